"""Training statistics: export from TensorBoard logs and reference CSVs, end-of-phase means, the name mapping, the
comparison table, the command and the runner's export."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from stable_baselines3.common.logger import configure
from test_benchmarks_runs import prepared_run

import qc_sb3.benchmarks.runner.runs
from qc_sb3.benchmarks.parity.reference_runs import execute_reference_run
from qc_sb3.benchmarks.report import write_report
from qc_sb3.benchmarks.runner.config import load_config
from qc_sb3.benchmarks.runner.planning import plan_runs
from qc_sb3.benchmarks.runner.runs import execute_run
from qc_sb3.benchmarks.runner.training_stats import (
    STATISTICS,
    TRAIN_STATS_FILE,
    comparison_markdown,
    comparison_table,
    export_run,
    main,
    phase_end_values,
    read_train_stats,
    statistic_names,
)

from test_benchmarks_toys import TOY_TASK, keep_torch_threads, toy_suite  # noqa: F401 (autouse fixtures of this module)

TASK = "cube-single-play-singletask-task1-v0"
PROTOCOL = {"offline_steps": 100, "online_steps": 200, "eval_interval": 50, "eval_episodes": 2}


def write_config(run_dir: Path, seed: int = 0, method: str = "QC", implementation: str | None = None) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    config = {"task": TASK, "suite": "ogbench", "domain": "cube-single", "method": method, "seed": seed, "protocol": PROTOCOL}
    if implementation is not None:
        config["implementation"] = implementation
    (run_dir / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return run_dir


def log_session(folder: Path, dumps: list[tuple[int, dict[str, float]]]) -> None:
    """One session of the runner's TensorBoard logger (a new event file): ``dumps`` of (step, {tag: value})."""
    logger = configure(str(folder), ["tensorboard"])
    for step, values in dumps:
        for tag, value in values.items():
            logger.record(tag, value)
        logger.dump(step=step)
    logger.close()


def rows_of(path: Path) -> list[tuple[str, int, str, float]]:
    with open(path, encoding="utf-8", newline="") as file:
        return [(row["phase"], int(row["step"]), row["tag"], float(row["value"])) for row in csv.DictReader(file)]


def test_export_holds_the_values_written_to_tensorboard(tmp_path):
    run_dir = write_config(tmp_path / "run")
    log_session(
        run_dir / "tensorboard" / "offline",
        [(10, {"offline/q_mean": -1.5, "offline/critic_loss": 0.1}), (20, {"offline/q_mean": -2.25, "eval/success": 0.5})],
    )
    log_session(run_dir / "tensorboard" / "online", [(7, {"train/q_mean": -3.0, "rollout/ep_rew_mean": -40.0})])
    path = export_run(run_dir)
    assert path == run_dir / TRAIN_STATS_FILE
    # Online env steps count on from the offline budget (100), as eval.csv's step does.
    assert rows_of(path) == [
        ("offline", 10, "offline/critic_loss", 0.1),  # TensorBoard's float32 0.1, written as its shortest decimal
        ("offline", 10, "offline/q_mean", -1.5),
        ("offline", 20, "eval/success", 0.5),
        ("offline", 20, "offline/q_mean", -2.25),
        ("online", 107, "rollout/ep_rew_mean", -40.0),
        ("online", 107, "train/q_mean", -3.0),
    ]
    assert [path.name for path in run_dir.iterdir() if path.name.startswith(".")] == []  # no temporary file left


def test_a_resumed_runs_stale_logs_are_dropped(tmp_path):
    run_dir = write_config(tmp_path / "run")
    offline = run_dir / "tensorboard" / "offline"
    # Session 1 evaluates at 50, logs at 60 and is killed; session 2 resumes from the checkpoint at 50: its first log
    # is at 70, so the value at 60 belongs to the lost part of session 1.
    log_session(offline, [(50, {"offline/q_mean": 1.0, "eval/success": 0.0}), (60, {"offline/q_mean": 2.0})])
    log_session(offline, [(70, {"offline/q_mean": 3.0}), (100, {"offline/q_mean": 4.0, "eval/success": 1.0})])
    # Session 3 starts with no offline scalars (it resumed online): its empty file changes nothing.
    log_session(offline, [])
    online = run_dir / "tensorboard" / "online"
    # Killed online before its first evaluation, then started again from the offline end: all of session 1 is stale.
    log_session(online, [(30, {"train/q_mean": -1.0})])
    log_session(online, [(20, {"train/q_mean": -2.0}), (50, {"train/q_mean": -3.0, "eval/success": 0.5})])
    rows = rows_of(export_run(run_dir))
    assert [(step, value) for phase, step, tag, value in rows if tag == "offline/q_mean"] == [(50, 1.0), (70, 3.0), (100, 4.0)]
    assert [(step, value) for phase, step, tag, value in rows if tag == "train/q_mean"] == [(120, -2.0), (150, -3.0)]


