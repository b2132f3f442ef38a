"""
CPU fast paths of the networks' forward passes without autograd, and the one place that chooses them (and the
per-member training path of :mod:`qc_sb3.accel.fast_training`).

The modules of :mod:`qc_sb3.common.networks` are the reference (docs/algorithms.md §2, §3), written with plain,
differentiable PyTorch ops. Acting and the TD target run them without autograd, where three rewrites are faster
on CPU and give the same values to float32 rounding (``tests/test_networks.py`` checks each against float64 hand
computations):

* scratch memory: the hidden activations of a module live in two reusable blocks (fresh tensors per layer cost
  page faults), written by in-place GELU and LayerNorm kernels;
* oneDNN: a Linear -> GELU(tanh) layer as one ``th.ops.mkldnn._linear_pointwise`` call (see also
  :mod:`qc_sb3.accel.onednn_matmul`);
* the fused Euler sampler: the whole flow integration as one oneDNN call per hidden layer and one matmul per step.

:func:`inference_path` decides which of them a forward pass takes, and with autograd whether an ensemble runs its
members one after the other; :func:`unfused_layers` keeps single networks off the oneDNN calls (for tests and for
the benchmarks' A/B).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal

import torch as th

from qc_sb3.accel.onednn_matmul import MIN_ROWS, uses_onednn
from qc_sb3.common.networks import LAYER_NORM_EPS

if TYPE_CHECKING:
    from qc_sb3.common.networks import MLP, EnsembleMLP, FlowVectorField

InferencePath = Literal["plain", "fused", "in_place", "per_member"]

# gelu_tanh(x) = 0.5 x (1 + tanh(u)) = x * sigmoid(2 u), 2 u = x (GELU_SCALE + GELU_CUBIC x^2) (docs/algorithms.md §2)
GELU_SCALE = 2.0 * math.sqrt(2.0 / math.pi)
GELU_CUBIC = GELU_SCALE * 0.044715
_HAS_FUSED_LINEAR_GELU = th.backends.mkldnn.is_available() and hasattr(th.ops.mkldnn, "_linear_pointwise")
_unfused = False


@contextlib.contextmanager
def unfused_layers() -> Iterator[None]:
    """Within this context single networks take the in-place path, never the fused one (not thread-safe)."""
    global _unfused
    previous, _unfused = _unfused, True
    try:
        yield
    finally:
        _unfused = previous


def fuses_single_network(x: th.Tensor) -> bool:
    """
    :param x: A single network's input, ``(M, in)``
    :return: Whether its Linear -> GELU(tanh) layers run as fused oneDNN calls: float32, where PyTorch ships the
        op, and where the layers take oneDNN's matmul (:func:`~qc_sb3.accel.onednn_matmul.uses_onednn`) or ``x``
        has fewer than ``MIN_ROWS`` rows. A fused call costs less per call than a matmul and in-place GELU passes, but
        without AVX-512 oneDNN's matmul is the slower one, which many rows do not repay
        (``python -m qc_sb3.benchmarks.speed.matmul_speed --flow-rows`` measures both).
    """
    few_rows = x.shape[-2] < MIN_ROWS
    return _HAS_FUSED_LINEAR_GELU and not _unfused and x.dtype == th.float32 and (few_rows or uses_onednn(x))


def inference_path(
    x: th.Tensor, hidden_layers: int, gelu_then_layer_norm: bool, layer_norm: bool, ensemble: bool
) -> InferencePath:
    """
    Which forward pass a network runs on ``x``; every module asks here.

    * ``"plain"``: ``x`` is not on the CPU (a GPU runs PyTorch's fused kernels better than these multi-pass ones),
      or ``torch.compile`` is tracing (it fuses the plain ops itself and cannot trace the scratch memory), or the
      network has no hidden layer; with autograd on (training needs the differentiable ops), a single network or an
      ensemble whose layers take the BLAS; with autograd off, a network whose layers are not Linear -> GELU(tanh)
      [-> LayerNorm] (e.g. the RLPD critic): the reference modules' own code;
    * ``"per_member"``: with autograd on, an ensemble whose layers take oneDNN's matmul
      (:func:`~qc_sb3.accel.onednn_matmul.uses_onednn`): its members one after the other, differentiable
      (:func:`~qc_sb3.accel.fast_training.per_member_ensemble_forward`);
    * ``"fused"``: with autograd off, on float32 CPU tensors, when PyTorch ships the oneDNN op, each hidden layer is one oneDNN
      Linear -> GELU(tanh) call: a single network without LayerNorm (which cannot be fused into the call) where
      :func:`fuses_single_network`, or an ensemble, member after member, with its LayerNorms in place on each
      call's output, where oneDNN's matmul runs the layers (:func:`~qc_sb3.accel.onednn_matmul.uses_onednn`;
      otherwise the in-place path's batched matmul is faster);
    * ``"in_place"``: otherwise, the in-place kernels on the module's scratch memory.

    :param x: The network's input
    :param hidden_layers: Number of hidden layers of the network
    :param gelu_then_layer_norm: Whether each hidden layer is Linear -> GELU(tanh) [-> LayerNorm]
    :param layer_norm: Whether the hidden layers have a LayerNorm
    :param ensemble: Whether the network is an ensemble of MLPs on a shared input
    :return: The path
    """
    if th.compiler.is_compiling() or x.device.type != "cpu" or hidden_layers == 0:
        return "plain"
    if th.is_grad_enabled():
        return "per_member" if ensemble and uses_onednn(x) else "plain"
    if not gelu_then_layer_norm:
        return "plain"
    if ensemble and uses_onednn(x):
        return "fused"
    if not ensemble and not layer_norm and fuses_single_network(x):
        return "fused"
    return "in_place"


def gelu_tanh_(x: th.Tensor, out: th.Tensor) -> th.Tensor:
    """
    GELU(tanh) of ``x`` written to ``out`` as ``x * sigmoid(2 u)`` in four passes.

    :param x: Pre-activations
    :param out: Destination of the same shape, not overlapping ``x``
    :return: ``out``
    """
    th.addcmul(x.new_tensor(GELU_SCALE), x, x, value=GELU_CUBIC, out=out)
    return out.mul_(x).sigmoid_().mul_(x)


def layer_norm_(h: th.Tensor, scale: th.Tensor, offset: th.Tensor) -> th.Tensor:
    """
    LayerNorm over the last dimension with eps 1e-6, then ``* scale + offset``, overwriting ``h``: two reductions
    and three passes (one ``F.layer_norm`` followed by the affine map makes more).

    :param h: Activations (overwritten)
    :param scale: Scale, broadcastable against ``h``
    :param offset: Offset, broadcastable against ``h``
    :return: ``h``
    """
    h.sub_(h.mean(dim=-1, keepdim=True))
    variance = th.linalg.vector_norm(h, dim=-1, keepdim=True).square_().div_(h.shape[-1])  # biased variance
    h.mul_(variance.add_(LAYER_NORM_EPS).rsqrt_())
    return th.addcmul(offset, h, scale, out=h)


class Scratch:
    """
    Reusable memory for the hidden activations of one module's no-grad forward passes: two flat blocks, handed out
    as views. Nothing a forward pass returns is a view of them, but one module must not run no-grad forward passes
    from several threads at once. The blocks are created outside inference mode so that they can be written both
    inside and outside it.
    """

    def __init__(self) -> None:
        self._memory = th.empty(0)

    def take(self, like: th.Tensor, numel: int) -> tuple[th.Tensor, th.Tensor]:
        """
        :param like: Tensor whose dtype and device the memory must have
        :param numel: Number of elements of each block
        :return: Two flat, non-overlapping blocks of ``numel`` elements ((re)allocated when too small or of another
            dtype or device)
        """
        memory = self._memory
        if memory.numel() < 2 * numel or memory.dtype != like.dtype or memory.device != like.device:
            with th.inference_mode(False):
                memory = self._memory = th.empty(2 * numel, dtype=like.dtype, device=like.device)
        return memory[:numel], memory[numel : 2 * numel]


def _scratch_of(module: th.nn.Module) -> Scratch:
    scratch = module.__dict__.get("_inference_scratch")
    if scratch is None:
        scratch = module.__dict__["_inference_scratch"] = Scratch()
    return scratch


def _region(block: th.Tensor, shape: tuple[int, ...]) -> th.Tensor:
    """The start of a flat scratch block viewed with the given shape."""
    return block[: math.prod(shape)].view(shape)


def _linear_gelu(h: th.Tensor, weight: th.Tensor, bias: th.Tensor) -> th.Tensor:
    """Linear -> GELU(tanh) as one oneDNN call."""
    return th.ops.mkldnn._linear_pointwise(h, weight, bias, "gelu", [], "tanh")


def _linear(h: th.Tensor, weight: th.Tensor, bias: th.Tensor | None) -> th.Tensor:
    """A Linear layer as one oneDNN call (``weight`` of shape ``(out, in)``, possibly a transposed view)."""
    return th.ops.mkldnn._linear_pointwise(h, weight, bias, "none", [], "")


def fused_mlp_forward(mlp: MLP, h: th.Tensor) -> th.Tensor:
    """
    :class:`~qc_sb3.common.networks.MLP` on the ``"fused"`` path.

    :param mlp: The network
    :param h: Inputs of shape ``(M, input_dim)``
    :return: Outputs of shape ``(M, output_dim)``
    """
    for linear in mlp.linears[:-1]:
        h = _linear_gelu(h, linear.weight, linear.bias)
    last = mlp.linears[-1]
    return _linear(h, last.weight, last.bias)


def in_place_mlp_from_first_layer(mlp: MLP, pre: th.Tensor) -> th.Tensor:
    """
    :meth:`~qc_sb3.common.networks.MLP.forward_from_first_layer` on the ``"fused"`` or ``"in_place"`` path: the
    first GELU (and LayerNorm) on scratch memory, then the later layers fused (no LayerNorm) or in place.

    :param mlp: The network (at least one hidden layer)
    :param pre: Output of its first Linear layer, shape ``(M, hidden_dims[0])``
    :return: Outputs of shape ``(M, output_dim)``
    """
    rows, width = pre.shape[0], max(linear.out_features for linear in mlp.linears[:-1])
    pre_block, post_block = _scratch_of(mlp).take(pre, rows * width)
    h = gelu_tanh_(pre, out=_region(post_block, tuple(pre.shape)))
    if mlp.norms is not None:
        h = layer_norm_(h, mlp.norms[0].weight, mlp.norms[0].bias)
    fused = mlp._path(h) == "fused"
    for i in range(1, len(mlp.linears) - 1):
        linear = mlp.linears[i]
        if fused:
            h = _linear_gelu(h, linear.weight, linear.bias)
            continue
        # The input may live in the post-activation block: each layer reads it before its GELU overwrites it.
        shape = (rows, linear.out_features)
        h = gelu_tanh_(
            th.addmm(linear.bias, h, linear.weight.T, out=_region(pre_block, shape)), out=_region(post_block, shape)
        )
        if mlp.norms is not None:
            h = layer_norm_(h, mlp.norms[i].weight, mlp.norms[i].bias)
    last = mlp.linears[-1]
    return th.addmm(last.bias, h, last.weight.T)


def in_place_ensemble_forward(
    ensemble: EnsembleMLP,
    x: th.Tensor,
    weights: list[th.Tensor],
    biases: list[th.Tensor],
    scales: list[th.Tensor],
    offsets: list[th.Tensor],
) -> th.Tensor:
    """
    :class:`~qc_sb3.common.networks.EnsembleMLP` (Linear -> GELU(tanh) [-> LayerNorm]) on the ``"in_place"`` path.

    :param ensemble: The ensemble (at least one hidden layer)
    :param x: Inputs of shape ``(B, input_dim)``, shared by the members
    :param weights: Its weights ``(K, in, out)`` per layer
    :param biases: Its biases ``(K, out)`` per layer
    :param scales: Its LayerNorm scales ``(K, out)`` per hidden layer (empty: no LayerNorm)
    :param offsets: Its LayerNorm offsets, likewise
    :return: Outputs of shape ``(K, B, output_dim)``
    """
    n_members, d_in, d_out = weights[0].shape
    rows, last = x.shape[0], len(weights) - 1
    width = max(weight.shape[2] for weight in weights[:-1])
    pre_block, post_block = _scratch_of(ensemble).take(x, n_members * rows * width)
    # All members' first layer as one batched matmul on a stride-0 view of the shared input.
    h = th.baddbmm(
        biases[0].unsqueeze(1), x.expand(n_members, rows, d_in), weights[0], out=_region(pre_block, (n_members, rows, d_out))
    )
    for i in range(1, last + 1):
        h = gelu_tanh_(h, out=_region(post_block, tuple(h.shape)))
        if scales:
            h = layer_norm_(h, scales[i - 1].unsqueeze(1), offsets[i - 1].unsqueeze(1))
        out = _region(pre_block, (n_members, rows, weights[i].shape[2])) if i < last else None
        h = th.baddbmm(biases[i].unsqueeze(1), h, weights[i], out=out)
    return h


def fused_ensemble_forward(
    x: th.Tensor,
    weights: list[th.Tensor],
    biases: list[th.Tensor],
    scales: list[th.Tensor],
    offsets: list[th.Tensor],
) -> th.Tensor:
    """
    :class:`~qc_sb3.common.networks.EnsembleMLP` (Linear -> GELU(tanh) [-> LayerNorm]) on the ``"fused"`` path:
    each member in turn, each hidden layer one oneDNN Linear -> GELU(tanh) call whose output is normalised in place.

    :param x: Inputs of shape ``(B, input_dim)``, shared by the members
    :param weights: Its weights ``(K, in, out)`` per layer
    :param biases: Its biases ``(K, out)`` per layer
    :param scales: Its LayerNorm scales ``(K, out)`` per hidden layer (empty: no LayerNorm)
    :param offsets: Its LayerNorm offsets, likewise
    :return: Outputs of shape ``(K, B, output_dim)``
    """
    outputs = []
    for k in range(weights[0].shape[0]):
        h = x
        for i in range(len(weights) - 1):
            h = _linear_gelu(h, weights[i][k].T, biases[i][k])  # a transposed view: oneDNN reads it in place
            if scales:
                h = layer_norm_(h, scales[i][k], offsets[i][k])
        outputs.append(_linear(h, weights[-1][k].T, biases[-1][k]))
    return th.stack(outputs)


def fused_euler(vector_field: FlowVectorField, observations: th.Tensor, noise: th.Tensor, flow_steps: int) -> th.Tensor:
    """
    :meth:`~qc_sb3.common.networks.FlowVectorField.integrate` (docs/algorithms.md §3) on the ``"fused"`` path of the
    vector field: same values to float32 rounding in few calls per step.

    Each step runs every hidden layer as one oneDNN Linear -> GELU(tanh) call on a buffer that holds
    concat[s, x, t], and the step itself as one matmul. Both rest on carrying the last layer's bias b_L outside
    the loop: with t_i = i / T and y_i = a_i - t_i b_L, the update a_{i+1} = a_i + (h_i W_L^T + b_L) / T becomes
    y_{i+1} = y_i + h_i W_L^T / T, a_T = y_T + b_L, and the first layer sees y_i in place of a_i through its time
    column: concat[s, a_i, t_i] W^T = concat[s, y_i, t_i] [W_s, W_x, w_t + W_x b_L]^T.

    :param vector_field: The velocity field f(s, x, t)
    :param observations: Observations of shape ``(M, observation_dim)``
    :param noise: Starting points z of shape ``(M, action_dim)``
    :param flow_steps: Number of Euler steps T
    :return: Actions of shape ``(M, action_dim)``, clipped to [-1, 1]
    """
    if flow_steps < 1:
        raise ValueError(f"flow_steps must be >= 1, got {flow_steps}")
    linears = vector_field.mlp.linears
    first, last = linears[0], linears[-1]
    actions_in = slice(vector_field.observation_dim, vector_field.observation_dim + vector_field.action_dim)
    first_weight = first.weight.clone()
    # Time column w_t + W_x b_L: the time step also carries t_i b_L through the first layer.
    th.addmv(first.weight[:, -1], first.weight[:, actions_in], last.bias, out=first_weight[:, -1])
    hidden = [(first_weight, first.bias), *((linear.weight, linear.bias) for linear in linears[1:-1])]
    inputs = th.cat((observations, noise, noise.new_zeros(noise.shape[0], 1)), dim=1)  # concat[s, y_0, t_0]
    action_columns, time_column = inputs[:, actions_in], inputs[:, -1]
    y = noise
    for i in range(flow_steps):
        if i > 0:
            time_column.fill_(i / flow_steps)
            action_columns.copy_(y)
        h = inputs
        for weight, bias in hidden:
            h = _linear_gelu(h, weight, bias)
        y = th.add(y, _linear(h, last.weight, None), alpha=1.0 / flow_steps)
    return y.add_(last.bias).clamp_(-1.0, 1.0)
