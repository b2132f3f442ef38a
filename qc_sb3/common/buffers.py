"""Replay buffer of primitive transitions that samples sliding-window action chunks (docs/algorithms.md §1)."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import ReplayBuffer
from stable_baselines3.common.vec_env import VecNormalize

# Dataset actions are clipped to ±(1 - 1e-5) (docs/algorithms.md §1), so a flow target never sits exactly on the boundary.
OFFLINE_ACTION_CLIP = 1.0 - 1e-5


class ChunkReplayBufferSamples(NamedTuple):
    """
    A batch of chunk windows, one row per sampled start step t (docs/algorithms.md §1).

    :param observations: ``(B, *obs_shape)``, s_t
    :param actions: ``(B, h, A)``, a_t .. a_{t+h-1}, in the buffer's [-1, 1] scale
    :param next_observations: ``(B, *obs_shape)``, s_{t+h} (the stored next observation of the window's last step)
    :param rewards: ``(B, h)``, cumulative discounted: ``R[i] = sum_{j <= i} gamma^j r_{t+j}``
    :param masks: ``(B, h)``, running min of ``1 - terminated``: ``M[i] = min_{j <= i} (1 - term_{t+j})``
    :param valid: ``(B, h)``, ``valid[0] = 1``; ``valid[i] = 1`` iff no episode ends at positions ``0 .. i-1``
    """

    observations: th.Tensor
    actions: th.Tensor
    next_observations: th.Tensor
    rewards: th.Tensor
    masks: th.Tensor
    valid: th.Tensor


class _Windows(NamedTuple):
    """Gathered per-step data of B windows of length h (numpy, before the cumulative quantities)."""

    observations: np.ndarray  # (B, *obs_shape)
    actions: np.ndarray  # (B, h, A)
    next_observations: np.ndarray  # (B, *obs_shape)
    rewards: np.ndarray  # (B, h), zero at padding positions
    terminated: np.ndarray  # (B, h)
    episode_end: np.ndarray  # (B, h), the stream's newest step counts as an episode end


class ChunkReplayBuffer(ReplayBuffer):
    """
    Replay buffer that stores one primitive transition per step and samples windows of ``chunk_size`` steps
    from any stored start (docs/algorithms.md §1), as Q-chunking trains on.

    It holds two segments:

    * an offline segment, bulk-loaded with :meth:`add_offline` and never evicted (it is not counted in
      ``buffer_size``);
    * an online ring of ``buffer_size`` steps (split over ``n_envs`` streams, as SB3 does), filled by :meth:`add`
      with SB3's signature: the timeouts come from ``info["TimeLimit.truncated"]`` and ``next_obs`` is the true
      last observation of an episode.

    A window that starts at step t covers t .. t+h-1 of its own stream (the offline segment, or one env's
    online stream in time order). It never reads past the stream's newest step nor into overwritten data: the
    newest step counts as an episode end, and positions past it repeat its index with zero reward. Windows that
    cross an episode end read the following stored steps, as the reference does, and are weighted out through
    ``valid``.

    Sampling is uniform over all stored steps (offline plus online) by default, as the reference samples its
    single buffer; with ``offline_fraction`` set, that fraction of every batch comes from the offline segment
    and the rest from the online ring (the RLPD family uses 0.5).

    Observations are stored as float32 when the space is float64 (OGBench's), halving memory; actions as in SB3.

    :param buffer_size: Max number of online steps (over all envs); offline data comes on top
    :param observation_space: Observation space (a Box)
    :param action_space: Action space (a Box); the buffer stores actions in [-1, 1] (``policy.scale_action``)
    :param device: PyTorch device of the sampled tensors
    :param n_envs: Number of parallel environments, each with its own stream
    :param chunk_size: Window length h
    :param gamma: Discount factor of the cumulative rewards
    :param offline_fraction: Fraction of every batch drawn from the offline segment, or None for uniform
        sampling over all stored steps
    :param optimize_memory_usage: Not supported (next observations at episode ends are needed)
    :param handle_timeout_termination: Must be True: truncations are episode ends but not terminations
    """

    # The arrays of the offline segment, each ``offline_<name>`` (clear_offline empties them).
    offline_fields: tuple[str, ...] = ("observations", "next_observations", "actions", "rewards", "terminated", "episode_end")

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        device: th.device | str = "cpu",
        n_envs: int = 1,
        chunk_size: int = 5,
        gamma: float = 0.99,
        offline_fraction: float | None = None,
        optimize_memory_usage: bool = False,
        handle_timeout_termination: bool = True,
    ):
        if optimize_memory_usage:
            raise ValueError(
                "ChunkReplayBuffer does not support optimize_memory_usage=True: it needs the true next observation "
                "of every step, including at episode ends"
            )
        if not handle_timeout_termination:
            raise ValueError(
                "ChunkReplayBuffer needs handle_timeout_termination=True to tell truncations (episode ends) from "
                "terminations (masks); got handle_timeout_termination=False"
            )
        if not isinstance(observation_space, spaces.Box):
            raise ValueError(f"ChunkReplayBuffer needs a Box observation space, got {observation_space}")
        if not isinstance(action_space, spaces.Box):
            raise ValueError(f"ChunkReplayBuffer needs a Box action space, got {action_space}")
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int | np.integer) or chunk_size < 1:
            raise ValueError(f"chunk_size must be an integer >= 1, got {chunk_size!r}")
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma!r}")
        if offline_fraction is not None and not 0.0 <= offline_fraction <= 1.0:
            raise ValueError(f"offline_fraction must be None or in [0, 1], got {offline_fraction!r}")
        super().__init__(buffer_size, observation_space, action_space, device, n_envs=n_envs)
        self.chunk_size = int(chunk_size)
        self.gamma = float(gamma)
        self.offline_fraction = offline_fraction

        self.storage_obs_dtype = np.float32 if observation_space.dtype == np.float64 else observation_space.dtype
        self.storage_action_dtype = self.actions.dtype
        # np.zeros allocates lazily, so replacing the parent's arrays costs no memory twice.
        self.observations = np.zeros((self.buffer_size, self.n_envs, *self.obs_shape), dtype=self.storage_obs_dtype)
        self.next_observations = np.zeros_like(self.observations)

        self.offline_observations = np.zeros((0, *self.obs_shape), dtype=self.storage_obs_dtype)
        self.offline_next_observations = np.zeros_like(self.offline_observations)
        self.offline_actions = np.zeros((0, self.action_dim), dtype=self.storage_action_dtype)
        self.offline_rewards = np.zeros(0, dtype=np.float32)
        self.offline_terminated = np.zeros(0, dtype=np.float32)
        self.offline_episode_end = np.zeros(0, dtype=np.float32)

    @property
    def offline_size(self) -> int:
        """Number of steps in the offline segment."""
        return len(self.offline_rewards)

    def add_offline(
        self,
        observations: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        next_observations: np.ndarray,
        terminated: np.ndarray,
        episode_end: np.ndarray,
    ) -> None:
        """
        Append a dataset of primitive steps to the offline segment, which online data never evicts.

        Arrays run over steps, episodes one after the other. Actions must already be in the buffer's [-1, 1]
        scale; they are clipped to ±(1 - 1e-5) (docs/algorithms.md §1).

        Only the shapes are checked here. The values are checked once, where offline data enters qc_sb3: by
        ``OfflineTransitions`` and ``check_transitions_fit`` of :mod:`qc_sb3.common.offline_transitions` (an
        algorithm's ``offline_dataset``, or its ``add_transitions_to_buffer``, which scales the actions too).
        Non-zero flags count as 1.

        :param observations: ``(N, *obs_shape)``, s_t
        :param actions: ``(N, A)`` or ``(N, *action_shape)``, a_t in [-1, 1]
        :param rewards: ``(N,)``, r_t
        :param next_observations: ``(N, *obs_shape)``, s_{t+1}
        :param terminated: ``(N,)``, true terminations (0/1); they may fall in the middle of an episode, as in
            OGBench's relabelled play data, where the trajectory goes on past the goal (docs/algorithms.md §6)
        :param episode_end: ``(N,)``, 1 on the last step of each episode (terminated or truncated); the last step
            is stored as one whatever its flag, as no data follows it
        """
        given = {
            "observations": observations,
            "actions": actions,
            "rewards": rewards,
            "next_observations": next_observations,
            "terminated": terminated,
            "episode_end": episode_end,
        }
        for name, array in self._storage_arrays(given).items():
            setattr(self, f"offline_{name}", np.concatenate([getattr(self, f"offline_{name}"), array]))

    def truncate_open_episodes(self) -> None:
        """
        End every env's episode at its newest stored online step as a truncation (the bootstrap stays), if it did not
        end there: for an env reset that is no episode end (a new ``learn()``, ``set_env``, a loaded model), so that
        no chunk window runs from the old episode into the new one.
        """
        if self.size() == 0:
            return
        last = (self.pos - 1) % self.buffer_size
        open_episode = self.dones[last] == 0
        self.timeouts[last][open_episode] = 1.0
        self.dones[last][open_episode] = 1.0

    def clear_offline(self) -> None:
        """Empty the offline segment (the online ring is untouched), e.g. to load the next shard of a dataset."""
        for name in self.offline_fields:
            array = getattr(self, f"offline_{name}")
            setattr(self, f"offline_{name}", np.zeros((0, *array.shape[1:]), dtype=array.dtype))

    def _storage_arrays(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """
        Check the shapes of an offline dataset (its values are checked where it enters qc_sb3, see ``add_offline``).

        :param arrays: The arrays given to ``add_offline``
        :return: Copies in the stored dtypes, actions clipped, flags as 0.0 / 1.0, the last step an episode end
        """
        given = {name: np.asarray(array) for name, array in arrays.items()}
        n_steps = len(given["rewards"]) if given["rewards"].ndim > 0 else 0
        if n_steps == 0:
            raise ValueError("add_offline needs at least one step, got empty rewards")
        action_shape = self.action_space.shape
        expected = {
            "observations": [(n_steps, *self.obs_shape)],
            "actions": [(n_steps, self.action_dim), (n_steps, *action_shape)],
            "rewards": [(n_steps,)],
            "next_observations": [(n_steps, *self.obs_shape)],
            "terminated": [(n_steps,)],
            "episode_end": [(n_steps,)],
        }
        for name, shapes in expected.items():
            if given[name].shape not in shapes:
                raise ValueError(
                    f"add_offline: {name} has shape {given[name].shape}, expected "
                    + " or ".join(str(shape) for shape in shapes)
                    + f" (N = {n_steps} steps from rewards; observation space {self.obs_shape}, action space {action_shape})"
                )
        low, high = given["actions"].min(), given["actions"].max()
        if low < -1.0 or high > 1.0:
            raise ValueError(
                f"add_offline: actions must be in the buffer's [-1, 1] scale (use policy.scale_action), got values "
                f"in [{low}, {high}]"
            )
        # No copy of the observations where their dtype is the stored one: add_offline concatenates them anyway.
        return {
            "observations": np.asarray(given["observations"], dtype=self.storage_obs_dtype),
            "actions": np.clip(
                given["actions"].reshape(n_steps, self.action_dim), -OFFLINE_ACTION_CLIP, OFFLINE_ACTION_CLIP
            ).astype(self.storage_action_dtype),
            "rewards": given["rewards"].astype(np.float32),
            "next_observations": np.asarray(given["next_observations"], dtype=self.storage_obs_dtype),
            "terminated": given["terminated"].astype(bool).astype(np.float32),
            # No data follows the last step: it ends its windows, as an online stream's newest step does.
            "episode_end": np.concatenate([given["episode_end"][:-1].astype(bool), [True]]).astype(np.float32),
        }

    def sample(self, batch_size: int, env: VecNormalize | None = None) -> ChunkReplayBufferSamples:  # type: ignore[override]
        """
        Sample ``batch_size`` chunk windows (docs/algorithms.md §1).

        :param batch_size: Number of windows B
        :param env: VecNormalize env whose statistics normalize observations and rewards, if any
        :return: The windows as torch tensors on the buffer's device
        """
        n_online = self.size() * self.n_envs
        n_offline = self.offline_size
        if n_online + n_offline == 0:
            raise ValueError("cannot sample from an empty ChunkReplayBuffer: add online steps or offline data first")
        if n_online == 0:
            n_from_offline = batch_size
        elif n_offline == 0:
            n_from_offline = 0
        elif self.offline_fraction is None:
            # Uniform over all stored steps: the offline share of the batch is binomial in the segment sizes.
            n_from_offline = int(np.random.binomial(batch_size, n_offline / (n_offline + n_online)))
        else:
            n_from_offline = round(self.offline_fraction * batch_size)
        parts = []
        if n_from_offline > 0:
            parts.append(self._offline_windows(np.random.randint(0, n_offline, size=n_from_offline)))
        if batch_size - n_from_offline > 0:
            parts.append(self._online_windows(np.random.randint(0, n_online, size=batch_size - n_from_offline)))
        windows = _Windows(*(np.concatenate(field) for field in zip(*parts, strict=True)))
        return self._chunk_samples(windows, env)

    def _window_steps(self, starts: np.ndarray, stream_length: int | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Stream positions t .. t+h-1 of each window, clamped at the stream's newest step, and the padding mask."""
        positions = starts[:, None] + np.arange(self.chunk_size)[None, :]
        newest = np.asarray(stream_length)[..., None] - 1
        return np.minimum(positions, newest), positions > newest

    def _offline_windows(self, starts: np.ndarray) -> _Windows:
        """Windows of the offline segment starting at the given steps."""
        steps, padding = self._window_steps(starts, self.offline_size)
        # The segment's last step is an episode end (add_offline stores it as one), so it needs no forcing.
        return _Windows(
            observations=self.offline_observations[starts],
            actions=self.offline_actions[steps],
            next_observations=self._offline_next_frames(steps[:, -1]),
            rewards=self.offline_rewards[steps] * ~padding,
            terminated=self.offline_terminated[steps],
            episode_end=self.offline_episode_end[steps],
        )

    def _offline_next_frames(self, steps: np.ndarray) -> np.ndarray:
        """The stored next observations of the given offline steps."""
        return self.offline_next_observations[steps]

    def _online_next_frames(self, rows: np.ndarray, env_indices: np.ndarray, at_newest: np.ndarray) -> np.ndarray:
        """The stored next observations at the given ring rows of the given envs (``at_newest``: the stream's newest step)."""
        return self.next_observations[rows, env_indices]

    def _online_windows(self, flat_starts: np.ndarray) -> _Windows:
        """Windows of the online ring; ``flat_starts`` index (time in stream) * n_envs + env."""
        stream_length = self.size()
        starts, env_indices = np.divmod(flat_starts, self.n_envs)
        steps, padding = self._window_steps(starts, stream_length)
        # Stream time 0 is the oldest stored step: index 0 until the ring is full, then the write position.
        oldest = self.pos if self.full else 0
        rows = (oldest + steps) % self.buffer_size
        columns = np.broadcast_to(env_indices[:, None], rows.shape)
        dones = self.dones[rows, columns]
        timeouts = self.timeouts[rows, columns]
        # The newest stored step of a stream ends its windows: what follows it is not written yet.
        at_newest = steps == stream_length - 1
        return _Windows(
            observations=self.observations[rows[:, 0], env_indices],
            actions=self.actions[rows, columns],
            next_observations=self._online_next_frames(rows[:, -1], env_indices, at_newest[:, -1]),
            rewards=self.rewards[rows, columns] * ~padding,
            terminated=dones * (1.0 - timeouts),
            episode_end=np.maximum(dones, at_newest),
        )

    def _chunk_samples(self, windows: _Windows, env: VecNormalize | None) -> ChunkReplayBufferSamples:
        """Cumulative rewards, masks and valid flags of docs/algorithms.md §1, as tensors."""
        discounts = self.gamma ** np.arange(self.chunk_size, dtype=np.float32)
        rewards = self._normalize_reward(windows.rewards.astype(np.float32), env)
        # §1: R[i] = sum_{j <= i} gamma^j r_{t+j}
        cumulative_rewards = np.cumsum(rewards * discounts, axis=1, dtype=np.float32)
        # §1: M[i] = min_{j <= i} (1 - term_{t+j})
        masks = np.minimum.accumulate(1.0 - windows.terminated, axis=1)
        # §1: valid[0] = 1; valid[i] = 1 - (any episode_end at positions 0 .. i-1)
        ended = np.maximum.accumulate(windows.episode_end, axis=1)
        valid = np.ones_like(masks)
        valid[:, 1:] = 1.0 - ended[:, :-1]
        batch_size = len(cumulative_rewards)
        data: dict[str, Any] = {
            "observations": self._normalize_obs(windows.observations, env),
            "actions": windows.actions.reshape(batch_size, self.chunk_size, self.action_dim),
            "next_observations": self._normalize_obs(windows.next_observations, env),
            "rewards": cumulative_rewards,
            "masks": masks,
            "valid": valid,
        }
        return ChunkReplayBufferSamples(**{name: self.to_torch(value).float() for name, value in data.items()})
