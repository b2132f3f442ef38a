"""What QC and QC-FQL share: a flow BC policy, a chunked critic ensemble, their joint update (docs/algorithms.md §2, §3)."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, ClassVar

import torch as th
from gymnasium import spaces
from stable_baselines3.common.noise import ActionNoise
from stable_baselines3.common.type_aliases import GymEnv, Schedule
from torch import nn

from qc_sb3.common.actor_critic import ActorCriticChunkPolicy
from qc_sb3.common.buffers import ChunkReplayBuffer, ChunkReplayBufferSamples
from qc_sb3.common.chunked import ChunkedOffPolicyAlgorithm
from qc_sb3.common.losses import Q_AGGREGATIONS, chunked_td_target, critic_loss, flow_matching_loss
from qc_sb3.common.networks import CriticEnsemble, FlowVectorField, TanhGELU


class FlowQPolicy(ActorCriticChunkPolicy):
    """
    Networks shared by QC and QC-FQL (docs/algorithms.md §2): a flow BC vector field over chunks (no LayerNorm), a
    critic ensemble of K members over concat[s, chunk] (LayerNorm), and its target copy, each trained network with
    its own optimizer (:class:`~qc_sb3.common.actor_critic.ActorCriticChunkPolicy`, which also says how the
    features extractor is trained).

    :param observation_space: Observation space
    :param action_space: Primitive action space
    :param lr_schedule: Learning rate schedule
    :param flow_steps: Euler steps T of the flow sampler
    :param q_agg: Ensemble aggregation, "mean" or "min"
    :param critic_layer_norm: LayerNorm after each hidden activation of the critic
    :param actor_layer_norm: LayerNorm after each hidden activation of the flow (and one-step actor)
    :param activation_fn: Activation of every network's hidden layers (the flow, the critics, the one-step actor),
        as SB3's ``activation_fn``; the reference's GELU(tanh) by default, which alone takes the fused CPU paths
    :param kwargs: The parameters of :class:`~qc_sb3.common.actor_critic.ActorCriticChunkPolicy` (``net_arch``,
        ``chunk_size``, ``action_chunking``, ``n_critics``, features extractor, optimizer)
    """

    optimized_modules: ClassVar[tuple[str, ...]] = ("flow", "critic")
    features_extractor_owner: ClassVar[str] = "flow"

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Box,
        lr_schedule: Schedule,
        flow_steps: int = 10,
        q_agg: str = "mean",
        critic_layer_norm: bool = True,
        actor_layer_norm: bool = False,
        activation_fn: type[nn.Module] = TanhGELU,
        **kwargs: Any,
    ):
        super().__init__(observation_space, action_space, lr_schedule, **kwargs)
        if q_agg not in Q_AGGREGATIONS:
            raise ValueError(f"q_agg must be one of {Q_AGGREGATIONS}, got {q_agg!r}")
        self.flow_steps = flow_steps
        self.q_agg = q_agg
        self.critic_layer_norm = critic_layer_norm
        self.actor_layer_norm = actor_layer_norm
        self.activation_fn = activation_fn
        self._build(lr_schedule)

    def _build_networks(self) -> None:
        self.flow = FlowVectorField(
            self.features_dim,
            self.flat_action_dim,
            self.actor_hidden_dims,
            layer_norm=self.actor_layer_norm,
            activation_fn=self.activation_fn,
        )
        self.critic = self._make_critic()
        self.critic_target = self._make_critic()

    def _make_critic(self) -> CriticEnsemble:
        return CriticEnsemble(
            self.features_dim,
            self.flat_action_dim,
            self.critic_hidden_dims,
            self.n_critics,
            layer_norm=self.critic_layer_norm,
            activation_fn=self.activation_fn,
        )

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data.update(
            flow_steps=self.flow_steps,
            q_agg=self.q_agg,
            critic_layer_norm=self.critic_layer_norm,
            actor_layer_norm=self.actor_layer_norm,
            activation_fn=self.activation_fn,
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
    def sample_actions(
        self, features: th.Tensor, deterministic: bool = False, noise: th.Tensor | None = None
    ) -> th.Tensor:
        """
        The policy's action for each state (best-of-N for QC, the one-step actor for QC-FQL), in [-1, 1];
        used to act and for the TD target (always sampled there).

        :param features: State features, shape (B, features_dim)
        :param deterministic: Use the policy's fixed noise instead of fresh noise (a deterministic function of the
            state)
        :param noise: The noise to start from, of :meth:`decision_noise`'s shape (drawn here when None)
        :return: Flat chunks of shape (B, flat_action_dim)
        """

    @abstractmethod
    def decision_noise(self, batch_size: int) -> th.Tensor:
        """
        Fresh noise for :meth:`sample_actions` on ``batch_size`` states, from the global torch generator.

        :param batch_size: Number of states B
        :return: A tensor on the policy's device
        """

    def act(self, observations: th.Tensor, deterministic: bool = False, noise: th.Tensor | None = None) -> th.Tensor:
        """
        The policy's action for preprocessed observations: :meth:`sample_actions` on their features (QC's best-of-N
        also reads the critic's, :meth:`critic_features`).

        :param observations: Preprocessed observations, shape (B, *obs_shape)
        :param deterministic: As in :meth:`sample_actions`
        :param noise: As in :meth:`sample_actions`
        :return: Flat chunks of shape (B, flat_action_dim)
        """
        return self.sample_actions(self.features(observations), deterministic=deterministic, noise=noise)

    def _predict_chunk(self, observation: th.Tensor, deterministic: bool = False) -> th.Tensor:
        return self.act(observation, deterministic=deterministic)


class FlowQAlgorithm(ChunkedOffPolicyAlgorithm):
    """
    The losses of QC and QC-FQL (docs/algorithms.md §3): chunked TD for the critic, flow matching for the flow, one
    gradient step on ``L_Q + L_actor`` (the update itself is the base class's). Subclasses define the actor-side loss,
    set their own hyperparameters before calling this constructor, and list every parameter in their docstring.

    :param flow_steps: Euler steps T of the flow sampler
    :param n_critics: Critic ensemble size K
    :param q_agg: Ensemble aggregation of the TD target and of best-of-N scoring, "mean" (reference) or "min"
    :param _init_setup_model: Whether or not to build the network at the creation of the instance

    The other parameters are those of :class:`~qc_sb3.common.chunked.ChunkedOffPolicyAlgorithm`.
    """

    policy: FlowQPolicy

    def __init__(
        self,
        policy: str | type[FlowQPolicy],
        env: GymEnv | str,
        learning_rate: float | Schedule = 3e-4,
        buffer_size: int = 1_000_000,
        learning_starts: int = 5000,
        batch_size: int = 256,
        tau: float = 0.005,
        gamma: float = 0.99,
        train_freq: int | tuple[int, str] = 1,
        gradient_steps: int = 1,
        action_noise: ActionNoise | None = None,
        chunk_size: int = 5,
        action_chunking: bool = True,
        replan_interval: int | None = None,
        temporal_ensemble_rate: float | None = None,
        flow_steps: int = 10,
        n_critics: int = 2,
        q_agg: str = "mean",
        offline_dataset: Any = None,
        offline_gradient_steps: int = 1_000_000,
        offline_log_interval: int = 1000,
        offline_sparse_rewards: bool = False,
        replay_buffer_class: type[ChunkReplayBuffer] = ChunkReplayBuffer,
        replay_buffer_kwargs: dict[str, Any] | None = None,
        policy_kwargs: dict[str, Any] | None = None,
        stats_window_size: int = 100,
        tensorboard_log: str | None = None,
        verbose: int = 0,
        device: th.device | str = "auto",
        seed: int | None = None,
        compile_step: bool = False,
        _init_setup_model: bool = True,
    ):
        if q_agg not in Q_AGGREGATIONS:
            raise ValueError(f"q_agg must be one of {Q_AGGREGATIONS}, got {q_agg!r}")
        if flow_steps < 1:
            raise ValueError(f"flow_steps must be >= 1, got {flow_steps}")
        if n_critics < 1:
            raise ValueError(f"n_critics must be >= 1, got {n_critics}")
        super().__init__(
            policy,
            env,
            learning_rate=learning_rate,
            buffer_size=buffer_size,
            learning_starts=learning_starts,
            batch_size=batch_size,
            tau=tau,
            gamma=gamma,
            train_freq=train_freq,
            gradient_steps=gradient_steps,
            action_noise=action_noise,
            chunk_size=chunk_size,
            action_chunking=action_chunking,
            replan_interval=replan_interval,
            temporal_ensemble_rate=temporal_ensemble_rate,
            offline_dataset=offline_dataset,
            offline_gradient_steps=offline_gradient_steps,
            offline_log_interval=offline_log_interval,
            offline_sparse_rewards=offline_sparse_rewards,
            replay_buffer_class=replay_buffer_class,
            replay_buffer_kwargs=replay_buffer_kwargs,
            policy_kwargs=policy_kwargs,
            stats_window_size=stats_window_size,
            tensorboard_log=tensorboard_log,
            verbose=verbose,
            device=device,
            seed=seed,
            compile_step=compile_step,
        )
        self.flow_steps = flow_steps
        self.n_critics = n_critics
        self.q_agg = q_agg
        if _init_setup_model:
            self._setup_model()

    def _policy_hyperparameters(self) -> dict[str, Any]:
        """Algorithm hyperparameters the policy needs (same-named attributes on both)."""
        return {"flow_steps": self.flow_steps, "n_critics": self.n_critics, "q_agg": self.q_agg}

    def _setup_model(self) -> None:
        self.policy_kwargs = {**self.policy_kwargs, **self._policy_hyperparameters()}
        super()._setup_model()

    def _optimized_loss(self, losses: dict[str, th.Tensor]) -> th.Tensor:
        return losses["critic_loss"] + losses["actor_loss"]  # docs/algorithms.md §3: L_Q + L_actor, one backward

    def step_noise(self, batch_size: int) -> dict[str, th.Tensor]:
        """
        Every random draw of one gradient step, from the global torch generator, in the order the step uses them:
        the TD target's decision, the flow-matching noise and times, then the actor's (:meth:`_actor_noise`).

        :param batch_size: Minibatch size B
        :return: Named tensors on the model's device
        """
        policy = self.policy
        return {
            "next_actions": policy.decision_noise(batch_size),
            "flow": th.randn(batch_size, policy.flat_action_dim, device=self.device),
            "times": th.rand(batch_size, 1, device=self.device),
            **self._actor_noise(batch_size),
        }

    def _actor_noise(self, batch_size: int) -> dict[str, th.Tensor]:
        """The random draws of the actor-side losses (none by default); see :meth:`step_noise`."""
        return {}

    def _losses(
        self,
        batch: ChunkReplayBufferSamples,
        noise: dict[str, th.Tensor] | None = None,
        policy: FlowQPolicy | None = None,
    ) -> dict[str, th.Tensor]:
        """
        Every loss and statistic of one gradient step; ``critic_loss`` and ``actor_loss`` are optimized.

        :param batch: A batch of chunk windows
        :param noise: The step's random draws (:meth:`step_noise`), drawn here when None
        :param policy: The networks to use, ``self.policy`` when None (the seed-parallel trainer passes plain ones
            whose parameters it substitutes)
        """
        policy = self.policy if policy is None else policy
        noise = self.step_noise(batch.observations.shape[0]) if noise is None else noise
        observations = policy.features(batch.observations)
        # The critic's input: its own extractor's features, or the shared extractor's detached (docs/design.md).
        critic_observations = policy.critic_features(batch.observations, observations)
        actions = policy.flat_actions(batch.actions)
        with th.no_grad():
            next_actions = policy.act(batch.next_observations, noise=noise["next_actions"])
            target = chunked_td_target(
                policy.critic_target,
                policy.target_features(batch.next_observations),
                next_actions,
                batch.rewards,
                batch.masks,
                self.gamma,
                self.chunk_size,
                self.q_agg,
            )
        critic_loss_value, q_values = critic_loss(policy.critic, critic_observations, actions, target, batch.valid)
        # docs/algorithms.md §3: flow matching on the dataset chunks, weighted by valid (unweighted for the -n variants).
        bc_flow_loss = flow_matching_loss(
            policy.flow, observations, actions, noise["flow"], noise["times"], batch.valid if self.action_chunking else None
        )
        return {
            "critic_loss": critic_loss_value,
            "q_mean": q_values.mean().detach(),
            "target_mean": target.mean(),
            "bc_flow_loss": bc_flow_loss,
            **self._actor_losses(policy, observations, bc_flow_loss, noise, critic_observations.detach()),
        }

    @abstractmethod
    def _actor_losses(
        self,
        policy: FlowQPolicy,
        observations: th.Tensor,
        bc_flow_loss: th.Tensor,
        noise: dict[str, th.Tensor],
        critic_observations: th.Tensor,
    ) -> dict[str, th.Tensor]:
        """
        The actor-side loss terms; must include ``actor_loss``, the one that is optimized.

        :param policy: The networks of the step
        :param observations: State features of the batch, shape (B, features_dim), by the actor side's extractor
        :param bc_flow_loss: The flow-matching loss of the batch
        :param noise: The step's random draws (:meth:`step_noise`)
        :param critic_observations: The critic's state input for the batch, detached (a Q term trains no extractor
            through the critic)
        :return: Named loss terms
        """
