"""Two shard folders of one OGBench task, cached side by side, each keep their own converted data."""

from __future__ import annotations

import shutil

import numpy as np

from qc_sb3.benchmarks.runner.specs import DatasetRequest
from qc_sb3.benchmarks.runner.suites.ogbench import _prepare_official
from qc_sb3.benchmarks.runner.tasks import get_task
from qc_sb3.common.datasets import load_offline_transitions
from qc_sb3.common.offline_source import OfflineShards
from qc_sb3.envs.ogbench import generate_dataset

TASK = "cube-double-play-singletask-task2-v0"


def test_two_shard_folders_of_one_task_do_not_overwrite_each_other(tmp_path):
    # Two folders of one shard each, with different play data (different generation seeds).
    folders = []
    for seed in (0, 1):
        generated = generate_dataset(
            "cube-double-play-v0", episodes=2, val_episodes=1, out_dir=tmp_path / f"gen{seed}", episode_length=30, seed=seed
        )
        folder = tmp_path / f"shards{seed}"
        folder.mkdir()
        shutil.copy(generated, folder / "shard-00.npz")
        folders.append(folder)
    task, cache = get_task(TASK), tmp_path / "cache"

    def prepare(folder):
        options = {"directory": str(folder.parent), "files": {TASK: folder.name}, "swap_interval": 10}
        return _prepare_official(DatasetRequest(task=task, options=options, cache=cache))

    first = prepare(folders[0])
    first_data = load_offline_transitions(first.sources[0]).observations.copy()
    second = prepare(folders[1])
    first_again = prepare(folders[0])  # from the cache, after the second folder was converted
    assert isinstance(first_again, OfflineShards)
    second_data = load_offline_transitions(second.sources[0]).observations
    assert not np.array_equal(first_data, second_data), "the two folders hold different play data"
    np.testing.assert_array_equal(load_offline_transitions(first_again.sources[0]).observations, first_data)
