"""QCFQLPolicy: a one-step actor distilled from the flow BC policy (docs/algorithms.md §2, §3)."""

from __future__ import annotations

from typing import Any

import torch as th
from gymnasium import spaces
from stable_baselines3.common.type_aliases import Schedule

from qc_sb3.common.flow_q import FlowQPolicy
from qc_sb3.common.networks import OneStepActor


class QCFQLPolicy(FlowQPolicy):
    """
    Policy of QC-FQL (and FQL, FQL-n): a one-step actor ``mu(s, z)`` (no LayerNorm, no tanh) that maps a noise
    z ~ N(0, I) to a chunk in one forward pass, clipped to [-1, 1] when acting and for the TD target. With
    ``deterministic=True`` the chunk is the actor's at z = 0 (the mode of the noise), clipped the same way.

    The parameters are those of :class:`~qc_sb3.common.flow_q.FlowQPolicy`.
    """

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Box, lr_schedule: Schedule, **kwargs: Any):
        super().__init__(observation_space, action_space, lr_schedule, **kwargs)
        features_dim = self.features_extractor.features_dim
        self.actor = OneStepActor(features_dim, self.flat_action_dim, self.actor_hidden_dims, layer_norm=self.actor_layer_norm)
        self.actor.optimizer = self._make_optimizer(self.actor, lr_schedule)

    @property
    def optimizers(self) -> list[th.optim.Optimizer]:
        return [*super().optimizers, self.actor.optimizer]

    def sample_actions(self, features: th.Tensor, deterministic: bool = False) -> th.Tensor:
        shape = (features.shape[0], self.flat_action_dim)
        noise = features.new_zeros(shape) if deterministic else th.randn(shape, device=features.device)
        return self.actor(features, noise).clamp(-1.0, 1.0)

    def set_training_mode(self, mode: bool) -> None:
        super().set_training_mode(mode)
        self.actor.train(mode)


MlpPolicy = QCFQLPolicy