def test_export_names_the_folder_without_logs(tmp_path):
    run_dir = write_config(tmp_path / "run")
    with pytest.raises(FileNotFoundError, match="no TensorBoard event files"):
        export_run(run_dir)
    with pytest.raises(FileNotFoundError, match=r"no config\.json"):
        export_run(tmp_path / "elsewhere")
    assert not (run_dir / TRAIN_STATS_FILE).exists()


def test_end_of_phase_means_on_a_hand_worked_example():
    stats = pd.DataFrame(
        [
            # Not in step order: the last values are the last by step.
            ("offline", 40, "offline/q_mean", 4.0),
            ("offline", 10, "offline/q_mean", 100.0),
            ("offline", 20, "offline/q_mean", 2.0),
            ("offline", 30, "offline/q_mean", 3.0),
            ("offline", 40, "offline/gradient_steps", 40.0),  # a counter, not a statistic
            ("offline", 40, "eval/success", 1.0),  # evaluations are eval.csv's
            ("online", 150, "train/q_mean", -6.0),
            ("online", 160, "train/learning_rate", 3e-4),
            ("online", 160, "rollout/ep_rew_mean", -9.0),
        ],
        columns=["phase", "step", "tag", "value"],
    )
    ends = phase_end_values(statistic_names(stats, "qc_sb3"), last=3)
    assert ends.to_dict("records") == [
        {"phase": "offline", "statistic": "q_mean", "value": (2.0 + 3.0 + 4.0) / 3, "values": 3},
        {"phase": "online", "statistic": "q_mean", "value": -6.0, "values": 1},  # fewer than 3: all of them
    ]
    with pytest.raises(ValueError, match="last must be >= 1, got 0"):
        phase_end_values(statistic_names(stats, "qc_sb3"), last=0)


def write_reference_run(run_dir: Path, seed: int = 0) -> Path:
    """A reference run as qc_sb3.benchmarks.parity.reference_runs leaves it: its agent CSVs, ``step`` on eval.csv's axis."""
    write_config(run_dir, seed=seed, implementation="reference")
    header = "actor/actor_loss,actor/bc_flow_loss,actor/distill_loss,critic/critic_loss,critic/q_mean,grad/norm,step\n"
    (run_dir / "reference_offline_agent.csv").write_text(
        header + "0.5,0.5,0.0,2.0,-10.0,7.0,50\n0.25,0.25,0.0,4.0,-20.0,9.0,100\n", encoding="utf-8"
    )
    (run_dir / "reference_online_agent.csv").write_text(header + "0.125,0.125,0.0,8.0,-30.0,11.0,300\n", encoding="utf-8")
    (run_dir / "DONE").write_text("done\n", encoding="utf-8")
    return run_dir


def test_the_reference_csvs_are_exported_and_named_as_ours(tmp_path):
    run_dir = write_reference_run(tmp_path / "reference" / "seed0")
    stats = read_train_stats(export_run(run_dir))
    assert len(stats) == 3 * 6
    assert stats[(stats["tag"] == "critic/q_mean")][["phase", "step", "value"]].values.tolist() == [
        ["offline", 50, -10.0],
        ["offline", 100, -20.0],
        ["online", 300, -30.0],
    ]
    ends = phase_end_values(statistic_names(stats, "reference"), last=2)
    values = {(row.phase, row.statistic): row.value for row in ends.itertuples()}
    # The mapped columns take our names; the reference's own statistics keep theirs.
    assert values[("offline", "q_mean")] == (-10.0 - 20.0) / 2
    assert values[("offline", "bc_flow_loss")] == (0.5 + 0.25) / 2
    assert values[("online", "critic_loss")] == 8.0
    assert values[("online", "distill_loss")] == 0.0
    assert values[("offline", "grad/norm")] == 8.0
    assert {statistic for _, statistic in values} == {
        "actor_loss",
        "bc_flow_loss",
        "distill_loss",
        "critic_loss",
        "q_mean",
        "grad/norm",
    }
    assert {column for _, column, _ in STATISTICS} <= set(stats["tag"])


