"""Seeds in one process (execution.seeds_per_process): the same run folders as separate runs, resumable, refused where
the algorithm cannot stack its seeds. The runner stacks a group's updates on a GPU (qc_sb3.seeds.group.stacks_updates);
these tests run that path on the CPU, and one test the CPU's own (a job's runs one after another)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch as th

from qc_sb3.benchmarks.run import run_benchmark
from qc_sb3.benchmarks.runner import seed_groups
from qc_sb3.benchmarks.runner.config import ConfigError, load_config
from qc_sb3.benchmarks.runner.datasets import prepare_datasets
from qc_sb3.benchmarks.runner.planning import plan_runs
from qc_sb3.benchmarks.runner.seed_groups import execute_together, plan_jobs
from qc_sb3.seeds.group import stacks_updates
from qc_sb3.seeds.stacked_update import StackedUpdate

from test_benchmarks_toys import TOY_TASK, keep_torch_threads, toy_config, toy_suite, write_config  # noqa: F401 (autouse fixtures of this module)

SEEDS = [0, 1, 2]
# float32 rounding: a batched matmul adds in another order than a single one, over 70 Adam steps
TOLERANCE = 1e-5
# Gradient steps of a toy run: 40 offline, then one per online step from learning_starts (10) to 40.
GRADIENT_STEPS = 70


class Killed(Exception):
    """Stands for a kill at a chosen point of a run."""


def grouped_config(seeds_per_process, **changes) -> dict:
    execution = {**toy_config()["execution"], "seeds_per_process": seeds_per_process}
    return toy_config(seeds=SEEDS, execution=execution, **changes)


def run_dirs(out: Path) -> list[Path]:
    return [out / TOY_TASK / "QC" / f"seed{seed}" for seed in SEEDS]


def read_rows(run_dir: Path) -> list[dict]:
    with (run_dir / "eval.csv").open(newline="") as file:
        return [{key: value for key, value in row.items() if key != "wall_time"} for row in csv.DictReader(file)]


def final_parameters(run_dir: Path) -> dict:
    (checkpoint,) = (run_dir / "checkpoints").glob("ckpt-*")
    return th.load(checkpoint / "tensors.pt", weights_only=True)["parameters"]


def layout(run_dir: Path) -> set[str]:
    """A run folder's files, the tensorboard files by folder (their names hold a time and a host)."""
    paths = [path.relative_to(run_dir) for path in run_dir.rglob("*")]
    return {str(path.parent if "tfevents" in path.name else path) for path in paths}


def stats(run_dir: Path) -> list[tuple[str, str, str, float]]:
    """The training statistics, but for the clock's (``time/*``)."""
    with (run_dir / "train_stats.csv").open(newline="") as file:
        rows = [(row["phase"], row["step"], row["tag"], float(row["value"])) for row in csv.DictReader(file)]
    return [row for row in rows if not row[2].startswith("time/")]


