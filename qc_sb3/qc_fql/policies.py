"""QCFQLPolicy: a one-step actor distilled from the flow BC policy (docs/algorithms.md §2, §3)."""

from __future__ import annotations

from typing import Any, ClassVar

import torch as th
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor, NatureCNN

from qc_sb3.common.flow_q import FlowQPolicy
from qc_sb3.common.networks import OneStepActor


class QCFQLPolicy(FlowQPolicy):
    """
    Policy of QC-FQL (and FQL, FQL-n): a one-step actor ``mu(s, z)`` (no LayerNorm, no tanh) that maps a noise
    z ~ N(0, I) to a chunk in one forward pass, clipped to [-1, 1] when acting and for the TD target. With
    ``deterministic=True`` the chunk is the actor's at z = 0 (the mode of the noise), clipped the same way.

    The parameters are those of :class:`~qc_sb3.common.flow_q.FlowQPolicy`.
    """

    optimized_modules: ClassVar[tuple[str, ...]] = ("flow", "critic", "actor")
    features_extractor_owner: ClassVar[str] = "actor"

    def _build_networks(self) -> None:
        super()._build_networks()
        self.actor = OneStepActor(
            self.features_dim,
            self.flat_action_dim,
            self.actor_hidden_dims,
            layer_norm=self.actor_layer_norm,
            activation_fn=self.activation_fn,
        )

    def sample_actions(
        self, features: th.Tensor, deterministic: bool = False, noise: th.Tensor | None = None
    ) -> th.Tensor:
        if deterministic:
            noise = features.new_zeros(features.shape[0], self.flat_action_dim)
        elif noise is None:
            noise = self.decision_noise(features.shape[0])
        return self.actor(features, noise).clamp(-1.0, 1.0)

    def decision_noise(self, batch_size: int) -> th.Tensor:
        return th.randn(batch_size, self.flat_action_dim, device=self.device)

MlpPolicy = QCFQLPolicy


class CnnPolicy(QCFQLPolicy):
    """
    The policy of QC-FQL for image observations, as SB3's SAC ``CnnPolicy``: SB3's ``NatureCNN`` is the default
    features extractor (:class:`~qc_sb3.common.encoders.ImpalaSmallExtractor` is the reference's), uint8 images are
    divided by 255 once, in the policy (``normalize_images``), and a channels-last image env is read channels first
    through SB3's ``VecTransposeImage``. The parameters are those of :class:`QCFQLPolicy`.
    """

    def __init__(self, *args: Any, features_extractor_class: type[BaseFeaturesExtractor] = NatureCNN, **kwargs: Any):
        super().__init__(*args, features_extractor_class=features_extractor_class, **kwargs)