def write_train_stats(run_dir: Path, rows: list[tuple[str, int, str, float]]) -> None:
    pd.DataFrame(rows, columns=["phase", "step", "tag", "value"]).to_csv(run_dir / TRAIN_STATS_FILE, index=False)


def comparison_runs(root: Path) -> list[Path]:
    """Two qc_sb3 seeds of QC and one reference seed, with hand-made statistics."""
    runs = []
    for seed, q_values in ((0, (9.0, -1.0, -2.0)), (1, (9.0, -3.0, -4.0))):
        run_dir = write_config(root / "qc_sb3" / "QC" / f"seed{seed}", seed=seed)
        write_train_stats(
            run_dir,
            [("offline", step, "offline/q_mean", value) for step, value in zip((10, 20, 30), q_values, strict=True)]
            + [("online", 150, "train/critic_loss", float(seed + 1)), ("online", 150, "train/target_mean", 5.0)],
        )
        runs.append(run_dir)
    reference = write_config(root / "reference" / "QC" / "seed0", implementation="reference")
    write_train_stats(reference, [("offline", 20, "critic/q_mean", -6.0), ("offline", 30, "critic/q_mean", -8.0)])
    return [*runs, reference]


def test_the_comparison_averages_each_runs_phase_end_over_seeds(tmp_path):
    table = comparison_table(comparison_runs(tmp_path), last=2)
    cell = table[(table["implementation"] == "qc_sb3") & (table["statistic"] == "q_mean")].iloc[0]
    # Seed 0's last two offline values average -1.5, seed 1's -3.5.
    assert (cell["phase"], cell["runs"], cell["mean"]) == ("offline", 2, pytest.approx((-1.5 - 3.5) / 2))
    assert cell["std"] == pytest.approx(np.std([-1.5, -3.5], ddof=1))
    theirs = table[(table["implementation"] == "reference") & (table["statistic"] == "q_mean")].iloc[0]
    assert (theirs["runs"], theirs["mean"]) == (1, -7.0)
    markdown = comparison_markdown(table)
    assert f"| {TASK} | QC | 100 + 200 | offline | q_mean | -2.5 (2) | -7 (1) |" in markdown
    assert f"| {TASK} | QC | 100 + 200 | online | critic_loss | 1.5 (2) | - |" in markdown
    assert "target_mean" not in markdown  # logged by one side only: in the CSV, not in the side-by-side table
    assert "target_mean" in set(table["statistic"])


def test_the_report_has_a_training_statistics_section(tmp_path):
    results = tmp_path / "results"
    for run_dir in comparison_runs(results):
        pd.DataFrame([{"step": 100, "phase": "offline", "success": 0.5}]).to_csv(run_dir / "eval.csv", index=False)
    out = write_report(results, tmp_path / "report")
    text = (out / "summary.md").read_text(encoding="utf-8")
    assert "## Training statistics" in text and "mean of its last 5 logged values" in text
    # The report averages a run's last 5 values: here all three of each seed, (9 - 1 - 2) / 3 and (9 - 3 - 4) / 3.
    assert f"| {TASK} | QC | 100 + 200 | offline | q_mean | 1.333 (2) | -7 (1) |" in text
    assert pd.read_csv(out / "training_stats.csv")["runs"].sum() == 2 + 2 + 2 + 1


