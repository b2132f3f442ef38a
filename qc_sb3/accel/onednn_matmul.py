"""
CPU fast path of the networks' Linear layers, with autograd: oneDNN's matmul in place of PyTorch's default BLAS.

The networks of :mod:`qc_sb3.common.networks` compute each layer with ``nn.Linear`` (an MLP) or ``baddbmm`` (an
ensemble), which on CPU call the BLAS PyTorch was built with (MKL in the wheels). On CPUs with AVX-512, which MKL
does not use on AMD's, oneDNN's matmul is faster for these networks' shapes, forward and for both products of the
backward pass; on CPUs with AVX2 only, the BLAS is as fast or faster (``python -m
qc_sb3.benchmarks.speed.matmul_speed`` measures both). It computes the same products (float32, same values to
rounding). :func:`linear` and :func:`ensemble_linear` are those layers: oneDNN where PyTorch reports the CPU
capability ``AVX512`` and the layer has at least :data:`MIN_ROWS` rows (a oneDNN call has a larger fixed cost), the
plain ``addmm`` / ``baddbmm`` otherwise; :func:`plain_matmuls` and :func:`onednn_matmuls` force one or the other
(for tests and for the benchmarks' A/B).

oneDNN has no batched float32 matmul that PyTorch exposes, so an ensemble's layer is one oneDNN call per member
(K calls where ``baddbmm`` makes one); inside a compiled graph the calls are unrolled.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch as th
from torch import nn

_HAS_ONEDNN = th.backends.mkldnn.is_available() and hasattr(th.ops.mkldnn, "_linear_pointwise")
# A oneDNN call has a larger fixed cost than a BLAS one, which a decision's few rows do not repay
# (``python -m qc_sb3.benchmarks.speed.matmul_speed`` measures the crossover); below this many rows the BLAS stays.
MIN_ROWS = 32
# The layers' matmul: None chooses by the CPU (onednn_by_default), True forces oneDNN, False the BLAS.
_forced: bool | None = None


def onednn_by_default(cpu_capability: str | None = None) -> bool:
    """
    :param cpu_capability: PyTorch's CPU capability (``th.backends.cpu.get_cpu_capability()`` when None)
    :return: Whether the layers take oneDNN's matmul unless forced: where PyTorch ships it and the CPU has AVX-512
    """
    capability = th.backends.cpu.get_cpu_capability() if cpu_capability is None else cpu_capability
    return _HAS_ONEDNN and capability == "AVX512"


_ONEDNN_BY_DEFAULT = onednn_by_default()


@contextlib.contextmanager
def _forcing(onednn: bool) -> Iterator[None]:
    global _forced
    previous, _forced = _forced, onednn
    try:
        yield
    finally:
        _forced = previous


def plain_matmuls() -> contextlib.AbstractContextManager[None]:
    """Within this context the layers use ``addmm`` / ``baddbmm`` everywhere (not thread-safe: a module switch)."""
    return _forcing(False)


def onednn_matmuls() -> contextlib.AbstractContextManager[None]:
    """Within this context the layers use oneDNN's matmul where it applies, whatever the CPU (not thread-safe)."""
    return _forcing(True)


def uses_onednn(x: th.Tensor) -> bool:
    """
    :param x: A layer's input, ``(M, in)`` or ``(K, M, in)``
    :return: Whether :func:`linear` and :func:`ensemble_linear` take oneDNN's matmul for it: chosen by the CPU
        (:func:`onednn_by_default`) or forced, for float32 on the CPU with at least :data:`MIN_ROWS` rows
    """
    wanted = _ONEDNN_BY_DEFAULT if _forced is None else _forced
    on_cpu = x.device.type == "cpu" and x.dtype == th.float32
    return _HAS_ONEDNN and wanted and on_cpu and x.dim() >= 2 and x.shape[-2] >= MIN_ROWS


def _onednn_matmul(a: th.Tensor, b: th.Tensor, bias: th.Tensor | None, transpose_a: bool, transpose_b: bool) -> th.Tensor:
    return th.ops.mkldnn._linear_pointwise(a.T if transpose_a else a, b.T if transpose_b else b, bias, "none", [], "")


