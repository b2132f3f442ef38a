"""ChunkedOffPolicyAlgorithm: offline pre-training then online fine-tuning over action chunks (docs/algorithms.md §5)."""

from __future__ import annotations

import io
import numbers
import pathlib
from typing import Any, TypeVar

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import ReplayBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.noise import ActionNoise
from stable_baselines3.common.type_aliases import GymEnv, MaybeCallback, Schedule

from qc_sb3.accel.compiled_step import CompiledLosses
from qc_sb3.accel.graphed_update import GraphedUpdate, set_capturable
from qc_sb3.common.accepted_inputs import AcceptedInputsMixin
from qc_sb3.common.actor_critic import ActorCriticChunkPolicy
from qc_sb3.common.buffers import ChunkReplayBuffer
from qc_sb3.common.chunk_execution import ChunkExecutionOptions
from qc_sb3.common.device_buffer import DeviceChunkReplayBuffer
from qc_sb3.common.env_checks import check_observation_batch, refuse_chunked_env
from qc_sb3.common.image_buffer import chunk_buffer_class_for
from qc_sb3.common.input_checks import check_env_outputs_finite, check_positive_int
from qc_sb3.common.kwargs_checks import check_policy_kwargs, check_replay_buffer_kwargs
from qc_sb3.common.model_file import check_model_file
from qc_sb3.common.offline_phase import OfflinePhaseMixin
from qc_sb3.common.offline_source import offline_source_record
from qc_sb3.common.policies import ActionQueueState

SelfChunkedOffPolicyAlgorithm = TypeVar("SelfChunkedOffPolicyAlgorithm", bound="ChunkedOffPolicyAlgorithm")


