"""Sharded offline datasets (the reference's dataset rotation) and sparse offline rewards (docs/algorithms.md §5, §6)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from qc_sb3 import QC, RLPD
from qc_sb3.common.offline_source import OfflineShards
from qc_sb3.common.offline_transitions import sparse_rewards

from toy_tasks import PointReachEnv, scripted_demonstrations

TINY_QC = {
    "learning_starts": 0,
    "batch_size": 8,
    "chunk_size": 3,
    "actor_num_samples": 2,
    "flow_steps": 2,
    "offline_log_interval": 2,
    "policy_kwargs": {"net_arch": [16]},
    "seed": 0,
}


def marked_shard(index: int, n_episodes: int = 2) -> dict[str, np.ndarray]:
    """Demonstrations whose every reward is -(index + 1): the buffer's rewards tell which shard it holds."""
    data = scripted_demonstrations(n_episodes, seed=index)
    data["rewards"] = np.full_like(data["rewards"], -(index + 1.0))
    return data


def test_shard_index_by_hand() -> None:
    # The reference swaps to the next shard before every step that is a multiple of the interval (step i from 1).
    shards = OfflineShards([{}, {}], swap_interval=3)
    assert [shards.shard_index(step) for step in range(1, 10)] == [0, 0, 1, 1, 1, 0, 0, 0, 1]
    assert [shards.steps_on_same_shard(step) for step in (1, 2, 3, 5, 6)] == [2, 1, 3, 1, 3]
    # Online (RLPD family): the reference swaps after every step i that is a multiple of the interval.
    assert [OfflineShards([{}, {}, {}], swap_interval=2).online_shard_index(i) for i in range(1, 10)] == [
        0, 0, 1, 1, 2, 2, 0, 0, 1
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"sources": []}, "at least one shard"),
        ({"sources": "ogbench/x-v0"}, "sequence of datasets"),
        ({"sources": [{}], "swap_interval": 0}, "swap_interval must be an integer >= 1, got 0"),
    ],
)
def test_shards_refuse_bad_arguments(kwargs: dict, message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        OfflineShards(**kwargs)


def test_offline_phase_rotates_through_shards_one_at_a_time(tmp_path: Path) -> None:
    shards = [marked_shard(index) for index in range(3)]
    model = QC("MlpPolicy", PointReachEnv(), offline_dataset=OfflineShards(shards, swap_interval=4), **TINY_QC)
    buffer = model.replay_buffer
    held: list[tuple[float, int]] = []
    sample = buffer.sample

    def spy(batch_size: int, env: object = None) -> object:
        # Which shard the offline segment holds at each gradient step, and how many steps it holds.
        held.append((float(np.unique(buffer.offline_rewards).item()), buffer.offline_size))
        return sample(batch_size, env)

    buffer.sample = spy  # type: ignore[method-assign]
    model.pretrain(gradient_steps=10)
    # Steps 1-3 on shard 0, 4-7 on shard 1, 8-10 on shard 2 (hand-worked from the reference's i % 4 == 0 rule).
    expected_shards = [0, 0, 0, 1, 1, 1, 1, 2, 2, 2]
    assert held == [(-(index + 1.0), len(shards[index]["rewards"])) for index in expected_shards]
    assert model.offline_shard_index == 2
    del buffer.sample  # the spy is not picklable

    # The last shard stays for the online phase, and the saved model resumes the rotation where it stopped.
    model.save(tmp_path / "model")
    model.save_replay_buffer(tmp_path / "buffer")
    loaded = QC.load(tmp_path / "model", env=PointReachEnv(), offline_dataset=OfflineShards(shards, swap_interval=4))
    assert (loaded.offline_steps_done, loaded.offline_shard_index) == (10, 2)
    assert np.unique(loaded.replay_buffer.offline_rewards).tolist() == [-3.0]
    loaded.load_replay_buffer(tmp_path / "buffer")
    loaded.pretrain(gradient_steps=2)  # steps 11 (shard 2) and 12 (shard 0)
    assert loaded.offline_shard_index == 0
    assert np.unique(loaded.replay_buffer.offline_rewards).tolist() == [-1.0]


def held_shard_per_update(model: RLPD) -> list[tuple[int, int]]:
    """Spy on the model's buffer: (online step, shard its offline segment holds) at each sampled batch."""
    buffer = model.replay_buffer
    held: list[tuple[int, int]] = []
    sample = buffer.sample

    def spy(batch_size: int, env: object = None) -> object:
        held.append((model.num_timesteps, -1 - int(np.unique(buffer.offline_rewards).item())))
        return sample(batch_size, env)

    buffer.sample = spy  # type: ignore[method-assign]
    return held


def test_rlpd_rotates_shards_during_the_online_phase_and_resumes_after_load(tmp_path: Path) -> None:
    shards = [marked_shard(index) for index in range(3)]
    kwargs = {"learning_starts": 1, "batch_size": 8, "chunk_size": 3, "policy_kwargs": {"net_arch": [16]}, "seed": 0}
    model = RLPD("MlpPolicy", PointReachEnv(), offline_dataset=OfflineShards(shards, swap_interval=2), **kwargs)
    held = held_shard_per_update(model)
    model.learn(total_timesteps=10)
    # The reference's online loop swaps after every step i with i % 2 == 0: steps 1-2 on shard 0, 3-4 on shard 1,
    # 5-6 on shard 2, 7-8 on shard 0 again. Step 1 is warm-up (no update).
    assert held == [(2, 0), (3, 1), (4, 1), (5, 2), (6, 2), (7, 0), (8, 0), (9, 1), (10, 1)]
    assert model.offline_shard_index == 1
    del model.replay_buffer.sample  # the spy is not picklable

    model.save(tmp_path / "model")
    model.save_replay_buffer(tmp_path / "buffer")
    loaded = RLPD.load(tmp_path / "model", env=PointReachEnv(), offline_dataset=OfflineShards(shards, swap_interval=2))
    assert loaded.offline_shard_index == 1 and np.unique(loaded.replay_buffer.offline_rewards).tolist() == [-2.0]
    loaded.load_replay_buffer(tmp_path / "buffer")
    held = held_shard_per_update(loaded)
    loaded.learn(total_timesteps=4, reset_num_timesteps=False)
    assert held == [(11, 2), (12, 2), (13, 0), (14, 0)]


def test_shard_that_does_not_fit_the_env_is_refused_at_its_swap() -> None:
    bad = marked_shard(1)
    bad["observations"] = np.concatenate([bad["observations"], bad["observations"][:, :1]], axis=1)
    bad["next_observations"] = np.concatenate([bad["next_observations"], bad["next_observations"][:, :1]], axis=1)
    model = QC("MlpPolicy", PointReachEnv(), offline_dataset=OfflineShards([marked_shard(0), bad], swap_interval=2), **TINY_QC)
    expected = r"observations have shape \(3,\) per step but the env's observation space has shape \(2,\)"
    with pytest.raises(ValueError, match=expected):
        model.pretrain(gradient_steps=3)


def test_sparse_rewards_formula() -> None:
    assert sparse_rewards(np.array([0.0, -1.0, -3.0, 2.0, -0.0])).tolist() == [0.0, -1.0, -1.0, -1.0, 0.0]


@pytest.mark.parametrize("algorithm", [QC, RLPD])
def test_offline_sparse_rewards_reach_the_buffer(algorithm: type) -> None:
    data = scripted_demonstrations(2, seed=0)
    rng = np.random.default_rng(0)
    data["rewards"] = rng.choice([0.0, -1.0, -2.0, -3.0], size=len(data["rewards"]))
    kwargs = TINY_QC if algorithm is QC else {"chunk_size": 3, "policy_kwargs": {"net_arch": [16]}, "seed": 0}
    dense = algorithm("MlpPolicy", PointReachEnv(), offline_dataset=data, **kwargs)
    sparse = algorithm("MlpPolicy", PointReachEnv(), offline_dataset=data, offline_sparse_rewards=True, **kwargs)
    np.testing.assert_array_equal(dense.replay_buffer.offline_rewards, data["rewards"].astype(np.float32))
    np.testing.assert_array_equal(sparse.replay_buffer.offline_rewards, np.where(data["rewards"] != 0, -1.0, 0.0))
