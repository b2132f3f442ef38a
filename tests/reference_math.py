"""The float64 oracle of the tests: NumPy versions (explicit formulas, one member and one sample at a time where it
matters) of the networks, samplers and distributions, written from docs/algorithms.md §2-§4, never from the library.

Functions read the weights out of the torch modules; tests compare the library's batched torch code against them.
This is the only place of hand-written forward passes in tests/.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch as th

from qc_sb3.common.networks import MLP, EnsembleMLP, FlowVectorField, OneStepActor

LAYER_NORM_EPS = 1e-6
Layers = list[tuple[np.ndarray, np.ndarray]]


def numpy_of(tensor: th.Tensor) -> np.ndarray:
    return tensor.detach().cpu().numpy().astype(np.float64)


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """docs/algorithms.md §2: GELU with the tanh approximation, written out."""
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def gelu_tanh_derivative(x: np.ndarray) -> np.ndarray:
    """The derivative of :func:`gelu_tanh`: 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) u', u = c (x + 0.044715 x^3)."""
    c = np.sqrt(2.0 / np.pi)
    tanh_u = np.tanh(c * (x + 0.044715 * x**3))
    return 0.5 * (1.0 + tanh_u) + 0.5 * x * (1.0 - tanh_u**2) * c * (1.0 + 3.0 * 0.044715 * x**2)


def relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0.0)


def layer_norm(x: np.ndarray, scale: np.ndarray, offset: np.ndarray) -> np.ndarray:
    """docs/algorithms.md §2: LayerNorm over the last axis, biased variance, eps 1e-6, then the affine map."""
    mean = x.mean(axis=-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + LAYER_NORM_EPS) * scale + offset


def dense_layers(
    x: np.ndarray,
    layers: Layers,
    norms: Layers | None = None,
    activation: Callable[[np.ndarray], np.ndarray] = gelu_tanh,
    norm_before_activation: bool = False,
) -> np.ndarray:
    """
    A stack of dense layers on inputs ``(..., in)``: each hidden layer ``h @ W + b`` -> activation [-> LayerNorm]
    (or LayerNorm before the activation), the last one ``h @ W + b`` only.

    :param layers: ``(W (in, out), b (out,))`` per layer
    :param norms: ``(scale, offset)`` per hidden layer, or None
    """
    h = np.asarray(x, dtype=np.float64)
    for i, (weight, bias) in enumerate(layers):
        h = h @ weight + bias
        if i == len(layers) - 1:
            break
        if norms is not None and norm_before_activation:
            h = layer_norm(h, *norms[i])
        h = activation(h)
        if norms is not None and not norm_before_activation:
            h = layer_norm(h, *norms[i])
    return h


def mlp_layers(mlp: MLP) -> tuple[Layers, Layers | None]:
    """An MLP's weights as ``(W (in, out), b)`` pairs and its LayerNorm parameters."""
    layers = [(numpy_of(linear.weight).T, numpy_of(linear.bias)) for linear in mlp.linears]
    norms = None if mlp.norms is None else [(numpy_of(norm.weight), numpy_of(norm.bias)) for norm in mlp.norms]
    return layers, norms


def member_layers(ensemble: EnsembleMLP, member: int) -> tuple[Layers, Layers | None]:
    """Member ``member`` of an ensemble as ``(W (in, out), b)`` pairs and its LayerNorm parameters."""
    layers = [(numpy_of(w[member]), numpy_of(b[member])) for w, b in zip(ensemble.weights, ensemble.biases, strict=True)]
    if ensemble.norm_weights is None or ensemble.norm_biases is None:
        return layers, None
    pairs = zip(ensemble.norm_weights, ensemble.norm_biases, strict=True)
    return layers, [(numpy_of(scale[member]), numpy_of(offset[member])) for scale, offset in pairs]


