"""Runs on the toy suite: results layout, skipping finished runs, resuming killed ones, the local process pool."""

from __future__ import annotations

import csv
import json
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch as th

from qc_sb3.benchmarks.run import run_benchmark
from qc_sb3.benchmarks.runner.config import load_config
from qc_sb3.benchmarks.runner.datasets import prepare_datasets
from qc_sb3.benchmarks.runner.evaluations import EVAL_COLUMNS
from qc_sb3.benchmarks.runner.planning import plan_runs
from qc_sb3.benchmarks.runner.runs import RunConflictError, execute_run
from qc_sb3.common.chunked import ChunkedOffPolicyAlgorithm
from qc_sb3.common.offline_source import OfflineShards

from test_benchmarks_toys import TOY_TASK, keep_torch_threads, toy_config, toy_suite, write_config  # noqa: F401 (autouse fixtures of this module)

# The values th.backends.cpu.get_cpu_capability documents.
CPU_CAPABILITIES = {"DEFAULT", "VSX", "Z VECTOR", "NO AVX", "AVX2", "AVX512", "SVE256"}


class Killed(Exception):
    """Stands for a kill at a chosen point of a run."""


def prepared_run(out: Path, **changes):
    """The toy config's one run, its dataset prepared under ``out``."""
    config = load_config(toy_config(**changes))
    (run,) = prepare_datasets(plan_runs(config, out), out / "datasets")
    return run


def kill_at(event: str, evaluation: int):
    """A hook that raises at ``event`` of the ``evaluation``-th evaluation (1-based)."""
    seen = {"evaluated": 0, "checkpointed": 0}

    def hook(name: str, run) -> None:
        seen[name] += 1
        if name == event and seen[name] == evaluation:
            raise Killed(f"{event} {evaluation}")

    return hook


def read_rows(run_dir: Path) -> list[dict]:
    with (Path(run_dir) / "eval.csv").open(newline="") as file:
        return list(csv.DictReader(file))


def without_wall_time(rows: list[dict]) -> list[dict]:
    return [{key: value for key, value in row.items() if key != "wall_time"} for row in rows]


def final_parameters(run_dir: Path) -> dict[str, th.Tensor]:
    (checkpoint,) = (Path(run_dir) / "checkpoints").glob("ckpt-*")
    return th.load(checkpoint / "tensors.pt", weights_only=True)["parameters"]["policy"]


