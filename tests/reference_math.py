"""An independent NumPy (float64, explicit loops) version of the reference networks and samplers, for tests.

It reads the weights out of the torch modules and recomputes docs/algorithms.md §2-§3 one member, one sample at
a time, so tests compare the library's batched torch code against plain formulas.
"""

from __future__ import annotations

import numpy as np
import torch as th

from qc_sb3.common.networks import MLP, CriticEnsemble, EnsembleMLP, FlowVectorField, OneStepActor

LAYER_NORM_EPS = 1e-6


def numpy_of(tensor: th.Tensor) -> np.ndarray:
    return tensor.detach().cpu().numpy().astype(np.float64)


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """docs/algorithms.md §2: GELU with the tanh approximation, written out."""
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def layer_norm(x: np.ndarray, scale: np.ndarray, offset: np.ndarray) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + LAYER_NORM_EPS) * scale + offset


def mlp_forward(mlp: MLP, x: np.ndarray) -> np.ndarray:
    """One MLP on a single input vector."""
    h = x
    n_layers = len(mlp.linears)
    for i, linear in enumerate(mlp.linears):
        h = numpy_of(linear.weight) @ h + numpy_of(linear.bias)
        if i < n_layers - 1:
            h = gelu_tanh(h)
            if mlp.norms is not None:
                h = layer_norm(h, numpy_of(mlp.norms[i].weight), numpy_of(mlp.norms[i].bias))
    return h


def ensemble_member_forward(ensemble: EnsembleMLP, member: int, x: np.ndarray) -> np.ndarray:
    """Member ``member`` of an EnsembleMLP on a single input vector."""
    h = x
    n_layers = len(ensemble.weights)
    for i in range(n_layers):
        h = h @ numpy_of(ensemble.weights[i][member]) + numpy_of(ensemble.biases[i][member])
        if i < n_layers - 1:
            h = gelu_tanh(h)
            if ensemble.norm_weights is not None and ensemble.norm_biases is not None:
                h = layer_norm(h, numpy_of(ensemble.norm_weights[i][member]), numpy_of(ensemble.norm_biases[i][member]))
    return h


def critic_values(critic: CriticEnsemble, observation: np.ndarray, action: np.ndarray) -> np.ndarray:
    """Q_k(s, a) for every member k of one (s, a): shape (K,)."""
    x = np.concatenate([observation, action])
    return np.array([ensemble_member_forward(critic.net, k, x)[0] for k in range(critic.n_critics)])


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
    flow: FlowVectorField, critic: CriticEnsemble, observation: np.ndarray, noises: np.ndarray, flow_steps: int, q_agg: str
) -> np.ndarray:
    """docs/algorithms.md §3: the candidate with the highest ensemble-aggregated online Q."""
    candidates = [euler_sample(flow, observation, noise, flow_steps) for noise in noises]
    aggregate = np.mean if q_agg == "mean" else np.min
    scores = [aggregate(critic_values(critic, observation, candidate)) for candidate in candidates]
    return candidates[int(np.argmax(scores))]