def mlp_forward(mlp: MLP, x: np.ndarray) -> np.ndarray:
    """docs/algorithms.md §2: Linear -> GELU(tanh) [-> LayerNorm] per hidden layer, last layer Linear."""
    return dense_layers(x, *mlp_layers(mlp))


def ensemble_member_forward(ensemble: EnsembleMLP, member: int, x: np.ndarray) -> np.ndarray:
    """Member ``member`` of an ensemble: QC's recipe (GELU -> LayerNorm, §2) or the RLPD family's (LayerNorm -> ReLU, §4)."""
    activation = relu if isinstance(ensemble.activation, th.nn.ReLU) else gelu_tanh
    return dense_layers(x, *member_layers(ensemble, member), activation, ensemble.norm_before_activation)


def critic_values(critic: th.nn.Module, observation: np.ndarray, action: np.ndarray) -> np.ndarray:
    """Q_k(s, a) for every member k of one (s, a), for QC's and RLPD's critics: shape (K,)."""
    ensemble = getattr(critic, "net", critic)
    x = np.concatenate([observation, action])
    return np.array([ensemble_member_forward(ensemble, k, x)[0] for k in range(ensemble.n_members)])


def flow_velocity(flow: FlowVectorField, observation: np.ndarray, x: np.ndarray, t: float) -> np.ndarray:
    return mlp_forward(flow.mlp, np.concatenate([observation, x, [t]]))


def actor_action(actor: OneStepActor, observation: np.ndarray, noise: np.ndarray) -> np.ndarray:
    return mlp_forward(actor.mlp, np.concatenate([observation, noise]))


def euler_sample(flow: FlowVectorField, observation: np.ndarray, noise: np.ndarray, flow_steps: int) -> np.ndarray:
    """docs/algorithms.md §3: a = z; a += f(s, a, i/T) / T for i < T; clip once at the end."""
    a = noise.copy()
    for i in range(flow_steps):
        a = a + flow_velocity(flow, observation, a, i / flow_steps) / flow_steps
    return np.clip(a, -1.0, 1.0)


def best_of_n(
    flow: FlowVectorField, critic: th.nn.Module, observation: np.ndarray, noises: np.ndarray, flow_steps: int, q_agg: str
) -> np.ndarray:
    """docs/algorithms.md §3: the candidate with the highest ensemble-aggregated online Q."""
    candidates = [euler_sample(flow, observation, noise, flow_steps) for noise in noises]
    aggregate = np.mean if q_agg == "mean" else np.min
    scores = [aggregate(critic_values(critic, observation, candidate)) for candidate in candidates]
    return candidates[int(np.argmax(scores))]


def sac_actor_mean_log_std(actor: th.nn.Module, observation: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """SB3's SAC actor (docs/algorithms.md §4): ReLU MLP, then a mean head and a log-std head clipped to [-20, 2]."""
    h = observation
    for layer in actor.latent_pi:
        h = numpy_of(layer.weight) @ h + numpy_of(layer.bias) if isinstance(layer, th.nn.Linear) else relu(h)
    mean = numpy_of(actor.mu.weight) @ h + numpy_of(actor.mu.bias)
    log_std = np.clip(numpy_of(actor.log_std.weight) @ h + numpy_of(actor.log_std.bias), -20.0, 2.0)
    return mean, log_std


def squashed_log_prob(mean: np.ndarray, log_std: np.ndarray, u: np.ndarray) -> float:
    """
    log N(u; mean, std) - sum log(1 - tanh(u)^2) for a = tanh(u), the reference's exact change of variables.

    1 - tanh(u)^2 = 1 / cosh(u)^2, so its log is 2 log 2 - 2 log(e^u + e^-u): finite in float64 for any u.
    """
    gaussian = -0.5 * ((u - mean) / np.exp(log_std)) ** 2 - log_std - 0.5 * np.log(2 * np.pi)
    log_det = 2 * np.log(2.0) - 2 * np.logaddexp(u, -u)
    return float(gaussian.sum() - log_det.sum())