def online_buffer(run_dir: Path) -> dict[str, np.ndarray]:
    (checkpoint,) = (Path(run_dir) / "checkpoints").glob("ckpt-*")
    with np.load(checkpoint / "replay_buffer.npz", allow_pickle=False) as arrays:
        return {name: arrays[name] for name in arrays.files}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The toy run, start to end without interruption."""
    out = tmp_path_factory.mktemp("uninterrupted")
    run = prepared_run(out)
    summary = execute_run(run)
    return run, summary


def test_a_run_writes_the_results_layout(uninterrupted):
    run, summary = uninterrupted
    run_dir = Path(run.run_dir)
    assert run_dir == Path(run_dir.parents[2]) / TOY_TASK / "QC" / "seed0"
    assert summary["status"] == "done"
    rows = read_rows(run_dir)
    assert list(rows[0]) == list(EVAL_COLUMNS)
    # Every 20 steps of each phase; the online rows' step counts on from the 40 offline steps (the paper's x-axis).
    assert [(row["step"], row["phase"], row["offline_steps"], row["env_steps"]) for row in rows] == [
        ("20", "offline", "20", "0"),
        ("40", "offline", "40", "0"),
        ("60", "online", "40", "20"),
        ("80", "online", "40", "40"),
    ]
    # One update per online step from learning_starts (10) on: 40 offline + 30 online.
    assert rows[-1]["gradient_steps"] == "70"
    assert all(0.0 <= float(row["success"]) <= 1.0 for row in rows)
    config = json.loads((run_dir / "config.json").read_text())
    assert config["task"] == TOY_TASK and config["method"] == "QC" and config["seed"] == 0
    assert config["hyperparameters"]["batch_size"] == 16 and config["hyperparameters"]["buffer_size"] == 40
    assert config["protocol"]["offline_steps"] == 40
    session = json.loads((run_dir / "versions.json").read_text())["sessions"][0]
    versions = session["versions"]
    assert versions["torch"] == th.__version__ and "stable_baselines3" in versions and "gymnasium" in versions
    # The machine: the CPU as Linux names it, the cores, and the vector instructions PyTorch's CPU kernels use.
    host = session["machine"]
    assert host["cores"] == os.cpu_count() and host["cpu_capability"] in CPU_CAPABILITIES
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    if "model name" in cpuinfo:  # Linux on x86
        assert f"model name\t: {host['cpu']}" in cpuinfo
    assert any((run_dir / "tensorboard" / phase).glob("events.out.tfevents.*") for phase in ("offline", "online"))
    assert json.loads((run_dir / "checkpoints" / "latest.json").read_text()) == {"checkpoint": "ckpt-00004"}
    assert {path.name for path in (run_dir / "checkpoints" / "ckpt-00004").iterdir()} == {
        "tensors.pt",
        "replay_buffer.npz",
        "model.json",
        "rng.json",
        "state.json",
    }
    state = json.loads((run_dir / "checkpoints" / "ckpt-00004" / "state.json").read_text())
    assert (state["phase"], state["evaluations_done"], state["offline_steps_done"], state["num_timesteps"]) == (
        "online",
        4,
        40,
        40,
    )
    assert json.loads((run_dir / "progress.json").read_text())["status"] == "done"
    assert (run_dir / "DONE").exists()


def test_a_finished_run_is_skipped_without_training_or_writing(tmp_path, monkeypatch):
    config = write_config(tmp_path / "toy.yaml", toy_config())
    out = tmp_path / "results"
    assert run_benchmark(config, out=out, workers=0, report=False)[0]["status"] == "done"
    run_dir = out / TOY_TASK / "QC" / "seed0"
    before = {path: (path.stat().st_mtime_ns, path.read_bytes()) for path in run_dir.rglob("*") if path.is_file()}

    def no_training(*args, **kwargs):
        raise AssertionError("a finished run must not train")

    monkeypatch.setattr(ChunkedOffPolicyAlgorithm, "pretrain", no_training)
    monkeypatch.setattr(ChunkedOffPolicyAlgorithm, "learn", no_training)
    (summary,) = run_benchmark(config, out=out, workers=0, report=False)
    assert summary["status"] == "skipped"
    after = {path: (path.stat().st_mtime_ns, path.read_bytes()) for path in run_dir.rglob("*") if path.is_file()}
    assert after == before


def test_a_run_killed_in_the_offline_phase_resumes_to_the_uninterrupted_result(tmp_path, uninterrupted):
    reference, _ = uninterrupted
    run = prepared_run(tmp_path)
    with pytest.raises(Killed):
        execute_run(run, hook=kill_at("checkpointed", 1))
    assert len(read_rows(Path(run.run_dir))) == 1 and not (Path(run.run_dir) / "DONE").exists()
    assert execute_run(run)["status"] == "done"
    # Offline step 20 onward replays exactly: model, optimizers, buffer and random generators were restored.
    assert without_wall_time(read_rows(Path(run.run_dir))) == without_wall_time(read_rows(Path(reference.run_dir)))
    resumed, expected = final_parameters(run.run_dir), final_parameters(reference.run_dir)
    assert resumed.keys() == expected.keys()
    for name in expected:
        assert th.equal(resumed[name], expected[name]), name
    sessions = json.loads((Path(run.run_dir) / "versions.json").read_text())["sessions"]
    assert [session["from_evaluation"] for session in sessions] == [0, 1]


@pytest.fixture(scope="module")
def toy_shards(tmp_path_factory) -> OfflineShards:
    """The toy data generated with seeds 0 and 1, as shards swapped every 7 offline steps."""
    out = tmp_path_factory.mktemp("shards")
    folders = [
        prepared_run(out, datasets={"toy": {"source": "generate", "episodes": 10, "seed": seed}}).offline_dataset
        for seed in (0, 1)
    ]
    return OfflineShards(folders, swap_interval=7)


def test_a_run_on_shards_killed_in_the_offline_phase_resumes_to_the_uninterrupted_result(tmp_path, toy_shards):
    reference = replace(prepared_run(tmp_path / "uninterrupted"), offline_dataset=toy_shards)
    execute_run(reference)
    run = replace(prepared_run(tmp_path / "killed"), offline_dataset=toy_shards)
    with pytest.raises(Killed):
        execute_run(run, hook=kill_at("checkpointed", 1))
    assert execute_run(run)["status"] == "done"
    # The resumed run swaps shards at offline steps 21, 28 and 35 as the uninterrupted one did.
    assert without_wall_time(read_rows(Path(run.run_dir))) == without_wall_time(read_rows(Path(reference.run_dir)))
    resumed, expected = final_parameters(run.run_dir), final_parameters(reference.run_dir)
    for name in expected:
        assert th.equal(resumed[name], expected[name]), name


def test_rows_written_after_the_last_checkpoint_are_evaluated_again_once(tmp_path, uninterrupted):
    reference, _ = uninterrupted
    run = prepared_run(tmp_path)
    # Killed after the second evaluation's row, before its checkpoint: the CSV is one row ahead of the checkpoint.
    with pytest.raises(Killed):
        execute_run(run, hook=kill_at("evaluated", 2))
    assert [row["step"] for row in read_rows(Path(run.run_dir))] == ["20", "40"]
    execute_run(run)
    rows = read_rows(Path(run.run_dir))
    assert [row["step"] for row in rows] == ["20", "40", "60", "80"]
    assert without_wall_time(rows) == without_wall_time(read_rows(Path(reference.run_dir)))


def test_a_run_killed_in_the_online_phase_continues_from_its_checkpoint(tmp_path, uninterrupted):
    reference, _ = uninterrupted
    run = prepared_run(tmp_path)
    with pytest.raises(Killed):
        execute_run(run, hook=kill_at("checkpointed", 3))  # after the first online evaluation (20 env steps)
    interrupted_buffer = online_buffer(run.run_dir)
    execute_run(run)
    rows, expected = read_rows(Path(run.run_dir)), read_rows(Path(reference.run_dir))
    # Each evaluation once; everything up to the kill is the uninterrupted run's.
    assert [row["step"] for row in rows] == ["20", "40", "60", "80"]
    assert without_wall_time(rows[:3]) == without_wall_time(expected[:3])
    # The counters go on from the checkpoint: 20 more env steps, one update each.
    assert [(row["offline_steps"], row["env_steps"], row["gradient_steps"]) for row in rows] == [
        (row["offline_steps"], row["env_steps"], row["gradient_steps"]) for row in expected
    ]
    buffer, reference_buffer = online_buffer(run.run_dir), online_buffer(reference.run_dir)
    # A full ring of 40 online steps (buffer_size: the online steps).
    assert buffer["full"] and reference_buffer["full"] and buffer["pos"] == reference_buffer["pos"] == 0
    assert len(buffer["offline_rewards"]) == len(reference_buffer["offline_rewards"]) > 0
    # The first 20 online steps are the ones stored before the kill; the interrupted episode is closed there.
    np.testing.assert_array_equal(buffer["observations"][:20], reference_buffer["observations"][:20])
    np.testing.assert_array_equal(buffer["actions"][:20], interrupted_buffer["actions"][:20])
    assert buffer["dones"][19, 0] == 1.0
    if reference_buffer["dones"][19, 0] == 0.0:  # mid-episode at the kill: closed as a truncation, not a termination
        assert buffer["timeouts"][19, 0] == 1.0


def test_a_run_folder_of_another_configuration_is_refused_before_any_run(tmp_path):
    out = tmp_path / "results"
    config = write_config(tmp_path / "toy.yaml", toy_config())
    run_benchmark(config, out=out, workers=0, report=False)
    changed = write_config(tmp_path / "changed.yaml", toy_config(hyperparameters={"batch_size": 8}))
    with pytest.raises(RunConflictError, match="hyperparameters"):
        run_benchmark(changed, out=out, workers=0, report=False)


def test_a_run_recorded_before_a_setting_existed_counts_as_that_settings_default(tmp_path):
    out = tmp_path / "results"
    config = write_config(tmp_path / "toy.yaml", toy_config())
    run_benchmark(config, out=out, workers=0, report=False)
    # An older runner recorded no compile_step: it ran as QC's default (False) does.
    record_path = out / TOY_TASK / "QC" / "seed0" / "config.json"
    record = json.loads(record_path.read_text())
    assert record["hyperparameters"].pop("compile_step") is False
    record_path.write_text(json.dumps(record))
    assert [summary["status"] for summary in run_benchmark(config, out=out, workers=0, report=False)] == ["skipped"]
    # Asked for the setting's other value, the old record is another configuration.
    compiled = write_config(tmp_path / "compiled.yaml", toy_config(hyperparameters={"compile_step": True}))
    with pytest.raises(RunConflictError, match="hyperparameters"):
        run_benchmark(compiled, out=out, workers=0, report=False)


def test_the_local_pool_runs_seeds_in_worker_processes(tmp_path):
    config = write_config(
        tmp_path / "toy.yaml", toy_config(seeds=[0, 1], protocol={**toy_config()["protocol"], "eval_interval": 40})
    )
    out = tmp_path / "results"
    summaries = run_benchmark(config, out=out, workers=2, report=True)
    assert [summary["status"] for summary in summaries] == ["done", "done"]
    for seed in (0, 1):
        run_dir = out / TOY_TASK / "QC" / f"seed{seed}"
        assert [row["step"] for row in read_rows(run_dir)] == ["40", "80"]
        assert json.loads((run_dir / "config.json").read_text())["seed"] == seed
    assert (out / "report" / f"{TOY_TASK}.png").exists() and (out / "report" / "summary.md").exists()


def test_a_run_folder_without_results_is_taken_over(tmp_path):
    run = prepared_run(tmp_path)
    # A run that failed before its first checkpoint leaves only its config behind.
    Path(run.run_dir).mkdir(parents=True)
    (Path(run.run_dir) / "config.json").write_text(json.dumps({"task": TOY_TASK, "hyperparameters": {"batch_size": 1}}))
    assert execute_run(run)["status"] == "done"
    assert json.loads((Path(run.run_dir) / "config.json").read_text())["hyperparameters"]["batch_size"] == 16
