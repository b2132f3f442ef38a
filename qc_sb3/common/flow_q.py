"""What QC and QC-FQL share: a flow BC policy, a chunked critic ensemble, their joint update (docs/algorithms.md §2, §3)."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

import torch as th
from gymnasium import spaces
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor, FlattenExtractor
from stable_baselines3.common.type_aliases import Schedule

from qc_sb3.common.buffers import ChunkReplayBufferSamples
from qc_sb3.common.chunked import ChunkedOffPolicyAlgorithm
from qc_sb3.common.losses import Q_AGGREGATIONS, chunked_td_target, critic_loss, flow_matching_loss
from qc_sb3.common.networks import CriticEnsemble, FlowVectorField
from qc_sb3.common.policies import ChunkPolicy, default_optimizer_kwargs

DEFAULT_HIDDEN_DIMS = [512, 512, 512, 512]


def actor_and_critic_hidden_dims(net_arch: list[int] | dict[str, list[int]] | None) -> tuple[list[int], list[int]]:
    """
    Hidden layer sizes of the actor-side networks (flow, one-step actor) and of the critic.

    :param net_arch: One list for all networks, or ``dict(pi=[...], qf=[...])`` as in SB3; None for 4 x 512
    :return: (actor hidden dims, critic hidden dims)
    """
    if net_arch is None:
        return list(DEFAULT_HIDDEN_DIMS), list(DEFAULT_HIDDEN_DIMS)
    if isinstance(net_arch, dict):
        unknown = set(net_arch) - {"pi", "qf"}
        if unknown:
            raise ValueError(f"net_arch keys must be 'pi' and 'qf', got unknown {sorted(unknown)}")
        return list(net_arch.get("pi", DEFAULT_HIDDEN_DIMS)), list(net_arch.get("qf", DEFAULT_HIDDEN_DIMS))
    return list(net_arch), list(net_arch)


class FlowQPolicy(ChunkPolicy):
    """
    Networks shared by QC and QC-FQL (docs/algorithms.md §2): a flow BC vector field over chunks (no LayerNorm), a critic
    ensemble of K members over concat[s, chunk] (LayerNorm), and its target copy. Each network has its own Adam optimizer,
    which is the reference's single Adam over all parameters, since Adam is per parameter.

    :param observation_space: Observation space
    :param action_space: Primitive action space
    :param lr_schedule: Learning rate schedule
    :param net_arch: Hidden layers, one list for all networks or ``dict(pi=[...], qf=[...])`` (default 4 x 512)
    :param chunk_size: Chunk length h
    :param action_chunking: False for the ``-n`` variants (single actions over h-step windows)
    :param flow_steps: Euler steps T of the flow sampler
    :param n_critics: Ensemble size K
    :param q_agg: Ensemble aggregation, "mean" or "min"
    :param critic_layer_norm: LayerNorm after each hidden activation of the critic
    :param actor_layer_norm: LayerNorm after each hidden activation of the flow (and one-step actor)
    :param features_extractor_class: Features extractor (flattening by default)
    :param features_extractor_kwargs: Keyword arguments of the features extractor
    :param normalize_images: Whether to divide image observations by 255
    :param optimizer_class: Optimizer class (Adam)
    :param optimizer_kwargs: Optimizer keyword arguments (None: Adam's defaults, beta 0.9/0.999, eps 1e-8, no weight
        decay, with its fused implementation)
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Box,
        lr_schedule: Schedule,
        net_arch: list[int] | dict[str, list[int]] | None = None,
        chunk_size: int = 5,
        action_chunking: bool = True,
        flow_steps: int = 10,
        n_critics: int = 2,
        q_agg: str = "mean",
        critic_layer_norm: bool = True,
        actor_layer_norm: bool = False,
        features_extractor_class: type[BaseFeaturesExtractor] = FlattenExtractor,
        features_extractor_kwargs: dict[str, Any] | None = None,
        normalize_images: bool = True,
        optimizer_class: type[th.optim.Optimizer] = th.optim.Adam,
        optimizer_kwargs: dict[str, Any] | None = None,
    ):
        super().__init__(
            observation_space,
            action_space,
            chunk_size=chunk_size,
            action_chunking=action_chunking,
            features_extractor_class=features_extractor_class,
            features_extractor_kwargs=features_extractor_kwargs,
            normalize_images=normalize_images,
        )
        if q_agg not in Q_AGGREGATIONS:
            raise ValueError(f"q_agg must be one of {Q_AGGREGATIONS}, got {q_agg!r}")
        self.net_arch = net_arch
        self.flow_steps = flow_steps
        self.n_critics = n_critics
        self.q_agg = q_agg
        self.critic_layer_norm = critic_layer_norm
        self.actor_layer_norm = actor_layer_norm
        self.optimizer_class = optimizer_class
        self.optimizer_kwargs = default_optimizer_kwargs(optimizer_class, optimizer_kwargs)
        self.actor_hidden_dims, self.critic_hidden_dims = actor_and_critic_hidden_dims(net_arch)

        self.features_extractor = self.make_features_extractor()
        features_dim = self.features_extractor.features_dim
        self.flow = FlowVectorField(features_dim, self.flat_action_dim, self.actor_hidden_dims, layer_norm=actor_layer_norm)
        self.critic = self._make_critic(features_dim)
        self.critic_target = self._make_critic(features_dim)
        # docs/algorithms.md §2: the target critic starts as an exact copy and moves only by Polyak averaging.
        self.critic_target.load_state_dict(self.critic.state_dict())
        self.critic_target.requires_grad_(False)
        self.flow.optimizer = self._make_optimizer(self.flow, lr_schedule)
        self.critic.optimizer = self._make_optimizer(self.critic, lr_schedule)

    def _make_critic(self, features_dim: int) -> CriticEnsemble:
        return CriticEnsemble(
            features_dim, self.flat_action_dim, self.critic_hidden_dims, self.n_critics, layer_norm=self.critic_layer_norm
        )

    def _make_optimizer(self, module: th.nn.Module, lr_schedule: Schedule) -> th.optim.Optimizer:
        return self.optimizer_class(module.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)  # type: ignore[call-arg]

    @property
    def optimizers(self) -> list[th.optim.Optimizer]:
        """Every optimizer of the policy, stepped together after one backward pass."""
        return [self.flow.optimizer, self.critic.optimizer]

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data.update(
            lr_schedule=self._dummy_schedule,  # only used at construction; optimizer states load separately
            net_arch=self.net_arch,
            flow_steps=self.flow_steps,
            n_critics=self.n_critics,
            q_agg=self.q_agg,
            critic_layer_norm=self.critic_layer_norm,
            actor_layer_norm=self.actor_layer_norm,
            optimizer_class=self.optimizer_class,
            optimizer_kwargs=self.optimizer_kwargs,
        )
        return data

    def flat_actions(self, actions: th.Tensor) -> th.Tensor:
        """
        The critic's and the flow's action input from a batch of windows (B, h, A): the flat time-major chunk, or
        only a_t for the ``-n`` variants (docs/algorithms.md §4).
        """
        if self.action_chunking:
            return actions.reshape(actions.shape[0], -1)
        return actions[:, 0, :]

    @abstractmethod
    def sample_actions(self, features: th.Tensor, deterministic: bool = False) -> th.Tensor:
        """
        The policy's action for each state (best-of-N for QC, the one-step actor for QC-FQL), in [-1, 1];
        used to act and for the TD target (always sampled there).

        :param features: State features, shape (B, features_dim)
        :param deterministic: Use the policy's fixed noise instead of fresh noise (a deterministic function of the
            state)
        :return: Flat chunks of shape (B, flat_action_dim)
        """

    def _predict_chunk(self, observation: th.Tensor, deterministic: bool = False) -> th.Tensor:
        return self.sample_actions(self.features(observation), deterministic=deterministic)

    def set_training_mode(self, mode: bool) -> None:
        self.flow.train(mode)
        self.critic.train(mode)
        self.training = mode


