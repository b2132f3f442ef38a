"""
CPU fast paths of the networks' training forward and backward passes (with autograd).

Training runs the plain modules' ops (docs/algorithms.md §2) under autograd, where two rewrites are faster on CPU
and give the same values and gradients to float32 rounding (``tests/test_fast_training.py`` checks them against
float64 hand computations and against the plain modules):

* GELU(tanh): PyTorch's forward and backward kernels evaluate a tanh; :class:`GeluTanh` computes the same function
  as ``x * sigmoid(2 u)``, forward and backward in few elementwise passes;
* an ensemble on oneDNN's matmul: its batched layer is one oneDNN call per member whose outputs are stacked, and
  whose gradients are stacked again; :func:`per_member_ensemble_forward` runs the members one after the other, each
  LayerNorm with its member's affine map as one ``F.layer_norm``, and stacks only the outputs and the parameters'
  gradients.

:func:`~qc_sb3.accel.fast_inference.inference_path` chooses the second, the fast networks' GELU the first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch as th
import torch.nn.functional as F

from qc_sb3.accel.fast_inference import GELU_CUBIC, GELU_SCALE
from qc_sb3.accel.onednn_matmul import member_linear
from qc_sb3.common.networks import LAYER_NORM_EPS


class GeluTanh(th.autograd.Function):
    """
    GELU with the tanh approximation, ``0.5 x (1 + tanh(u)) = x s`` with ``s = sigmoid(2 u)``,
    ``2 u = x (GELU_SCALE + GELU_CUBIC x^2)`` (docs/algorithms.md §2), and its derivative
    ``s + x s (1 - s) (GELU_SCALE + 3 GELU_CUBIC x^2)``. It saves ``x``, ``s`` and its output. It is differentiable
    once: a backward pass that builds a graph of the gradient (``create_graph=True``) raises an error.
    """

    @staticmethod
    def forward(ctx: Any, x: th.Tensor) -> th.Tensor:
        s = th.addcmul(x.new_tensor(GELU_SCALE), x, x, value=GELU_CUBIC).mul_(x).sigmoid_()
        y = x * s
        ctx.save_for_backward(x, s, y)
        return y

    @staticmethod
    def backward(ctx: Any, grad: th.Tensor) -> th.Tensor:
        if th.is_grad_enabled():  # autograd runs a backward pass with grad mode on only for create_graph=True
            raise RuntimeError(
                "the fast networks' GELU(tanh) is differentiable once, and a gradient of its gradient was asked for "
                "(create_graph=True): build the policy with policy_kwargs=dict(fast_paths=False) for plain PyTorch ops"
            )
        x, s, y = ctx.saved_tensors
        slope = th.addcmul(x.new_tensor(GELU_SCALE), x, x, value=3.0 * GELU_CUBIC).mul_(y)  # x s (S + 3 C x^2)
        return slope.lerp_(x.new_ones(()), s).mul_(grad)  # slope + s (1 - slope) = s + slope (1 - s)


def gelu_tanh(x: th.Tensor) -> th.Tensor:
    """
    GELU(tanh) of ``x`` with autograd by :class:`GeluTanh`.

    :param x: Pre-activations (floating point)
    :return: GELU(tanh) of ``x``, of the same shape
    """
    return GeluTanh.apply(x)


def per_member_ensemble_forward(
    x: th.Tensor,
    weights: list[th.Tensor],
    biases: list[th.Tensor],
    scales: list[th.Tensor],
    offsets: list[th.Tensor],
    activation: Callable[[th.Tensor], th.Tensor],
    norm_before_activation: bool,
) -> th.Tensor:
    """
    :meth:`~qc_sb3.common.networks.EnsembleMLP.layers` with autograd, one member after the other
    (docs/algorithms.md §2): each member's layers are :func:`~qc_sb3.accel.onednn_matmul.member_linear` calls and
    LayerNorms with its own affine map (``F.layer_norm`` with weight and bias), on its views of the stacked
    parameters (``unbind``, whose backward stacks each parameter's gradients once).

    :param x: Inputs of shape ``(B, input_dim)``, shared by the members
    :param weights: Weights ``(K, in, out)`` per layer
    :param biases: Biases ``(K, out)`` per layer
    :param scales: LayerNorm scales ``(K, out)`` per hidden layer (empty: no LayerNorm)
    :param offsets: LayerNorm offsets, likewise
    :param activation: The hidden layers' activation
    :param norm_before_activation: Each hidden layer is Linear -> LayerNorm -> activation (else Linear ->
        activation -> LayerNorm)
    :return: Outputs of shape ``(K, B, output_dim)``
    """
    weights_k, biases_k, scales_k, offsets_k = ([p.unbind(0) for p in group] for group in (weights, biases, scales, offsets))
    last = len(weights) - 1
    outputs = []
    for k in range(weights[0].shape[0]):
        h = x
        for i in range(last):
            h = member_linear(h, weights_k[i][k], biases_k[i][k])
            if scales and norm_before_activation:
                h = F.layer_norm(h, h.shape[-1:], scales_k[i][k], offsets_k[i][k], eps=LAYER_NORM_EPS)
            h = activation(h)
            if scales and not norm_before_activation:
                h = F.layer_norm(h, h.shape[-1:], scales_k[i][k], offsets_k[i][k], eps=LAYER_NORM_EPS)
        outputs.append(member_linear(h, weights_k[last][k], biases_k[last][k]))
    return th.stack(outputs)
