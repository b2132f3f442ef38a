"""The fast networks' training paths (qc_sb3.accel.fast_training): GELU(tanh) with its hand-written backward against
the float64 formula of docs/algorithms.md §2 and its derivative, and the fast networks' forward and backward passes
with autograd against the plain modules with the same parameters."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch as th
from torch import nn

from qc_sb3.accel.fast_inference import inference_path
from qc_sb3.accel.fast_networks import accelerate
from qc_sb3.accel.fast_training import gelu_tanh
from qc_sb3.accel.onednn_matmul import MIN_ROWS
from qc_sb3.common.networks import MLP, CriticEnsemble, EnsembleMLP
from qc_sb3.rlpd.networks import LayerNormReLUCriticEnsemble

from reference_math import gelu_tanh as gelu_tanh_by_hand
from reference_math import gelu_tanh_derivative, numpy_of

# Zero, GELU's saturated tails (sigmoid(2 u) rounds to 0 or 1 in float32), and the region around the bend.
SPECIAL_INPUTS = [0.0, 20.0, -20.0, 100.0, -100.0, 5.0, -5.0, 1e-3, -1e-3, 1.0, -1.0]
# Batches of a few rows take the BLAS, of MIN_ROWS and more oneDNN's matmul (qc_sb3.accel.onednn_matmul).
ROWS = [5, MIN_ROWS + 3]


def graph_nodes(output: th.Tensor) -> set[str]:
    """The names of the autograd nodes that ``output`` depends on."""
    names, stack, seen = set(), [output.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names.add(type(node).__name__)
        stack.extend(next_node for next_node, _ in node.next_functions)
    return names


@pytest.mark.parametrize("dtype", [th.float32, th.float64])
def test_gelu_tanh_and_its_gradient_are_the_formula_and_its_derivative(dtype: th.dtype) -> None:
    generator = th.Generator().manual_seed(0)
    x = th.cat((4.0 * th.randn(4000, generator=generator), th.tensor(SPECIAL_INPUTS))).to(dtype).requires_grad_()
    upstream = th.randn(x.shape, generator=generator, dtype=dtype)
    y = gelu_tanh(x)
    (y * upstream).sum().backward()
    x64 = numpy_of(x)
    tol = 1e-5 if dtype == th.float32 else 1e-12
    np.testing.assert_allclose(numpy_of(y), gelu_tanh_by_hand(x64), rtol=tol, atol=tol)
    np.testing.assert_allclose(numpy_of(x.grad), gelu_tanh_derivative(x64) * numpy_of(upstream), rtol=tol, atol=tol)
    # Exact at 0 (y = 0, y' = 1/2), and in float32 in the saturated tails (y = x or 0, y' = 1 or 0).
    exact = slice(4000, 4005 if dtype == th.float32 else 4001)
    assert y[exact].tolist() == [0.0, 20.0, 0.0, 100.0, 0.0][: len(y[exact])]
    assert (x.grad[exact] / upstream[exact]).tolist() == [0.5, 1.0, 0.0, 1.0, 0.0][: len(y[exact])]


def test_gelu_tanh_backward_is_the_numerical_derivative_of_its_forward() -> None:
    x = (3.0 * th.randn(64, generator=th.Generator().manual_seed(1), dtype=th.float64)).requires_grad_()
    assert th.autograd.gradcheck(gelu_tanh, (x,))


def test_gelu_tanh_refuses_a_gradient_of_its_gradient() -> None:
    x = th.randn(8, generator=th.Generator().manual_seed(2)).requires_grad_()
    with pytest.raises(RuntimeError, match=r"differentiable once.*fast_paths=False"):
        th.autograd.grad(gelu_tanh(x).sum(), x, create_graph=True)


def randomized(module: nn.Module, seed: int, std: float = 0.5) -> tuple[nn.Module, nn.Module]:
    """``module`` with random parameters (biases and LayerNorm scales/offsets included), and its accelerated copy."""
    generator = th.Generator().manual_seed(seed)
    with th.no_grad():
        for parameter in module.parameters():
            parameter.add_(std * th.randn(parameter.shape, generator=generator))
    return module, accelerate(copy.deepcopy(module))


def network_input(rows: int, features: int, seed: int) -> th.Tensor:
    """Random inputs with a row of zeros and rows of +-20, so that pre-activations reach GELU's saturated tails."""
    x = 3.0 * th.randn(rows, features, generator=th.Generator().manual_seed(seed))
    x[0], x[1], x[2] = 0.0, 20.0, -20.0
    return x


