"""The offline phase of a chunked algorithm: its data in the replay buffer, its gradient steps, and ``learn()``."""

from __future__ import annotations

import time
import warnings
from typing import Any, TypeVar

import numpy as np
import torch as th
from stable_baselines3.common.callbacks import BaseCallback, CallbackList, ProgressBarCallback
from stable_baselines3.common.type_aliases import MaybeCallback
from stable_baselines3.common.utils import configure_logger, update_learning_rate

from qc_sb3.common.actor_critic import ActorCriticChunkPolicy
from qc_sb3.common.buffers import ChunkReplayBuffer
from qc_sb3.common.datasets import load_offline_transitions
from qc_sb3.common.gradient_update import GradientUpdateMixin
from qc_sb3.common.input_checks import user_stacklevel, warn_if_no_online_update
from qc_sb3.common.normalization import fit_vec_normalize
from qc_sb3.common.offline_source import OfflineShards, describe_offline_source_record, open_offline_source_record
from qc_sb3.common.offline_transitions import (
    OfflineTransitions,
    append_checked_transitions,
    check_transitions_fit,
    with_channels_first_images,
    with_sparse_rewards,
)

SelfOfflinePhaseMixin = TypeVar("SelfOfflinePhaseMixin", bound="OfflinePhaseMixin")
# Offline gradient steps timed (after the first, which pays one-off costs) before the first estimate of the time left.
ETA_STEPS = 10


