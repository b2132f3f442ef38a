"""The RLPD family's actor: SB3's SAC actor with the reference's initialisation and exact tanh log-determinant."""

from __future__ import annotations

import math

import torch as th
import torch.nn.functional as F
from gymnasium import spaces
from stable_baselines3.common.distributions import SquashedDiagGaussianDistribution, TanhBijector, sum_independent_dims
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from stable_baselines3.sac.policies import Actor
from torch import nn

from qc_sb3.common.networks import reference_init_

LOG_2 = math.log(2.0)


def tanh_log_det_jacobian(gaussian_actions: th.Tensor) -> th.Tensor:
    """
    ``log(1 - tanh(u)^2)`` per coordinate, computed as ``2 * (log 2 - u - softplus(-2u))``: exact and finite for
    any ``u``, where the direct form gives ``-inf`` once ``tanh(u)`` rounds to 1 (``|u|`` > 9 in float32).

    :param gaussian_actions: Pre-squash actions u
    :return: The log-determinant per coordinate, same shape as ``gaussian_actions``
    """
    return 2.0 * (LOG_2 - gaussian_actions - F.softplus(-2.0 * gaussian_actions))


class ExactSquashedDiagGaussianDistribution(SquashedDiagGaussianDistribution):
    """
    SB3's squashed diagonal Gaussian ``a = tanh(u)``, ``u ~ N(mu, std)``, whose log-probability uses the exact
    tanh log-determinant (:func:`tanh_log_det_jacobian`, the reference's TensorFlow-Probability ``Tanh`` bijector)
    instead of SB3's ``log(1 - a^2 + 1e-6)``. The two differ where the policy saturates: SB3's term is floored at
    ``log(1e-6)`` per coordinate, so it under-counts the log-probability of actions near the bounds.

    :param action_dim: Dimension of the action space
    """

    def log_prob(self, actions: th.Tensor, gaussian_actions: th.Tensor | None = None) -> th.Tensor:
        """
        :param actions: Squashed actions a in [-1, 1]
        :param gaussian_actions: Their pre-squash values u when known (samples of this distribution); None:
            ``atanh(a)``, with ``a`` first clamped to ``±(1 - float eps)`` as SB3 does
        :return: log pi(a), summed over the action dimensions
        """
        if gaussian_actions is None:
            gaussian_actions = TanhBijector.inverse(actions)
        log_prob = sum_independent_dims(self.distribution.log_prob(gaussian_actions))
        return log_prob - tanh_log_det_jacobian(gaussian_actions).sum(dim=1)


class RLPDActor(Actor):
    """
    SB3's SAC actor as the Q-chunking reference builds it for RLPD (``TanhNormal`` over an ``MLP`` with
    ``activate_final=True``): Linear -> activation per hidden layer (no LayerNorm), a mean head and a
    state-dependent log-std head clipped to [-20, 2]. Unlike SB3, every layer, heads included, starts with
    Xavier-uniform weights and zero biases, and the log-probability uses the exact tanh log-determinant
    (:class:`ExactSquashedDiagGaussianDistribution`).

    :param observation_space: Observation space
    :param action_space: The actor's action space (the flat chunk space)
    :param net_arch: Hidden layer sizes
    :param features_extractor: Network to extract features
    :param features_dim: Number of features
    :param activation_fn: Activation function of the hidden layers
    :param normalize_images: Whether to normalize images or not, dividing by 255.0
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Box,
        net_arch: list[int],
        features_extractor: BaseFeaturesExtractor,
        features_dim: int,
        activation_fn: type[nn.Module] = nn.ReLU,
        normalize_images: bool = True,
    ):
        super().__init__(
            observation_space,
            action_space,
            net_arch=net_arch,
            features_extractor=features_extractor,
            features_dim=features_dim,
            activation_fn=activation_fn,
            normalize_images=normalize_images,
        )
        self.action_dist = ExactSquashedDiagGaussianDistribution(self.action_dist.action_dim)
        for layer in [*self.latent_pi, self.mu, self.log_std]:
            if isinstance(layer, nn.Linear):
                reference_init_(layer.weight, layer.bias)