class ChunkedOffPolicyAlgorithm(ChunkExecutionOptions, AcceptedInputsMixin, OfflinePhaseMixin):
    """
    Base class of every chunked method: an SB3 off-policy algorithm that trains on sliding-window chunks of
    primitive transitions (:class:`~qc_sb3.common.buffers.ChunkReplayBuffer`), acts with chunks executed open loop
    through one action queue per env, and runs an offline phase before its online phase (docs/algorithms.md §5).

    * Offline phase: ``offline_gradient_steps`` gradient steps on ``offline_dataset``, run by ``learn()`` after the
      callbacks' ``on_training_start`` and before its first env step (or by :meth:`pretrain`). They never count as
      env steps: ``num_timesteps`` stays 0, progress is ``offline_steps_done``, logged as ``offline/*``.
    * Online phase: the policy acts from the first env step; updates start after ``learning_starts`` online steps,
      logged as ``train/*`` and ``rollout/*`` as in SB3. It executes each chunk as ``replan_interval`` and
      ``temporal_ensemble_rate`` say (:class:`~qc_sb3.common.chunk_execution.ChunkExecution`; so do ``predict`` and
      :func:`~qc_sb3.common.evaluation.evaluate_success`); the buffer stores the executed actions.
    * Saving records where the offline data came from (a Minari id or folder), not the data; ``load()`` reads it again.
    * NaN or inf in the offline data, an env step or the losses is refused with an error naming the step.

    The env is the ordinary primitive env: chunking lives in the algorithm (docs/design.md). Subclasses implement
    ``_losses`` and ``_optimized_loss`` and call ``_setup_model()`` at the end of their ``__init__``.

    :param policy: The policy model to use
    :param env: The primitive environment to learn from (if registered in Gym, can be str)
    :param learning_rate: Learning rate of every optimizer, constant or a schedule of the remaining progress (as in
        SB3, progress counts online env steps: the offline phase runs at the schedule's start value)
    :param buffer_size: Number of online steps the replay buffer keeps (offline data comes on top), at least 1
    :param learning_starts: Online env steps collected before the first update (the policy acts from step 0)
    :param batch_size: Minibatch size of each gradient step, at least 1 (a warning when above the offline data's size)
    :param tau: Target network update coefficient (Polyak), in (0, 1]
    :param gamma: Discount factor
    :param train_freq: Update the model every ``train_freq`` env steps (or ``(n, "episode")``)
    :param gradient_steps: Gradient steps per update (the update-to-data ratio)
    :param action_noise: Exploration noise (SB3's ``ActionNoise``): one draw added to each executed primitive action in
        the [-1, 1] scale, then clipped, as SB3 adds it; the env executes and the buffer stores the noisy action.
        None by default (the policies are stochastic)
    :param chunk_size: Length h of the chunks (the reference's ``horizon_length``)
    :param action_chunking: False gives the ``-n`` variants: h-step windows, single actions (docs/algorithms.md §4)
    :param replan_interval: Actions k of each chunk executed before a new decision from the current observation, in
        [1, h] (None: whole chunks, the paper's open loop; 1 for the ``-n`` variants); settable later
    :param temporal_ensemble_rate: Temporal ensembling's rate m >= 0 (None: off): decide at every step and execute
        the ``exp(-m * i)``-weighted average (i = 0 the oldest) of what the overlapping chunks planned for the step,
        an action sequence the critic never scored; needs ``replan_interval`` None or 1; settable later
    :param offline_dataset: Offline data: a Minari dataset id or folder, a ``MinariDataset``, a mapping of arrays,
        ``OfflineTransitions``, or :class:`~qc_sb3.OfflineShards`;
        the model saves where it came from, not the data. None: no offline phase (``learn()`` warns that it skips it)
    :param offline_gradient_steps: Gradient steps of the offline phase (the reference's 1M by default)
    :param offline_log_interval: Offline gradient steps between two dumps of the ``offline/*`` logs
    :param offline_sparse_rewards: Replace the offline rewards r by -1 * [r != 0] (docs/algorithms.md §6, the reference's
        ``--sparse``; for envs whose online reward is made sparse the same way)
    :param replay_buffer_class: ChunkReplayBuffer (NumPy storage, the default; on an image observation space it builds
        :class:`~qc_sb3.common.image_buffer.ImageChunkReplayBuffer`, each frame stored once) or a subclass, e.g.
        :class:`~qc_sb3.common.device_buffer.DeviceChunkReplayBuffer` (storage and window sampling on ``device``)
    :param replay_buffer_kwargs: Keyword arguments of the replay buffer (e.g. ``offline_fraction``)
    :param policy_kwargs: Additional arguments to be passed to the policy on creation
    :param stats_window_size: Window size for the rollout logging
    :param tensorboard_log: The log location for tensorboard (if None, no logging)
    :param verbose: Verbosity level: 0 no output, 1 info messages, 2 debug messages
    :param device: Device (cpu, cuda, ...) on which the code should be run
    :param seed: Seed for the pseudo random generators
    :param compile_step: Compile the losses of the gradient step and the policy's decision with ``torch.compile``
        (:mod:`qc_sb3.accel`), and on CUDA capture the update as a CUDA graph: the same updates and chunks to float32
        rounding. Off by default, as in SB3; where compiling is impossible it stays eager with a warning saying why
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
        action_noise: ActionNoise | None = None,
        chunk_size: int = 5,
        action_chunking: bool = True,
        replan_interval: int | None = None,
        temporal_ensemble_rate: float | None = None,
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
        supported_action_spaces: tuple[type[spaces.Space], ...] = (spaces.Box,),
    ):
        check_positive_int("buffer_size", buffer_size)
        check_positive_int("batch_size", batch_size)
        if not (isinstance(replay_buffer_class, type) and issubclass(replay_buffer_class, ChunkReplayBuffer)):
            raise ValueError(f"replay_buffer_class must be ChunkReplayBuffer or a subclass, got {replay_buffer_class!r}")
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
            action_noise=action_noise,
            replay_buffer_class=replay_buffer_class,
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
        check_replay_buffer_kwargs(replay_buffer_class, self.replay_buffer_kwargs)
        check_policy_kwargs(type(self), ChunkedOffPolicyAlgorithm, self.policy_class, self.policy_kwargs)
        check_positive_int("chunk_size", chunk_size)
        check_positive_int("offline_gradient_steps", offline_gradient_steps, minimum=0)
        check_positive_int("offline_log_interval", offline_log_interval)
        self.chunk_size = int(chunk_size)
        if self.env is not None:
            refuse_chunked_env(self.env, type(self).__name__, self.chunk_size)
        self.action_chunking = action_chunking
        self._set_chunk_execution(self._act_chunk_size(), replan_interval, temporal_ensemble_rate)
        self.offline_dataset = offline_dataset
        self.offline_gradient_steps = offline_gradient_steps
        self.offline_log_interval = offline_log_interval
        self.offline_sparse_rewards = offline_sparse_rewards
        self.offline_steps_done = 0
        # Where the offline data came from (offline_source.offline_source_record), refreshed at each save, read by load().
        self.offline_dataset_source: dict[str, Any] | None = None
        # Whether a VecNormalize's statistics were updated with the offline data (once per model).
        self._offline_normalization_fitted = False
        # The shard of an OfflineShards dataset that the buffer's offline segment holds.
        self.offline_shard_index = 0
        self._action_queue: ActionQueueState | None = None
        self.compile_step = compile_step
        self._step_losses: CompiledLosses | None = None
        self._update_graph: GraphedUpdate | None = None
        self._seed_group_member = None

    def _get_torch_save_params(self) -> tuple[list[str], list[str]]:
        # The policy's state dict, then each optimizer, as the policy declares them.
        return ["policy", *(f"policy.{name}" for name in self.policy_class.optimizer_names())], []

    def _setup_model(self) -> None:
        # Refuse offline data that does not fit the env before building or training anything.
        offline_data = self._read_offline_data()
        self.replay_buffer_kwargs = {**self.replay_buffer_kwargs, "chunk_size": self.chunk_size, "gamma": self.gamma}
        self.policy_kwargs = {**self.policy_kwargs, **self._chunk_policy_kwargs()}
        self.replay_buffer_class = chunk_buffer_class_for(self.replay_buffer_class, self.observation_space)
        super()._setup_model()
        if self._vec_normalize_env is not None and isinstance(self.replay_buffer, DeviceChunkReplayBuffer):
            raise ValueError(
                "DeviceChunkReplayBuffer does not support VecNormalize (its statistics live on the host): use "
                "replay_buffer_class=ChunkReplayBuffer with a VecNormalize env"
            )
        # Whether the update must also copy normalisation statistics into the targets (a BatchNorm extractor).
        self._has_running_statistics = bool(self.policy.target_running_statistics()[0])
        self._step_losses = CompiledLosses(self._losses, self.device) if self.compile_step else None
        self._update_graph = None
        if self.compile_step and self.device.type == "cuda":
            self._update_graph = GraphedUpdate(self._update, self.policy.optimizers, self.device)
        # The online updates' losses, on the device, not yet read into the logger, and whether train() reads them at
        # once (see train()).
        self._unread_losses: list[dict[str, th.Tensor]] = []
        self._read_losses_every_train = self.device.type == "cpu"
        if self.compile_step:
            self.policy.compile_decision()
        if offline_data is not None:
            self._add_offline_data(offline_data)

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

        The parameters are those of :meth:`stable_baselines3.common.base_class.BaseAlgorithm.load`; as there,
        ``kwargs`` override saved attributes, ``replan_interval`` and ``temporal_ensemble_rate`` included.
        """
        check_model_file(path, cls, _all_subclasses(ChunkedOffPolicyAlgorithm), custom_objects)
        execution = {key: kwargs.pop(key) for key in ("replan_interval", "temporal_ensemble_rate") if key in kwargs}
        model = super().load(path, env, device, custom_objects, print_system_info, force_reset, **kwargs)
        for key, value in execution.items():  # properties of the policy: set after it is rebuilt
            setattr(model, key, value)
        return model

    def _excluded_save_params(self) -> list[str]:
        excluded = [
            "offline_dataset",
            "_action_queue",
            "_has_running_statistics",
            "_step_losses",
            "_update_graph",
            "_seed_group_member",
            "_unread_losses",
            "_read_losses_every_train",
        ]
        return [*super()._excluded_save_params(), *excluded]

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

    def set_parameters(
        self,
        load_path_or_dict: str | dict[str, Any],
        exact_match: bool = True,
        device: th.device | str = "auto",
    ) -> None:
        """
        Load parameters as SB3 does. A model saved while its update was a CUDA graph has its optimizers in their
        ``capturable`` mode, which is for captures only: a model that does not capture its update sets it off (one
        that does sets it on again when it captures the update for the new optimizer state).

        The parameters are those of :meth:`stable_baselines3.common.base_class.BaseAlgorithm.set_parameters`.
        """
        super().set_parameters(load_path_or_dict, exact_match, device)
        if self._update_graph is None or not self._update_graph.captured:
            set_capturable(self.policy.optimizers, False)

    def set_env(self, env: GymEnv, force_reset: bool = True) -> None:
        """
        Set a new env, as SB3 does; with ``force_reset`` (the default) the action queues are dropped too, so that the
        new env's first step starts a fresh chunk.

        :param env: The environment for learning a policy
        :param force_reset: Reset the env (and the action queues) before the next ``learn()``
        """
        refuse_chunked_env(env, type(self).__name__, self.chunk_size)
        super().set_env(env, force_reset)
        if force_reset:
            self._action_queue = None

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
        if reset_num_timesteps or self._last_obs is None:
            # SB3 resets the env: the episodes under way end here, or windows would run on into the new ones.
            self.replay_buffer.truncate_open_episodes()
        total_timesteps, callback = super()._setup_learn(
            total_timesteps, callback, reset_num_timesteps, tb_log_name, progress_bar
        )
        if reset_num_timesteps:
            self._action_queue = None
        if self._last_obs is not None:
            check_env_outputs_finite(np.asarray(self._last_obs), "reset observation", self.num_timesteps + 1)
        return total_timesteps, callback

    def _sample_action(
        self,
        learning_starts: int,
        action_noise: ActionNoise | None = None,
        n_envs: int = 1,
    ) -> tuple[np.ndarray, np.ndarray]:
        """
        Act with the policy from the first online step (docs/algorithms.md §5: no random warm-up), popping each env's queue.

        ``action_noise``: one draw per executed primitive action, added in the [-1, 1] scale and clipped, as SB3
        adds it (executed and stored alike); the queued chunk is not changed.

        :param learning_starts: Unused: it gates updates only
        :param action_noise: Exploration noise, or None
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
        buffer_actions = self.policy.scale_action(actions)
        if action_noise is not None:
            buffer_actions = np.clip(buffer_actions + action_noise(), -1.0, 1.0)
            actions = self.policy.unscale_action(buffer_actions)
        return actions, buffer_actions

    def _store_transition(
        self,
        replay_buffer: ReplayBuffer,
        buffer_action: np.ndarray,
        new_obs: np.ndarray | dict[str, np.ndarray],
        reward: np.ndarray,
        dones: np.ndarray,
        infos: list[dict[str, Any]],
    ) -> None:
        # What is stored: with VecNormalize, the observations and rewards before normalization.
        stored_obs, stored_reward = new_obs, reward
        if self._vec_normalize_env is not None:
            stored_obs = self._vec_normalize_env.get_original_obs()
            stored_reward = self._vec_normalize_env.get_original_reward()
        check_observation_batch(stored_obs, infos, dones, self.observation_space.shape, self.num_timesteps)  # type: ignore[arg-type]
        check_env_outputs_finite(np.asarray(stored_obs), "observation", self.num_timesteps)
        check_env_outputs_finite(np.asarray(stored_reward), "reward", self.num_timesteps)
        for env_index, (done, info) in enumerate(zip(dones, infos, strict=True)):
            if done and info.get("terminal_observation") is not None:
                terminal = np.asarray(info["terminal_observation"])[None]
                check_env_outputs_finite(terminal, "terminal observation", self.num_timesteps, first_env=env_index)
        super()._store_transition(replay_buffer, buffer_action, new_obs, reward, dones, infos)
        # The rest of a chunk is dropped when its episode ends (docs/algorithms.md §5).
        if self._action_queue is not None:
            self._action_queue[1][np.asarray(dones, dtype=bool)] = self.policy.act_chunk_size


def _all_subclasses(base: type) -> list[type]:
    """Every subclass of ``base`` defined so far, at any depth."""
    return [subclass for child in base.__subclasses__() for subclass in (child, *_all_subclasses(child))]