class FlowQAlgorithm(ChunkedOffPolicyAlgorithm):
    """
    The losses of QC and QC-FQL (docs/algorithms.md §3): chunked TD for the critic, flow matching for the flow, one gradient
    step on ``L_Q + L_actor`` (the update itself is the base class's). Subclasses define the actor-side loss.

    :param flow_steps: Euler steps T of the flow sampler
    :param n_critics: Critic ensemble size K
    :param q_agg: Ensemble aggregation of the TD target and of best-of-N scoring, "mean" (reference) or "min"

    The other parameters are those of :class:`~qc_sb3.common.chunked.ChunkedOffPolicyAlgorithm`.
    """

    policy: FlowQPolicy

    def __init__(
        self,
        *args: Any,
        flow_steps: int = 10,
        n_critics: int = 2,
        q_agg: str = "mean",
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        if q_agg not in Q_AGGREGATIONS:
            raise ValueError(f"q_agg must be one of {Q_AGGREGATIONS}, got {q_agg!r}")
        if flow_steps < 1:
            raise ValueError(f"flow_steps must be >= 1, got {flow_steps}")
        if n_critics < 1:
            raise ValueError(f"n_critics must be >= 1, got {n_critics}")
        self.flow_steps = flow_steps
        self.n_critics = n_critics
        self.q_agg = q_agg

    def _policy_hyperparameters(self) -> dict[str, Any]:
        """Algorithm hyperparameters the policy needs (same-named attributes on both)."""
        return {"flow_steps": self.flow_steps, "n_critics": self.n_critics, "q_agg": self.q_agg}

    def _setup_model(self) -> None:
        self.policy_kwargs = {**self.policy_kwargs, **self._policy_hyperparameters()}
        super()._setup_model()

    def _get_torch_save_params(self) -> tuple[list[str], list[str]]:
        return ["policy", *[f"policy.{name}.optimizer" for name in self._optimized_modules]], []

    @property
    def _optimized_modules(self) -> list[str]:
        """Names of the policy's modules that carry an optimizer."""
        return ["flow", "critic"]

    def _optimized_loss(self, losses: dict[str, th.Tensor]) -> th.Tensor:
        return losses["critic_loss"] + losses["actor_loss"]  # docs/algorithms.md §3: L_Q + L_actor, one backward

    def _losses(self, batch: ChunkReplayBufferSamples) -> dict[str, th.Tensor]:
        """Every loss and statistic of one gradient step; ``critic_loss`` and ``actor_loss`` are optimized."""
        policy = self.policy
        observations = policy.features(batch.observations)
        actions = policy.flat_actions(batch.actions)
        with th.no_grad():
            next_observations = policy.features(batch.next_observations)
            next_actions = policy.sample_actions(next_observations)
            target = chunked_td_target(
                policy.critic_target,
                next_observations,
                next_actions,
                batch.rewards,
                batch.masks,
                self.gamma,
                self.chunk_size,
                self.q_agg,
            )
        critic_loss_value, q_values = critic_loss(policy.critic, observations, actions, target, batch.valid)
        # docs/algorithms.md §3: flow matching on the dataset chunks, weighted by valid (unweighted for the -n variants).
        noise = th.randn_like(actions)
        times = th.rand(actions.shape[0], 1, device=actions.device)
        bc_flow_loss = flow_matching_loss(
            policy.flow, observations, actions, noise, times, batch.valid if self.action_chunking else None
        )
        return {
            "critic_loss": critic_loss_value,
            "q_mean": q_values.mean().detach(),
            "target_mean": target.mean(),
            "bc_flow_loss": bc_flow_loss,
            **self._actor_losses(observations, bc_flow_loss),
        }

    @abstractmethod
    def _actor_losses(self, observations: th.Tensor, bc_flow_loss: th.Tensor) -> dict[str, th.Tensor]:
        """
        The actor-side loss terms; must include ``actor_loss``, the one that is optimized.

        :param observations: State features of the batch, shape (B, features_dim)
        :param bc_flow_loss: The flow-matching loss of the batch
        :return: Named loss terms
        """
