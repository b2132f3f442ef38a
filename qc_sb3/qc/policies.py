"""QCPolicy: best-of-N sampling from a flow BC policy, scored by the chunked critic ensemble (docs/algorithms.md §3)."""

from __future__ import annotations

from typing import Any

import torch as th
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor, NatureCNN

from qc_sb3.common.flow_q import FlowQPolicy
from qc_sb3.common.networks import best_of_n_actions


class QCPolicy(FlowQPolicy):
    """
    Policy of QC (and BFN, BFN-n): draw ``actor_num_samples`` chunks from the flow BC policy, score each with the
    ONLINE critic aggregated over the ensemble (``q_agg``), return the argmax. Used to act and for the TD-target
    action, from fresh noise each call, as in the reference (which evaluates this stochastic policy too).

    With ``deterministic=True`` the N chunks start from a fixed set of N flow noises instead, drawn once when the
    policy is built (from the global torch generator, which the algorithm's ``seed`` sets, without advancing it)
    and kept in the buffer ``deterministic_noise``: it is saved and loaded with the policy, so the same observation
    gives the same chunk across calls and across save/load.

    :param actor_num_samples: Number N of flow samples per decision

    The other parameters are those of :class:`~qc_sb3.common.flow_q.FlowQPolicy`.
    """

    deterministic_noise: th.Tensor

    def __init__(self, *args: Any, actor_num_samples: int = 32, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.actor_num_samples = actor_num_samples
        # Drawn in a fork of the generator's state, so the networks' initialisation and every later draw are
        # the same as without it.
        with th.random.fork_rng(devices=[]):
            noise = th.randn(actor_num_samples, self.flat_action_dim)
        self.register_buffer("deterministic_noise", noise)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        return {**super()._get_constructor_parameters(), "actor_num_samples": self.actor_num_samples}

    def sample_actions(
        self,
        features: th.Tensor,
        deterministic: bool = False,
        noise: th.Tensor | None = None,
        critic_features: th.Tensor | None = None,
    ) -> th.Tensor:
        """
        The best of N flow chunks under the critic (the parameters of
        :meth:`~qc_sb3.common.flow_q.FlowQPolicy.sample_actions`, and the critic's own state input).

        :param critic_features: The states by the critic's features extractor (:meth:`critic_features`), needed
            where the critic has its own; None: ``features``
        """
        if critic_features is None:
            if self.separate_critic_extractor:
                raise ValueError(
                    "this QCPolicy's critic has its own features extractor: pass critic_features=policy.critic_features"
                    "(observations), or call policy.act(observations)"
                )
            critic_features = features
        if deterministic:
            noise = self.deterministic_noise.to(features.dtype).expand(features.shape[0], -1, -1)
        return best_of_n_actions(
            self.flow,
            self.critic,
            features,
            self.actor_num_samples,
            self.flow_steps,
            self.q_agg,
            noise=noise,
            critic_observations=critic_features,
        )

    def act(self, observations: th.Tensor, deterministic: bool = False, noise: th.Tensor | None = None) -> th.Tensor:
        features = self.features(observations)
        critic_features = self.critic_features(observations, features)
        return self.sample_actions(features, deterministic=deterministic, noise=noise, critic_features=critic_features)

    def decision_noise(self, batch_size: int) -> th.Tensor:
        return th.randn(batch_size, self.actor_num_samples, self.flat_action_dim, device=self.device)

MlpPolicy = QCPolicy


class CnnPolicy(QCPolicy):
    """
    The policy of QC for image observations, as SB3's SAC ``CnnPolicy``: SB3's ``NatureCNN`` is the default
    features extractor (:class:`~qc_sb3.common.encoders.ImpalaSmallExtractor` is the reference's), uint8 images are
    divided by 255 once, in the policy (``normalize_images``), and a channels-last image env is read channels first
    through SB3's ``VecTransposeImage``. The parameters are those of :class:`QCPolicy`.
    """

    def __init__(self, *args: Any, features_extractor_class: type[BaseFeaturesExtractor] = NatureCNN, **kwargs: Any):
        super().__init__(*args, features_extractor_class=features_extractor_class, **kwargs)
