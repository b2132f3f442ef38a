"""The networks' oneDNN Linear layers (qc_sb3.accel.onednn_matmul) against float64 hand computations of the
layer and of its gradients: y = x W^T + b, and for a loss sum(y * G), dx = G W, dW = G^T x, db = sum over rows of G."""

import pytest
import torch as th
from torch import nn

from qc_sb3.accel import onednn_matmul
from qc_sb3.accel.compiled_step import compile_unavailable_reason
from qc_sb3.accel.onednn_matmul import (
    Linear,
    ensemble_linear,
    linear,
    member_linear,
    onednn_matmuls,
    plain_matmuls,
    uses_onednn,
)

pytestmark = pytest.mark.skipif(
    not onednn_matmul._HAS_ONEDNN, reason="this PyTorch build has no oneDNN: the layers are addmm / baddbmm"
)


def tensors(*shapes: tuple[int, ...], seed: int = 0) -> list[th.Tensor]:
    generator = th.Generator().manual_seed(seed)
    return [th.randn(*shape, generator=generator).requires_grad_() for shape in shapes]


def assert_close(actual: th.Tensor, expected: th.Tensor) -> None:
    th.testing.assert_close(actual.double(), expected, rtol=1e-5, atol=1e-4)


def test_the_layers_take_onednn_for_float32_cpu_inputs_of_enough_rows_only():
    rows = onednn_matmul.MIN_ROWS
    with onednn_matmuls():
        assert uses_onednn(th.zeros(rows, 3)) and uses_onednn(th.zeros(2, rows, 3))
        assert not uses_onednn(th.zeros(rows - 1, 3)) and not uses_onednn(th.zeros(2, rows - 1, 3))
        assert not uses_onednn(th.zeros(rows, 3, dtype=th.float64))
        with plain_matmuls():
            assert not uses_onednn(th.zeros(rows, 3))
        assert uses_onednn(th.zeros(rows, 3))


@pytest.mark.parametrize(("capability", "onednn"), [("AVX512", True), ("AVX2", False), ("DEFAULT", False)])
def test_by_default_the_layers_take_onednn_on_cpus_with_avx512_only(monkeypatch, capability: str, onednn: bool):
    # oneDNN's matmul beats the BLAS (MKL, which takes its AVX2 kernels on AMD CPUs) where it has AVX-512 to use.
    assert onednn_matmul.onednn_by_default(capability) is onednn
    monkeypatch.setattr(th.backends.cpu, "get_cpu_capability", lambda: capability)
    assert onednn_matmul.onednn_by_default() is onednn
    monkeypatch.setattr(onednn_matmul, "_ONEDNN_BY_DEFAULT", onednn)
    monkeypatch.setattr(onednn_matmul, "_forced", None)  # the test session's fixture forces oneDNN: lift it
    assert uses_onednn(th.zeros(onednn_matmul.MIN_ROWS, 3)) is onednn
    with onednn_matmuls():
        assert uses_onednn(th.zeros(onednn_matmul.MIN_ROWS, 3))
    with plain_matmuls():
        assert not uses_onednn(th.zeros(onednn_matmul.MIN_ROWS, 3))


def test_linear_and_its_gradients_are_the_hand_computed_ones():
    x, weight, bias = tensors((37, 65), (48, 65), (48,))
    grad = th.randn(37, 48, generator=th.Generator().manual_seed(1))
    with th.profiler.profile() as profile:
        (linear(x, weight, bias) * grad).sum().backward()
    assert [event.name for event in profile.events()].count("mkldnn::_linear_pointwise") == 3  # y, dx, dW
    x64, w64, g64 = x.detach().double(), weight.detach().double(), grad.double()
    assert_close(linear(x, weight, bias), x64 @ w64.T + bias.detach().double())
    assert_close(x.grad, g64 @ w64)
    assert_close(weight.grad, g64.T @ x64)
    assert_close(bias.grad, g64.sum(0))


def test_an_nn_linear_made_onednn_keeps_its_parameters_and_gives_the_hand_computed_layer():
    th.manual_seed(0)
    onednn = layer = nn.Linear(65, 48)
    weight_before, bias_before = layer.weight, layer.bias
    layer.__class__ = Linear  # as qc_sb3.accel.fast_networks.accelerate swaps an SB3 actor's layers
    assert onednn.weight is weight_before and onednn.bias is bias_before
    assert list(onednn.state_dict()) == ["weight", "bias"]
    (x,) = tensors((37, 65))
    grad = th.randn(37, 48, generator=th.Generator().manual_seed(1))
    with th.profiler.profile() as profile:
        (onednn(x) * grad).sum().backward()
    assert [event.name for event in profile.events()].count("mkldnn::_linear_pointwise") == 3  # y, dx, dW
    weight, bias = layer.weight.detach().double(), layer.bias.detach().double()
    assert_close(onednn(x), x.detach().double() @ weight.T + bias)
    assert_close(layer.weight.grad, grad.double().T @ x.detach().double())
    assert_close(layer.bias.grad, grad.double().sum(0))
    batched = th.randn(2, 37, 65)  # more than two dimensions: nn.Linear's own forward
    assert_close(onednn(batched), batched.double() @ weight.T + bias)


