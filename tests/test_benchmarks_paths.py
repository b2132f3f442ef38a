"""Results folders hold only what the runner and the reports write there: names are never paths, links never followed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from qc_sb3.benchmarks.report import load_results, write_report
from qc_sb3.benchmarks.run import main
from qc_sb3.benchmarks.runner.config import ConfigError, load_config
from qc_sb3.benchmarks.runner.datasets import prepare_datasets
from qc_sb3.benchmarks.runner.locks import folder_lock
from qc_sb3.benchmarks.runner.paths import UnsafePathError
from qc_sb3.benchmarks.runner.planning import plan_runs
from qc_sb3.benchmarks.runner.runs import execute_run

from test_benchmarks_toys import toy_config, toy_suite, write_config  # noqa: F401 (autouse fixture of this module)


@pytest.mark.parametrize("name", ["../escaped", "/tmp/escaped", "a/b", "..", ".hidden", ""])
def test_a_config_name_that_is_a_path_is_refused_with_the_rule(name):
    with pytest.raises(ConfigError, match=r"name .* is not valid: use letters, digits"):
        load_config(toy_config(name=name or "."))


def test_the_runner_refuses_a_config_name_that_leaves_the_results_folder(tmp_path, monkeypatch, capsys):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    config = write_config(tmp_path / "toy.yaml", toy_config(name="../../escaped"))
    assert main([str(config), "--no-report"]) == 2
    assert "is not valid" in " ".join(capsys.readouterr().out.split())
    assert sorted(os.listdir(tmp_path)) == ["toy.yaml", "work"] and not os.listdir(work)


def write_run(results: Path, folder: str, task: str, successes: tuple[float, float] = (0.5, 1.0)) -> Path:
    """A finished offline-only run as the runner writes it, under ``results/<folder>/QC/seed0``, naming ``task``."""
    run_dir = results / folder / "QC" / "seed0"
    run_dir.mkdir(parents=True)
    config = {
        "task": task,
        "suite": "ogbench",
        "domain": "cube-double",
        "method": "QC",
        "seed": 0,
        "protocol": {"offline_steps": 200, "online_steps": 0, "eval_interval": 100, "eval_episodes": 5},
    }
    (run_dir / "config.json").write_text(json.dumps(config))
    rows = "step,phase,success,return\n" + "".join(f"{100 * (k + 1)},offline,{s},-1.0\n" for k, s in enumerate(successes))
    (run_dir / "eval.csv").write_text(rows)
    return run_dir


def files_under(folder: Path) -> set[str]:
    return {str(path.relative_to(folder)) for path in folder.rglob("*")}


@pytest.mark.parametrize("escape", ["../../../escaped", "absolute"])
def test_a_report_never_writes_where_a_runs_config_names_its_task(tmp_path, escape):
    results = tmp_path / "a" / "b" / "results"
    outside = tmp_path / "outside"
    task = str(outside / "escaped") if escape == "absolute" else escape
    write_run(results, "cube-double-play-singletask-task2-v0", "cube-double-play-singletask-task2-v0")
    bad = write_run(results, "bad", task)
    before = files_under(tmp_path)
    with pytest.warns(UserWarning, match=f"{bad / 'config.json'}: task .* is not a valid name.*skipped"):
        out = write_report(results)
    written = files_under(tmp_path) - before
    assert all(path.startswith("a/b/results/report") for path in written), written
    assert (out / "cube-double-play-singletask-task2-v0.png").is_file() and not outside.exists()
    assert "escaped" not in (out / "curves.csv").read_text()


def prepared_run(out: Path):
    """The toy config's one run, its dataset prepared under ``out``."""
    (run,) = prepare_datasets(plan_runs(load_config(toy_config()), out), out / "datasets")
    return run


OUTSIDE_TEXT = "a file outside the results folder\n" * 30


@pytest.fixture
def outside_file(tmp_path) -> Path:
    path = tmp_path / "elsewhere" / "precious.txt"
    path.parent.mkdir()
    path.write_text(OUTSIDE_TEXT)
    return path


def test_a_lock_file_that_is_a_symlink_is_refused_not_followed(tmp_path, outside_file):
    folder = tmp_path / "results" / "datasets"
    folder.mkdir(parents=True)
    (folder / ".lock").symlink_to(outside_file)
    with pytest.raises(UnsafePathError, match=r"\.lock is a symbolic link"), folder_lock(folder):
        pass
    assert outside_file.read_text() == OUTSIDE_TEXT


