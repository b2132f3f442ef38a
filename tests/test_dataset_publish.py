"""Replacing a converted dataset (``convert --overwrite``): a kill at any step of the publish leaves one complete copy."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import minari
import pytest
from test_robomimic_convert import DEMO_PIECES, write_file

from qc_sb3.envs.minari_root import this_host_tag
from qc_sb3.envs.publish import REPLACED_PREFIX
from qc_sb3.envs.robomimic import convert_to_minari

# A child converting with overwrite=True that dies (os._exit, as kill -9: no handler runs) just before the
# kill_at-th rename or deletion of the publish, or (kill_at past them) just after the publish returns.
KILLED_CONVERT = """
import os, shutil, sys
import qc_sb3.envs.publish as publish
import qc_sb3.envs.robomimic.convert as convert

path, kill_at = sys.argv[1], int(sys.argv[2])
calls = [0]

def killing(function):
    def call(*args, **kwargs):
        calls[0] += 1
        if calls[0] == kill_at:
            os._exit(9)
        return function(*args, **kwargs)
    return call

def publish_then_die(*args):
    os.replace, shutil.rmtree = killing(os.replace), killing(shutil.rmtree)
    publish.publish_dataset(*args)
    os._exit(9)

convert.publish_dataset = publish_then_die
convert.convert_to_minari(path, "lift", overwrite=True)
"""

OLD_EPISODES = len(DEMO_PIECES["demo_2"])  # filter key "valid"
NEW_EPISODES = sum(len(pieces) for pieces in DEMO_PIECES.values())


@pytest.fixture(autouse=True)
def minari_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "minari"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    return root


# The publish's steps: 1 old copy aside, 2 new copy into place, 3 old copy deleted; 4: after all of them.
@pytest.mark.parametrize(("kill_at", "episodes"), [(1, OLD_EPISODES), (2, OLD_EPISODES), (3, NEW_EPISODES), (4, NEW_EPISODES)])
def test_a_kill_at_any_step_of_overwrite_leaves_a_complete_dataset(tmp_path, minari_root, kill_at, episodes):
    lift_file = write_file(tmp_path / "low_dim.hdf5")
    dataset_id = convert_to_minari(lift_file, "lift", filter_key="valid")
    child = subprocess.run(
        [sys.executable, "-c", KILLED_CONVERT, str(lift_file), str(kill_at)],
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 9, child.stderr
    # The next convert in that root, to another id, cleans up after the killed one.
    convert_to_minari(lift_file, "lift", dataset_id="robomimic/other-v0")
    assert minari.load_dataset(dataset_id).total_episodes == episodes
    assert sorted(path.name for path in minari_root.iterdir()) == ["robomimic"]


def test_a_replaced_dataset_of_a_running_convert_is_left_alone(tmp_path, minari_root):
    lift_file = write_file(tmp_path / "low_dim.hdf5")
    held = minari_root / f"{REPLACED_PREFIX}{this_host_tag()}.{os.getpid()}-abc" / "dataset"
    held.mkdir(parents=True)
    convert_to_minari(lift_file, "lift")
    assert held.is_dir()