def assert_same_forward_and_backward(plain: nn.Module, fast: nn.Module, inputs: list[th.Tensor], **kwargs) -> set[str]:
    """Outputs and the gradients of every parameter and input agree to float32 rounding; returns the fast graph's nodes."""
    upstream = None
    outputs, graphs = [], []
    for module in (plain, fast):
        leaves = [x.clone().requires_grad_() for x in inputs]
        out = module(*leaves, **kwargs)
        if upstream is None:
            upstream = th.randn(out.shape, generator=th.Generator().manual_seed(7))
        (out * upstream).sum().backward()
        outputs.append((out, [x.grad for x in leaves], [p.grad for p in module.parameters()]))
        graphs.append(graph_nodes(out))
    (out_plain, input_grads_plain, grads_plain), (out_fast, input_grads_fast, grads_fast) = outputs
    th.testing.assert_close(out_fast, out_plain, rtol=1e-5, atol=1e-5)
    for fast_grad, plain_grad in zip(input_grads_fast + grads_fast, input_grads_plain + grads_plain, strict=True):
        assert (fast_grad is None) == (plain_grad is None)
        if plain_grad is not None:
            scale = plain_grad.abs().max().item()
            th.testing.assert_close(fast_grad, plain_grad, rtol=1e-4, atol=1e-5 * max(scale, 1.0))
    return graphs[1]


@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("layer_norm", [False, True])
def test_fast_mlp_trains_as_the_plain_one(layer_norm: bool, rows: int) -> None:
    th.manual_seed(3)
    plain, fast = randomized(MLP(6, (48, 40), 3, layer_norm=layer_norm), seed=3)
    x = network_input(rows, 6, seed=3)
    assert (numpy_of(plain.linears[0](x)).__abs__() > 10).any()  # the saturated tails are reached
    nodes = assert_same_forward_and_backward(plain, fast, [x])
    assert "GeluTanhBackward" in nodes


@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("layer_norm", [False, True])
def test_fast_ensemble_trains_as_the_plain_one(layer_norm: bool, rows: int) -> None:
    th.manual_seed(4)
    plain, fast = randomized(EnsembleMLP(3, 6, (48, 40), 2, layer_norm=layer_norm), seed=4)
    x = network_input(rows, 6, seed=4)
    nodes = assert_same_forward_and_backward(plain, fast, [x])
    assert "GeluTanhBackward" in nodes
    # From MIN_ROWS rows the members run one after the other on oneDNN's matmul, their activations never stacked.
    assert ("_OneDNNMemberLinearBackward" in nodes) == (rows >= MIN_ROWS)


@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("frozen", [False, True])
def test_fast_critics_train_as_the_plain_ones(frozen: bool, rows: int) -> None:
    th.manual_seed(5)
    observations, actions = network_input(rows, 5, seed=5), network_input(rows, 4, seed=6)
    for critic in (CriticEnsemble(5, 4, hidden_dims=(40, 48), n_critics=2), LayerNormReLUCriticEnsemble(5, 4, (40, 48), 2)):
        plain, fast = randomized(critic, seed=5)
        assert_same_forward_and_backward(plain, fast, [observations, actions], frozen=frozen)
        if frozen:
            assert all(parameter.grad is None for parameter in fast.parameters())


def test_only_an_ensemble_on_onednn_trains_member_by_member() -> None:
    def path(x: th.Tensor, ensemble: bool = True) -> str:
        return inference_path(x, hidden_layers=2, gelu_then_layer_norm=True, layer_norm=True, ensemble=ensemble)

    x = th.zeros(MIN_ROWS, 3)
    assert path(x) == "per_member"
    assert path(x, ensemble=False) == "plain"  # a single network: its layers are one call each already
    assert path(x[:-1]) == "plain" and path(x.double()) == "plain"  # the layers take the BLAS's batched matmul
    assert inference_path(x, 0, True, True, ensemble=True) == "plain"  # no hidden layer
    with th.no_grad():
        assert path(x) == "fused"
