"""ChunkedOffPolicyAlgorithm: offline pre-training then online fine-tuning over action chunks (docs/algorithms.md §5)."""

from __future__ import annotations

import io
import numbers
import pathlib
import warnings
from abc import abstractmethod
from typing import Any, TypeVar

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import ReplayBuffer
from stable_baselines3.common.callbacks import BaseCallback, CallbackList, ProgressBarCallback
from stable_baselines3.common.noise import ActionNoise
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.type_aliases import GymEnv, MaybeCallback, Schedule
from stable_baselines3.common.utils import configure_logger, update_learning_rate
from stable_baselines3.common.vec_env import VecEnv

from qc_sb3.common.actor_critic import ActorCriticChunkPolicy
from qc_sb3.common.buffers import ChunkReplayBuffer, ChunkReplayBufferSamples
from qc_sb3.common.datasets import (
    OfflineShards,
    OfflineTransitions,
    add_transitions_to_buffer,
    check_transitions_match_spaces,
    describe_offline_source_record,
    load_offline_transitions,
    offline_source_record,
    open_offline_source_record,
    with_sparse_rewards,
)
from qc_sb3.common.model_file import check_model_file
from qc_sb3.common.normalization import fit_vec_normalize
from qc_sb3.common.policies import ActionQueueState

SelfChunkedOffPolicyAlgorithm = TypeVar("SelfChunkedOffPolicyAlgorithm", bound="ChunkedOffPolicyAlgorithm")


