"""ChunkPolicy: a policy that outputs action chunks and executes them open-loop through per-env action queues."""

from __future__ import annotations

import warnings
from abc import abstractmethod
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor, FlattenExtractor

from qc_sb3.accel.compiled_decision import CompiledDecision
from qc_sb3.common.chunk_execution import ActionQueueState, ChunkExecution


class ChunkPolicy(BasePolicy):
    """
    Base class of policies that act with chunks of ``act_chunk_size`` primitive actions (docs/algorithms.md §5).

    ``predict`` keeps one action queue per env in its recurrent ``state``: when an env's queue is empty it asks
    :meth:`_predict_chunk` for a chunk, then pops one primitive action per call; ``episode_start`` clears the
    queue. SB3's ``evaluate_policy`` and any loop that passes state and episode starts thus execute the chunks
    open-loop with no special code. ``replan_interval`` and ``temporal_ensemble_rate`` change how many actions of
    each chunk run before the next decision (:class:`~qc_sb3.common.chunk_execution.ChunkExecution`); both can be
    set on the policy at any time and hold from the next decision on.

    A loop that drops the state (``action, _ = model.predict(obs)``) re-plans at every step: each call samples a
    chunk and executes only its first action, a closed-loop policy at h times the compute. Since that loop is the
    one in SB3's docs, the policy warns (once per policy) the second time in a row it is called with
    ``state=None`` (and not ``episode_start`` True for every env, a fresh start) while ``act_chunk_size > 1``; pass
    the returned state back, with ``episode_start``, as for recurrent policies.

    ``deterministic=False`` (SB3's default for ``predict``, what the algorithm acts with and what the reference
    evaluates with) samples the stochastic policy. ``deterministic=True`` (the default of SB3's ``evaluate_policy``
    and ``EvalCallback``) gives a deterministic function of the observation: each policy says which in
    :meth:`_predict_chunk`.

    :param observation_space: Observation space (a Box)
    :param action_space: Primitive action space (a Box)
    :param chunk_size: Length h of the chunks the algorithm trains on
    :param action_chunking: Whether the policy outputs chunks of h actions (True) or one action at a time over
        h-step windows (False: the ``-n`` variants, docs/algorithms.md §4)
    :param features_extractor_class: Features extractor (flattening by default)
    :param features_extractor_kwargs: Keyword arguments of the features extractor
    :param normalize_images: Whether to divide image observations by 255
    :param replan_interval: Actions k of each chunk executed before a new decision from the current observation
        (1 <= k <= act_chunk_size; None: the whole chunk)
    :param temporal_ensemble_rate: Rate m of temporal ensembling's weights (None: off); ensembling decides at every
        step and executes, at each step, the weighted average of what the overlapping chunks planned for it
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Box,
        chunk_size: int = 5,
        action_chunking: bool = True,
        features_extractor_class: type[BaseFeaturesExtractor] = FlattenExtractor,
        features_extractor_kwargs: dict[str, Any] | None = None,
        normalize_images: bool = True,
        replan_interval: int | None = None,
        temporal_ensemble_rate: float | None = None,
    ):
        super().__init__(
            observation_space,
            action_space,
            features_extractor_class=features_extractor_class,
            features_extractor_kwargs=features_extractor_kwargs,
            normalize_images=normalize_images,
            squash_output=False,
        )
        self.chunk_size = chunk_size
        self.action_chunking = action_chunking
        self.primitive_action_dim = int(np.prod(action_space.shape))
        self.chunk_execution = ChunkExecution(self.act_chunk_size, replan_interval, temporal_ensemble_rate)
        # Whether the last predict() call got state=None, and whether the re-planning warning was given.
        self._last_predict_without_state = False
        self._warned_predict_without_state = False
        self.compiled_decision: CompiledDecision | None = None

    @property
    def act_chunk_size(self) -> int:
        """Number of primitive actions per policy decision: h with action chunking, 1 for the ``-n`` variants."""
        return self.chunk_size if self.action_chunking else 1

    @property
    def replan_interval(self) -> int | None:
        """Actions of each chunk executed before the next decision (None: all of them); settable."""
        return self.chunk_execution.replan_interval

    @replan_interval.setter
    def replan_interval(self, value: int | None) -> None:
        self.chunk_execution = ChunkExecution(self.act_chunk_size, value, self.temporal_ensemble_rate)

    @property
    def temporal_ensemble_rate(self) -> float | None:
        """Rate of temporal ensembling's weights (None: no ensembling); settable."""
        return self.chunk_execution.temporal_ensemble_rate

    @temporal_ensemble_rate.setter
    def temporal_ensemble_rate(self, value: float | None) -> None:
        self.chunk_execution = ChunkExecution(self.act_chunk_size, self.replan_interval, value)

    @property
    def flat_action_dim(self) -> int:
        """Dimension of the policy's output and of the critic's action input: act_chunk_size * A."""
        return self.act_chunk_size * self.primitive_action_dim

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data.update(
            chunk_size=self.chunk_size,
            action_chunking=self.action_chunking,
            features_extractor_class=self.features_extractor_class,
            features_extractor_kwargs=self.features_extractor_kwargs,
            replan_interval=self.replan_interval,
            temporal_ensemble_rate=self.temporal_ensemble_rate,
        )
        return data

    def features(self, observations: th.Tensor) -> th.Tensor:
        """Preprocessed, flattened observations, the networks' state input."""
        return self.extract_features(observations, self.features_extractor)  # type: ignore[return-value]

    @abstractmethod
    def _predict_chunk(self, observation: th.Tensor, deterministic: bool = False) -> th.Tensor:
        """
        One flat chunk per observation, in the [-1, 1] scale.

        :param observation: Preprocessed observations, shape (B, *obs_shape)
        :param deterministic: Return a deterministic function of the observation instead of a sample
        :return: Chunks of shape (B, act_chunk_size * A), time-major
        """

    def _predict(self, observation: th.Tensor, deterministic: bool = False) -> th.Tensor:
        return self._predict_chunk(observation, deterministic=deterministic)

    def compile_decision(self, measure: bool = True) -> None:
        """
        Make :meth:`predict` and :meth:`predict_chunk` decide through :meth:`_predict_chunk` compiled as one graph
        (:mod:`qc_sb3.accel.compiled_decision`; the algorithms call this with ``compile_step=True``): the same
        chunks to float32 rounding from the same generator state, compiled at the first decision, eager with a
        warning where compiling is impossible.

        :param measure: Time the compiled and the eager decision at the first decision and keep the faster
            (False: always the compiled one)
        """
        self.compiled_decision = CompiledDecision(self._predict_chunk, self.device, measure=measure)

    def _decide(self, observation: th.Tensor, deterministic: bool) -> th.Tensor:
        """:meth:`_predict_chunk` without autograd, compiled after :meth:`compile_decision`."""
        with th.no_grad():
            if self.compiled_decision is None:
                return self._predict_chunk(observation, deterministic=deterministic)
            return self.compiled_decision(observation, deterministic)

    def predict_chunk(self, observation: np.ndarray, deterministic: bool = False) -> np.ndarray:
        """
        One chunk per observation, in the env's action scale.

        :param observation: One observation, or a batch of n_envs observations
        :param deterministic: Return the policy's deterministic chunk instead of a sample
        :return: Chunks of shape (n_envs, act_chunk_size, *action_shape)
        """
        self.set_training_mode(False)
        observation_tensor, _ = self.obs_to_tensor(observation)
        chunks = self._decide(observation_tensor, deterministic).cpu().numpy()
        chunks = chunks.reshape(len(chunks), self.act_chunk_size, *self.action_space.shape)
        return self.unscale_action(chunks)

    def predict(  # type: ignore[override]
        self,
        observation: np.ndarray,
        state: ActionQueueState | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
    ) -> tuple[np.ndarray, ActionQueueState]:
        """
        Pop the next primitive action of each env's queue, deciding a new chunk where the queue is due (empty, or
        ``replan_interval`` actions into its chunk); with temporal ensembling, decide at every step and average.

        :param observation: One observation, or a batch of n_envs observations
        :param state: The queues returned by the previous call (None: all queues empty)
        :param episode_start: Per env, whether an episode starts at this observation (clears its queue)
        :param deterministic: Decide with the policy's deterministic chunk instead of a sample
        :return: One primitive action per env in the env's scale, and the updated queues
        """
        self._warn_if_state_is_dropped(state, episode_start)
        self.set_training_mode(False)
        observation_tensor, vectorized_env = self.obs_to_tensor(observation)
        n_envs = observation_tensor.shape[0]
        execution = self.chunk_execution
        if state is None:
            state = execution.empty_queues(n_envs, self.primitive_action_dim)
        else:
            state = execution.copy_queues(state, n_envs, self.primitive_action_dim)
        if episode_start is not None:
            state[1][np.asarray(episode_start, dtype=bool).reshape(n_envs)] = self.act_chunk_size

        def decide(envs: np.ndarray) -> np.ndarray:
            chunks = self._decide(observation_tensor[th.as_tensor(envs, device=self.device)], deterministic)
            return chunks.cpu().numpy().reshape(-1, self.act_chunk_size, self.primitive_action_dim)

        scaled_actions, state = execution.step(state, decide)
        actions = self.unscale_action(scaled_actions).reshape(n_envs, *self.action_space.shape)
        actions = np.clip(actions, self.action_space.low, self.action_space.high)
        if not vectorized_env:
            actions = actions.squeeze(axis=0)
        return actions, state

    def _warn_if_state_is_dropped(self, state: ActionQueueState | None, episode_start: np.ndarray | None) -> None:
        """
        Warn, once, at the second call in a row without state: the caller then executes one action per chunk. A call
        whose ``episode_start`` is True for every env starts afresh (as ``evaluate_policy``'s first call): it is not
        counted.
        """
        without_state = state is None and (episode_start is None or not np.all(episode_start))
        # Dropping the state changes nothing where every step decides anew without ensembling (k = 1).
        execution = self.chunk_execution
        replans = execution.interval > 1 or execution.temporal_ensemble_rate is not None
        dropped = without_state and self._last_predict_without_state and self.act_chunk_size > 1 and replans
        if dropped and not self._warned_predict_without_state:
            warnings.warn(
                f"predict() was called twice in a row with state=None: each call samples a new chunk of "
                f"{self.act_chunk_size} actions and only its first action is executed, which re-plans at every "
                "step (a closed-loop policy at h times the compute). Pass the returned state back, as for "
                "recurrent policies: `action, state = model.predict(obs, state=state, episode_start=episode_start)`, "
                "episode_start being True at the first observation of each episode.",
                UserWarning,
                stacklevel=4,
            )
            self._warned_predict_without_state = True
        self._last_predict_without_state = without_state
