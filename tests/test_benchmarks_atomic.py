"""Atomic writes: the umask's permissions, and the temporary files of killed writers removed by the next holder."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from qc_sb3.benchmarks.run import main
from qc_sb3.benchmarks.runner.atomic import write_text
from qc_sb3.benchmarks.runner.locks import folder_lock

from test_benchmarks_toys import toy_config, toy_suite, write_config  # noqa: F401 (autouse fixture of this module)


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_an_atomically_written_file_has_the_umasks_permissions(tmp_path, umask, mode):
    previous = os.umask(umask)
    try:
        write_text(tmp_path / "eval.csv", "step\n")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "eval.csv").stat().st_mode) == mode


def plant(path: Path, age: float = 3600.0) -> Path:
    """A temporary file as a writer killed ``age`` seconds ago left it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("partial")
    then = time.time() - age
    os.utime(path, (then, then))
    return path


def test_the_next_holder_removes_the_temporary_files_of_a_killed_writer_of_the_same_target(tmp_path):
    stale = plant(tmp_path / ".eval.csv.0123456789abcdef.tmp")
    other_target = plant(tmp_path / ".progress.json.0123456789abcdef.tmp")
    with folder_lock(tmp_path):
        current = plant(tmp_path / ".eval.csv.fedcba9876543210.tmp", age=-60)  # a live writer's, newer than the lock
        write_text(tmp_path / "eval.csv", "step\n")
    assert not stale.exists() and other_target.exists() and current.exists()
    assert (tmp_path / "eval.csv").read_text() == "step\n"


def test_without_a_lock_no_temporary_file_is_removed(tmp_path):
    stale = plant(tmp_path / ".eval.csv.0123456789abcdef.tmp")
    write_text(tmp_path / "eval.csv", "step\n")
    assert stale.exists()


def test_the_runner_removes_generators_temporary_files_from_its_dataset_cache(tmp_path):
    cache = tmp_path / "cache"
    stale = plant(cache / "ogbench" / "cube-single-play-v0-e10" / ".cube-single-play-v0.npz.0123456789abcdef.tmp")
    kept = plant(cache / "ogbench" / "notes.txt")
    (cache / ".lock").touch()
    config = write_config(tmp_path / "toy.yaml", toy_config(dataset_cache=str(cache), out=str(tmp_path / "results")))
    assert main([str(config), "--no-report", "--workers", "0"]) == 0
    assert not stale.exists() and kept.exists()