def _onednn_matmul_shape(
    a: th.Tensor, b: th.Tensor, bias: th.Tensor | None, transpose_a: bool, transpose_b: bool
) -> th.Tensor:
    return a.new_empty(a.shape[1 if transpose_a else 0], b.shape[1 if transpose_b else 0])


# An operator of its own, so that torch.compile calls oneDNN as it is (inductor lowers oneDNN's own op only for
# frozen weights); the transposes are arguments, not strided inputs, which a compiled graph would copy first.
_LIBRARY = th.library.Library("qc_sb3", "DEF")
_LIBRARY.define("onednn_matmul(Tensor a, Tensor b, Tensor? bias, bool transpose_a, bool transpose_b) -> Tensor")
_LIBRARY.impl("onednn_matmul", _onednn_matmul, "CPU")
th.library.register_fake("qc_sb3::onednn_matmul", _onednn_matmul_shape, lib=_LIBRARY)


def _matmul_t(
    a: th.Tensor, b: th.Tensor, bias: th.Tensor | None = None, transpose_a: bool = False, transpose_b: bool = False
) -> th.Tensor:
    """
    ``A @ B.T (+ bias)`` by oneDNN, where A is ``a`` (``a.T`` if ``transpose_a``) and B is ``b`` (``b.T`` if
    ``transpose_b``): oneDNN reads the transposes in place.
    """
    if th.compiler.is_compiling():
        return th.ops.qc_sb3.onednn_matmul(a, b, bias, transpose_a, transpose_b)
    return _onednn_matmul(a, b, bias, transpose_a, transpose_b)


class _OneDNNLinear(th.autograd.Function):
    """y = x W^T + b with oneDNN matmuls forward and backward (dx = dy W, dW = dy^T x, db = sum dy)."""

    @staticmethod
    def forward(x: th.Tensor, weight: th.Tensor, bias: th.Tensor) -> th.Tensor:
        return _matmul_t(x, weight, bias)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[th.Tensor, th.Tensor, th.Tensor], output: th.Tensor) -> None:
        x, weight, _ = inputs
        ctx.save_for_backward(x, weight)

    @staticmethod
    def backward(ctx: Any, grad: th.Tensor) -> tuple[th.Tensor | None, ...]:
        x, weight = ctx.saved_tensors
        grad = grad.contiguous()  # the gradient of a mean is an expanded (stride-0) tensor: see _OneDNNEnsembleLinear
        grad_x = _matmul_t(grad, weight, transpose_b=True) if ctx.needs_input_grad[0] else None
        grad_weight = _matmul_t(grad, x, transpose_a=True, transpose_b=True) if ctx.needs_input_grad[1] else None
        grad_bias = grad.sum(0) if ctx.needs_input_grad[2] else None
        return grad_x, grad_weight, grad_bias


class _OneDNNEnsembleLinear(th.autograd.Function):
    """y_k = x_k W_k + b_k for k = 1..K, one oneDNN matmul per member forward and per product backward."""

    @staticmethod
    def forward(x: th.Tensor, weights: th.Tensor, biases: th.Tensor) -> th.Tensor:
        return th.stack([_matmul_t(x[k], weights[k], biases[k], transpose_b=True) for k in range(weights.shape[0])])

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[th.Tensor, th.Tensor, th.Tensor], output: th.Tensor) -> None:
        x, weights, _ = inputs
        ctx.save_for_backward(x, weights)

    @staticmethod
    def backward(ctx: Any, grad: th.Tensor) -> tuple[th.Tensor | None, ...]:
        x, weights = ctx.saved_tensors
        # The gradient of a loss that is a mean or sum of this layer's outputs (an actor loss -Q.mean()) comes as an
        # expanded tensor, stride 0; oneDNN's matmul takes such an input hundreds of times slower than a dense one.
        grad = grad.contiguous()
        members = range(weights.shape[0])
        grad_x = th.stack([_matmul_t(grad[k], weights[k]) for k in members]) if ctx.needs_input_grad[0] else None
        grad_weights = (
            th.stack([_matmul_t(x[k], grad[k], transpose_a=True, transpose_b=True) for k in members])
            if ctx.needs_input_grad[1]
            else None
        )
        grad_biases = grad.sum(1) if ctx.needs_input_grad[2] else None
        return grad_x, grad_weights, grad_biases