@pytest.fixture(scope="module", autouse=True)
def stacked_as_on_a_gpu():
    """Groups stack their updates, as they do on a GPU."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(seed_groups, "stacks_updates", lambda device: True)
        yield


def count_stacked_steps(monkeypatch) -> list[int]:
    """Count the stacked updates (one per gradient step of a group, for all its seeds)."""
    calls = [0]
    update = StackedUpdate.__call__

    def counted(self, *args, **kwargs):
        calls[0] += 1
        return update(self, *args, **kwargs)

    monkeypatch.setattr(StackedUpdate, "__call__", counted)
    return calls


@pytest.fixture(scope="module")
def separate_and_grouped(tmp_path_factory):
    """The toy config on three seeds, run one per process (seeds_per_process 1) and all three together."""
    root = tmp_path_factory.mktemp("groups")
    outs = {}
    for size in (1, 3):
        config = write_config(root / f"toy{size}.yaml", grouped_config(size))
        outs[size] = root / f"results{size}"
        summaries = run_benchmark(config, out=outs[size], workers=0, report=False)
        assert [summary["status"] for summary in summaries] == ["done"] * 3
    return outs[1], outs[3]


def test_seeds_in_one_process_write_the_runs_that_separate_processes_write(separate_and_grouped):
    separate, grouped = separate_and_grouped
    for alone, together in zip(run_dirs(separate), run_dirs(grouped), strict=True):
        assert layout(together) == layout(alone)
        assert json.loads((together / "config.json").read_text()) == json.loads((alone / "config.json").read_text())
        rows, expected = read_rows(together), read_rows(alone)
        assert [row["step"] for row in rows] == ["20", "40", "60", "80"]
        for row, other in zip(rows, expected, strict=True):
            for column in ("step", "phase", "offline_steps", "env_steps", "gradient_steps", "success", "length"):
                assert row[column] == other[column], column
            assert float(row["return"]) == pytest.approx(float(other["return"]), abs=1e-4)
        assert json.loads((together / "progress.json").read_text())["status"] == "done"
        assert json.loads((together / "DONE").read_text())["status"] == "done"
        # The same training statistics (losses to float32 rounding) and final parameters and Adam states.
        for (*key, value), (*other_key, other_value) in zip(stats(together), stats(alone), strict=True):
            assert key == other_key and value == pytest.approx(other_value, abs=1e-4, rel=1e-4), key
        mine, theirs = final_parameters(together), final_parameters(alone)
        assert mine.keys() == theirs.keys()
        for name, tensor in theirs["policy"].items():
            assert th.allclose(mine["policy"][name], tensor, atol=TOLERANCE, rtol=0), name
        for optimizer in ("policy.flow.optimizer", "policy.critic.optimizer"):
            for key, state in theirs[optimizer]["state"].items():
                assert float(mine[optimizer]["state"][key]["step"]) == float(state["step"]) == GRADIENT_STEPS
                assert th.allclose(mine[optimizer]["state"][key]["exp_avg"], state["exp_avg"], atol=1e-6, rtol=1e-3)
    # Each seed its own model: the seeds differ from each other.
    first, second = (final_parameters(run_dir)["policy"] for run_dir in run_dirs(grouped)[:2])
    assert not all(th.equal(first[name], second[name]) for name in first)


def test_on_the_cpu_seeds_in_one_process_run_one_after_another(tmp_path, separate_and_grouped, monkeypatch):
    separate, _ = separate_and_grouped
    monkeypatch.setattr(seed_groups, "stacks_updates", stacks_updates)
    calls = count_stacked_steps(monkeypatch)
    config = write_config(tmp_path / "toy.yaml", grouped_config(3))
    summaries = run_benchmark(config, out=tmp_path / "results", workers=0, report=False)
    assert [summary["status"] for summary in summaries] == ["done"] * 3
    assert calls[0] == 0
    # Each run as it runs alone: the runs of separate processes, bit for bit.
    for together, alone in zip(run_dirs(tmp_path / "results"), run_dirs(separate), strict=True):
        assert read_rows(together) == read_rows(alone)
        mine, theirs = final_parameters(together), final_parameters(alone)
        assert all(th.equal(mine["policy"][name], tensor) for name, tensor in theirs["policy"].items())


def test_the_seeds_of_a_group_take_their_gradient_steps_as_one_stacked_update(tmp_path, monkeypatch):
    calls = count_stacked_steps(monkeypatch)
    config = write_config(tmp_path / "toy.yaml", grouped_config(2))
    summaries = run_benchmark(config, out=tmp_path / "results", workers=0, report=False)
    assert [summary["status"] for summary in summaries] == ["done"] * 3
    # Seeds 0 and 1 together (one stacked update per step for both), seed 2 alone.
    assert calls[0] == GRADIENT_STEPS


def prepared_runs(out: Path, seeds_per_process: int = 3) -> list:
    return prepare_datasets(plan_runs(load_config(grouped_config(seeds_per_process)), out), out / "datasets")


def kill_at_checkpoint(number: int):
    """A hook that raises at the ``number``-th checkpoint written by any run of the group (1-based)."""
    seen = [0]

    def hook(event: str, run) -> None:
        if event == "checkpointed":
            seen[0] += 1
            if seen[0] == number:
                raise Killed(f"after checkpoint {number} ({run.name})")

    return hook


def sessions(run_dir: Path) -> list[int]:
    return [session["from_evaluation"] for session in json.loads((run_dir / "versions.json").read_text())["sessions"]]


def test_a_group_killed_after_a_checkpoint_resumes_bit_for_bit(tmp_path, separate_and_grouped, monkeypatch):
    _, grouped = separate_and_grouped
    runs = prepared_runs(tmp_path)
    # Killed once every seed has written its first checkpoint (20 offline steps): the others stop with it.
    summaries = execute_together(runs, hook=kill_at_checkpoint(3))
    assert [summary["status"] for summary in summaries] == ["failed"] * 3
    killed = [summary["run"] for summary in summaries if summary["error"].startswith("Killed")]
    assert len(killed) == 1
    # The others name the run that stopped them, and why.
    assert all(f"{killed[0]} failed: Killed" in summary["error"] for summary in summaries if summary["run"] not in killed)
    calls = count_stacked_steps(monkeypatch)
    assert [summary["status"] for summary in execute_together(runs)] == ["done"] * 3
    assert calls[0] == GRADIENT_STEPS - 20  # resumed together
    for resumed, expected in zip(run_dirs(tmp_path), run_dirs(grouped), strict=True):
        assert read_rows(resumed) == read_rows(expected)
        mine, theirs = final_parameters(resumed), final_parameters(expected)
        for name, tensor in theirs["policy"].items():
            assert th.equal(mine["policy"][name], tensor), name
        for optimizer in ("policy.flow.optimizer", "policy.critic.optimizer"):
            for key, state in theirs[optimizer]["state"].items():
                assert all(th.equal(mine[optimizer]["state"][key][n], value) for n, value in state.items()), key
        assert sessions(resumed) == [0, 1]
        assert not (resumed / "error.txt").exists()


def test_seeds_killed_at_different_checkpoints_resume_apart_never_mixed(tmp_path, separate_and_grouped, monkeypatch):
    _, grouped = separate_and_grouped
    runs = prepared_runs(tmp_path)
    # The fourth checkpoint is one seed's second: killed there, it stands one evaluation ahead of the other two.
    execute_together(runs, hook=kill_at_checkpoint(4))
    standing = [len(read_rows(run_dir)) for run_dir in run_dirs(tmp_path)]
    assert sorted(standing) == [1, 1, 2]
    calls = count_stacked_steps(monkeypatch)
    assert [summary["status"] for summary in execute_together(runs)] == ["done"] * 3
    # The two at the first checkpoint train together (20 offline and 30 online steps); the other one alone.
    assert calls[0] == GRADIENT_STEPS - 20
    for run_dir, expected, evaluations in zip(run_dirs(tmp_path), run_dirs(grouped), standing, strict=True):
        assert sessions(run_dir) == [0, evaluations]
        rows = read_rows(run_dir)
        assert [row["gradient_steps"] for row in rows] == [row["gradient_steps"] for row in read_rows(expected)]
        mine, theirs = final_parameters(run_dir)["policy"], final_parameters(expected)["policy"]
        for name, tensor in theirs.items():
            assert th.allclose(mine[name], tensor, atol=TOLERANCE, rtol=0), name


def test_finished_seeds_are_skipped_and_the_others_run_together(tmp_path, monkeypatch):
    runs = prepared_runs(tmp_path)
    assert execute_together(runs[:1])[0]["status"] == "done"  # seed 0 alone, finished
    calls = count_stacked_steps(monkeypatch)
    assert [summary["status"] for summary in execute_together(runs)] == ["skipped", "done", "done"]
    assert calls[0] == GRADIENT_STEPS


def test_jobs_group_each_methods_seeds_and_only_the_methods_named():
    data = toy_config(methods={"QC": None, "QC-FQL": None}, seeds=[0, 1, 2, 3, 4])
    data["execution"] = {**data["execution"], "seeds_per_process": {"QC": 2}}
    jobs = plan_jobs(plan_runs(load_config(data), "out"))
    assert [[(run.method, run.seed) for run in job] for job in jobs] == [
        [("QC", 0), ("QC", 1)],
        [("QC", 2), ("QC", 3)],
        [("QC", 4)],
        *[[("QC-FQL", seed)] for seed in range(5)],
    ]
    # The default: every run its own job.
    assert all(len(job) == 1 for job in plan_jobs(plan_runs(load_config(toy_config(seeds=[0, 1])), "out")))


@pytest.mark.parametrize(
    ("methods", "value", "expected"),
    [
        (["QC"], 0, "execution.seeds_per_process must be an integer >= 1"),
        (["QC"], 1.5, "execution.seeds_per_process must be an integer >= 1 or a mapping"),
        (["QC"], "2", "execution.seeds_per_process must be an integer >= 1 or a mapping"),
        (["QC"], True, "execution.seeds_per_process must be an integer >= 1 or a mapping"),
        (["QC"], {"QC": 0}, "execution.seeds_per_process.QC must be an integer >= 1"),
        (["QC"], {"QC-FQL": 2}, "names 'QC-FQL', which is not one of the config's methods"),
        (["QC", "RLPD"], 2, "is 2 for RLPD, whose algorithm RLPD cannot train seeds together"),
        (["QC", "QC-RLPD"], {"QC-RLPD": 4}, "execution.seeds_per_process.QC-RLPD is 4 for QC-RLPD"),
    ],
)
def test_bad_seeds_per_process_is_refused_naming_it(methods, value, expected):
    data = toy_config(methods=methods)
    data["execution"] = {**data["execution"], "seeds_per_process": value}
    with pytest.raises(ConfigError, match="invalid benchmark config") as error:
        load_config(data)
    assert expected in str(error.value)


def test_settings_the_stacked_update_cannot_take_are_refused_before_any_run(tmp_path):
    data = grouped_config(2, hyperparameters={**toy_config()["hyperparameters"], "compile_step": True})
    with pytest.raises(ConfigError) as error:
        plan_runs(load_config(data), tmp_path)
    assert "QC: execution.seeds_per_process > 1 needs compile_step: false" in str(error.value)
    data = grouped_config(2, hyperparameters={**toy_config()["hyperparameters"], "train_freq": [1, "episode"]})
    with pytest.raises(ConfigError, match="needs train_freq in steps"):
        plan_runs(load_config(data), tmp_path)
    assert not any(tmp_path.iterdir())
    # RLPD beside grouped QC seeds: accepted, each RLPD run its own job.
    data = toy_config(methods=["QC", "RLPD"], seeds=[0, 1])
    data["execution"] = {**data["execution"], "seeds_per_process": {"QC": 2}}
    jobs = plan_jobs(plan_runs(load_config(data), tmp_path))
    assert [[(run.method, run.seed) for run in job] for job in jobs] == [[("QC", 0), ("QC", 1)], [("RLPD", 0)], [("RLPD", 1)]]


def test_the_local_pool_runs_a_group_as_one_job(tmp_path):
    config = write_config(tmp_path / "toy.yaml", grouped_config(3, protocol={**toy_config()["protocol"], "eval_interval": 40}))
    out = tmp_path / "results"
    summaries = run_benchmark(config, out=out, workers=2, report=True)
    assert [summary["status"] for summary in summaries] == ["done"] * 3
    # The runs' locks name the process that ran them: one worker for the three.
    holders = {(run_dir / ".lock").read_text() for run_dir in run_dirs(out)}
    assert len(holders) == 1
    assert (out / "report" / "summary.md").exists()