class ChunkedOffPolicyAlgorithm(OffPolicyAlgorithm):
    """
    Base class of every chunked method: an SB3 off-policy algorithm that trains on sliding-window chunks of
    primitive transitions (:class:`~qc_sb3.common.buffers.ChunkReplayBuffer`), acts with chunks executed
    open-loop through one action queue per env, and runs an offline phase before its online phase.

    * Offline phase: ``offline_gradient_steps`` gradient steps on ``offline_dataset``, run by ``learn()`` after
      the callbacks' ``on_training_start`` and before its first env step (or explicitly with :meth:`pretrain`).
      Gradient steps never count as env steps: ``num_timesteps`` stays 0 and progress is kept in
      ``offline_steps_done``. Callbacks are called after every offline gradient step (see :meth:`learn`). A dataset
      given as :class:`~qc_sb3.common.datasets.OfflineShards` is rotated through, one shard in the buffer at a time.
    * Online phase (docs/algorithms.md §5): the policy acts from the first env step; updates start after ``learning_starts``
      online steps, ``gradient_steps`` per ``train_freq`` env steps. Every primitive step is stored; a queue is
      cleared when its episode ends.

    * Logs: the offline phase logs ``offline/*`` (its losses averaged over ``offline_log_interval`` gradient steps,
      x = ``offline_steps_done``), the online phase ``train/*`` and ``rollout/*`` as SB3 does (x = env steps), so
      that every tensorboard tag has one monotone x-axis.
    * Saving: the model records where its offline data came from (a Minari id or folder, or ``OfflineShards`` of
      those) and ``load()`` reads it again into the replay buffer (``load(..., offline_dataset=...)`` overrides);
      data passed in memory is not saved, and ``load()`` warns that the buffer holds no offline data.
    * ``VecNormalize``: the first ``learn()`` or :meth:`pretrain` updates its statistics with the offline data (if
      its ``training`` is on) before any gradient step, so that the offline phase trains on observations and
      rewards normalised as the online phase will see them; online steps keep updating them as in SB3.
    * Dict observation spaces are not supported: flatten them with ``gymnasium.wrappers.FlattenObservation``.

    * Update (docs/algorithms.md §3): one gradient step computes every loss of :meth:`_losses` with the same pre-step
      parameters, backpropagates :meth:`_optimized_loss` once, moves the target critic by Polyak averaging of the
      critic's pre-step weights (the reference's order), then steps every optimizer. The policy provides
      ``critic``, ``critic_target`` and ``optimizers``.

    * Checks beyond SB3's: NaN or inf (also as float32, the buffer's dtype) in the offline data or in an env
      step's observations and rewards are refused, naming the step; ``train()`` raises a RuntimeError naming the
      update and the loss when a loss or the parameters become NaN or inf, checked once per call on the values it
      reads from the device anyway, i.e. after that call's optimizer steps (the model must then not be saved);
      ``load()`` refuses a truncated zip or another algorithm's model, naming the algorithm found.

    The env is the ordinary primitive env: chunking lives in the algorithm (docs/design.md). Subclasses implement
    ``_losses`` and ``_optimized_loss`` and call ``_setup_model()`` at the end of their ``__init__``.

    :param policy: The policy model to use
    :param env: The primitive environment to learn from (if registered in Gym, can be str)
    :param learning_rate: Learning rate of every optimizer, constant or a schedule of the remaining progress
    :param buffer_size: Number of online steps the replay buffer keeps (offline data comes on top), at least 1
    :param learning_starts: Online env steps collected before the first update (the policy acts from step 0)
    :param batch_size: Minibatch size of each gradient step, at least 1 (a warning when above the offline data's size)
    :param tau: Target network update coefficient (Polyak), in (0, 1]
    :param gamma: Discount factor
    :param train_freq: Update the model every ``train_freq`` env steps (or ``(n, "episode")``)
    :param gradient_steps: Gradient steps per update (the update-to-data ratio)
    :param chunk_size: Length h of the chunks (the reference's ``horizon_length``)
    :param action_chunking: False gives the ``-n`` variants: h-step windows, single actions (docs/algorithms.md §4)
    :param offline_dataset: Offline data: a Minari dataset id or folder, a ``MinariDataset``, a mapping of arrays,
        :class:`~qc_sb3.common.datasets.OfflineTransitions`, or :class:`~qc_sb3.common.datasets.OfflineShards`;
        the model saves where it came from, not the data. None: no offline phase (``learn()`` warns that it skips it)
    :param offline_gradient_steps: Gradient steps of the offline phase (the reference's 1M by default)
    :param offline_log_interval: Offline gradient steps between two dumps of the ``offline/*`` logs
    :param offline_sparse_rewards: Replace the offline rewards r by -1 * [r != 0] (docs/algorithms.md §6, the reference's
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

    policy: ActorCriticChunkPolicy
    replay_buffer: ChunkReplayBuffer

    def __init__(
        self,
        policy: str | type[ActorCriticChunkPolicy],
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
        _check_positive_int("buffer_size", buffer_size)
        _check_positive_int("batch_size", batch_size)
        if isinstance(tau, bool) or not isinstance(tau, numbers.Real) or not 0.0 < tau <= 1.0:
            raise ValueError(f"tau must be a number in (0, 1], got {tau!r}")
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
        if offline_log_interval < 1:
            raise ValueError(f"offline_log_interval must be >= 1, got {offline_log_interval}")
        self.chunk_size = int(chunk_size)
        self.action_chunking = action_chunking
        self.offline_dataset = offline_dataset
        self.offline_gradient_steps = offline_gradient_steps
        self.offline_log_interval = offline_log_interval
        self.offline_sparse_rewards = offline_sparse_rewards
        self.offline_steps_done = 0
        # Where the offline data came from (datasets.offline_source_record), refreshed at each save, read by load().
        self.offline_dataset_source: dict[str, Any] | None = None
        # Whether a VecNormalize's statistics were updated with the offline data (once per model).
        self._offline_normalization_fitted = False
        # The shard of an OfflineShards dataset that the buffer's offline segment holds.
        self.offline_shard_index = 0
        self._action_queue: ActionQueueState | None = None
        # Validated and loaded in _setup_model, before any network is built
        self._offline_transitions: OfflineTransitions | None = None

    @staticmethod
    def _wrap_env(env: GymEnv, verbose: int = 0, monitor_wrapper: bool = True) -> VecEnv:
        wrapped = OffPolicyAlgorithm._wrap_env(env, verbose, monitor_wrapper)
        if isinstance(wrapped.observation_space, spaces.Dict):
            raise ValueError(
                f"dict observation spaces are not supported, got {wrapped.observation_space}: flatten it with "
                "`gymnasium.wrappers.FlattenObservation` (or SB3's `VecFlattenObservation` around a VecEnv)"
            )
        return wrapped

    def _get_torch_save_params(self) -> tuple[list[str], list[str]]:
        # The policy's state dict, then each optimizer, as the policy declares them.
        return ["policy", *(f"policy.{name}" for name in self.policy_class.optimizer_names())], []

    def _setup_model(self) -> None:
        if self.offline_dataset is None and self.offline_dataset_source is not None:
            # load() of a model saved with offline data, and no offline_dataset=... to override it.
            self._offline_transitions = self._reload_recorded_offline_data(self.offline_dataset_source)
        elif self.offline_dataset is not None:
            # Refuse a dataset that does not fit the env before building or training anything.
            self._offline_transitions = self._load_offline_data(self.offline_shard_index)
        self.replay_buffer_kwargs = {**self.replay_buffer_kwargs, "chunk_size": self.chunk_size, "gamma": self.gamma}
        self.policy_kwargs = {**self.policy_kwargs, "chunk_size": self.chunk_size, "action_chunking": self.action_chunking}
        super()._setup_model()
        if self._offline_transitions is not None:
            if self.batch_size > len(self._offline_transitions):
                warnings.warn(
                    f"batch_size={self.batch_size} is larger than the offline dataset ({len(self._offline_transitions)} "
                    "steps): batches are drawn with replacement and repeat steps",
                    stacklevel=4,  # the user's QC(...), QCFQL(...) or RLPD(...) call, through __init__ and _setup_model
                )
            add_transitions_to_buffer(self.replay_buffer, self._offline_transitions, self.action_space)  # type: ignore[arg-type]
            self._offline_transitions = None

    def _reload_recorded_offline_data(self, record: dict[str, Any]) -> OfflineTransitions | None:
        """
        Read the offline data that a saved model recorded (at ``load()``), or warn, naming it, that it cannot be read
        and the replay buffer will hold no offline data.

        :param record: The model's ``offline_dataset_source``
        :return: The transitions (``offline_dataset`` is then set to their source), or None
        """
        name = describe_offline_source_record(record)
        consequence = (
            "the replay buffer holds no offline data (RLPD's batches become all-online, a remaining offline phase "
            "cannot run): pass offline_dataset=... to load(), or load_replay_buffer() a buffer saved with the model"
        )
        source = open_offline_source_record(record)
        if source is None:
            warnings.warn(f"this model was trained on {name}, which is not saved with it; {consequence}", stacklevel=3)
            return None
        self.offline_dataset = source
        try:
            return self._load_offline_data(self.offline_shard_index)
        except (ValueError, OSError) as error:
            self.offline_dataset = None
            warnings.warn(f"cannot read this model's offline data, {name} ({error}); {consequence}", stacklevel=3)
            return None

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
        if that is not the one it holds (docs/algorithms.md §5, OfflineShards).

        :param gradient_step: The next offline gradient step, 1-based
        """
        if isinstance(self.offline_dataset, OfflineShards):
            self._use_shard(self.offline_dataset.shard_index(gradient_step))

    def _use_shard(self, shard_index: int) -> None:
        """
        Swap the buffer's offline segment to shard ``shard_index`` of the ``OfflineShards`` dataset, if that is
        not the one it holds.

        :param shard_index: An index into the dataset's shards
        """
        if shard_index == self.offline_shard_index:
            return
        # Empty the segment before loading the next shard, so that only one shard is held in the buffer.
        self.replay_buffer.clear_offline()
        add_transitions_to_buffer(self.replay_buffer, self._load_offline_data(shard_index), self.action_space)  # type: ignore[arg-type]
        self.offline_shard_index = shard_index

    @classmethod
    def load(  # type: ignore[override]
        cls: type[SelfChunkedOffPolicyAlgorithm],
        path: str | pathlib.Path | io.BufferedIOBase,
        env: GymEnv | None = None,
        device: th.device | str = "auto",
        custom_objects: dict[str, Any] | None = None,
        print_system_info: bool = False,
        force_reset: bool = True,
        **kwargs: Any,
    ) -> SelfChunkedOffPolicyAlgorithm:
        """
        Load a model saved by ``save()``, as SB3's ``load()`` does, after checking the file: a truncated or corrupt
        zip, or the model of another algorithm (e.g. a QC-FQL or SB3 SAC zip given to ``QC.load``), is refused with
        a ValueError that says so and names the algorithm found.

        The parameters are those of :meth:`stable_baselines3.common.base_class.BaseAlgorithm.load`.
        """
        check_model_file(path, cls, _all_subclasses(ChunkedOffPolicyAlgorithm), custom_objects)
        return super().load(
            path,
            env=env,
            device=device,
            custom_objects=custom_objects,
            print_system_info=print_system_info,
            force_reset=force_reset,
            **kwargs,
        )

    def _excluded_save_params(self) -> list[str]:
        return [*super()._excluded_save_params(), "offline_dataset", "_offline_transitions", "_action_queue"]

    def save(self, path: Any, exclude: Any = None, include: Any = None) -> None:
        """
        Save the model as SB3 does, with a record of where its offline data came from (not the data): ``load()``
        reads it from there again.

        :param path: Path to the file where the model should be saved
        :param exclude: Names of parameters that should be excluded in addition to the default ones
        :param include: Names of parameters that might be excluded but should be included anyway
        """
        if self.offline_dataset is not None:
            self.offline_dataset_source = offline_source_record(self.offline_dataset)
        super().save(path, exclude, include)

    def set_env(self, env: GymEnv, force_reset: bool = True) -> None:
        """
        Set a new env, as SB3 does; with ``force_reset`` (the default) the action queues are dropped too, so that the
        new env's first step starts a fresh chunk.

        :param env: The environment for learning a policy
        :param force_reset: Reset the env (and the action queues) before the next ``learn()``
        """
        super().set_env(env, force_reset)
        if force_reset:
            self._action_queue = None

    @property
    def offline_steps_remaining(self) -> int:
        """Gradient steps of the offline phase still to run."""
        return max(self.offline_gradient_steps - self.offline_steps_done, 0)

    def pretrain(
        self: SelfChunkedOffPolicyAlgorithm,
        gradient_steps: int | None = None,
        progress_bar: bool = False,
        tb_log_name: str = "run",
        callback: MaybeCallback = None,
    ) -> SelfChunkedOffPolicyAlgorithm:
        """
        Run (part of) the offline phase on its own: gradient steps on the offline data, logging ``offline/*`` every
        ``offline_log_interval`` steps (and at the end) with ``offline_steps_done`` as x-axis. ``learn()`` runs what
        remains of the offline phase itself; this is for running it apart from any env.

        :param gradient_steps: Number of gradient steps to run (default: what remains of ``offline_gradient_steps``)
        :param progress_bar: Display a progress bar over the gradient steps (tqdm and rich)
        :param tb_log_name: Name of the tensorboard run, if no logger is set up yet
        :param callback: Callback(s) called after every gradient step, as in :meth:`learn`'s offline phase (with
            ``on_training_start`` before the first and ``on_training_end`` after the last); one returning False
            stops the phase there
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
        self._fit_normalization_on_offline_data()
        callback = self._init_callback(callback)
        callback.on_training_start(locals(), globals())
        self._run_offline_steps(n_steps, callback, progress_bar)
        callback.on_training_end()
        return self

    def _run_offline_steps(self, n_steps: int, callback: BaseCallback, progress_bar: bool) -> bool:
        """
        Offline gradient steps, one at a time, each followed by ``callback.on_step()``; the losses are averaged on
        the device and logged every ``offline_log_interval`` steps (counted in ``offline_steps_done``) and at the end.

        :param n_steps: Number of gradient steps
        :param callback: Called after every gradient step
        :param progress_bar: Display a progress bar over the gradient steps
        :return: False if the callback stopped the phase
        """
        policy = self.policy
        for optimizer in policy.optimizers:
            update_learning_rate(optimizer, self.lr_schedule(self._current_progress_remaining))
        # What a callback that reads env-step locals finds: no episode ended during a gradient step.
        step_locals = {"dones": np.zeros(self.n_envs, dtype=bool), "infos": [{} for _ in range(self.n_envs)]}
        progress = _progress_bar(n_steps) if progress_bar else None
        step_losses: list[dict[str, th.Tensor]] = []
        continue_training = True
        for _ in range(n_steps):
            self._use_shard_of_step(self.offline_steps_done + 1)
            # A callback may have evaluated the policy (eval mode) since the last step.
            policy.set_training_mode(True)
            step_losses.append(self._gradient_step(self.batch_size))
            self._n_updates += 1
            self.offline_steps_done += 1
            if progress is not None:
                progress.update(1)
            if self.offline_steps_done % self.offline_log_interval == 0:
                self._dump_offline_logs(step_losses)
                step_losses = []
            callback.update_locals({**step_locals, "offline_steps_done": self.offline_steps_done})
            if not callback.on_step():
                continue_training = False
                break
        if step_losses:
            self._dump_offline_logs(step_losses)
        if progress is not None:
            progress.close()
        return continue_training

    def _dump_offline_logs(self, step_losses: list[dict[str, th.Tensor]]) -> None:
        """Log the offline losses averaged over their gradient steps, at x = ``offline_steps_done``."""
        self._record_checked_means("offline", step_losses)
        self.logger.record("offline/gradient_steps", self.offline_steps_done)
        self.logger.dump(step=self.offline_steps_done)

    def _fit_normalization_on_offline_data(self) -> None:
        """Update a training ``VecNormalize``'s statistics with the buffer's offline data, once per model."""
        vec_normalize = self._vec_normalize_env
        buffer = self.replay_buffer
        if vec_normalize is None or not vec_normalize.training or self._offline_normalization_fitted:
            return
        if buffer.offline_size == 0:
            return
        fit_vec_normalize(vec_normalize, buffer.offline_observations, buffer.offline_rewards, buffer.offline_episode_end > 0)
        self._offline_normalization_fitted = True

    def train(self, gradient_steps: int, batch_size: int = 256) -> None:
        policy = self.policy
        policy.set_training_mode(True)
        self._update_learning_rate(policy.optimizers)
        step_losses = [self._gradient_step(batch_size) for _ in range(gradient_steps)]
        self._n_updates += gradient_steps
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self._record_checked_means("train", step_losses)

    def _gradient_step(self, batch_size: int) -> dict[str, th.Tensor]:
        """
        One update (docs/algorithms.md §3) on a fresh batch.

        :param batch_size: Minibatch size
        :return: The losses of :meth:`_losses`, detached
        """
        policy = self.policy
        optimizers = policy.optimizers
        batch = self.replay_buffer.sample(batch_size, env=self._vec_normalize_env)
        losses = self._losses(batch)
        for optimizer in optimizers:
            optimizer.zero_grad(set_to_none=True)
        self._optimized_loss(losses).backward()
        # docs/algorithms.md §3: target update from the critic's weights before this step, as the reference does.
        # target <- (1 - tau) target + tau online, every tensor in one call (SB3's polyak_update takes two per tensor)
        th._foreach_lerp_(*policy.target_parameters(), self.tau)
        for optimizer in optimizers:
            optimizer.step()
        return {name: value.detach() for name, value in losses.items()}

    def _record_checked_means(self, prefix: str, step_losses: list[dict[str, th.Tensor]]) -> None:
        """
        Record ``<prefix>/<name>``, each loss averaged over the last ``len(step_losses)`` updates, and stop training
        with an error if a loss or the parameters became NaN or inf in them. The losses stay on the device until
        here: this is one host read for all of them (a read per loss and step would stall a GPU).

        :param prefix: The logger's prefix ("train" online, "offline" in the offline phase)
        :param step_losses: The detached losses of each update, the last one being update ``n_updates``
        """
        names = list(step_losses[0])
        losses_per_step = th.stack([th.stack(list(losses.values())) for losses in step_losses])
        first_non_finite_step = (~th.isfinite(losses_per_step).all(dim=1)).int().argmax()
        parameters_norm = th.nn.utils.get_total_norm(list(self.policy.parameters()))
        *means, non_finite_step, norm = th.cat(
            [
                losses_per_step.mean(dim=0),
                first_non_finite_step[None].to(losses_per_step),
                parameters_norm[None].to(losses_per_step),
            ]
        ).tolist()
        first_update = self._n_updates - len(step_losses) + 1
        _check_training_finite(names, means, first_update + int(non_finite_step), norm, first_update, self._n_updates)
        for name, mean in zip(names, means, strict=True):
            self.logger.record(f"{prefix}/{name}", mean)

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

    def learn(
        self: SelfChunkedOffPolicyAlgorithm,
        total_timesteps: int,
        callback: MaybeCallback = None,
        log_interval: int = 4,
        tb_log_name: str = "run",
        reset_num_timesteps: bool = True,
        progress_bar: bool = False,
    ) -> SelfChunkedOffPolicyAlgorithm:
        """
        Run what remains of the offline phase, then ``total_timesteps`` online env steps, as SB3's ``learn``.

        Callbacks: ``on_training_start`` first; then ``on_step`` after every offline gradient step, then after every
        env step as in SB3; ``on_training_end`` last. In the offline phase a callback's ``n_calls`` counts gradient
        steps (so ``EvalCallback``'s ``eval_freq`` and ``CheckpointCallback``'s ``save_freq`` are in gradient steps
        there), the step counter is ``model.offline_steps_done``, and ``num_timesteps`` stays 0: ``EvalCallback``
        logs its offline evaluations at x = 0 and ``CheckpointCallback`` names every offline checkpoint
        ``*_0_steps.zip``, each replacing the previous one. A callback returning False in the offline phase ends
        ``learn()`` there, before any env step; the next ``learn()`` (with or without ``reset_num_timesteps``)
        runs the remaining offline steps, then goes online. The offline phase is skipped, with a warning, when the
        buffer holds no offline data.

        :param total_timesteps: Online env steps to run (the offline phase does not count)
        :param callback: Callback(s) called at every offline gradient step and every env step
        :param log_interval: Episodes between two online log dumps
        :param tb_log_name: Name of the run for tensorboard logging
        :param reset_num_timesteps: Whether to reset ``num_timesteps`` (the offline phase always continues from
            ``offline_steps_done``)
        :param progress_bar: Display a progress bar over the offline gradient steps, then SB3's over the env steps
        :return: the trained model
        """
        total_timesteps, callback = self._setup_learn(
            total_timesteps, callback, reset_num_timesteps, tb_log_name, progress_bar
        )
        # SB3's _init_callback appends its progress bar over env steps: started only once the online phase starts.
        online_progress = None
        if progress_bar:
            assert isinstance(callback, CallbackList) and isinstance(callback.callbacks[-1], ProgressBarCallback)
            online_progress = callback.callbacks[-1]
            callback.callbacks.remove(online_progress)
        callback.on_training_start(locals(), globals())
        if not self._run_offline_phase(callback, progress_bar):
            callback.on_training_end()
            return self
        if online_progress is not None:
            online_progress.on_training_start(locals(), globals())
            assert isinstance(callback, CallbackList)
            callback.callbacks.append(online_progress)

        assert self.env is not None, "You must set the environment before calling learn()"
        # The online loop of SB3's OffPolicyAlgorithm.learn.
        while self.num_timesteps < total_timesteps:
            rollout = self.collect_rollouts(
                self.env,
                train_freq=self.train_freq,  # type: ignore[arg-type]
                action_noise=self.action_noise,
                callback=callback,
                learning_starts=self.learning_starts,
                replay_buffer=self.replay_buffer,
                log_interval=log_interval,
            )
            if not rollout.continue_training:
                break
            if self.num_timesteps > 0 and self.num_timesteps > self.learning_starts:
                gradient_steps = self.gradient_steps if self.gradient_steps >= 0 else rollout.episode_timesteps
                if gradient_steps > 0:
                    self.train(batch_size=self.batch_size, gradient_steps=gradient_steps)
        callback.on_training_end()
        return self

    def _run_offline_phase(self, callback: BaseCallback, progress_bar: bool) -> bool:
        """
        What remains of the offline phase, inside ``learn()``.

        :param callback: Called after every gradient step
        :param progress_bar: Display a progress bar over the gradient steps
        :return: False if the callback stopped it
        """
        if self.offline_steps_remaining == 0:
            return True
        if self.replay_buffer.offline_size == 0:
            warnings.warn(
                f"no offline data (offline_dataset=None): the offline phase's {self.offline_steps_remaining} "
                "remaining gradient steps are skipped and learn() goes online directly",
                stacklevel=3,
            )
            return True
        return self._run_offline_steps(self.offline_steps_remaining, callback, progress_bar)

    def _setup_learn(
        self,
        total_timesteps: int,
        callback: MaybeCallback = None,
        reset_num_timesteps: bool = True,
        tb_log_name: str = "run",
        progress_bar: bool = False,
    ) -> tuple[int, BaseCallback]:
        # Before SB3 resets the env, so that its first observation is normalised with the fitted statistics.
        self._fit_normalization_on_offline_data()
        total_timesteps, callback = super()._setup_learn(
            total_timesteps, callback, reset_num_timesteps, tb_log_name, progress_bar
        )
        if reset_num_timesteps:
            self._action_queue = None
        if self._last_obs is not None:
            _check_env_outputs_finite(np.asarray(self._last_obs), "reset observation", self.num_timesteps + 1)
        return total_timesteps, callback

    def _sample_action(
        self,
        learning_starts: int,
        action_noise: ActionNoise | None = None,
        n_envs: int = 1,
    ) -> tuple[np.ndarray, np.ndarray]:
        """
        Act with the policy from the first online step (docs/algorithms.md §5: no random warm-up), popping each env's queue.

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
        if self._vec_normalize_env is not None:
            # What is stored: the observations and rewards before normalization.
            _check_env_outputs_finite(self._vec_normalize_env.get_original_obs(), "observation", self.num_timesteps)
            _check_env_outputs_finite(self._vec_normalize_env.get_original_reward(), "reward", self.num_timesteps)
        _check_env_outputs_finite(np.asarray(new_obs), "observation", self.num_timesteps)
        _check_env_outputs_finite(np.asarray(reward), "reward", self.num_timesteps)
        for env_index, (done, info) in enumerate(zip(dones, infos, strict=True)):
            if done and info.get("terminal_observation") is not None:
                terminal = np.asarray(info["terminal_observation"])[None]
                _check_env_outputs_finite(terminal, "terminal observation", self.num_timesteps, first_env=env_index)
        super()._store_transition(replay_buffer, buffer_action, new_obs, reward, dones, infos)
        # The rest of a chunk is dropped when its episode ends (docs/algorithms.md §5).
        if self._action_queue is not None:
            self._action_queue[1][np.asarray(dones, dtype=bool)] = self.policy.act_chunk_size


