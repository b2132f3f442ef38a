"""ImageChunkReplayBuffer: each frame stored once, the batches of ChunkReplayBuffer, and the algorithms' default.

Its windows are checked against the brute force of docs/algorithms.md §1, on state and image data, in
tests/test_buffers.py.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from qc_sb3 import QC, QCFQL, RLPD, ChunkReplayBuffer, DeviceChunkReplayBuffer, ImageChunkReplayBuffer

FRAME = spaces.Box(0, 255, (64, 64, 3), np.uint8)
FRAME_BYTES = 64 * 64 * 3
ACTIONS = spaces.Box(-1.0, 1.0, (2,), np.float32)


def frame(step_id: int, marker: int = 0) -> np.ndarray:
    """A frame that carries its step id in its first two bytes (``marker`` 1: an episode's true last frame)."""
    image = np.zeros(FRAME.shape, dtype=np.uint8)
    image.reshape(-1)[:3] = (step_id // 256, step_id % 256, marker)
    return image


def episode(first_id: int, length: int) -> dict[str, np.ndarray]:
    """One truncated episode of an env: the next observation of each step is the following step's frame."""
    frames = [frame(first_id + k) for k in range(length)] + [frame(first_id + length - 1, marker=1)]
    rng = np.random.default_rng(first_id)
    return {
        "observations": np.stack(frames[:-1]),
        "next_observations": np.stack(frames[1:]),
        "actions": rng.uniform(-0.9, 0.9, (length, 2)).astype(np.float32),
        "rewards": rng.normal(size=length).astype(np.float32),
        "episode_end": np.arange(length) == length - 1,
    }


def add_episode_online(buffers: list[ChunkReplayBuffer], data: dict[str, np.ndarray], truncated: bool = True) -> None:
    for t in range(len(data["rewards"])):
        end = truncated and bool(data["episode_end"][t])
        for buffer in buffers:
            buffer.add(
                data["observations"][t : t + 1],
                data["next_observations"][t : t + 1],
                data["actions"][t : t + 1],
                data["rewards"][t : t + 1],
                np.array([end]),
                [{"TimeLimit.truncated": end}],
            )


def add_episodes_offline(buffer: ChunkReplayBuffer, episodes: list[dict[str, np.ndarray]]) -> None:
    data = {name: np.concatenate([e[name] for e in episodes]) for name in episodes[0]}
    buffer.add_offline(terminated=np.zeros(len(data["rewards"])), **data)


def assert_same_batches(plain: ChunkReplayBuffer, image: ImageChunkReplayBuffer, seed: int = 0) -> None:
    """Both buffers draw their starts from NumPy's generator: with one seed they must give the same batch."""
    np.random.seed(seed)
    expected = plain.sample(512)
    np.random.seed(seed)
    got = image.sample(512)
    for name, value in expected._asdict().items():
        np.testing.assert_array_equal(getattr(got, name).numpy(), value.numpy(), err_msg=name)


def test_each_frame_is_stored_once():
    """1000 online steps (episodes of 50, the ring wrapped once) and 500 offline steps (episodes of 50)."""
    plain, image = (cls(1000, FRAME, ACTIONS, chunk_size=5) for cls in (ChunkReplayBuffer, ImageChunkReplayBuffer))
    offline = [episode(50 * k, 50) for k in range(10)]
    for buffer in (plain, image):
        add_episodes_offline(buffer, offline)
    for k in range(40):
        add_episode_online([plain, image], episode(1000 + 50 * k, 50))
    assert_same_batches(plain, image)

    # One kept frame per episode end: 10 offline; online, 19 of the 20 ends in the ring (the freed slots are
    # reused), the newest step's next frame waiting apart until the env's next step.
    assert len(image.offline_extra_frames) == 10
    assert (image.offline_next_frame >= 0).sum() == 10
    assert (image.next_frame >= 0).sum() == 19
    np.testing.assert_array_equal(image.newest_next_observations[0], frame(1000 + 50 * 40 - 1, marker=1))
    assert 20 <= len(image.extra_frames) <= 40
    assert image.observations.dtype == image.extra_frames.dtype == np.uint8
    # About one frame per step (the per-step index is 8 bytes): 1500 steps, 30 ends, at most 40 extra slots.
    assert not hasattr(image, "next_observations") and not hasattr(image, "offline_next_observations")
    steps = 1000 + 500
    assert steps * FRAME_BYTES <= image.observation_nbytes() <= (steps + 10 + 40 + 1) * FRAME_BYTES + 8 * steps
    plain_bytes = sum(
        array.nbytes
        for array in (plain.observations, plain.next_observations, plain.offline_observations, plain.offline_next_observations)
    )
    assert plain_bytes == 2 * steps * FRAME_BYTES


def test_an_open_episode_cut_by_a_new_learn_keeps_its_last_frame():
    """truncate_open_episodes, then a new episode: the cut step's next frame is not the new episode's first one."""
    plain, image = (cls(30, FRAME, ACTIONS, chunk_size=3) for cls in (ChunkReplayBuffer, ImageChunkReplayBuffer))
    add_episode_online([plain, image], episode(0, 7), truncated=False)
    for buffer in (plain, image):
        buffer.truncate_open_episodes()
    add_episode_online([plain, image], episode(100, 4))
    assert_same_batches(plain, image)
    assert (image.next_frame >= 0).sum() == 1  # the cut step (the second episode's end is the newest step)


def test_reset_frees_the_extra_frames():
    plain, image = (cls(30, FRAME, ACTIONS, chunk_size=2) for cls in (ChunkReplayBuffer, ImageChunkReplayBuffer))
    add_episode_online([plain, image], episode(0, 5))
    for buffer in (plain, image):
        buffer.reset()
    assert len(image.extra_frames) == 0 and (image.next_frame == -1).all()
    add_episode_online([plain, image], episode(200, 6))
    assert_same_batches(plain, image)


class FrameEnv(gym.Env):
    """A channels-last image env: the frame's brightness counts the steps."""

    observation_space = spaces.Box(0, 255, (8, 8, 3), np.uint8)
    action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(self.observation_space.shape, np.uint8), {}

    def step(self, action):
        self.t += 1
        return np.full(self.observation_space.shape, self.t, np.uint8), 0.0, self.t >= 5, False, {}


@pytest.mark.parametrize("algorithm", [QC, QCFQL, RLPD])
def test_the_algorithms_default_to_it_for_image_envs(algorithm):
    def buffer_of(env: gym.Env, **kwargs) -> ChunkReplayBuffer:
        kwargs = {"buffer_size": 50, "chunk_size": 2, "policy_kwargs": {"net_arch": [8]}, "device": "cpu", **kwargs}
        return algorithm("MlpPolicy", env, **kwargs).replay_buffer

    image_buffer = buffer_of(FrameEnv())
    assert type(image_buffer) is ImageChunkReplayBuffer
    assert image_buffer.observations.shape == (50, 1, 3, 8, 8)  # SB3's VecTransposeImage: channels first
    assert type(buffer_of(gym.make("Pendulum-v1"))) is ChunkReplayBuffer
    if algorithm is not RLPD:  # RLPD builds the default buffer only
        assert type(buffer_of(FrameEnv(), replay_buffer_class=DeviceChunkReplayBuffer)) is DeviceChunkReplayBuffer
