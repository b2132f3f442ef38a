"""A full disk in the runner: its dataset preparation and checkpoints say in one line which path failed, and why."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from qc_sb3 import QC
from qc_sb3.benchmarks.runner import checkpoints, progress
from qc_sb3.benchmarks.runner.checkpoints import CheckpointState, latest_checkpoint, save_checkpoint
from qc_sb3.benchmarks.runner.config import load_config
from qc_sb3.benchmarks.runner.datasets import DatasetPreparationError, prepare_datasets
from qc_sb3.benchmarks.runner.planning import plan_runs
from qc_sb3.benchmarks.runner.runs import execute_run

import test_benchmarks_toys
from test_benchmarks_toys import TOY_TASK, register_toy_suite, toy_config
from test_qc import make_model


def full_disk(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_failed_dataset_preparation_names_the_task_and_the_cache(tmp_path, monkeypatch):
    register_toy_suite()
    monkeypatch.setattr(test_benchmarks_toys.minari, "create_dataset_from_buffers", full_disk)
    cache = tmp_path / "datasets"
    with pytest.raises(
        DatasetPreparationError,
        match=rf"preparing the generate dataset of {TOY_TASK} in the dataset cache '{cache}' failed: \[Errno 28\] No space",
    ):
        prepare_datasets(plan_runs(load_config(toy_config()), tmp_path / "results"), cache)


def test_the_runner_reports_a_failed_dataset_preparation_in_one_line(tmp_path, monkeypatch, capsys):
    from qc_sb3.benchmarks import run

    register_toy_suite()
    monkeypatch.setattr(test_benchmarks_toys.minari, "create_dataset_from_buffers", full_disk)
    config = test_benchmarks_toys.write_config(tmp_path / "toy.yaml", toy_config(dataset_cache=str(tmp_path / "cache")))
    assert run.main([str(config), "--workers", "0", "--out", str(tmp_path / "results")]) == 2
    output = capsys.readouterr().out
    assert "error:" in output and "No space left on device" in output and "Traceback" not in output


def test_a_report_that_cannot_be_written_is_one_line_and_the_runs_are_kept(tmp_path, monkeypatch, capsys):
    from qc_sb3.benchmarks import run

    register_toy_suite()
    monkeypatch.setattr(run, "write_report", full_disk)
    config = test_benchmarks_toys.write_config(tmp_path / "toy.yaml", toy_config(dataset_cache=str(tmp_path / "cache")))
    results = tmp_path / "results"
    assert run.main([str(config), "--workers", "0", "--out", str(results)]) == 2
    output = " ".join(capsys.readouterr().out.split())
    assert f"writing their report in {results / 'report'} failed: [Errno 28] No space left on device" in output
    assert f"python -m qc_sb3.benchmarks.report {results}" in output and "Traceback" not in output
    assert len(list(results.rglob("DONE"))) == len(plan_runs(load_config(toy_config()), results))


@pytest.mark.parametrize("failing", ["np.savez", "th.save"])
def test_a_failed_checkpoint_is_removed_and_the_last_complete_one_kept(tmp_path, monkeypatch, failing):
    model = make_model(QC)
    first = CheckpointState(phase="online", evaluations_done=1, offline_steps_done=0, num_timesteps=0, wall_time=1.0)
    save_checkpoint(tmp_path, model, first)
    module, name = failing.split(".")
    monkeypatch.setattr(getattr(checkpoints, module), name, full_disk)
    second = CheckpointState(phase="online", evaluations_done=2, offline_steps_done=0, num_timesteps=0, wall_time=2.0)
    final = tmp_path / "checkpoints" / "ckpt-00002"
    with pytest.raises(OSError, match=rf"writing checkpoint '{final}' failed \(OSError: \[Errno 28\] No space left"):
        save_checkpoint(tmp_path, model, second)
    assert sorted(path.name for path in (tmp_path / "checkpoints").iterdir()) == ["ckpt-00001", "latest.json"]
    assert latest_checkpoint(tmp_path)[1] == first


def test_a_failure_that_cannot_be_recorded_is_still_the_error_raised(tmp_path, monkeypatch):
    register_toy_suite()
    (run,) = prepare_datasets(plan_runs(load_config(toy_config()), tmp_path / "results"), tmp_path / "datasets")

    def disk_full_at_first_checkpoint(event, run):
        if event == "checkpointed":
            # From now on the disk is full for the progress file, as it was for the checkpoint.
            monkeypatch.setattr(progress, "write_json", full_disk)
            raise OSError("writing checkpoint 'ckpt-00001' failed (no space)")

    unrecorded = r"its progress could not be recorded in '.*': \[Errno 28\] No space left"
    failed = r"checkpoint 'ckpt-00001' failed"
    with pytest.warns(UserWarning, match=unrecorded) as caught, pytest.raises(OSError, match=failed):
        execute_run(run, hook=disk_full_at_first_checkpoint)
    assert len([warning for warning in caught if "could not be recorded" in str(warning.message)]) == 1
    # What could be written still is: the traceback.
    assert "writing checkpoint 'ckpt-00001' failed" in (Path(run.run_dir) / "error.txt").read_text()