def _all_subclasses(base: type) -> list[type]:
    """Every subclass of ``base`` defined so far, at any depth."""
    return [subclass for child in base.__subclasses__() for subclass in (child, *_all_subclasses(child))]


def _check_positive_int(name: str, value: Any) -> None:
    """Raise a ValueError naming ``name`` unless ``value`` is an integer >= 1."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


def _check_training_finite(
    names: list[str],
    means: list[float],
    first_non_finite_update: int,
    parameters_norm: float,
    first_update: int,
    last_update: int,
) -> None:
    """
    Stop training with an error when a loss or the parameters became NaN or inf during one ``train()`` call.

    The check runs once per call, on the values already read from the device, so the optimizer steps of that call
    have run: the model's parameters may then be NaN, and the error says not to save them.

    :param names: The losses' names
    :param means: Their means over the call
    :param first_non_finite_update: The first update (``n_updates``) of the call whose losses are not all finite
    :param parameters_norm: The norm of all the policy's parameters after the call
    :param first_update: The call's first update (``n_updates``)
    :param last_update: The call's last update (``n_updates``)
    """
    non_finite_losses = [name for name, mean in zip(names, means, strict=True) if not np.isfinite(mean)]
    if non_finite_losses:
        where = f"the loss(es) {', '.join(non_finite_losses)} became NaN or inf at update {first_non_finite_update}"
    elif not np.isfinite(parameters_norm):
        where = f"the parameters became NaN or inf in updates {first_update}..{last_update} (the losses were finite)"
    else:
        return
    raise RuntimeError(
        f"train: {where} (n_updates); training stopped: the model's parameters may be NaN or inf, do not save them "
        "(reload the last saved model). Check the data and rewards for huge values, or lower the learning rate"
    )


def _check_env_outputs_finite(values: np.ndarray, what: str, env_step: int, first_env: int = 0) -> None:
    """
    Refuse NaN or inf in one env step's outputs (one row per env), also as float32, the replay buffer's dtype
    (a finite 1e39 becomes inf there), before anything is stored.

    :param values: ``(n_envs, ...)`` observations or ``(n_envs,)`` rewards
    :param what: What the values are, for the message
    :param env_step: The env step they come from (``num_timesteps``)
    :param first_env: Index of the env of the first row
    """
    with np.errstate(over="ignore", invalid="ignore"):
        finite = np.isfinite(values) & np.isfinite(values.astype(np.float32))
    finite_envs = finite.reshape(len(finite), -1).all(axis=1)
    if not finite_envs.all():
        env_index = first_env + int(np.argmin(finite_envs))
        raise ValueError(
            f"env {env_index} returned a {what} holding NaN or inf (as float32, the replay buffer's dtype) at env step "
            f"{env_step} (num_timesteps); refused before it is stored: the env must return finite values within "
            "float32's range"
        )


def _progress_bar(total: int) -> Any:
    """A rich tqdm bar over offline gradient steps (tqdm and rich are imported only when asked for)."""
    from tqdm import TqdmExperimentalWarning
    from tqdm.rich import tqdm

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TqdmExperimentalWarning)  # as SB3's ProgressBarCallback does
        return tqdm(total=total, desc="offline gradient steps")
