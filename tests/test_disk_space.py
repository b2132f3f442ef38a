"""A full disk: converters and generators refuse before writing (HDF5 can crash on a failed write), naming the path."""

from __future__ import annotations

import errno
from collections import namedtuple
from pathlib import Path

import numpy as np
import pytest
from test_robomimic_convert import write_file

from qc_sb3.common.datasets import load_offline_transitions
from qc_sb3.envs import disk_space
from qc_sb3.envs.ogbench import convert_to_minari as convert_ogbench
from qc_sb3.envs.ogbench import generate_dataset
from qc_sb3.envs.ogbench.generate import _save_npz_atomically
from qc_sb3.envs.robomimic import convert_to_minari as convert_robomimic
from qc_sb3.envs.robomimic.demos import RECORDED_KEYS, Episode, _write_atomically

Usage = namedtuple("Usage", "total used free")
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
OGBENCH_TASK = "cube-double-play-singletask-task2-v0"


@pytest.fixture(autouse=True)
def minari_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "minari"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    return root


@pytest.fixture(scope="module")
def npz_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate_dataset(
        "cube-double-play-v0", episodes=2, val_episodes=1, out_dir=tmp_path_factory.mktemp("npz"), episode_length=30
    )


def free_space(monkeypatch: pytest.MonkeyPatch, free: int) -> None:
    """Make every file system report ``free`` bytes free."""
    monkeypatch.setattr(disk_space.shutil, "disk_usage", lambda path: Usage(10**12, 10**12 - free, free))


def dataset_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


@pytest.mark.parametrize("converter", ["ogbench", "robomimic"])
def test_converters_refuse_a_full_disk_before_writing(tmp_path, minari_root, npz_file, monkeypatch, converter):
    if converter == "ogbench":
        dataset_id = "ogbench/full-disk-v0"

        def convert(**kwargs):
            return convert_ogbench(npz_file, OGBENCH_TASK, dataset_id=dataset_id, **kwargs)
    else:
        dataset_id, lift_file = "robomimic/full-disk-v0", write_file(tmp_path / "low_dim.hdf5")

        def convert(**kwargs):
            return convert_robomimic(lift_file, "lift", dataset_id=dataset_id, **kwargs)

    convert()
    old = load_offline_transitions(dataset_id)
    # The estimate covers what the dataset took, and a disk with less free space than the estimate is refused.
    needed = dataset_bytes(minari_root / dataset_id)
    free_space(monkeypatch, needed - 1)
    with pytest.raises(OSError, match=rf"not enough free space for Minari dataset '{dataset_id}' in '{minari_root}'") as error:
        convert(overwrite=True)
    assert error.value.errno == errno.ENOSPC
    assert f"{needed - 1:,} are free" in str(error.value)
    # Nothing was written, and the old dataset holds.
    assert sorted(path.name for path in minari_root.iterdir()) == [converter]
    np.testing.assert_array_equal(load_offline_transitions(dataset_id).observations, old.observations)


def test_robomimic_generator_refuses_a_full_disk_before_writing(tmp_path, monkeypatch):
    steps = 4
    episode = Episode(
        attempt=0,
        style="steady",
        retries=0,
        success=True,
        actions=np.zeros((steps, 7)),
        states=np.zeros((steps, 32)),
        rewards=np.zeros(steps),
        dones=np.ones(steps, dtype=np.int64),
        obs={key: np.zeros((steps, 3)) for key in RECORDED_KEYS},
        next_obs={key: np.zeros((steps, 3)) for key in RECORDED_KEYS},
        model_file="<mujoco/>" * 1000,
    )
    _write_atomically(tmp_path / "fits.hdf5", [episode], {}, 0, 1)
    free_space(monkeypatch, (tmp_path / "fits.hdf5").stat().st_size - 1)
    with pytest.raises(OSError, match=rf"not enough free space for 1 robomimic demos in '{tmp_path}'"):
        _write_atomically(tmp_path / "demos.hdf5", [episode], {}, 0, 1)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["fits.hdf5"]


def test_ogbench_generator_names_the_file_a_failed_write_was_for(tmp_path, monkeypatch):
    def full_disk(file, **arrays):
        file.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    (tmp_path / "a.npz").write_bytes(b"old")
    monkeypatch.setattr("qc_sb3.envs.ogbench.generate.np.savez_compressed", full_disk)
    with pytest.raises(OSError, match=rf"writing '{tmp_path / 'a.npz'}' failed \(No space left on device\)") as error:
        _save_npz_atomically({tmp_path / "a.npz": {"x": np.zeros(3)}})
    assert error.value.errno == errno.ENOSPC
    # The old file holds and no temporary file is left.
    assert [path.name for path in tmp_path.iterdir()] == ["a.npz"]
    assert (tmp_path / "a.npz").read_bytes() == b"old"


def test_estimate_by_hand():
    # 1.1 x (24 + 3) bytes, plus 32 KiB per episode.
    assert disk_space.estimated_bytes([np.zeros(3), "abc"], episodes=2) == int(1.1 * 27) + 2 * 32 * 1024