class OfflinePhaseMixin(GradientUpdateMixin):
    """
    The offline phase of :class:`~qc_sb3.common.chunked.ChunkedOffPolicyAlgorithm` (whose docstring describes it
    to users): reading and checking ``offline_dataset`` once, before any network is built, seeding the replay
    buffer with it (one shard at a time for ``OfflineShards``), fitting a ``VecNormalize`` on it, the offline
    gradient steps (:meth:`pretrain`), and :meth:`learn`, which runs what remains of them before SB3's online loop.

    Its gradient steps are :class:`~qc_sb3.common.gradient_update.GradientUpdateMixin`'s, shared with the online
    ``train()``, whose unread online losses it reads before ``learn()`` returns.
    """

    policy: ActorCriticChunkPolicy
    replay_buffer: ChunkReplayBuffer
    chunk_size: int
    offline_dataset: Any
    offline_dataset_source: dict[str, Any] | None
    offline_gradient_steps: int
    offline_log_interval: int
    offline_sparse_rewards: bool
    offline_steps_done: int
    offline_shard_index: int
    _offline_normalization_fitted: bool

    def _read_offline_data(self) -> OfflineTransitions | None:
        """
        Read ``offline_dataset`` (its shard ``offline_shard_index`` for ``OfflineShards``) and check it against the
        env, before any network is built; at ``load()`` without ``offline_dataset=...``, read the recorded one.

        :return: The checked transitions, or None without offline data
        """
        if self.offline_dataset is None and self.offline_dataset_source is not None:
            return self._reload_recorded_offline_data(self.offline_dataset_source)
        if self.offline_dataset is not None:
            return self._load_offline_data(self.offline_shard_index)
        return None

    def _add_offline_data(self, data: OfflineTransitions) -> None:
        """
        Put offline data read by :meth:`_read_offline_data` in the replay buffer, once it exists.

        :param data: The checked transitions
        """
        if self.batch_size > len(data):
            warnings.warn(
                f"batch_size={self.batch_size} is larger than the offline dataset ({len(data)} "
                "steps): batches are drawn with replacement and repeat steps",
                stacklevel=user_stacklevel(),  # the user's QC(...), QCFQL(...) or RLPD(...) call
            )
        append_checked_transitions(self.replay_buffer, data, self.action_space)  # type: ignore[arg-type]

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
            warnings.warn(f"this model was trained on {name}, which is not saved with it; {consequence}", stacklevel=4)
            return None
        self.offline_dataset = source
        try:
            return self._load_offline_data(self.offline_shard_index)
        except (ValueError, OSError) as error:
            self.offline_dataset = None
            warnings.warn(f"cannot read this model's offline data, {name} ({error}); {consequence}", stacklevel=4)
            return None

    def _load_offline_data(self, shard_index: int) -> OfflineTransitions:
        """
        Load the offline dataset (or its shard ``shard_index``), transpose channels-last images as SB3 transposes
        the env's (``with_channels_first_images``), check it against the env and the chunk size (the one check of
        offline data against the model: the buffer then checks shapes only) and apply the sparse reward if asked.

        :param shard_index: The shard to load when ``offline_dataset`` is an ``OfflineShards``; ignored otherwise
        :return: The transitions, actions in the env's scale
        """
        source = self.offline_dataset
        if isinstance(source, OfflineShards):
            source = source.sources[shard_index]
        data = with_channels_first_images(load_offline_transitions(source, env_id=self._env_id()), self.observation_space)
        check_transitions_fit(data, self.observation_space, self.action_space, self.chunk_size)  # type: ignore[arg-type]
        return with_sparse_rewards(data) if self.offline_sparse_rewards else data

    def _env_id(self) -> str | None:
        """The id of the training env's spec (its first env), None without an env or a spec."""
        if self.env is None:
            return None
        spec = self.env.get_attr("spec", indices=[0])[0]
        return None if spec is None else spec.id

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
        append_checked_transitions(self.replay_buffer, self._load_offline_data(shard_index), self.action_space)  # type: ignore[arg-type]
        self.offline_shard_index = shard_index

    @property
    def offline_steps_remaining(self) -> int:
        """Gradient steps of the offline phase still to run."""
        return max(self.offline_gradient_steps - self.offline_steps_done, 0)

    def pretrain(
        self: SelfOfflinePhaseMixin,
        gradient_steps: int | None = None,
        progress_bar: bool = False,
        tb_log_name: str = "run",
        callback: MaybeCallback = None,
    ) -> SelfOfflinePhaseMixin:
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
        first_step_end, step = 0.0, 0
        for step in range(1, n_steps + 1):
            self._use_shard_of_step(self.offline_steps_done + 1)
            # A callback may have evaluated the policy (eval mode) since the last step.
            policy.set_training_mode(True)
            step_losses.append(self._gradient_step(self.batch_size))
            self._n_updates += 1
            self.offline_steps_done += 1
            if progress is not None:
                progress.update(1)
            if step == 1:
                first_step_end = time.perf_counter()
            elif step == 1 + ETA_STEPS or self.offline_steps_done % self.offline_log_interval == 0:
                self._record_time_left((time.perf_counter() - first_step_end) / (step - 1), n_steps - step, step)
            if self.offline_steps_done % self.offline_log_interval == 0:
                self._dump_offline_logs(step_losses)
                step_losses = []
            callback.update_locals({**step_locals, "offline_steps_done": self.offline_steps_done})
            if not callback.on_step():
                continue_training = False
                break
        if step_losses:
            if step > 1:
                self._record_time_left((time.perf_counter() - first_step_end) / (step - 1), n_steps - step, step)
            self._dump_offline_logs(step_losses)
        if progress is not None:
            progress.close()
        return continue_training

    def _record_time_left(self, seconds_per_step: float, call_steps_left: int, steps_timed: int) -> None:
        """
        Record ``time/offline_eta_s``, the estimated seconds left of the offline phase (of the call under way where
        it runs past ``offline_gradient_steps``), logged at the next dump beside ``offline/*``, which holds training
        statistics; at the first estimate, with ``verbose >= 1``, say it in an info line.

        :param seconds_per_step: Mean wall time of the gradient steps timed so far (callbacks included)
        :param call_steps_left: Gradient steps still to run in this call
        :param steps_timed: Gradient steps run so far in this call
        """
        steps_left = max(call_steps_left, self.offline_steps_remaining)
        eta = seconds_per_step * steps_left
        self.logger.record("time/offline_eta_s", eta)
        if steps_timed == 1 + ETA_STEPS and self.verbose >= 1:
            self.logger.info(
                f"offline phase: {seconds_per_step:.3g} s per gradient step over its first steps, about "
                f"{eta / 3600:.3g} h for the {steps_left} left (offline_gradient_steps, net_arch and the algorithm's "
                "sampling sizes set this: see the speed options guide, 'Sizes for a laptop')"
            )

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

    def learn(
        self: SelfOfflinePhaseMixin,
        total_timesteps: int,
        callback: MaybeCallback = None,
        log_interval: int = 4,
        tb_log_name: str = "run",
        reset_num_timesteps: bool = True,
        progress_bar: bool = False,
    ) -> SelfOfflinePhaseMixin:
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
        :param progress_bar: Display a progress bar over the offline gradient steps (with their time left), then SB3's over
            the env steps
        :return: the trained model
        """
        start = 0 if reset_num_timesteps else self.num_timesteps
        warn_if_no_online_update(start, total_timesteps, self.learning_starts, self.gradient_steps)
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
        # Losses not yet read (an accelerator reads them at log dumps): checked before learn() returns.
        self._read_train_losses()
        callback.on_training_end()
        return self


def _progress_bar(total: int) -> Any:
    """A rich tqdm bar over offline gradient steps (tqdm and rich are imported only when asked for)."""
    from tqdm import TqdmExperimentalWarning
    from tqdm.rich import tqdm

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TqdmExperimentalWarning)  # as SB3's ProgressBarCallback does
        return tqdm(total=total, desc="offline gradient steps")