class _OneDNNMemberLinear(th.autograd.Function):
    """y = x W + b for one ensemble member's weight W of shape ``(in, out)`` (dx = dy W^T, dW = x^T dy, db = sum dy)."""

    @staticmethod
    def forward(x: th.Tensor, weight: th.Tensor, bias: th.Tensor) -> th.Tensor:
        return _matmul_t(x, weight, bias, transpose_b=True)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[th.Tensor, th.Tensor, th.Tensor], output: th.Tensor) -> None:
        x, weight, _ = inputs
        ctx.save_for_backward(x, weight)

    @staticmethod
    def backward(ctx: Any, grad: th.Tensor) -> tuple[th.Tensor | None, ...]:
        x, weight = ctx.saved_tensors
        grad = grad.contiguous()  # see _OneDNNEnsembleLinear
        grad_x = _matmul_t(grad, weight) if ctx.needs_input_grad[0] else None
        grad_weight = _matmul_t(x, grad, transpose_a=True, transpose_b=True) if ctx.needs_input_grad[1] else None
        grad_bias = grad.sum(0) if ctx.needs_input_grad[2] else None
        return grad_x, grad_weight, grad_bias


def _check_inner_sizes(x: th.Tensor, in_features: int) -> None:
    """PyTorch's own error for a product of mismatched shapes (oneDNN's names no shape)."""
    if x.shape[-1] != in_features:
        raise RuntimeError(
            f"mat1 and mat2 shapes cannot be multiplied: inputs of shape {tuple(x.shape)}, a layer of "
            f"{in_features} input features"
        )


def linear(x: th.Tensor, weight: th.Tensor, bias: th.Tensor) -> th.Tensor:
    """
    A Linear layer, ``x W^T + b`` (``th.addmm(bias, x, weight.T)``).

    :param x: Inputs of shape ``(M, in)``
    :param weight: Weight of shape ``(out, in)``
    :param bias: Bias of shape ``(out,)``
    :return: Outputs of shape ``(M, out)``
    """
    if uses_onednn(x):
        _check_inner_sizes(x, weight.shape[1])
        return _OneDNNLinear.apply(x, weight, bias)
    return th.addmm(bias, x, weight.T)


def ensemble_linear(x: th.Tensor, weights: th.Tensor, biases: th.Tensor) -> th.Tensor:
    """
    One Linear layer of each of K ensemble members, ``x_k W_k + b_k`` (``th.baddbmm(biases.unsqueeze(1), x, weights)``).

    :param x: Inputs of shape ``(K, M, in)`` (a stride-0 expansion of a shared input costs nothing)
    :param weights: Weights of shape ``(K, in, out)``
    :param biases: Biases of shape ``(K, out)``
    :return: Outputs of shape ``(K, M, out)``
    """
    if uses_onednn(x):
        _check_inner_sizes(x, weights.shape[1])
        return _OneDNNEnsembleLinear.apply(x, weights, biases)
    return th.baddbmm(biases.unsqueeze(1), x, weights)


def member_linear(x: th.Tensor, weight: th.Tensor, bias: th.Tensor) -> th.Tensor:
    """
    One ensemble member's Linear layer, ``x W + b`` (``th.addmm(bias, x, weight)``), on oneDNN's matmul where
    :func:`uses_onednn`: a member's slice of :func:`ensemble_linear`.

    :param x: Inputs of shape ``(M, in)``
    :param weight: The member's weight, of shape ``(in, out)``
    :param bias: The member's bias, of shape ``(out,)``
    :return: Outputs of shape ``(M, out)``
    """
    if uses_onednn(x):
        _check_inner_sizes(x, weight.shape[0])
        return _OneDNNMemberLinear.apply(x, weight, bias)
    return th.addmm(bias, x, weight)


class Linear(nn.Linear):
    """
    ``nn.Linear`` whose forward pass is :func:`linear` (oneDNN's matmul on CPU, for 2-D inputs with a bias): the same
    parameters, state dict and values to float32 rounding. For networks built from ``nn.Linear`` layers elsewhere (SB3's
    ``create_mlp``), swapped in by :func:`~qc_sb3.accel.fast_networks.accelerate`.
    """

    def forward(self, input: th.Tensor) -> th.Tensor:
        if self.bias is None or input.dim() != 2:
            return super().forward(input)
        return linear(input, self.weight, self.bias)
