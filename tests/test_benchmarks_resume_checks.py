"""Resuming a run folder trusts nothing in it: crafted checkpoints run no code, damaged records fail that run alone."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch as th

from qc_sb3 import QC
from qc_sb3.benchmarks.run import main, run_benchmark
from qc_sb3.benchmarks.runner.checkpoints import CheckpointError
from qc_sb3.benchmarks.runner.config import ConfigError, load_config
from qc_sb3.benchmarks.runner.datasets import prepare_datasets
from qc_sb3.benchmarks.runner.evaluations import DamagedRunError
from qc_sb3.benchmarks.runner.methods import constructor_arguments
from qc_sb3.benchmarks.runner.planning import plan_runs
from qc_sb3.benchmarks.runner.runs import RunConflictError, execute_run

from test_benchmarks_toys import keep_torch_threads, make_point_reach, toy_config, toy_suite, write_config  # noqa: F401 (autouse fixtures of this module)

# Offline-only toy protocol (two evaluations, no online phase): the fastest run with a checkpoint to resume from.
PROTOCOL = {"offline_steps": 40, "online_steps": 0, "eval_interval": 20, "eval_episodes": 1}


class Killed(Exception):
    """Stands for a kill after the first checkpoint."""


class WritesMarker:
    """Unpickling this runs ``open(path, "w")``: the marker appears iff a loader executed the file's code."""

    def __init__(self, path: Path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def kill_after_first_checkpoint(name: str, run) -> None:
    if name == "checkpointed":
        raise Killed


@pytest.fixture
def interrupted(tmp_path):
    """A toy run killed after its first checkpoint (one eval.csv row, ckpt-00001)."""
    config = load_config(toy_config(protocol=PROTOCOL))
    (run,) = prepare_datasets(plan_runs(config, tmp_path / "results"), tmp_path / "datasets")
    with pytest.raises(Killed):
        execute_run(run, hook=kill_after_first_checkpoint)
    return run, Path(run.run_dir) / "checkpoints" / "ckpt-00001"


def test_a_resumed_run_rebuilds_the_model_from_its_config_and_its_checkpoint(interrupted):
    run, checkpoint = interrupted
    # Nothing pickled: the parameters load with weights_only, the buffer without allow_pickle, the rest is JSON.
    tensors = th.load(checkpoint / "tensors.pt", weights_only=True)
    assert "policy" in tensors["parameters"] and tensors["rng"]["torch"].dtype == th.uint8
    with np.load(checkpoint / "replay_buffer.npz", allow_pickle=False) as buffer:
        assert buffer["offline_rewards"].size > 0
    assert json.loads((checkpoint / "model.json").read_text())["offline_steps_done"] == 20
    assert execute_run(run)["status"] == "done"


def crafted_pickle(path: Path, marker: Path) -> None:
    with path.open("wb") as file:
        pickle.dump(WritesMarker(marker), file)


def test_a_checkpoint_of_the_pickle_format_is_refused_unopened(interrupted, tmp_path):
    run, checkpoint = interrupted
    marker = tmp_path / "executed"
    # The earlier format: a genuine SB3 model.zip of the run's config, and pickles that write the marker if loaded.
    model = QC("MlpPolicy", make_point_reach(), device="cpu", **constructor_arguments(run.hyperparameters, 40))
    model.save(checkpoint / "model.zip")
    for name in ("replay_buffer.pkl", "rng.pkl"):
        crafted_pickle(checkpoint / name, marker)
    with pytest.raises(CheckpointError, match=r"earlier format .*pickles, which can run code"):
        execute_run(run)
    assert not marker.exists()
    assert "CheckpointError" in (Path(run.run_dir) / "error.txt").read_text()


@pytest.mark.parametrize("file", ["tensors.pt", "replay_buffer.npz"])
def test_a_crafted_checkpoint_file_runs_no_code_and_is_refused(interrupted, tmp_path, file):
    run, checkpoint = interrupted
    marker = tmp_path / "executed"
    if file == "tensors.pt":
        # torch.save writes a zip of pickled records: a plain pickle with a __reduce__ is what an attacker would try.
        th.save({"parameters": WritesMarker(marker)}, checkpoint / file, _use_new_zipfile_serialization=True)
    else:
        np.savez(checkpoint / file, observations=np.array([WritesMarker(marker)], dtype=object))
    with pytest.raises(CheckpointError, match=f"{checkpoint} cannot be resumed"):
        execute_run(run)
    assert not marker.exists()


@pytest.mark.parametrize(
    ("damaged", "expected"),
    [("checkpoints/latest.json", "latest.json is damaged"), ("config.json", "config.json cannot be read")],
)
def test_a_damaged_run_folder_fails_that_run_and_the_others_go_on(tmp_path, damaged, expected):
    config = write_config(tmp_path / "toy.yaml", toy_config(seeds=[0, 1], protocol=PROTOCOL))
    out = tmp_path / "results"
    runs = plan_runs(load_config(toy_config(seeds=[0, 1], protocol=PROTOCOL)), out)
    prepared = prepare_datasets(runs, out / "datasets")
    with pytest.raises(Killed):
        execute_run(prepared[0], hook=kill_after_first_checkpoint)
    path = Path(prepared[0].run_dir) / damaged
    path.write_text(path.read_text()[:15])  # torn
    torn = path.read_text()
    summaries = run_benchmark(config, out=out, workers=0, report=False)
    assert [summary["status"] for summary in summaries] == ["failed", "done"]
    assert expected in summaries[0]["error"] and "delete" in summaries[0]["error"]
    # The damage is left for the user to see: the run's folder is not rewritten from scratch.
    assert path.read_text() == torn


@pytest.mark.parametrize("damage", ["deleted", "truncated", "edited"])
def test_evaluation_rows_lost_before_the_checkpoint_refuse_the_resume(interrupted, damage):
    run, _ = interrupted
    eval_csv = Path(run.run_dir) / "eval.csv"
    text = eval_csv.read_text()
    if damage == "deleted":
        eval_csv.unlink()
    elif damage == "truncated":
        eval_csv.write_text(text[: len(text) - 20])
    else:
        # The row of offline step 20 claims other counters than the checkpoint's.
        header, row = text.splitlines()
        fields = row.split(",")
        fields[5] = "19"  # offline_steps
        eval_csv.write_text(f"{header}\n{','.join(fields)}\n")
    damaged = eval_csv.read_text() if damage != "deleted" else None
    with pytest.raises(DamagedRunError, match="checkpoint records 1 evaluation"):
        execute_run(run)
    assert (eval_csv.read_text() if eval_csv.exists() else None) == damaged  # left as found, not overwritten


def test_a_finished_run_of_another_configuration_is_not_claimed(tmp_path):
    config = load_config(toy_config(protocol=PROTOCOL))
    (run,) = prepare_datasets(plan_runs(config, tmp_path / "results"), tmp_path / "datasets")
    assert execute_run(run)["status"] == "done"
    other = load_config(toy_config(protocol=PROTOCOL, hyperparameters={**toy_config()["hyperparameters"], "tau": 0.01}))
    (other_run,) = plan_runs(other, tmp_path / "results")
    with pytest.raises(RunConflictError, match="different configuration"):
        execute_run(other_run)
    assert not (Path(run.run_dir) / "error.txt").exists()


def test_bad_yaml_exits_with_status_2_and_a_message(tmp_path, capsys):
    config = tmp_path / "bad.yaml"
    config.write_text("tasks: [point-reach\nmethods: {QC: null}\n")
    out = tmp_path / "results"
    assert main([str(config), "--out", str(out)]) == 2
    output = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    assert "is not valid YAML" in output and "line 2, column 8" in output
    assert not out.exists()


@pytest.mark.parametrize(
    ("hyperparameters", "expected"),
    [
        ({"batch_size": -16}, "hyperparameters.batch_size must be >= 1, got -16"),
        ({"gamma": 1.5}, "hyperparameters.gamma must be in [0.0, 1.0], got 1.5"),
        ({"chunk_size": 0}, "hyperparameters.chunk_size must be >= 1, got 0"),
        ({"tau": 0.0}, "hyperparameters.tau must be in (0.0, 1.0], got 0.0"),
        # Not in the runner's range table: the algorithm's own check, run on a dummy env before anything runs.
        ({"q_agg": "median"}, "QC (domain toy) refuses its hyperparameters: ValueError: q_agg must be one of"),
        ({"policy_kwargs": {"net_arch": [16], "critic_layer_norm": "yes", "bogus": 1}}, "refuses its hyperparameters"),
    ],
)
def test_bad_hyperparameters_are_refused_before_any_folder_is_made(tmp_path, capsys, hyperparameters, expected):
    config = write_config(
        tmp_path / "bad.yaml", toy_config(hyperparameters={**toy_config()["hyperparameters"], **hyperparameters})
    )
    out = tmp_path / "results"
    assert main([str(config), "--out", str(out), "--no-report"]) == 2
    output = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    assert expected in output
    assert not out.exists()


def test_eval_interval_zero_is_named_without_a_wrong_divisibility_message():
    with pytest.raises(ConfigError) as error:
        load_config(toy_config(protocol={**PROTOCOL, "eval_interval": 0}))
    message = str(error.value)
    assert "protocol.eval_interval must be an integer >= 1, got 0" in message
    assert "must divide" not in message


SMALL = {"batch_size": 16, "learning_starts": 10, "policy_kwargs": {"net_arch": [16, 16]}}


@pytest.mark.parametrize(
    ("method", "hyperparameters", "protocol"),
    [
        # Three optimizers, offline only: bit-identical.
        ("QC-FQL", {**SMALL, "flow_steps": 2, "offline_log_interval": 10}, PROTOCOL),
        # A learned temperature, online only, the offline data in the buffer's own segment.
        ("RLPD", {**SMALL, "n_critics": 2}, {"offline_steps": 0, "online_steps": 40, "eval_interval": 20, "eval_episodes": 1}),
    ],
)
def test_other_algorithms_resume_from_the_checkpoint_format(tmp_path, method, hyperparameters, protocol):
    def run_of(out: Path):
        config = load_config(toy_config(methods={method: None}, hyperparameters=hyperparameters, protocol=protocol))
        (run,) = prepare_datasets(plan_runs(config, out), tmp_path / "datasets")
        return run

    reference, resumed = run_of(tmp_path / "reference"), run_of(tmp_path / "resumed")
    execute_run(reference)
    with pytest.raises(Killed):
        execute_run(resumed, hook=kill_after_first_checkpoint)
    assert execute_run(resumed)["status"] == "done"

    def last_row(run) -> dict[str, str]:
        header, *rows = (Path(run.run_dir) / "eval.csv").read_text().splitlines()
        return dict(zip(header.split(","), rows[-1].split(","), strict=True))

    counters = ("step", "offline_steps", "env_steps", "gradient_steps")
    assert [last_row(resumed)[key] for key in counters] == [last_row(reference)[key] for key in counters]
    if method == "QC-FQL":
        expected, actual = (
            th.load(next((Path(run.run_dir) / "checkpoints").glob("ckpt-*")) / "tensors.pt", weights_only=True)
            for run in (reference, resumed)
        )
        assert_identical(actual["parameters"], expected["parameters"])


def assert_identical(actual, expected, where: str = "") -> None:
    """Nested state dicts equal bit for bit (tensors with th.equal, everything else with ==)."""
    assert type(actual) is type(expected), where
    if isinstance(expected, dict):
        assert actual.keys() == expected.keys(), where
        for key in expected:
            assert_identical(actual[key], expected[key], f"{where}/{key}")
    elif isinstance(expected, list | tuple):
        assert len(actual) == len(expected), where
        for index, (left, right) in enumerate(zip(actual, expected, strict=True)):
            assert_identical(left, right, f"{where}/{index}")
    elif isinstance(expected, th.Tensor):
        assert th.equal(actual, expected), where
    else:
        assert actual == expected, where
