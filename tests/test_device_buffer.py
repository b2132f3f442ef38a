"""DeviceChunkReplayBuffer inside the algorithms: the steps it stores, what it refuses, and its windows on a GPU.

Its windows on CPU are checked against the brute force of docs/algorithms.md §1 with ChunkReplayBuffer's, in
tests/test_buffers.py.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from stable_baselines3.common.buffers import ReplayBuffer
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

from qc_sb3 import QC, QCFQL, ChunkReplayBuffer, DeviceChunkReplayBuffer
from qc_sb3.benchmarks.parity.window_parity import EndingEnv, random_offline_data
from tests.test_buffers import add_offline, add_online, check_batch_against_brute_force, make_buffer, steps_of

STEPS = 200


def make_model(algorithm: type, buffer_class: type, env=None, **kwargs):
    return algorithm(
        "MlpPolicy",
        env if env is not None else gym.wrappers.TimeLimit(EndingEnv(), max_episode_steps=6),
        replay_buffer_class=buffer_class,
        offline_dataset=random_offline_data(60, np.random.default_rng(0)),
        policy_kwargs={"net_arch": [16, 16]},
        chunk_size=3,
        batch_size=16,
        seed=0,
        device="cpu",
        **kwargs,
    )


@pytest.mark.parametrize("algorithm", [QC, QCFQL])
def test_it_stores_the_steps_sb3_stores(algorithm: type) -> None:
    """Without updates both buffers see the same steps (same seed); the NumPy one stores them through SB3's add."""
    buffers = {}
    for buffer_class in (ChunkReplayBuffer, DeviceChunkReplayBuffer):
        model = make_model(algorithm, buffer_class, offline_gradient_steps=0, learning_starts=1000)
        model.learn(STEPS)
        buffers[buffer_class] = model.replay_buffer
    plain, device = buffers[ChunkReplayBuffer], buffers[DeviceChunkReplayBuffer]
    assert plain.size() == device.size() == STEPS
    for name in ("observations", "next_observations", "actions", "rewards", "dones", "timeouts"):
        np.testing.assert_array_equal(getattr(device, name)[:STEPS].numpy(), getattr(plain, name)[:STEPS], err_msg=name)
    terminations = (plain.dones[:STEPS] * (1 - plain.timeouts[:STEPS])).sum()
    assert plain.timeouts[:STEPS].sum() > 0 and terminations > 0, "both endings"
    for name in ("observations", "actions", "rewards", "terminated", "episode_end"):
        np.testing.assert_array_equal(getattr(device, f"offline_{name}").numpy(), getattr(plain, f"offline_{name}"))


@pytest.mark.parametrize("algorithm", [QC, QCFQL])
def test_models_train_on_its_batches(algorithm: type) -> None:
    model = make_model(algorithm, DeviceChunkReplayBuffer, offline_gradient_steps=5, learning_starts=10)
    model.learn(30)
    assert isinstance(model.replay_buffer, DeviceChunkReplayBuffer)
    assert model._n_updates == 5 + 20
    assert all(th.isfinite(parameter).all() for parameter in model.policy.parameters())


def test_vec_normalize_and_other_buffers_are_refused() -> None:
    env = VecNormalize(DummyVecEnv([lambda: gym.wrappers.TimeLimit(EndingEnv(), max_episode_steps=6)]))
    with pytest.raises(ValueError, match="DeviceChunkReplayBuffer does not support VecNormalize"):
        make_model(QC, DeviceChunkReplayBuffer, env=env)
    refused = r"replay_buffer_class must be ChunkReplayBuffer or a subclass, got .*\.ReplayBuffer'>"
    with pytest.raises(ValueError, match=refused):
        make_model(QCFQL, ReplayBuffer)


@pytest.mark.skipif(not th.cuda.is_available(), reason="needs a CUDA GPU: the buffer's storage and windows on CUDA")
def test_windows_on_cuda_match_brute_force() -> None:
    rng = np.random.default_rng(0)
    buffer = make_buffer(40, n_envs=2, buffer_class=DeviceChunkReplayBuffer, chunk_size=4, gamma=0.9, device="cuda")
    offline = steps_of([(6, "terminated"), (3, "truncated"), (5, "truncated")], rng, first_id=0)
    add_offline(buffer, offline)
    streams = [steps_of([(4, "terminated"), (7, "truncated"), (30, "ongoing")], rng, 10_000 * (env + 1)) for env in range(2)]
    add_online(buffer, streams)
    th.manual_seed(0)
    batch = buffer.sample(512)
    assert all(tensor.device.type == "cuda" for tensor in batch)
    streams_by_id = {int(step.obs[0]): (offline, t) for t, step in enumerate(offline)}
    for stream in streams:
        kept = stream[-20:]
        streams_by_id.update({int(step.obs[0]): (kept, t) for t, step in enumerate(kept)})
    check_batch_against_brute_force(batch, streams_by_id, 4, 0.9)
