"""The chunk replay buffer with its storage and its window sampling on the training device (docs/algorithms.md §1)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.vec_env import VecNormalize

from qc_sb3.common.buffers import ChunkReplayBuffer, ChunkReplayBufferSamples, _Windows

OFFLINE_FIELDS = ("observations", "next_observations", "actions", "rewards", "terminated", "episode_end")


class DeviceChunkReplayBuffer(ChunkReplayBuffer):
    """
    :class:`~qc_sb3.common.buffers.ChunkReplayBuffer` with every step stored in torch tensors on ``device`` and the
    windows gathered there, so that a batch for a GPU update never crosses from the host: ``sample()`` draws its start
    steps with torch's generator on the device and makes no host synchronisation (the segment sizes it needs are host
    integers). ``add()`` copies each env step to the device.

    The windows are those of ChunkReplayBuffer (docs/algorithms.md §1), which is the plain version this one is tested
    against (``tests/test_buffers.py`` checks both against the same brute force); so is the sampling (uniform over all
    stored steps, or ``offline_fraction``). Only the random streams differ: the starts come from torch's generator
    (seeded by SB3's ``set_random_seed``) instead of NumPy's. Pass it to QC or QC-FQL as
    ``replay_buffer_class=DeviceChunkReplayBuffer``; it is worth it where the update runs on an accelerator.

    VecNormalize is not supported (its statistics live on the host): use ChunkReplayBuffer with it.

    The parameters are those of :class:`~qc_sb3.common.buffers.ChunkReplayBuffer`.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        obs_dtype = th.from_numpy(np.zeros(0, dtype=self.storage_obs_dtype)).dtype
        per_step = {
            "observations": (self.obs_shape, obs_dtype),
            "next_observations": (self.obs_shape, obs_dtype),
            "actions": ((self.action_dim,), th.float32),
            "rewards": ((), th.float32),
            "dones": ((), th.float32),
            "timeouts": ((), th.float32),
        }
        # The parent's NumPy arrays are replaced (never touched, so never allocated).
        for name, (shape, dtype) in per_step.items():
            setattr(self, name, th.zeros((self.buffer_size, self.n_envs, *shape), dtype=dtype, device=self.device))
        self._discounts = self.gamma ** th.arange(self.chunk_size, dtype=th.float32, device=self.device)
        self._empty_offline()

    def _empty_offline(self) -> None:
        shapes = {"observations": self.obs_shape, "next_observations": self.obs_shape, "actions": (self.action_dim,)}
        for name in OFFLINE_FIELDS:
            dtype = self.observations.dtype if name.endswith("observations") else th.float32
            setattr(self, f"offline_{name}", th.zeros((0, *shapes.get(name, ())), dtype=dtype, device=self.device))

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
        values = {
            "observations": np.asarray(obs).reshape((self.n_envs, *self.obs_shape)),
            "next_observations": np.asarray(next_obs).reshape((self.n_envs, *self.obs_shape)),
            "actions": np.asarray(action).reshape((self.n_envs, self.action_dim)),
            "rewards": np.asarray(reward).reshape(self.n_envs),
            "dones": np.asarray(done).reshape(self.n_envs),
            "timeouts": np.array([info.get("TimeLimit.truncated", False) for info in infos]),
        }
        for name, value in values.items():
            stored = getattr(self, name)
            stored[self.pos] = th.as_tensor(value, dtype=stored.dtype).to(self.device, non_blocking=True)
        self.pos += 1
        if self.pos == self.buffer_size:
            self.full = True
            self.pos = 0

    def add_offline(
        self,
        observations: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        next_observations: np.ndarray,
        terminated: np.ndarray,
        episode_end: np.ndarray,
    ) -> None:
        """Append a dataset of primitive steps to the offline segment; see :meth:`ChunkReplayBuffer.add_offline`."""
        given = {
            "observations": observations,
            "actions": actions,
            "rewards": rewards,
            "next_observations": next_observations,
            "terminated": terminated,
            "episode_end": episode_end,
        }
        for name, array in self._storage_arrays(given).items():
            stored = getattr(self, f"offline_{name}")
            setattr(self, f"offline_{name}", th.cat([stored, th.as_tensor(array, dtype=stored.dtype, device=self.device)]))

    def clear_offline(self) -> None:
        """Empty the offline segment (the online ring is untouched)."""
        self._empty_offline()

    def sample(self, batch_size: int, env: VecNormalize | None = None) -> ChunkReplayBufferSamples:  # type: ignore[override]
        """
        Sample ``batch_size`` chunk windows (docs/algorithms.md §1) on the buffer's device.

        :param batch_size: Number of windows B
        :param env: Must be None: VecNormalize is not supported here
        :return: The windows as float32 tensors on the buffer's device
        """
        if env is not None:
            raise ValueError(
                "DeviceChunkReplayBuffer does not support VecNormalize (its statistics live on the host); use "
                "ChunkReplayBuffer with a VecNormalize env"
            )
        n_online = self.size() * self.n_envs
        n_offline = self.offline_size
        if n_online + n_offline == 0:
            raise ValueError("cannot sample from an empty DeviceChunkReplayBuffer: add online steps or offline data first")
        n_from_offline = self._offline_share(batch_size, n_offline, n_online)
        parts = []
        if n_from_offline > 0:
            parts.append(self._offline_windows(self._random_starts(n_offline, n_from_offline)))
        if batch_size - n_from_offline > 0:
            parts.append(self._online_windows(self._random_starts(n_online, batch_size - n_from_offline)))
        windows = _Windows(*(th.cat(field) for field in zip(*parts, strict=True)))
        return self._chunk_samples(windows, None)

    def _offline_share(self, batch_size: int, n_offline: int, n_online: int) -> int:
        """How many of the batch's windows come from the offline segment (a host draw, as ChunkReplayBuffer's)."""
        if n_online == 0:
            return batch_size
        if n_offline == 0:
            return 0
        if self.offline_fraction is None:
            return int(np.random.binomial(batch_size, n_offline / (n_offline + n_online)))
        return round(self.offline_fraction * batch_size)

    def _random_starts(self, high: int, count: int) -> th.Tensor:
        return th.randint(0, high, (count,), device=self.device)

    def _window_steps(self, starts: th.Tensor, stream_length: int) -> tuple[th.Tensor, th.Tensor]:  # type: ignore[override]
        """Stream positions t .. t+h-1 of each window, clamped at the stream's newest step, and the padding mask."""
        positions = starts[:, None] + th.arange(self.chunk_size, device=self.device)[None, :]
        return positions.clamp(max=stream_length - 1), positions > stream_length - 1

    def _offline_windows(self, starts: th.Tensor) -> _Windows:  # type: ignore[override]
        steps, padding = self._window_steps(starts, self.offline_size)
        return _Windows(
            observations=self.offline_observations[starts],
            actions=self.offline_actions[steps],
            next_observations=self.offline_next_observations[steps[:, -1]],
            rewards=self.offline_rewards[steps] * ~padding,
            terminated=self.offline_terminated[steps],
            episode_end=self.offline_episode_end[steps],
        )

    def _online_windows(self, flat_starts: th.Tensor) -> _Windows:  # type: ignore[override]
        stream_length = self.size()
        starts, env_indices = flat_starts // self.n_envs, flat_starts % self.n_envs
        steps, padding = self._window_steps(starts, stream_length)
        oldest = self.pos if self.full else 0
        rows = (oldest + steps) % self.buffer_size
        columns = env_indices[:, None].expand_as(rows)
        dones = self.dones[rows, columns]
        timeouts = self.timeouts[rows, columns]
        at_newest = (steps == stream_length - 1).float()
        return _Windows(
            observations=self.observations[rows[:, 0], env_indices],
            actions=self.actions[rows, columns],
            next_observations=self.next_observations[rows[:, -1], env_indices],
            rewards=self.rewards[rows, columns] * ~padding,
            terminated=dones * (1.0 - timeouts),
            episode_end=th.maximum(dones, at_newest),
        )

    def _chunk_samples(self, windows: _Windows, env: VecNormalize | None) -> ChunkReplayBufferSamples:
        """Cumulative rewards, masks and valid flags of docs/algorithms.md §1, on the device."""
        # §1: R[i] = sum_{j <= i} gamma^j r_{t+j}
        cumulative_rewards = th.cumsum(windows.rewards * self._discounts, dim=1)
        # §1: M[i] = min_{j <= i} (1 - term_{t+j})
        masks = th.cummin(1.0 - windows.terminated, dim=1).values
        # §1: valid[0] = 1; valid[i] = 1 - (any episode_end at positions 0 .. i-1)
        ended = th.cummax(windows.episode_end, dim=1).values
        valid = th.cat([th.ones_like(ended[:, :1]), 1.0 - ended[:, :-1]], dim=1)
        batch_size = len(cumulative_rewards)
        return ChunkReplayBufferSamples(
            observations=windows.observations.float(),
            actions=windows.actions.reshape(batch_size, self.chunk_size, self.action_dim),
            next_observations=windows.next_observations.float(),
            rewards=cumulative_rewards,
            masks=masks,
            valid=valid,
        )
