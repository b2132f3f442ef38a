"""A chunk replay buffer that stores each observation frame once, for image observations (docs/algorithms.md §1)."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from stable_baselines3.common.preprocessing import is_image_space

from qc_sb3.common.buffers import ChunkReplayBuffer

# Offline frames are compared in blocks of this many steps, so that the comparison never holds a whole dataset.
_COMPARE_BLOCK = 4096


class ImageChunkReplayBuffer(ChunkReplayBuffer):
    """
    :class:`~qc_sb3.common.buffers.ChunkReplayBuffer` that stores every observation frame once: the next observation
    of step t is read from the frame of step t+1 of the same stream (the offline segment, or one env's online stream)
    wherever the two are equal, as they are inside an episode. A next observation that differs from the following
    step's observation (the true last observation of an episode, which the next episode's first frame is not, or the
    newest online step's, which has no following step yet) is kept once, in a separate store of extra frames. The
    windows are those of ChunkReplayBuffer (docs/algorithms.md §1), so ``sample()`` returns the same batches.

    Observation memory is about one frame per stored step plus one per episode end, instead of two per step: at
    1,000,000 steps of 64 x 64 x 3 uint8 frames, 12.3 GB rather than 24.6 GB. The algorithms use it by default for
    an image observation space (SB3's ``is_image_space``: a uint8 Box of rank 3); any Box works.

    The parameters are those of :class:`~qc_sb3.common.buffers.ChunkReplayBuffer`.
    """

    offline_fields = ("observations", "next_frame", "extra_frames", "actions", "rewards", "terminated", "episode_end")

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        # No stored copy of the next observations: the parent's array was never written, so it never took memory.
        del self.next_observations
        frame_shape = (0, *self.obs_shape)
        # Online: per ring row and env, the index of its next frame in extra_frames, or -1 for the following row's.
        self.next_frame = np.full((self.buffer_size, self.n_envs), -1, dtype=np.int64)
        self.extra_frames = np.zeros(frame_shape, dtype=self.storage_obs_dtype)
        self._free_extra: list[int] = []
        # The next observation of each env's newest step, until the env's next step shows whether it is needed.
        self.newest_next_observations = np.zeros((self.n_envs, *self.obs_shape), dtype=self.storage_obs_dtype)
        # Offline: per step, the index of its next frame in offline_extra_frames, or -1 for the following step's.
        self.offline_next_frame = np.zeros(0, dtype=np.int64)
        self.offline_extra_frames = np.zeros(frame_shape, dtype=self.storage_obs_dtype)
        del self.offline_next_observations

    def observation_nbytes(self) -> int:
        """Bytes of all stored observation frames (online ring, extra frames, offline segment) and their indices."""
        arrays = (self.observations, self.next_frame, self.extra_frames, self.newest_next_observations)
        offline = (self.offline_observations, self.offline_next_frame, self.offline_extra_frames)
        return sum(array.nbytes for array in (*arrays, *offline))

    def reset(self) -> None:
        """Empty the online ring (the offline segment stays), with its extra frames."""
        super().reset()
        self.next_frame[:] = -1
        self.extra_frames = self.extra_frames[:0].copy()
        self._free_extra = []

    def add(
        self,
        obs: np.ndarray,
        next_obs: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        done: np.ndarray,
        infos: list[dict[str, Any]],
    ) -> None:
        """Store one step of every env, as SB3's ``ReplayBuffer.add`` does (timeouts from ``TimeLimit.truncated``)."""
        obs = np.asarray(obs, dtype=self.storage_obs_dtype).reshape((self.n_envs, *self.obs_shape))
        next_obs = np.asarray(next_obs, dtype=self.storage_obs_dtype).reshape((self.n_envs, *self.obs_shape))
        if self.size() > 0:
            # The previous newest step reads this step's frame, unless its next observation is another one.
            previous = (self.pos - 1) % self.buffer_size
            differs = (self.newest_next_observations != obs).reshape(self.n_envs, -1).any(axis=1)
            for env in np.flatnonzero(differs):
                self.next_frame[previous, env] = self._store_extra(self.newest_next_observations[env])
        # The oldest step is overwritten: its extra frame is freed.
        for env in np.flatnonzero(self.next_frame[self.pos] >= 0):
            self._free_extra.append(int(self.next_frame[self.pos, env]))
            self.next_frame[self.pos, env] = -1
        self.observations[self.pos] = obs
        self.newest_next_observations[:] = next_obs
        self.actions[self.pos] = np.asarray(action).reshape((self.n_envs, self.action_dim))
        self.rewards[self.pos] = np.asarray(reward)
        self.dones[self.pos] = np.asarray(done)
        self.timeouts[self.pos] = np.array([info.get("TimeLimit.truncated", False) for info in infos])
        self.pos += 1
        if self.pos == self.buffer_size:
            self.full = True
            self.pos = 0

    def _store_extra(self, frame: np.ndarray) -> int:
        """Put one frame into the online extra frames (growing them when no slot is free); return its index."""
        if not self._free_extra:
            capacity = len(self.extra_frames)
            grown = max(2 * capacity, 4 * self.n_envs)
            self.extra_frames = np.concatenate(
                [self.extra_frames, np.zeros((grown - capacity, *self.obs_shape), dtype=self.storage_obs_dtype)]
            )
            self._free_extra = list(range(grown - 1, capacity - 1, -1))
        index = self._free_extra.pop()
        self.extra_frames[index] = frame
        return index

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
        Append a dataset of primitive steps to the offline segment; see :meth:`ChunkReplayBuffer.add_offline`. Each
        next observation equal to the following step's observation is stored as a reference to that frame.
        """
        given = {
            "observations": observations,
            "actions": actions,
            "rewards": rewards,
            "next_observations": next_observations,
            "terminated": terminated,
            "episode_end": episode_end,
        }
        stored = self._storage_arrays(given)
        frames, next_frames = stored.pop("observations"), stored.pop("next_observations")
        n_steps = len(frames)
        # The last step has no following step in this data: its next frame is always kept.
        kept = np.ones(n_steps, dtype=bool)
        for start in range(0, n_steps - 1, _COMPARE_BLOCK):
            stop = min(start + _COMPARE_BLOCK, n_steps - 1)
            equal = next_frames[start:stop] == frames[start + 1 : stop + 1]
            kept[start:stop] = ~equal.reshape(stop - start, -1).all(axis=1)
        next_frame = np.full(n_steps, -1, dtype=np.int64)
        next_frame[kept] = len(self.offline_extra_frames) + np.arange(kept.sum())
        self.offline_observations = np.concatenate([self.offline_observations, frames])
        self.offline_extra_frames = np.concatenate([self.offline_extra_frames, next_frames[kept]])
        self.offline_next_frame = np.concatenate([self.offline_next_frame, next_frame])
        for name, array in stored.items():
            setattr(self, f"offline_{name}", np.concatenate([getattr(self, f"offline_{name}"), array]))

    def _offline_next_frames(self, steps: np.ndarray) -> np.ndarray:
        """The next observations of the given offline steps: the following step's frame or a kept one."""
        indices = self.offline_next_frame[steps]
        # Where a frame is kept, steps + 1 may be past the segment: clip it (that gathered frame is replaced).
        frames = self.offline_observations[np.minimum(steps + 1, self.offline_size - 1)]
        kept = indices >= 0
        frames[kept] = self.offline_extra_frames[indices[kept]]
        return frames

    def _online_next_frames(self, rows: np.ndarray, env_indices: np.ndarray, at_newest: np.ndarray) -> np.ndarray:
        """The next observations at the given ring rows: the following row's frame, a kept one, or the newest's."""
        indices = self.next_frame[rows, env_indices]
        frames = self.observations[(rows + 1) % self.buffer_size, env_indices]
        kept = indices >= 0
        frames[kept] = self.extra_frames[indices[kept]]
        frames[at_newest] = self.newest_next_observations[env_indices[at_newest]]
        return frames


def chunk_buffer_class_for(replay_buffer_class: type[ChunkReplayBuffer], observation_space: spaces.Space) -> type:
    """
    The replay buffer class an algorithm builds: ImageChunkReplayBuffer for the default ChunkReplayBuffer on an image
    observation space (SB3's ``is_image_space``), else the given class.

    :param replay_buffer_class: The algorithm's ``replay_buffer_class``
    :param observation_space: The env's observation space
    :return: The class to build
    """
    if replay_buffer_class is ChunkReplayBuffer and is_image_space(observation_space, check_channels=False):
        return ImageChunkReplayBuffer
    return replay_buffer_class
