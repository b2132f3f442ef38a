"""Wrong or damaged offline data: another env's dataset, a damaged or truncated file, named before anything trains."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import gymnasium as gym
import minari
import numpy as np
import pytest
from minari.data_collector import EpisodeBuffer
from test_datasets import make_episodes
from test_robomimic_convert import write_file

from qc_sb3 import QC
from qc_sb3.common.dataset_checksums import CHECKSUM_FILE, record_checksums
from qc_sb3.common.datasets import load_offline_transitions
from qc_sb3.envs.robomimic import convert_to_minari

from test_qc import TINY


@pytest.fixture(autouse=True)
def minari_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "minari"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    return root


@pytest.fixture
def converted(tmp_path: Path) -> Path:
    """A converted robomimic dataset's data file (the converter records its checksums)."""
    dataset_id = convert_to_minari(write_file(tmp_path / "low_dim.hdf5"), "lift")
    return Path(minari.load_dataset(dataset_id).spec.data_path) / "main_data.hdf5"


def overwrite_middle(path: Path, n_bytes: int = 64) -> None:
    """Overwrite n_bytes in the middle of a file with different bytes, keeping its size."""
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + n_bytes] = bytes((byte + 1) % 256 for byte in data[middle : middle + n_bytes])
    path.write_bytes(bytes(data))


def test_converters_record_every_data_file(converted: Path) -> None:
    recorded = json.loads((converted.parent / CHECKSUM_FILE).read_text())["files"]
    assert sorted(recorded) == ["main_data.hdf5", "metadata.json"]
    assert recorded["main_data.hdf5"]["size"] == converted.stat().st_size


@pytest.mark.parametrize("how", ["id", "folder"])
def test_a_damaged_file_is_refused_naming_it(converted: Path, how: str) -> None:
    overwrite_middle(converted)
    source = "robomimic/lift-mh-low_dim-v0" if how == "id" else str(converted.parent.parent)
    with pytest.raises(ValueError, match=rf"{converted}' does not match the SHA-256 recorded"):
        load_offline_transitions(source)


def test_a_truncated_file_is_refused_naming_it(converted: Path) -> None:
    size = converted.stat().st_size
    converted.write_bytes(converted.read_bytes()[: size // 2])
    with pytest.raises(ValueError, match=rf"{converted}' has {size // 2} bytes, {size} when it was written"):
        load_offline_transitions(str(converted.parent))
    # Without recorded checksums (a dataset from elsewhere), h5py's error comes with the file's folder.
    (converted.parent / CHECKSUM_FILE).unlink()
    for source in (str(converted.parent), "robomimic/lift-mh-low_dim-v0"):
        with pytest.raises(
            ValueError, match=rf"at '{converted.parent}' is not readable \(truncated or damaged\?\): .*truncated"
        ):
            load_offline_transitions(source)


def test_an_unchanged_dataset_loads_and_a_changed_one_is_hashed_again(converted: Path) -> None:
    first = load_offline_transitions(str(converted.parent))
    np.testing.assert_array_equal(load_offline_transitions(str(converted.parent)).observations, first.observations)
    overwrite_middle(converted)  # a new modification time: verified again
    with pytest.raises(ValueError, match="does not match the SHA-256"):
        load_offline_transitions(str(converted.parent))


def test_checksums_of_a_folder_by_hand(tmp_path: Path) -> None:
    (tmp_path / "a.bin").write_bytes(b"abc")
    record_checksums(tmp_path)
    recorded = json.loads((tmp_path / CHECKSUM_FILE).read_text())["files"]
    # SHA-256("abc"), FIPS 180-2's example.
    assert recorded == {"a.bin": {"size": 3, "sha256": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"}}


@pytest.fixture
def tiny_envs() -> tuple[str, str]:
    """Two registered envs with the same spaces (TinyReachEnv), as a task 1 and a task 2 of one domain."""
    ids = ("qctest/TinyReachTask1-v0", "qctest/TinyReachTask2-v0")
    for env_id in ids:
        gym.register(env_id, entry_point="test_datasets:TinyReachEnv", max_episode_steps=5)
    yield ids
    for env_id in ids:
        del gym.registry[env_id]


def test_a_dataset_of_another_env_is_warned_about(tiny_envs: tuple[str, str]) -> None:
    task_1, task_2 = tiny_envs
    buffers = [EpisodeBuffer(id=index, **episode) for index, episode in enumerate(make_episodes())]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # Minari's unset metadata fields
        minari.create_dataset_from_buffers("qctest/task1-v0", buffers, env=gym.make(task_1))
    kwargs = dict(offline_gradient_steps=0, batch_size=4, chunk_size=2, policy_kwargs=TINY, actor_num_samples=2, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the env it was recorded for: no warning
        QC("MlpPolicy", gym.make(task_1), offline_dataset="qctest/task1-v0", **kwargs)
    with pytest.warns(UserWarning, match=rf"recorded for env '{task_1}', but it trains on env '{task_2}'") as caught:
        QC("MlpPolicy", gym.make(task_2), offline_dataset="qctest/task1-v0", **kwargs)
    assert [Path(warning.filename).name for warning in caught if "recorded for env" in str(warning.message)] == [
        Path(__file__).name
    ]
