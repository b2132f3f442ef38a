"""The dataset cache records the library's form of offline data, and the runs carry it to the algorithms as is."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from qc_sb3.benchmarks.runner.cache import cached, cached_file
from qc_sb3.benchmarks.runner.config import load_config
from qc_sb3.benchmarks.runner.datasets import prepare_datasets
from qc_sb3.benchmarks.runner.planning import plan_runs
from qc_sb3.common.datasets import load_offline_transitions
from qc_sb3.common.offline_source import OfflineShards

from test_benchmarks_toys import register_toy_suite, toy_config
from toy_tasks import scripted_demonstrations

KEY = {"suite": "toy", "task": "point-reach", "generate": {"episodes": 3}}


def record_path(cache: Path, key: dict) -> Path:
    """Where the cache records ``key``: the first 16 hex digits of the SHA-256 of its sorted JSON."""
    return cache / "index" / f"{hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]}.json"


def never_built():
    raise AssertionError("the cached data was made again")


@pytest.fixture
def folders(tmp_path: Path) -> list[str]:
    paths = [tmp_path / "minari" / "toy" / f"shard-{index}-v0" for index in range(2)]
    for path in paths:
        path.mkdir(parents=True)
    return [str(path) for path in paths]


def test_a_cached_dataset_is_recorded_as_the_library_records_it_and_found_again(tmp_path, folders):
    shards = OfflineShards(folders, swap_interval=7)
    assert cached(tmp_path, KEY, lambda: shards) == shards
    # offline_source_record's layout (docs/design.md), written out by hand.
    assert json.loads(record_path(tmp_path, KEY).read_text()) == {
        "key": KEY,
        "offline_dataset": {
            "kind": "shards",
            "shards": [{"kind": "minari_folder", "path": folder} for folder in folders],
            "swap_interval": 7,
        },
    }
    assert cached(tmp_path, KEY, never_built) == shards
    assert cached(tmp_path, {**KEY, "other": 1}, lambda: folders[0]) == folders[0]
    assert cached(tmp_path, {**KEY, "other": 1}, never_built) == folders[0]


@pytest.mark.parametrize("swap_interval", [None, 5])
def test_records_of_the_earlier_cache_format_are_found_again(tmp_path, folders, swap_interval):
    record = record_path(tmp_path, KEY)
    record.parent.mkdir(parents=True)
    paths = folders if swap_interval is not None else folders[:1]
    record.write_text(json.dumps({"key": KEY, "paths": paths, "swap_interval": swap_interval}))
    expected = OfflineShards(folders, swap_interval=5) if swap_interval is not None else folders[0]
    assert cached(tmp_path, KEY, never_built) == expected


def test_a_cached_dataset_whose_folder_is_gone_is_made_again(tmp_path, folders):
    cached(tmp_path, KEY, lambda: OfflineShards(folders, swap_interval=7))
    Path(folders[1]).rmdir()
    Path(folders[1]).with_name("rebuilt-v0").mkdir()
    rebuilt = str(Path(folders[1]).with_name("rebuilt-v0"))
    assert cached(tmp_path, KEY, lambda: rebuilt) == rebuilt
    assert cached(tmp_path, KEY, never_built) == rebuilt


def test_data_that_is_not_in_a_folder_is_refused_and_not_recorded(tmp_path):
    with pytest.raises(ValueError, match="ns/missing-v0"):
        cached(tmp_path, KEY, lambda: "ns/missing-v0")
    assert not record_path(tmp_path, KEY).exists()


def test_an_intermediate_file_is_recorded_by_its_path_also_in_the_earlier_format(tmp_path):
    made = tmp_path / "play.npz"
    made.touch()
    assert cached_file(tmp_path, KEY, lambda: made) == made
    assert json.loads(record_path(tmp_path, KEY).read_text()) == {"key": KEY, "path": str(made)}
    assert cached_file(tmp_path, KEY, never_built) == made
    earlier = {**KEY, "earlier": True}
    record_path(tmp_path, earlier).write_text(json.dumps({"key": earlier, "paths": [str(made)], "swap_interval": None}))
    assert cached_file(tmp_path, earlier, never_built) == made


def test_a_prepared_run_carries_a_minari_folder_the_algorithms_read(tmp_path):
    register_toy_suite()
    (run,) = prepare_datasets(plan_runs(load_config(toy_config()), tmp_path), tmp_path / "datasets")
    assert isinstance(run.offline_dataset, str) and Path(run.offline_dataset).is_dir()
    # The toy suite's generate source: its scripted demonstrations (10 episodes, seed 0, half to the goal).
    expected = scripted_demonstrations(10, seed=0, goal_fraction=0.5)
    data = load_offline_transitions(run.offline_dataset)
    for name in ("observations", "actions", "rewards", "next_observations", "terminated", "episode_end"):
        np.testing.assert_array_equal(getattr(data, name), expected[name], err_msg=name)