def test_linear_computes_only_the_gradients_asked_for():
    x, weight, bias = tensors((40, 5), (3, 5), (3,))
    linear(x, weight.detach(), bias.detach()).sum().backward()
    assert weight.grad is None and bias.grad is None
    assert_close(x.grad, th.ones(40, 3, dtype=th.float64) @ weight.detach().double())


def test_ensemble_linear_on_a_shared_input_and_its_gradients_are_the_hand_computed_ones():
    x, weights, biases = tensors((33, 65), (3, 65, 40), (3, 40))
    grad = th.randn(3, 33, 40, generator=th.Generator().manual_seed(2))
    out = ensemble_linear(x.expand(3, *x.shape), weights, biases)
    (out * grad).sum().backward()
    x64, w64, g64 = x.detach().double(), weights.detach().double(), grad.double()
    for k in range(3):
        assert_close(out[k], x64 @ w64[k] + biases[k].detach().double())
        assert_close(weights.grad[k], x64.T @ g64[k])
        assert_close(biases.grad[k], g64[k].sum(0))
    assert_close(x.grad, sum(g64[k] @ w64[k].T for k in range(3)))


@pytest.mark.parametrize("rows", [onednn_matmul.MIN_ROWS - 1, onednn_matmul.MIN_ROWS + 5])
def test_member_linear_and_its_gradients_are_the_hand_computed_ones(rows: int):
    x, weights, biases = tensors((rows, 65), (2, 65, 40), (2, 40), seed=4)
    grad = th.randn(rows, 40, generator=th.Generator().manual_seed(5))
    weight, bias = weights.unbind(0)[1], biases.unbind(0)[1]  # one member's views, as an ensemble's layer takes them
    with th.profiler.profile() as profile:
        out = member_linear(x, weight, bias)
        (out * grad).sum().backward()
    onednn_calls = [event.name for event in profile.events()].count("mkldnn::_linear_pointwise")
    assert onednn_calls == (3 if rows >= onednn_matmul.MIN_ROWS else 0)  # y, dx, dW
    x64, w64, g64 = x.detach().double(), weights.detach().double()[1], grad.double()
    assert_close(out, x64 @ w64 + biases.detach().double()[1])
    assert_close(x.grad, g64 @ w64.T)
    assert_close(weights.grad[1], x64.T @ g64)
    assert_close(biases.grad[1], g64.sum(0))
    assert bool((weights.grad[0] == 0).all()) and bool((biases.grad[0] == 0).all())


def test_plain_matmuls_give_the_same_layers():
    x, weight, bias = tensors((40, 4), (5, 4), (5,))
    expected = x.detach().double() @ weight.detach().double().T + bias.detach().double()
    with plain_matmuls():
        assert_close(linear(x, weight, bias), expected)


def test_a_product_of_mismatched_shapes_names_them():
    x, weight, bias = tensors((40, 4), (5, 3), (5,))
    with pytest.raises(RuntimeError, match=r"shapes cannot be multiplied: inputs of shape \(40, 4\), a layer of 3"):
        linear(x, weight, bias)
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        ensemble_linear(x.expand(2, 40, 4), weight.detach().T.expand(2, 3, 5), bias.detach().expand(2, 5))


@pytest.mark.skipif(compile_unavailable_reason(th.device("cpu")) is not None, reason="torch.compile cannot run here")
def test_compiled_layers_call_onednn_and_give_the_hand_computed_gradients():
    x, weight, bias, weights, biases = tensors((36, 12), (10, 12), (10,), (2, 10, 3), (2, 3), seed=3)

    def network(x, weight, bias, weights, biases):
        return ensemble_linear(th.tanh(linear(x, weight, bias)).expand(2, 36, 10), weights, biases).sum()

    compiled = th.compile(network, fullgraph=True)
    compiled(x, weight, bias, weights, biases).backward()  # compiles the forward, and the backward at its first call
    for tensor in (x, weight, bias, weights, biases):
        tensor.grad = None
    with th.profiler.profile() as profile:
        compiled(x, weight, bias, weights, biases).backward()
    called = [event.name for event in profile.events() if event.name == "qc_sb3::onednn_matmul"]
    assert len(called) == 3 + 2 + 2 * 2  # forward: 1 + 2 members; backward: dx and dW, of the layer and per member
    x64, w64, b64, ws64 = (t.detach().double() for t in (x, weight, bias, weights))
    hidden = th.tanh(x64 @ w64.T + b64)
    grad_hidden = th.ones(36, 3, dtype=th.float64) @ ws64.sum(0).T * (1 - hidden**2)
    assert_close(weights.grad[0], hidden.T @ th.ones(36, 3, dtype=th.float64))
    assert_close(weight.grad, grad_hidden.T @ x64)
    assert_close(x.grad, grad_hidden @ w64)


def test_the_matmul_benchmark_times_the_same_product_on_both_paths():
    from qc_sb3.benchmarks.speed.matmul_speed import products

    th.manual_seed(0)
    for name, (blas, onednn) in products(rows=40, width=8, members=3).items():
        expected, actual = blas(), onednn()
        actual = th.stack(actual) if isinstance(actual, list) else actual
        th.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5, msg=name)
