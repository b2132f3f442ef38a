"""ChunkedOffPolicyAlgorithm: offline pre-training then online fine-tuning over action chunks (spec/algorithms.md §5)."""

from __future__ import annotations

import warnings
from abc import abstractmethod
from typing import Any, TypeVar

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import ReplayBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.noise import ActionNoise
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.type_aliases import GymEnv, MaybeCallback, Schedule
from stable_baselines3.common.utils import configure_logger

from qc_sb3.common.buffers import ChunkReplayBuffer, ChunkReplayBufferSamples
from qc_sb3.common.datasets import (
    OfflineShards,
    OfflineTransitions,
    add_transitions_to_buffer,
    check_transitions_match_spaces,
    load_offline_transitions,
    with_sparse_rewards,
)
from qc_sb3.common.policies import ActionQueueState, ChunkPolicy

SelfChunkedOffPolicyAlgorithm = TypeVar("SelfChunkedOffPolicyAlgorithm", bound="ChunkedOffPolicyAlgorithm")


class ChunkedOffPolicyAlgorithm(OffPolicyAlgorithm):
    """
    Base class of every chunked method: an SB3 off-policy algorithm that trains on sliding-window chunks of
    primitive transitions (:class:`~qc_sb3.common.buffers.ChunkReplayBuffer`), acts with chunks executed
    open-loop through one action queue per env, and runs an offline phase before its online phase.

    * Offline phase: ``offline_gradient_steps`` gradient steps on ``offline_dataset``, run once by the first
      ``learn()`` before its first env step (or explicitly with :meth:`pretrain`). Gradient steps never count as
      env steps; progress is kept in ``offline_steps_done``. A dataset given as
      :class:`~qc_sb3.common.datasets.OfflineShards` is rotated through, one shard in the buffer at a time.
    * Online phase (spec §5): the policy acts from the first env step; updates start after ``learning_starts``
      online steps, ``gradient_steps`` per ``train_freq`` env steps. Every primitive step is stored; a queue is
      cleared when its episode ends.

    * Update (spec §3): one gradient step computes every loss of :meth:`_losses` with the same pre-step
      parameters, backpropagates :meth:`_optimized_loss` once, moves the target critic by Polyak averaging of the
      critic's pre-step weights (the reference's order), then steps every optimizer. The policy provides
      ``critic``, ``critic_target`` and ``optimizers``.

    The env is the ordinary primitive env: chunking lives in the algorithm (design.md). Subclasses implement
    ``_losses`` and ``_optimized_loss`` and call ``_setup_model()`` at the end of their ``__init__``.

    :param policy: The policy model to use
    :param env: The primitive environment to learn from (if registered in Gym, can be str)
    :param learning_rate: Learning rate of every optimizer, constant or a schedule of the remaining progress
    :param buffer_size: Number of online steps the replay buffer keeps (offline data comes on top)
    :param learning_starts: Online env steps collected before the first update (the policy acts from step 0)
    :param batch_size: Minibatch size of each gradient step
    :param tau: Target network update coefficient (Polyak)
    :param gamma: Discount factor
    :param train_freq: Update the model every ``train_freq`` env steps (or ``(n, "episode")``)
    :param gradient_steps: Gradient steps per update (the update-to-data ratio)
    :param chunk_size: Length h of the chunks (the reference's ``horizon_length``)
    :param action_chunking: False gives the ``-n`` variants: h-step windows, single actions (spec §4)
    :param offline_dataset: Offline data: a Minari dataset id or folder, a ``MinariDataset``, a mapping of arrays,
        :class:`~qc_sb3.common.datasets.OfflineTransitions`, or :class:`~qc_sb3.common.datasets.OfflineShards`;
        never saved with the model
    :param offline_gradient_steps: Gradient steps of the offline phase (the reference's 1M by default)
    :param offline_log_interval: Offline gradient steps between two log dumps
    :param offline_sparse_rewards: Replace the offline rewards r by -1 * [r != 0] (spec §6, the reference's
        ``--sparse``; for envs whose online reward is made sparse the same way)
    :param replay_buffer_kwargs: Keyword arguments of the ChunkReplayBuffer (e.g. ``offline_fraction``)
    :param policy_kwargs: Additional arguments to be passed to the policy on creation
    :param stats_window_size: Window size for the rollout logging
    :param tensorboard_log: The log location for tensorboard (if None, no logging)
    :param verbose: Verbosity level: 0 no output, 1 info messages, 2 debug messages
    :param device: Device (cpu, cuda, ...) on which the code should be run
    :param seed: Seed for the pseudo random generators
    :param supported_action_spaces: The action spaces supported by the algorithm
    """

    policy: ChunkPolicy
    replay_buffer: ChunkReplayBuffer

    def __init__(
        self,
        policy: str | type[ChunkPolicy],
        env: GymEnv | str,
        learning_rate: float | Schedule = 3e-4,
        buffer_size: int = 1_000_000,
        learning_starts: int = 5000,
        batch_size: int = 256,
        tau: float = 0.005,
        gamma: float = 0.99,
        train_freq: int | tuple[int, str] = 1,
        gradient_steps: int = 1,
        chunk_size: int = 5,
        action_chunking: bool = True,
        offline_dataset: Any = None,
        offline_gradient_steps: int = 1_000_000,
        offline_log_interval: int = 1000,
        offline_sparse_rewards: bool = False,
        replay_buffer_kwargs: dict[str, Any] | None = None,
        policy_kwargs: dict[str, Any] | None = None,
        stats_window_size: int = 100,
        tensorboard_log: str | None = None,
        verbose: int = 0,
        device: th.device | str = "auto",
        seed: int | None = None,
        supported_action_spaces: tuple[type[spaces.Space], ...] = (spaces.Box,),
    ):
        super().__init__(
            policy,
            env,
            learning_rate,
            buffer_size=buffer_size,
            learning_starts=learning_starts,
            batch_size=batch_size,
            tau=tau,
            gamma=gamma,
            train_freq=train_freq,
            gradient_steps=gradient_steps,
            replay_buffer_class=ChunkReplayBuffer,
            replay_buffer_kwargs=replay_buffer_kwargs,
            policy_kwargs=policy_kwargs,
            stats_window_size=stats_window_size,
            tensorboard_log=tensorboard_log,
            verbose=verbose,
            device=device,
            support_multi_env=True,
            seed=seed,
            sde_support=False,
            supported_action_spaces=supported_action_spaces,
        )
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int | np.integer) or chunk_size < 1:
            raise ValueError(f"chunk_size must be an integer >= 1, got {chunk_size!r}")
        if offline_gradient_steps < 0:
            raise ValueError(f"offline_gradient_steps must be >= 0, got {offline_gradient_steps}")
        self.chunk_size = int(chunk_size)
        self.action_chunking = action_chunking
        self.offline_dataset = offline_dataset
        self.offline_gradient_steps = offline_gradient_steps
        self.offline_log_interval = offline_log_interval
        self.offline_sparse_rewards = offline_sparse_rewards
        self.offline_steps_done = 0
        # The shard of an OfflineShards dataset that the buffer's offline segment holds.
        self.offline_shard_index = 0
        self._action_queue: ActionQueueState | None = None
        # Validated and loaded in _setup_model, before any network is built
        self._offline_transitions: OfflineTransitions | None = None

    def _setup_model(self) -> None:
        if self.offline_dataset is not None:
            # Refuse a dataset that does not fit the env before building or training anything.
            self._offline_transitions = self._load_offline_data(self.offline_shard_index)
        self.replay_buffer_kwargs = {**self.replay_buffer_kwargs, "chunk_size": self.chunk_size, "gamma": self.gamma}
        self.policy_kwargs = {**self.policy_kwargs, "chunk_size": self.chunk_size, "action_chunking": self.action_chunking}
        super()._setup_model()
        if self._offline_transitions is not None:
            add_transitions_to_buffer(self.replay_buffer, self._offline_transitions, self.action_space)  # type: ignore[arg-type]
            self._offline_transitions = None

    def _load_offline_data(self, shard_index: int) -> OfflineTransitions:
        """
        Load the offline dataset (or its shard ``shard_index``), check it against the env's spaces and apply the
        sparse reward if asked.

        :param shard_index: The shard to load when ``offline_dataset`` is an ``OfflineShards``; ignored otherwise
        :return: The transitions, actions in the env's scale
        """
        source = self.offline_dataset
        if isinstance(source, OfflineShards):
            source = source.sources[shard_index]
        data = load_offline_transitions(source)
        check_transitions_match_spaces(data, self.observation_space, self.action_space)  # type: ignore[arg-type]
        return with_sparse_rewards(data) if self.offline_sparse_rewards else data

    def _use_shard_of_step(self, gradient_step: int) -> None:
        """
        Swap the buffer's offline segment to the shard that offline gradient step ``gradient_step`` trains on,
        if that is not the one it holds (spec §5, OfflineShards).

        :param gradient_step: The next offline gradient step, 1-based
        """
        if not isinstance(self.offline_dataset, OfflineShards):
            return
        shard_index = self.offline_dataset.shard_index(gradient_step)
        if shard_index == self.offline_shard_index:
            return
        # Empty the segment before loading the next shard, so that only one shard is held in the buffer.
        self.replay_buffer.clear_offline()
        add_transitions_to_buffer(self.replay_buffer, self._load_offline_data(shard_index), self.action_space)  # type: ignore[arg-type]
        self.offline_shard_index = shard_index

    def _excluded_save_params(self) -> list[str]:
        return [*super()._excluded_save_params(), "offline_dataset", "_offline_transitions", "_action_queue"]

    @property
    def offline_steps_remaining(self) -> int:
        """Gradient steps of the offline phase still to run."""
        return max(self.offline_gradient_steps - self.offline_steps_done, 0)

    def pretrain(
        self: SelfChunkedOffPolicyAlgorithm,
        gradient_steps: int | None = None,
        progress_bar: bool = False,
        tb_log_name: str = "run",
    ) -> SelfChunkedOffPolicyAlgorithm:
        """
        Run (part of) the offline phase: gradient steps on the offline data, logging ``train/*`` every
        ``offline_log_interval`` steps (and at shard swaps) with the offline step count as x-axis.

        :param gradient_steps: Number of gradient steps to run (default: what remains of ``offline_gradient_steps``)
        :param progress_bar: Display a progress bar over the gradient steps (tqdm and rich)
        :param tb_log_name: Name of the tensorboard run, if no logger is set up yet
        :return: the trained model
        """
        n_steps = self.offline_steps_remaining if gradient_steps is None else gradient_steps
        if n_steps <= 0:
            return self
        if self.replay_buffer.offline_size == 0:
            raise ValueError(
                "the offline phase needs offline data: pass offline_dataset=... at construction or "
                "load_replay_buffer() a buffer that holds it"
            )
        if not hasattr(self, "_logger"):
            self._logger = configure_logger(self.verbose, self.tensorboard_log, tb_log_name, reset_num_timesteps=True)
        progress = _progress_bar(n_steps) if progress_bar else None
        while n_steps > 0:
            next_step = self.offline_steps_done + 1
            self._use_shard_of_step(next_step)
            block = min(self.offline_log_interval, n_steps)
            if isinstance(self.offline_dataset, OfflineShards):
                block = min(block, self.offline_dataset.steps_on_same_shard(next_step))
            self.train(gradient_steps=block, batch_size=self.batch_size)
            self.offline_steps_done += block
            n_steps -= block
            self.logger.record("offline/gradient_steps", self.offline_steps_done)
            self.logger.dump(step=self.offline_steps_done)
            if progress is not None:
                progress.update(block)
        if progress is not None:
            progress.close()
        return self

    def train(self, gradient_steps: int, batch_size: int = 256) -> None:
        policy: Any = self.policy
        policy.set_training_mode(True)
        optimizers = policy.optimizers
        self._update_learning_rate(optimizers)
        # Summed on the device and read once per call: a host sync per loss and step would stall a GPU.
        sums: dict[str, th.Tensor] = {}
        for _ in range(gradient_steps):
            batch = self.replay_buffer.sample(batch_size, env=self._vec_normalize_env)
            losses = self._losses(batch)
            for optimizer in optimizers:
                optimizer.zero_grad(set_to_none=True)
            self._optimized_loss(losses).backward()
            # spec §3: target update from the critic's weights before this step, as the reference does.
            # target <- (1 - tau) target + tau online, every tensor in one call (SB3's polyak_update takes two per tensor)
            th._foreach_lerp_(list(policy.critic_target.parameters()), list(policy.critic.parameters()), self.tau)
            for optimizer in optimizers:
                optimizer.step()
            for name, value in losses.items():
                sums[name] = sums[name] + value.detach() if name in sums else value.detach()
        self._n_updates += gradient_steps
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        means = (th.stack(list(sums.values())) / gradient_steps).tolist()
        for name, mean in zip(sums, means, strict=True):
            self.logger.record(f"train/{name}", mean)

    @abstractmethod
    def _losses(self, batch: ChunkReplayBufferSamples) -> dict[str, th.Tensor]:
        """
        Every loss and statistic of one gradient step (all logged as ``train/<name>``, averaged over the call).

        :param batch: A batch of chunk windows
        :return: Named scalar tensors
        """

    @abstractmethod
    def _optimized_loss(self, losses: dict[str, th.Tensor]) -> th.Tensor:
        """
        The scalar to backpropagate, from the losses of :meth:`_losses`.

        :param losses: The output of :meth:`_losses`
        :return: A scalar tensor
        """

    def _setup_learn(
        self,
        total_timesteps: int,
        callback: MaybeCallback = None,
        reset_num_timesteps: bool = True,
        tb_log_name: str = "run",
        progress_bar: bool = False,
    ) -> tuple[int, BaseCallback]:
        # The offline phase runs once, inside learn(), after the logger is set up and before the first env step.
        total_timesteps, callback = super()._setup_learn(
            total_timesteps, callback, reset_num_timesteps, tb_log_name, progress_bar
        )
        if reset_num_timesteps:
            self._action_queue = None
        if self.offline_steps_remaining > 0 and self.replay_buffer.offline_size > 0:
            self.pretrain(progress_bar=progress_bar)
        return total_timesteps, callback

    def _sample_action(
        self,
        learning_starts: int,
        action_noise: ActionNoise | None = None,
        n_envs: int = 1,
    ) -> tuple[np.ndarray, np.ndarray]:
        """
        Act with the policy from the first online step (spec §5: no random warm-up), popping each env's queue.

        :param learning_starts: Unused: it gates updates only
        :param action_noise: Not supported (the policies are stochastic)
        :param n_envs: Number of envs
        :return: Actions in the env's scale, and the same in the buffer's [-1, 1] scale
        """
        assert self._last_obs is not None, "self._last_obs was not set"
        # No queues yet (a new learn(), or a loaded model): every env starts a chunk, a fresh start for predict.
        fresh_start = np.ones(n_envs, dtype=bool) if self._action_queue is None else None
        actions, self._action_queue = self.policy.predict(
            self._last_obs,  # type: ignore[arg-type]
            state=self._action_queue,
            episode_start=fresh_start,
        )
        return actions, self.policy.scale_action(actions)

    def _store_transition(
        self,
        replay_buffer: ReplayBuffer,
        buffer_action: np.ndarray,
        new_obs: np.ndarray | dict[str, np.ndarray],
        reward: np.ndarray,
        dones: np.ndarray,
        infos: list[dict[str, Any]],
    ) -> None:
        super()._store_transition(replay_buffer, buffer_action, new_obs, reward, dones, infos)
        # The rest of a chunk is dropped when its episode ends (spec §5).
        if self._action_queue is not None:
            self._action_queue[1][np.asarray(dones, dtype=bool)] = self.policy.act_chunk_size


def _progress_bar(total: int) -> Any:
    """A rich tqdm bar over offline gradient steps (tqdm and rich are imported only when asked for)."""
    from tqdm import TqdmExperimentalWarning
    from tqdm.rich import tqdm

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TqdmExperimentalWarning)  # as SB3's ProgressBarCallback does
        return tqdm(total=total, desc="offline gradient steps")
