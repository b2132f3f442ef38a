"""
How a chunk policy executes its chunks (docs/algorithms.md §5): open loop, re-planning every k steps, or with temporal
ensembling; the action queues of :meth:`~qc_sb3.common.policies.ChunkPolicy.predict`.

Training does not depend on it: the buffer stores the executed primitive transitions and samples windows from every
step, whatever the chunk boundaries were.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any

import numpy as np

# The recurrent state that carries the action queues between `predict` calls, in the buffer's [-1, 1] scale:
# * open loop or re-planning: the current chunk of each env, shape (n_envs, h, A), and the index of its next action,
#   shape (n_envs,); a new chunk is decided when the index reaches k (replan_interval);
# * temporal ensembling: the last h chunks decided, newest first, shape (n_envs, h, h, A) (NaN where no chunk was
#   decided yet in the episode), and the index of the newest chunk's next action (1 after each step).
# In both, an index of h or more (as at an episode start) empties the queue: the next step starts afresh.
ActionQueueState = tuple[np.ndarray, np.ndarray]

# Decides a chunk for the envs selected by a boolean mask: (mask,) -> chunks of shape (mask.sum(), h, A).
Decide = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class ChunkExecution:
    """
    How many actions of each chunk are executed before the next decision, and whether overlapping chunks are averaged.

    * ``replan_interval`` k (1 <= k <= h; None: k = h, open loop): after k actions of a chunk, a new chunk is decided
      from the current observation and the rest of the old one is dropped. The decision itself is unchanged (QC's
      best-of-N scores whole chunks with the critic, QC-FQL's actor outputs whole chunks); only fewer of its actions
      run.
    * ``temporal_ensemble_rate`` m (>= 0; None: off): temporal ensembling (ACT, Zhao et al. 2023), which decides a chunk
      at every step (k = 1) and executes, at each step, the weighted average of the actions that the chunks still
      overlapping it (up to h, the ones decided in the episode's last h steps) planned for it. The weights are ACT's,
      ``w_i = exp(-m * i)`` normalized to sum 1, where i = 0 is the oldest chunk's prediction (so m > 0 favours older
      predictions, m = 0 is the plain mean; ACT uses m = 0.01). The executed sequence is then not a chunk that the
      critic scored (nor one the policy sampled).

    :param act_chunk_size: Number h of primitive actions per decision
    :param replan_interval: Actions executed per chunk before the next decision (None: all h)
    :param temporal_ensemble_rate: Rate m of the ensembling weights (None: no ensembling); needs k = 1 or None
    """

    act_chunk_size: int
    replan_interval: int | None = None
    temporal_ensemble_rate: float | None = None

    def __post_init__(self) -> None:
        check_chunk_execution(self.act_chunk_size, self.replan_interval, self.temporal_ensemble_rate)

    @property
    def interval(self) -> int:
        """The number k of actions executed per decision: 1 with ensembling, else ``replan_interval`` or h."""
        if self.temporal_ensemble_rate is not None:
            return 1
        return self.act_chunk_size if self.replan_interval is None else int(self.replan_interval)

    def queue_shape(self, n_envs: int, action_dim: int) -> tuple[int, ...]:
        """The shape of the state's chunks for ``n_envs`` envs and primitive actions of ``action_dim`` elements."""
        h = self.act_chunk_size
        return (n_envs, h, h, action_dim) if self.temporal_ensemble_rate is not None else (n_envs, h, action_dim)

    def empty_queues(self, n_envs: int, action_dim: int) -> ActionQueueState:
        """Queues that decide a new chunk for every env at the next step."""
        fill = np.nan if self.temporal_ensemble_rate is not None else 0.0
        chunks = np.full(self.queue_shape(n_envs, action_dim), fill, dtype=np.float32)
        return chunks, np.full(n_envs, self.act_chunk_size, dtype=np.int64)

    def copy_queues(self, state: ActionQueueState, n_envs: int, action_dim: int) -> ActionQueueState:
        """A copy of a state (so that a caller's is never modified), after checking its shapes."""
        chunks, next_index = state
        expected = self.queue_shape(n_envs, action_dim)
        if np.shape(chunks) != expected or np.shape(next_index) != (n_envs,):
            raise ValueError(
                f"action-queue state has chunks of shape {np.shape(chunks)} and indices of shape {np.shape(next_index)}, "
                f"expected {expected} and {(n_envs,)} for {n_envs} env(s) ({self.describe()})"
            )
        return np.array(chunks, dtype=np.float32), np.array(next_index, dtype=np.int64)

    def describe(self) -> str:
        """The execution in words, for messages."""
        if self.temporal_ensemble_rate is not None:
            return f"temporal ensembling with rate {self.temporal_ensemble_rate} over chunks of {self.act_chunk_size}"
        return f"{self.interval} action(s) of each chunk of {self.act_chunk_size} per decision"

    def step(self, state: ActionQueueState, decide: Decide) -> tuple[np.ndarray, ActionQueueState]:
        """
        The action each env executes now, deciding new chunks where needed; ``state`` is updated in place.

        :param state: The queues (a copy the caller owns); an index of h or more empties an env's queue
        :param decide: Decides chunks for the envs of a boolean mask
        :return: One primitive action per env, shape (n_envs, A), and the updated queues
        """
        chunks, next_index = state
        if self.temporal_ensemble_rate is not None:
            return self._ensemble_step(chunks, next_index, decide), (chunks, next_index)
        due = next_index >= self.interval
        if due.any():
            chunks[due] = decide(due)
            next_index[due] = 0
        actions = chunks[np.arange(len(next_index)), next_index]
        next_index += 1
        return actions, (chunks, next_index)

    def _ensemble_step(self, history: np.ndarray, next_index: np.ndarray, decide: Decide) -> np.ndarray:
        """Shift in a new chunk for every env and average, per env, the actions the valid chunks planned for now."""
        h = self.act_chunk_size
        history[next_index >= h] = np.nan  # an episode start: the chunks of the previous episode do not count
        history[:, 1:] = history[:, :-1].copy()
        history[:, 0] = decide(np.ones(len(next_index), dtype=bool))
        next_index[:] = 1
        # The chunk decided j steps ago planned its action j for this step.
        planned = history[:, np.arange(h), np.arange(h)]  # (n_envs, h ages, A)
        valid = ~np.isnan(planned[..., 0])  # the ages 0..v-1 of the chunks decided in this episode
        weights = np.zeros(valid.shape, dtype=np.float64)
        for env, count in enumerate(valid.sum(axis=1)):
            weights[env, :count] = ensemble_weights(int(count), float(self.temporal_ensemble_rate))  # type: ignore[arg-type]
        return np.einsum("ej,eja->ea", weights, np.where(valid[..., None], planned, 0.0)).astype(np.float32)


def ensemble_weights(count: int, rate: float) -> np.ndarray:
    """
    Temporal ensembling's weights of ``count`` predictions of one step, ordered by the age of the chunk that made them
    (index 0: the newest chunk, decided this step): ACT's ``w_i = exp(-rate * i)`` with i = 0 the OLDEST prediction,
    normalized to sum 1.

    :param count: Number of predictions (chunks overlapping the step), >= 1
    :param rate: The rate m >= 0
    :return: Weights of shape (count,), newest first
    """
    oldest_first = np.exp(-rate * np.arange(count, dtype=np.float64))
    return (oldest_first / oldest_first.sum())[::-1].copy()


def check_chunk_execution(
    act_chunk_size: int, replan_interval: int | None, temporal_ensemble_rate: float | None
) -> None:
    """
    Raise a ValueError naming the value unless ``1 <= replan_interval <= act_chunk_size`` (or None), the ensembling
    rate is a finite number >= 0 (or None), and ensembling comes with ``replan_interval`` None or 1.

    :param act_chunk_size: Number h of primitive actions per decision
    :param replan_interval: Actions executed per chunk (None: h)
    :param temporal_ensemble_rate: Rate of the ensembling weights (None: off)
    """
    if replan_interval is not None and (
        isinstance(replan_interval, bool)
        or not isinstance(replan_interval, Integral)
        or not 1 <= replan_interval <= act_chunk_size
    ):
        raise ValueError(
            f"replan_interval must be None (execute whole chunks) or an integer in [1, {act_chunk_size}] (the actions "
            f"per decision, h = {act_chunk_size}), got {replan_interval!r}"
        )
    if temporal_ensemble_rate is None:
        return
    if (
        isinstance(temporal_ensemble_rate, bool)
        or not isinstance(temporal_ensemble_rate, Real)
        or not math.isfinite(temporal_ensemble_rate)
        or temporal_ensemble_rate < 0
    ):
        raise ValueError(f"temporal_ensemble_rate must be None (off) or a number >= 0, got {temporal_ensemble_rate!r}")
    if replan_interval not in (None, 1):
        raise ValueError(
            f"temporal_ensemble_rate={temporal_ensemble_rate!r} decides a chunk at every step, but replan_interval is "
            f"{replan_interval!r}: give replan_interval=1 or None with temporal ensembling"
        )


class ChunkExecutionOptions:
    """
    The algorithm's side of the options: ``replan_interval`` and ``temporal_ensemble_rate`` as attributes that can be
    set at any time (checked, then followed by the policy from its next decision on) and are saved with the model.
    The class using it sets ``policy`` (a :class:`~qc_sb3.common.policies.ChunkPolicy`) and passes the two values to
    the policy it builds.
    """

    policy: Any
    _replan_interval: int | None
    _temporal_ensemble_rate: float | None

    def _set_chunk_execution(
        self, act_chunk_size: int, replan_interval: int | None, temporal_ensemble_rate: float | None
    ) -> None:
        """Check the two options against h and keep them (on the policy too, once it exists)."""
        execution = ChunkExecution(act_chunk_size, replan_interval, temporal_ensemble_rate)
        self._replan_interval, self._temporal_ensemble_rate = replan_interval, temporal_ensemble_rate
        if getattr(self, "policy", None) is not None:
            self.policy.chunk_execution = execution

    @property
    def replan_interval(self) -> int | None:
        """Actions of each chunk executed before the next decision (None: the whole chunk); settable."""
        return self._replan_interval

    @replan_interval.setter
    def replan_interval(self, value: int | None) -> None:
        self._set_chunk_execution(self._act_chunk_size(), value, self._temporal_ensemble_rate)

    @property
    def temporal_ensemble_rate(self) -> float | None:
        """Rate of temporal ensembling's weights (None: no ensembling); settable."""
        return self._temporal_ensemble_rate

    @temporal_ensemble_rate.setter
    def temporal_ensemble_rate(self, value: float | None) -> None:
        self._set_chunk_execution(self._act_chunk_size(), self._replan_interval, value)

    def _act_chunk_size(self) -> int:
        """Number h of primitive actions per decision: the chunk length, 1 for the ``-n`` variants."""
        return int(self.chunk_size) if self.action_chunking else 1  # type: ignore[attr-defined]

    def _chunk_policy_kwargs(self) -> dict[str, Any]:
        """The policy's keyword arguments of its chunks: their length and kind, and how they are executed."""
        return {
            "chunk_size": self.chunk_size,  # type: ignore[attr-defined]
            "action_chunking": self.action_chunking,  # type: ignore[attr-defined]
            "replan_interval": self._replan_interval,
            "temporal_ensemble_rate": self._temporal_ensemble_rate,
        }
