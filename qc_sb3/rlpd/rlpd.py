"""RLPD, RLPD-AC and QC-RLPD: SAC with a LayerNorm critic ensemble and 50/50 offline/online batches (docs/algorithms.md §4)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch as th
from stable_baselines3.common.buffers import ReplayBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.noise import ActionNoise
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import RolloutReturn, TrainFreq
from stable_baselines3.common.vec_env import VecEnv

from qc_sb3.common.buffers import OFFLINE_ACTION_CLIP, ChunkReplayBufferSamples
from qc_sb3.common.chunked import ChunkedOffPolicyAlgorithm
from qc_sb3.common.losses import chunked_td_target, critic_loss
from qc_sb3.common.offline_source import OfflineShards
from qc_sb3.rlpd.losses import bc_loss, sac_actor_loss, temperature_loss
from qc_sb3.rlpd.policies import CnnPolicy, MlpPolicy, RLPDPolicy

# docs/algorithms.md §4: every batch is half offline, half online windows.
DEFAULT_OFFLINE_FRACTION = 0.5


class RLPD(ChunkedOffPolicyAlgorithm):
    """
    RLPD (Ball et al. 2023) in the Q-chunking reference's own version (docs/algorithms.md §4): SAC with a squashed-Gaussian
    actor, an ensemble of K = 10 LayerNorm critics whose TD target is the mean over all K target critics (no min, no
    entropy term in the backup), a learned temperature, and batches drawn half from the offline data and half from
    the online data. There is no offline pre-training: the offline data only seeds the buffer. The first
    ``learning_starts`` online steps take uniformly random primitive actions, then the policy acts and one update
    follows every env step. An offline dataset given as :class:`~qc_sb3.common.offline_source.OfflineShards` rotates
    during the online phase, as the reference's online script does: the updates after online step ``i`` (from 1)
    sample shard ``((i - 1) // swap_interval) % n_shards``, so steps 1-1000 use shard 0, 1001-2000 shard 1, and so
    on with the reference's interval of 1000.

    Variants: ``chunk_size=1`` (default) is RLPD; ``chunk_size=5`` is RLPD-AC (actor and critic over chunks, chunks
    executed open-loop); ``chunk_size=5, bc_alpha=0.01`` is QC-RLPD (plus a behavior-cloning term).

    :param policy: The policy model to use ("MlpPolicy", or "CnnPolicy" for image observations)
    :param env: The primitive environment to learn from (if registered in Gym, can be str)
    :param learning_rate: Adam learning rate (actor, critic and temperature), constant or a schedule of the
        remaining online progress
    :param buffer_size: Number of online steps the replay buffer keeps (offline data comes on top)
    :param learning_starts: Online env steps with uniformly random primitive actions and no update
    :param batch_size: Minibatch size of each gradient step
    :param tau: Target network update coefficient (Polyak)
    :param gamma: Discount factor
    :param train_freq: Update the model every ``train_freq`` env steps (or ``(n, "episode")``)
    :param gradient_steps: Gradient steps per update (the update-to-data ratio)
    :param action_noise: Exploration noise (SB3's ``ActionNoise``): one draw added to each executed primitive action in
        the [-1, 1] scale, then clipped, as SB3 adds it; the env executes and the buffer stores the noisy action.
        None by default (the policies are stochastic)
    :param chunk_size: Chunk length h: 1 for RLPD, 5 for RLPD-AC and QC-RLPD
    :param replan_interval: Actions k of each chunk executed before a new decision, in [1, h] (None: whole chunks);
        settable later (see ``ChunkedOffPolicyAlgorithm``)
    :param temporal_ensemble_rate: Temporal ensembling's rate (None: off; see ``ChunkedOffPolicyAlgorithm``)
    :param n_critics: Critic ensemble size K
    :param bc_alpha: Weight of the behavior-cloning term ``-mean_B log pi(a_data | s)`` (0: RLPD, RLPD-AC;
        0.01: QC-RLPD)
    :param initial_ent_coef: Initial temperature alpha
    :param target_entropy: Target entropy of the temperature loss ("auto": -0.5 * h * A)
    :param offline_dataset: Offline data: a Minari dataset id or folder, a ``MinariDataset``, a mapping of arrays,
        ``OfflineTransitions``, or :class:`~qc_sb3.OfflineShards`;
        the model saves where it came from (a Minari id or folder), not the data, and ``load()`` reads it again
    :param offline_sparse_rewards: Replace the offline rewards r by -1 * [r != 0] (docs/algorithms.md §6, the reference's
        ``--sparse``; for envs whose online reward is made sparse the same way)
    :param replay_buffer_kwargs: Keyword arguments of the ChunkReplayBuffer (default ``offline_fraction=0.5``)
    :param policy_kwargs: Additional arguments of the policy (``net_arch``, ``activation_fn``, optimizer)
    :param stats_window_size: Window size for the rollout logging
    :param tensorboard_log: The log location for tensorboard (if None, no logging)
    :param verbose: Verbosity level: 0 no output, 1 info messages, 2 debug messages
    :param device: Device (cpu, cuda, ...) on which the code should be run
    :param seed: Seed for the pseudo random generators
    :param _init_setup_model: Whether or not to build the network at the creation of the instance
    """

    policy_aliases: ClassVar[dict[str, type[BasePolicy]]] = {"MlpPolicy": MlpPolicy, "CnnPolicy": CnnPolicy}
    policy: RLPDPolicy

    def __init__(
        self,
        policy: str | type[RLPDPolicy],
        env: Any,
        learning_rate: float = 3e-4,
        buffer_size: int = 1_000_000,
        learning_starts: int = 5000,
        batch_size: int = 256,
        tau: float = 0.005,
        gamma: float = 0.99,
        train_freq: int | tuple[int, str] = 1,
        gradient_steps: int = 1,
        action_noise: ActionNoise | None = None,
        chunk_size: int = 1,
        replan_interval: int | None = None,
        temporal_ensemble_rate: float | None = None,
        n_critics: int = 10,
        bc_alpha: float = 0.0,
        initial_ent_coef: float = 1.0,
        target_entropy: float | str = "auto",
        offline_dataset: Any = None,
        offline_sparse_rewards: bool = False,
        replay_buffer_kwargs: dict[str, Any] | None = None,
        policy_kwargs: dict[str, Any] | None = None,
        stats_window_size: int = 100,
        tensorboard_log: str | None = None,
        verbose: int = 0,
        device: th.device | str = "auto",
        seed: int | None = None,
        _init_setup_model: bool = True,
    ):
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
            action_chunking=True,
            replan_interval=replan_interval,
            temporal_ensemble_rate=temporal_ensemble_rate,
            offline_dataset=offline_dataset,
            offline_gradient_steps=0,  # docs/algorithms.md §4: no offline pre-training
            offline_sparse_rewards=offline_sparse_rewards,
            replay_buffer_kwargs={"offline_fraction": DEFAULT_OFFLINE_FRACTION, **(replay_buffer_kwargs or {})},
            policy_kwargs=policy_kwargs,
            stats_window_size=stats_window_size,
            tensorboard_log=tensorboard_log,
            verbose=verbose,
            device=device,
            seed=seed,
        )
        if n_critics < 1:
            raise ValueError(f"n_critics must be >= 1, got {n_critics}")
        if bc_alpha < 0:
            raise ValueError(f"bc_alpha must be >= 0, got {bc_alpha}")
        if initial_ent_coef <= 0:
            raise ValueError(f"initial_ent_coef must be > 0, got {initial_ent_coef}")
        if isinstance(target_entropy, str) and target_entropy != "auto":
            raise ValueError(f"target_entropy must be a number or 'auto', got {target_entropy!r}")
        self.n_critics = n_critics
        self.bc_alpha = bc_alpha
        self.initial_ent_coef = initial_ent_coef
        self.target_entropy = target_entropy
        if _init_setup_model:
            self._setup_model()

    def _setup_model(self) -> None:
        self.policy_kwargs = {**self.policy_kwargs, "n_critics": self.n_critics, "initial_ent_coef": self.initial_ent_coef}
        super()._setup_model()
        if self.target_entropy == "auto":
            # docs/algorithms.md §4: target entropy -0.5 * (action dim), the action being the flat chunk.
            self.target_entropy = -0.5 * self.policy.flat_action_dim

    def _sample_action(
        self,
        learning_starts: int,
        action_noise: ActionNoise | None = None,
        n_envs: int = 1,
    ) -> tuple[np.ndarray, np.ndarray]:
        """
        Uniformly random primitive actions for the first ``learning_starts`` online steps, one per env and step
        (docs/algorithms.md §4), then the policy's chunks executed open-loop through each env's action queue.

        :param learning_starts: Online steps of random warm-up
        :param action_noise: Exploration noise added to the policy's actions after the warm-up (as SB3 adds it)
        :param n_envs: Number of envs
        :return: Actions in the env's scale, and the same in the buffer's [-1, 1] scale
        """
        if self.num_timesteps < learning_starts:
            actions = np.array([self.action_space.sample() for _ in range(n_envs)])
            return actions, self.policy.scale_action(actions)
        return super()._sample_action(learning_starts, action_noise, n_envs)

    def collect_rollouts(
        self,
        env: VecEnv,
        callback: BaseCallback,
        train_freq: TrainFreq,
        replay_buffer: ReplayBuffer,
        action_noise: ActionNoise | None = None,
        learning_starts: int = 0,
        log_interval: int | None = None,
    ) -> RolloutReturn:
        """
        SB3's rollout collection, then, when an update follows and the offline data is an ``OfflineShards``, the
        swap of the buffer's offline segment to the shard of online step ``num_timesteps`` (the reference's
        online rotation, :meth:`~qc_sb3.common.offline_source.OfflineShards.online_shard_index`). The shard follows
        from the step count alone, so a loaded model resumes the rotation where it stopped.
        """
        rollout = super().collect_rollouts(
            env, callback, train_freq, replay_buffer, action_noise, learning_starts, log_interval
        )
        if (
            rollout.continue_training
            and isinstance(self.offline_dataset, OfflineShards)
            and self.num_timesteps > learning_starts
        ):
            self._use_shard(self.offline_dataset.online_shard_index(self.num_timesteps))
        return rollout

    def _optimized_loss(self, losses: dict[str, th.Tensor]) -> th.Tensor:
        # docs/algorithms.md §4: one backward of the sum, every loss computed with the same pre-step parameters.
        return losses["critic_loss"] + losses["actor_loss"] + losses["alpha_loss"] + self.bc_alpha * losses["bc_loss"]

    def _losses(self, batch: ChunkReplayBufferSamples) -> dict[str, th.Tensor]:
        """
        Every loss and statistic of one gradient step; ``critic_loss``, ``actor_loss``, ``alpha_loss`` and
        ``bc_alpha * bc_loss`` are optimized. Random draws, in order: the target action's noise, then the actor's.
        """
        policy = self.policy
        # The critic's input: its own extractor's features, or the shared extractor's detached (docs/design.md).
        observations = policy.critic_features(batch.observations)
        actions = batch.actions.reshape(batch.actions.shape[0], -1)  # the flat time-major chunk (a_t for h = 1)
        ent_coef = policy.temperature().detach()
        with th.no_grad():
            # docs/algorithms.md §4: A' ~ pi(.|s_{t+h}); y = R[:, -1] + gamma^h M[:, -1] mean_K Q_target(s_{t+h}, A'),
            # no entropy term.
            next_actions = policy.action_distribution(batch.next_observations).sample()  # no log-probability needed
            target = chunked_td_target(
                policy.critic_target,  # type: ignore[arg-type]
                policy.target_features(batch.next_observations),
                next_actions,
                batch.rewards,
                batch.masks,
                self.gamma,
                self.chunk_size,
                "mean",
            )
        critic_loss_value, q_values = critic_loss(policy.critic, observations, actions, target, batch.valid)  # type: ignore[arg-type]
        distribution = policy.action_distribution(batch.observations)
        sampled_actions = distribution.sample()
        log_prob = distribution.log_prob(sampled_actions, distribution.gaussian_actions)
        # docs/algorithms.md §4 (QC-RLPD): log-likelihood of the batch's own chunks, clipped to ±(1 - 1e-5).
        log_prob_of_data = distribution.log_prob(actions.clamp(-OFFLINE_ACTION_CLIP, OFFLINE_ACTION_CLIP))
        return {
            "critic_loss": critic_loss_value,
            "actor_loss": sac_actor_loss(policy.critic, observations.detach(), sampled_actions, log_prob, ent_coef),
            "alpha_loss": temperature_loss(policy.temperature.log_ent_coef, log_prob, float(self.target_entropy)),
            "bc_loss": bc_loss(log_prob_of_data),
            "ent_coef": ent_coef,
            "entropy": -log_prob.detach().mean(),
            "q_mean": q_values.mean().detach(),
            "target_mean": target.mean(),
        }
