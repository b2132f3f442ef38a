"""
Fast versions of the plain networks of :mod:`qc_sb3.common.networks`: the same parameters, state dicts and values
to float32 rounding, with the CPU fast paths of :mod:`qc_sb3.accel.fast_inference` (without autograd), of
:mod:`qc_sb3.accel.fast_training` (with autograd) and the oneDNN Linear layers of :mod:`qc_sb3.accel.onednn_matmul`.

:func:`accelerate` swaps them in: it changes the class of each network module of a policy to its fast
subclass, in place (the parameters stay the same tensors). The tests check each fast module against the plain one
and against float64 hand computations.
"""

from __future__ import annotations

import functools

import torch as th
import torch.nn.functional as F
from stable_baselines3.sac.policies import Actor as SACActor
from torch import nn

from qc_sb3.accel import fast_inference
from qc_sb3.accel.compiled_step import run_eagerly_on_cpu, traced_gelu_tanh
from qc_sb3.accel.fast_inference import InferencePath, inference_path
from qc_sb3.accel.fast_training import gelu_tanh, per_member_ensemble_forward
from qc_sb3.accel.onednn_matmul import Linear, ensemble_linear, linear
from qc_sb3.common.networks import MLP, EnsembleMLP, FlowVectorField, TanhGELU, layer_norm


def fast_gelu_tanh(x: th.Tensor) -> th.Tensor:
    """
    GELU(tanh) as :class:`~qc_sb3.common.networks.TanhGELU`: compiled code on CPU traces it as a sigmoid, eager
    code on CPU in float32 runs :func:`~qc_sb3.accel.fast_training.gelu_tanh`, any other PyTorch's own kernel.
    """
    if x.device.type == "cpu":
        if th.compiler.is_compiling():
            return traced_gelu_tanh(x)
        if x.dtype == th.float32:
            return gelu_tanh(x)
    return F.gelu(x, approximate="tanh")


class FastMLP(MLP):
    """
    :class:`~qc_sb3.common.networks.MLP` with oneDNN Linear layers, and the fused and in-place CPU paths when its
    activation is the reference's GELU(tanh).
    """

    def _path(self, x: th.Tensor) -> InferencePath:
        gelu = isinstance(self.activation, TanhGELU)
        return inference_path(x, len(self.linears) - 1, gelu, self.norms is not None, ensemble=False)

    def forward(self, x: th.Tensor) -> th.Tensor:
        h = x.reshape(-1, x.shape[-1])
        if self._path(h) == "fused":
            out = fast_inference.fused_mlp_forward(self, h)
        else:
            first = self.linears[0]
            out = self.forward_from_first_layer(linear(h, first.weight, first.bias))
        return out.view(*x.shape[:-1], self.linears[-1].out_features)

    def forward_from_first_layer(self, pre: th.Tensor) -> th.Tensor:
        if self._path(pre) != "plain":
            return fast_inference.in_place_mlp_from_first_layer(self, pre)
        activation = fast_gelu_tanh if isinstance(self.activation, TanhGELU) else self.activation
        h = pre
        for i, layer in enumerate(self.linears[1:]):
            h = activation(h)
            if self.norms is not None:
                h = layer_norm(h, self.norms[i].weight, self.norms[i].bias)
            h = linear(h, layer.weight, layer.bias)
        return h


class FastEnsembleMLP(EnsembleMLP):
    """:class:`~qc_sb3.common.networks.EnsembleMLP` with the fused and in-place CPU paths and oneDNN Linear layers."""

    def layers(
        self,
        x: th.Tensor,
        weights: list[th.Tensor],
        biases: list[th.Tensor],
        scales: list[th.Tensor],
        offsets: list[th.Tensor],
    ) -> th.Tensor:
        last = len(weights) - 1
        gelu_then_layer_norm = isinstance(self.activation, TanhGELU) and not self.norm_before_activation
        path = inference_path(x, last, gelu_then_layer_norm, bool(scales), ensemble=True)
        if path == "fused":
            return fast_inference.fused_ensemble_forward(x, weights, biases, scales, offsets)
        if path == "in_place":
            return fast_inference.in_place_ensemble_forward(self, x, weights, biases, scales, offsets)
        activation = fast_gelu_tanh if isinstance(self.activation, TanhGELU) else self.activation
        if path == "per_member":
            return per_member_ensemble_forward(x, weights, biases, scales, offsets, activation, self.norm_before_activation)
        h = x.expand(self.n_members, *x.shape)
        for i in range(last):
            h = ensemble_linear(h, weights[i], biases[i])
            if scales and self.norm_before_activation:
                h = layer_norm(h, scales[i].unsqueeze(1), offsets[i].unsqueeze(1))
            h = activation(h)
            if scales and not self.norm_before_activation:
                h = layer_norm(h, scales[i].unsqueeze(1), offsets[i].unsqueeze(1))
        return ensemble_linear(h, weights[last], biases[last])


class FastFlowVectorField(FlowVectorField):
    """
    :class:`~qc_sb3.common.networks.FlowVectorField` whose Euler integration takes the fused CPU path
    (:func:`~qc_sb3.accel.fast_inference.fused_euler`) where its MLP's forward would, and runs eagerly inside a
    compiled gradient step on CPU (:func:`~qc_sb3.accel.compiled_step.run_eagerly_on_cpu`).
    """

    @run_eagerly_on_cpu
    def integrate(self, observations: th.Tensor, noise: th.Tensor, flow_steps: int) -> th.Tensor:
        if flow_steps > 0 and self.mlp._path(observations) == "fused":
            return fast_inference.fused_euler(self, observations, noise, flow_steps)
        return super().integrate(observations, noise, flow_steps)


FAST_CLASSES: dict[type[nn.Module], type[nn.Module]] = {
    MLP: FastMLP,
    EnsembleMLP: FastEnsembleMLP,
    FlowVectorField: FastFlowVectorField,
}


@functools.cache
def fast_class(cls: type[nn.Module]) -> type[nn.Module] | None:
    """
    The fast class of a plain network class: its entry of :data:`FAST_CLASSES`, or for a subclass of one of those
    (e.g. the RLPD critic, an ``EnsembleMLP``) a subclass of both; None for any other class.

    :param cls: A module class
    :return: The class to swap in, or None
    """
    if cls in FAST_CLASSES:
        return FAST_CLASSES[cls]
    if any(issubclass(cls, fast) for fast in FAST_CLASSES.values()):
        return None
    for plain, fast in FAST_CLASSES.items():
        if issubclass(cls, plain):
            return type(f"Fast{cls.__name__}", (fast, cls), {"__module__": __name__, "__doc__": cls.__doc__})
    return None


def accelerate(module: nn.Module) -> nn.Module:
    """
    Swap the fast implementations into ``module`` and its submodules, in place: each plain network gets its fast
    class, and the ``nn.Linear`` layers of an SB3 SAC actor (the RLPD family's) become oneDNN
    :class:`~qc_sb3.accel.onednn_matmul.Linear` layers. Parameters, buffers and state dict are unchanged.

    :param module: A policy or a network
    :return: ``module``
    """
    for submodule in module.modules():
        fast = fast_class(type(submodule))
        if fast is not None:
            submodule.__class__ = fast
        if isinstance(submodule, SACActor):
            for layer in submodule.modules():
                if type(layer) is nn.Linear:
                    layer.__class__ = Linear
    return module