def test_a_lock_file_that_is_not_a_regular_file_is_refused(tmp_path):
    os.mkfifo(tmp_path / ".lock")
    with pytest.raises(UnsafePathError, match=r"\.lock is not a regular file"), folder_lock(tmp_path):
        pass


@pytest.mark.parametrize("planted", ["config.json", "eval.csv", ".lock", "checkpoints"])
def test_a_run_folder_holding_a_symlink_is_refused_and_the_target_left_unchanged(tmp_path, outside_file, planted):
    run = prepared_run(tmp_path / "results")
    run_dir = Path(run.run_dir)
    run_dir.mkdir(parents=True)
    (run_dir / planted).symlink_to(outside_file if planted != "checkpoints" else outside_file.parent)
    with pytest.raises(UnsafePathError, match=f"{run_dir / planted} is a symbolic link"):
        execute_run(run)
    assert outside_file.read_text() == OUTSIDE_TEXT and os.listdir(outside_file.parent) == ["precious.txt"]
    assert sorted(os.listdir(run_dir)) == [planted]


def test_a_run_folder_that_links_outside_the_results_folder_is_refused_before_any_work(tmp_path, outside_file, capsys):
    out = tmp_path / "results"
    config = write_config(tmp_path / "toy.yaml", toy_config())
    seed_dir = out / "point-reach" / "QC" / "seed0"
    seed_dir.parent.mkdir(parents=True)
    seed_dir.symlink_to(outside_file.parent, target_is_directory=True)
    assert main([str(config), "--out", str(out), "--no-report"]) == 2
    assert "is a symbolic link inside the results folder" in " ".join(capsys.readouterr().out.split())
    assert os.listdir(outside_file.parent) == ["precious.txt"] and outside_file.read_text() == OUTSIDE_TEXT
    assert sorted(os.listdir(out)) == ["point-reach"]  # no dataset was prepared


@pytest.mark.parametrize("unwritable", ["out", "dataset_cache"])
def test_a_folder_that_cannot_be_made_is_refused_before_any_dataset_is_made(tmp_path, capsys, unwritable):
    (tmp_path / "a-file").write_text("not a folder")
    folders = {"out": tmp_path / "results", "dataset_cache": tmp_path / "cache"}
    folders[unwritable] = tmp_path / "a-file" / unwritable
    changes = {key: str(folder) for key, folder in folders.items()}
    config = write_config(tmp_path / "toy.yaml", toy_config(**changes))
    assert main([str(config)]) == 2
    message = "".join(capsys.readouterr().out.split())  # rich wraps lines, even inside a path
    assert "".join(f"{folders[unwritable]} cannot be made: {tmp_path / 'a-file'} is not a folder".split()) in message
    assert sorted(os.listdir(tmp_path)) == ["a-file", "toy.yaml"]  # nothing made, no dataset generated


def test_a_read_only_results_folder_is_refused_before_any_dataset_is_made(tmp_path, capsys):
    out = tmp_path / "results"
    out.mkdir()
    out.chmod(0o555)
    try:
        if os.access(out, os.W_OK):
            pytest.skip("this user writes in read-only folders (root); the test above covers a folder that cannot be made")
        config = write_config(tmp_path / "toy.yaml", toy_config(out=str(out)))
        assert main([str(config)]) == 2
        assert f"theresultsfolder{out}isnotwritable" in "".join(capsys.readouterr().out.split())
        assert not os.listdir(out)
    finally:
        out.chmod(0o755)


def test_a_report_follows_symlinked_run_folders_and_reads_each_once(tmp_path):
    results = tmp_path / "results"
    write_run(results, "cube-double-play-singletask-task2-v0", "cube-double-play-singletask-task2-v0", (0.0, 0.5))
    elsewhere = write_run(tmp_path / "elsewhere", "scene-play-singletask-task1-v0", "scene-play-singletask-task1-v0")
    (results / "scene-play-singletask-task1-v0").symlink_to(elsewhere.parents[1], target_is_directory=True)
    (results / "loop").symlink_to(results, target_is_directory=True)  # a cycle: read once, not forever
    loaded = load_results(results)
    assert sorted(set(loaded["task"])) == ["cube-double-play-singletask-task2-v0", "scene-play-singletask-task1-v0"]
    assert len(loaded) == 4  # two evaluations per run, each run once
    assert set(loaded.loc[loaded["task"] == "scene-play-singletask-task1-v0", "success"]) == {0.5, 1.0}