def test_the_command_exports_finished_runs_once(tmp_path, capsys, monkeypatch):
    results = tmp_path / "results"
    finished = write_reference_run(results / TASK / "QC (reference)" / "seed0")
    unfinished = write_reference_run(results / TASK / "QC (reference)" / "seed1", seed=1)
    (unfinished / "DONE").unlink()
    scratch = write_reference_run(results / TASK / "reference-run-x" / "final")  # a runner's copy, not a run's folder
    kept = write_reference_run(results / TASK / "QC (reference)" / "seed2", seed=2)
    (kept / TRAIN_STATS_FILE).write_text("already here\n", encoding="utf-8")
    assert main([str(results)]) == 0
    assert (finished / TRAIN_STATS_FILE).exists()
    assert not (unfinished / TRAIN_STATS_FILE).exists() and not (scratch / TRAIN_STATS_FILE).exists()
    assert (kept / TRAIN_STATS_FILE).read_text(encoding="utf-8") == "already here\n"
    first = (finished / TRAIN_STATS_FILE).read_bytes()
    assert "1 run(s) exported, 0 failed" in capsys.readouterr().out
    assert main([str(results)]) == 0  # idempotent: nothing left to export
    assert "0 run(s) exported" in capsys.readouterr().out
    assert (finished / TRAIN_STATS_FILE).read_bytes() == first

    # A write that fails half-way leaves neither a partial file nor a temporary one, and is reported.
    (finished / TRAIN_STATS_FILE).unlink()
    real_writer = csv.writer

    class FailingWriter:
        def __init__(self, file):
            self.writer = real_writer(file)

        def writerow(self, row):
            self.writer.writerow(row)

        def writerows(self, rows):
            self.writer.writerow(next(iter(rows)))
            raise OSError("disk full")

    monkeypatch.setattr("qc_sb3.benchmarks.runner.training_stats.csv.writer", FailingWriter)
    assert main([str(results)]) == 1
    assert "disk full" in capsys.readouterr().err
    assert sorted(path.name for path in finished.iterdir()) == sorted(
        ["config.json", "DONE", "reference_offline_agent.csv", "reference_online_agent.csv"]
    )


def test_the_runner_exports_before_done_and_finishes_if_it_fails(tmp_path, monkeypatch):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = prepared_run(tmp_path / "out")
    execute_run(run)
    run_dir = Path(run.run_dir)
    stats = read_train_stats(run_dir / TRAIN_STATS_FILE)
    # The toy run logs offline every 10 gradient steps; online, the updates' losses at its evaluations (20, 40).
    for phase, tag, offset in (("offline", "offline/q_mean", 0), ("online", "train/q_mean", 40)):
        (events,) = (run_dir / "tensorboard" / phase).glob("events.out.tfevents.*")
        accumulator = EventAccumulator(str(events))
        accumulator.Reload()
        logged = [(event.step + offset, np.float32(event.value)) for event in accumulator.Scalars(tag)]
        exported = stats[stats["tag"] == tag]
        assert [(step, np.float32(value)) for step, value in zip(exported["step"], exported["value"], strict=True)] == logged
    assert stats[stats["tag"] == "offline/q_mean"]["step"].tolist() == [10, 20, 30, 40]
    assert stats[stats["tag"] == "train/q_mean"]["step"].tolist() == [60, 80]

    # A failed export (derived data, rebuilt by the CLI) warns and the run still finishes.
    def failing_export(run_dir):
        raise OSError("disk full")

    monkeypatch.setattr(qc_sb3.benchmarks.runner.runs, "export_run", failing_export)
    other = prepared_run(tmp_path / "other")
    with pytest.warns(UserWarning, match="train_stats.csv not written .OSError: disk full"):
        execute_run(other)
    assert (Path(other.run_dir) / "DONE").exists() and not (Path(other.run_dir) / TRAIN_STATS_FILE).exists()


FAKE_REFERENCE_MAIN = '''"""Stands for the reference's main.py: writes its save folder's files as the reference does."""
import sys
from pathlib import Path

save = Path(next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--save_dir="))) / "qc" / "evidence" / "a" / "b"
save.mkdir(parents=True)
(save / "eval.csv").write_text("step,success\\n10000,0.5\\n30000,1.0\\n")
(save / "offline_agent.csv").write_text("critic/q_mean,actor/bc_flow_loss,step\\n-5.0,0.25,10000\\n")
(save / "online_agent.csv").write_text("critic/q_mean,actor/bc_flow_loss,step\\n-7.5,0.125,30000\\n")
'''


def test_the_reference_runner_exports_before_done(tmp_path):
    config = load_config(Path(__file__).parents[1] / "benchmarks" / "configs" / "evidence-parity.yaml")
    run = plan_runs(config, tmp_path / "out")[0]
    reference_root = tmp_path / "reference"
    reference_root.mkdir()
    (reference_root / "main.py").write_text(FAKE_REFERENCE_MAIN, encoding="utf-8")
    execute_reference_run(run, reference_root, sys.executable, [tmp_path / "data.npz"])
    run_dir = Path(run.run_dir)
    assert (run_dir / "DONE").exists()
    assert rows_of(run_dir / TRAIN_STATS_FILE) == [
        ("offline", 10000, "actor/bc_flow_loss", 0.25),
        ("offline", 10000, "critic/q_mean", -5.0),
        ("online", 30000, "actor/bc_flow_loss", 0.125),
        ("online", 30000, "critic/q_mean", -7.5),
    ]
