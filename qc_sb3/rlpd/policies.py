"""RLPDPolicy: a SAC squashed-Gaussian actor over chunks, a LayerNorm critic ensemble and a learned temperature."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor, NatureCNN
from stable_baselines3.common.type_aliases import Schedule
from torch import nn

from qc_sb3.common.actor_critic import ActorCriticChunkPolicy
from qc_sb3.rlpd.actor import ExactSquashedDiagGaussianDistribution, RLPDActor
from qc_sb3.rlpd.networks import LayerNormReLUCriticEnsemble


class Temperature(nn.Module):
    """
    The learned SAC temperature alpha, stored as ``log alpha``.

    :param initial_value: Initial alpha (the reference's 1.0)
    """

    def __init__(self, initial_value: float = 1.0):
        super().__init__()
        if initial_value <= 0:
            raise ValueError(f"the initial temperature must be > 0, got {initial_value}")
        self.log_ent_coef = nn.Parameter(th.tensor(float(np.log(initial_value))))

    def forward(self) -> th.Tensor:
        """:return: alpha = exp(log alpha), a scalar tensor"""
        return self.log_ent_coef.exp()


class RLPDPolicy(ActorCriticChunkPolicy):
    """
    Networks of RLPD, RLPD-AC and QC-RLPD (docs/algorithms.md §4): SB3's SAC actor (a state-dependent squashed
    Gaussian, log-std clipped to [-20, 2]) with the reference's initialisation and exact tanh log-determinant
    (:class:`~qc_sb3.rlpd.actor.RLPDActor`) over the flat chunk space ``[-1, 1]^(h * A)``, a critic ensemble of K
    members over ``concat[s, chunk]`` (Linear -> LayerNorm -> ReLU), its target copy, and the temperature, each
    trained module with its own optimizer (:class:`~qc_sb3.common.actor_critic.ActorCriticChunkPolicy`, which also
    says how the features extractor is trained). With ``deterministic=True`` the policy acts with the squashed mean
    ``tanh(mu(s))``, as SAC does.

    :param observation_space: Observation space
    :param action_space: Primitive action space
    :param lr_schedule: Learning rate schedule
    :param chunk_size: Chunk length h (1: RLPD)
    :param action_chunking: Must be True (the RLPD family has no ``-n`` variant)
    :param n_critics: Ensemble size K
    :param initial_ent_coef: Initial temperature alpha
    :param activation_fn: Activation of the actor's hidden layers (SB3's SAC default, ReLU)
    :param kwargs: The other parameters of :class:`~qc_sb3.common.actor_critic.ActorCriticChunkPolicy`
        (``net_arch``, features extractor, optimizer)
    """

    optimized_modules: ClassVar[tuple[str, ...]] = ("actor", "critic", "temperature")
    features_extractor_owner: ClassVar[str] = "actor"

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Box,
        lr_schedule: Schedule,
        chunk_size: int = 1,
        action_chunking: bool = True,
        n_critics: int = 10,
        initial_ent_coef: float = 1.0,
        activation_fn: type[nn.Module] = nn.ReLU,
        **kwargs: Any,
    ):
        if not action_chunking:
            raise ValueError("the RLPD family acts with whole chunks: action_chunking must be True, got False")
        super().__init__(
            observation_space,
            action_space,
            lr_schedule,
            chunk_size=chunk_size,
            action_chunking=action_chunking,
            n_critics=n_critics,
            **kwargs,
        )
        self.initial_ent_coef = initial_ent_coef
        self.activation_fn = activation_fn
        # docs/algorithms.md §4: the actor's action space is the flat chunk in [-1, 1]^(h * A).
        self.chunk_space = spaces.Box(-1.0, 1.0, (self.flat_action_dim,), np.float32)
        self._build(lr_schedule)

    def _build_networks(self) -> None:
        self.actor = RLPDActor(
            self.observation_space,
            self.chunk_space,
            net_arch=self.actor_hidden_dims,
            features_extractor=self.features_extractor,
            features_dim=self.features_dim,
            activation_fn=self.activation_fn,
            normalize_images=self.normalize_images,
        )
        self.critic = LayerNormReLUCriticEnsemble(
            self.features_dim, self.flat_action_dim, self.critic_hidden_dims, self.n_critics
        )
        self.critic_target = LayerNormReLUCriticEnsemble(
            self.features_dim, self.flat_action_dim, self.critic_hidden_dims, self.n_critics
        )
        self.temperature = Temperature(self.initial_ent_coef)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data.update(initial_ent_coef=self.initial_ent_coef, activation_fn=self.activation_fn)
        return data

    def action_distribution(self, observations: th.Tensor) -> ExactSquashedDiagGaussianDistribution:
        """
        The actor's squashed Gaussian pi(.|s) over flat chunks (SB3's SAC actor, log-std clipped to [-20, 2]).

        :param observations: Preprocessed observations, shape (B, *obs_shape)
        :return: The distribution (SB3's, with the exact tanh log-determinant in ``log_prob``)
        """
        mean_actions, log_std, _ = self.actor.get_action_dist_params(observations)  # docs/algorithms.md §4
        return self.actor.action_dist.proba_distribution(mean_actions, log_std)  # type: ignore[return-value]

    def _predict_chunk(self, observation: th.Tensor, deterministic: bool = False) -> th.Tensor:
        if deterministic:
            return self.actor(observation, deterministic=True)  # tanh(mean), as SAC
        return self.action_distribution(observation).sample()  # a = tanh(mu + std * eps), eps ~ N(0, I)


MlpPolicy = RLPDPolicy


class CnnPolicy(RLPDPolicy):
    """
    The policy of the RLPD family for image observations, as SB3's SAC ``CnnPolicy``: SB3's ``NatureCNN`` is the default
    features extractor (:class:`~qc_sb3.common.encoders.ImpalaSmallExtractor` is the reference's), uint8 images are
    divided by 255 once, in the policy (``normalize_images``), and a channels-last image env is read channels first
    through SB3's ``VecTransposeImage``. The parameters are those of :class:`RLPDPolicy`.
    """

    def __init__(self, *args: Any, features_extractor_class: type[BaseFeaturesExtractor] = NatureCNN, **kwargs: Any):
        super().__init__(*args, features_extractor_class=features_extractor_class, **kwargs)
