"""Training statistics of finished runs as small committed files, and their comparison across methods and
implementations (docs/evidence.md §5).

Run: ``python -m qc_sb3.benchmarks.runner.training_stats RESULTS_DIR``: writes ``train_stats.csv`` into every finished run (a
``DONE`` file) under the folder that lacks one; the runners write it themselves before ``DONE``.

``train_stats.csv`` is long: one row per logged value, columns ``phase`` (offline, online), ``step`` (the x-axis of
``eval.csv``: offline gradient steps, then the offline budget plus online env steps), ``tag`` and ``value``. A qc_sb3
run's rows are its TensorBoard scalars (``tensorboard/offline`` and ``tensorboard/online``, each tag under its own
name: ``offline/q_mean``, ``train/critic_loss``, ``rollout/ep_rew_mean``, ``eval/success``...); a reference run's
(:mod:`qc_sb3.benchmarks.parity.reference_runs`) are the columns of its ``reference_offline_agent.csv`` and
``reference_online_agent.csv`` (``critic/q_mean``, ``actor/bc_flow_loss``, ``grad/norm``...).

The comparison reads each run's value of a statistic at the end of a phase (the mean of its last ``K`` logged values
in that phase, :data:`END_VALUES`), names the statistics of both implementations alike (:data:`STATISTICS`), and
averages over seeds, per task, method, budgets and implementation.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from tensorboard.backend.event_processing import event_accumulator

from qc_sb3.benchmarks.parity.implementation_parity import IMPLEMENTATION, REFERENCE
from qc_sb3.benchmarks.runner.atomic import atomic_path

TRAIN_STATS_FILE = "train_stats.csv"
COLUMNS = ("phase", "step", "tag", "value")
PHASES = ("offline", "online")
# The mean of the last END_VALUES logged values of a phase is a run's statistic at the end of that phase.
END_VALUES = 5
# The statistics both implementations log with the same meaning (checked against the reference's agents/acfql.py,
# and for q_mean and critic_loss also agents/acrlpd.py): name here and in qc_sb3 (``offline/<name>`` in the offline
# phase, ``train/<name>`` online), the reference's column, and what it is in both.
STATISTICS = (
    ("q_mean", "critic/q_mean", "mean of Q over the K critics and the batch's chunks (B, K)"),
    ("critic_loss", "critic/critic_loss", "TD loss: mean over (K, B) of (Q - y)^2 * valid"),
    ("bc_flow_loss", "actor/bc_flow_loss", "flow-matching loss on the batch's chunks"),
    ("actor_loss", "actor/actor_loss", "the actor's optimized loss (QC: bc_flow_loss; QC-FQL: + alpha distill + Q loss)"),
    ("distill_loss", "actor/distill_loss", "QC-FQL's distillation loss (the reference logs 0 for best-of-N)"),
)
REFERENCE_NAMES = {column: name for name, column, _ in STATISTICS}
# qc_sb3's tags of training statistics, per phase; counters and schedules are not statistics.
QC_SB3_PREFIXES = {"offline": "offline/", "online": "train/"}
NOT_STATISTICS = {"gradient_steps", "learning_rate", "n_updates"}


def export_run(run_dir: str | Path) -> Path:
    """
    Write a finished run's ``train_stats.csv`` (atomically: a reader never sees half a file).

    :param run_dir: The run's folder (``config.json`` and, for qc_sb3, ``tensorboard/``; for the reference, its
        ``reference_<phase>_agent.csv``)
    :return: The file written
    :raises FileNotFoundError: Naming the folder, if it holds no ``config.json`` or no logs to read
    """
    run_dir = Path(run_dir)
    config = _read_config(run_dir)
    offline_budget = int(config["protocol"]["offline_steps"])
    if config.get("implementation", IMPLEMENTATION) == REFERENCE:
        rows = _reference_rows(run_dir)
    else:
        rows = _tensorboard_rows(run_dir, offline_budget)
    rows.sort(key=lambda row: (PHASES.index(row[0]), row[1], row[2]))
    target = run_dir / TRAIN_STATS_FILE
    with atomic_path(target) as temporary, open(temporary, "w", encoding="utf-8", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(COLUMNS)
        writer.writerows((phase, step, tag, repr(value)) for phase, step, tag, value in rows)
    return target


def _read_config(run_dir: Path) -> dict:
    path = run_dir / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir} holds no config.json: not a run folder")
    return json.loads(path.read_text(encoding="utf-8"))


def _reference_rows(run_dir: Path) -> list[tuple[str, int, str, float]]:
    """The reference's agent CSVs (its ``step`` is already the x-axis of ``eval.csv``)."""
    rows = []
    paths = {phase: run_dir / f"reference_{phase}_agent.csv" for phase in PHASES}
    if not any(path.is_file() for path in paths.values()):
        raise FileNotFoundError(f"{run_dir} holds no reference_offline_agent.csv or reference_online_agent.csv")
    for phase, path in paths.items():
        if not path.is_file():
            continue
        with open(path, encoding="utf-8", newline="") as file:
            for record in csv.DictReader(file):
                step = int(float(record.pop("step")))
                rows.extend((phase, step, tag, float(value)) for tag, value in record.items() if value != "")
    return rows


def _tensorboard_rows(run_dir: Path, offline_budget: int) -> list[tuple[str, int, str, float]]:
    """qc_sb3's TensorBoard scalars of both phases; online env steps are moved past the offline budget."""
    rows = []
    found = False
    for phase in PHASES:
        folder = run_dir / "tensorboard" / phase
        files = sorted(folder.glob("events.out.tfevents.*")) if folder.is_dir() else []
        found = found or bool(files)
        offset = 0 if phase == "offline" else offline_budget
        for (tag, step), value in phase_scalars(files).items():
            rows.append((phase, step + offset, tag, value))
    if not found:
        raise FileNotFoundError(f"{run_dir} holds no TensorBoard event files under tensorboard/offline or tensorboard/online")
    return rows


def phase_scalars(event_files: Iterable[Path]) -> dict[tuple[str, int], float]:
    """
    The scalars of one phase's event files, one value per tag and step, as the finished run holds them.

    Each session of a resumed run writes a file of its own, and restarts from its latest checkpoint, taken right
    after an evaluation: what an earlier session logged after that evaluation was done again (or, online, differently)
    and is dropped. The evaluation a session resumed from is the last one (``eval/*``, in any earlier file) before its
    first logged step.

    :param event_files: The phase's event files (their order does not matter: they are ordered by their first event)
    :return: ``{(tag, step): value}``, each value the float32 TensorBoard holds, as its shortest decimal
    """
    sessions = []
    for path in event_files:
        accumulator = event_accumulator.EventAccumulator(str(path), size_guidance={event_accumulator.SCALARS: 0})
        accumulator.Reload()
        events = {tag: accumulator.Scalars(tag) for tag in accumulator.Tags()["scalars"]}
        if any(events.values()):
            sessions.append((accumulator.FirstEventTimestamp(), str(path), events))
    sessions.sort(key=lambda session: session[:2])
    values: dict[tuple[str, int], float] = {}
    evaluation_steps: set[int] = set()
    for _, _, events in sessions:
        first_step = min(event.step for tag_events in events.values() for event in tag_events)
        resumed_from = max((step for step in evaluation_steps if step < first_step), default=None)
        if values:
            kept_up_to = -1 if resumed_from is None else resumed_from
            values = {key: value for key, value in values.items() if key[1] <= kept_up_to}
        for tag, tag_events in events.items():
            for event in tag_events:
                values[(tag, event.step)] = float(str(np.float32(event.value)))
                if tag.startswith("eval/"):
                    evaluation_steps.add(event.step)
    return values


def read_train_stats(path: str | Path) -> pd.DataFrame:
    """
    A ``train_stats.csv``.

    :param path: The file
    :return: Its rows (phase, step, tag, value)
    """
    return pd.read_csv(path, dtype={"phase": str, "step": np.int64, "tag": str, "value": np.float64})


def statistic_names(stats: pd.DataFrame, implementation: str) -> pd.DataFrame:
    """
    A run's training statistics under the names of :data:`STATISTICS`; other statistics keep their own names
    (qc_sb3's without their phase prefix), logs that are not training statistics are dropped.

    :param stats: :func:`read_train_stats`'s rows of one run
    :param implementation: The run's implementation (``qc_sb3`` or ``reference``)
    :return: Columns phase, step, statistic, value
    """
    if implementation == REFERENCE:
        named = stats.assign(statistic=stats["tag"].map(lambda tag: REFERENCE_NAMES.get(tag, tag)))
    else:
        prefix = stats["phase"].map(QC_SB3_PREFIXES)
        own = np.array([tag.startswith(start) for tag, start in zip(stats["tag"], prefix, strict=True)], dtype=bool)
        named = stats[own].assign(statistic=[tag.split("/", 1)[1] for tag in stats["tag"][own]])
        named = named[~named["statistic"].isin(NOT_STATISTICS)]
    return named[["phase", "step", "statistic", "value"]].reset_index(drop=True)


def phase_end_values(named: pd.DataFrame, last: int = END_VALUES) -> pd.DataFrame:
    """
    Each statistic at the end of each phase: the mean of its ``last`` values logged in that phase (all of them if
    fewer), by step.

    :param named: :func:`statistic_names`'s rows of one run
    :param last: How many values
    :return: Columns phase, statistic, value, values (how many were averaged)
    """
    if last < 1:
        raise ValueError(f"last must be >= 1, got {last}")
    rows = []
    for (phase, statistic), group in named.groupby(["phase", "statistic"], sort=True):
        ends = group.sort_values("step", kind="stable")["value"].to_numpy()[-last:]
        rows.append({"phase": phase, "statistic": statistic, "value": float(ends.mean()), "values": len(ends)})
    return pd.DataFrame(rows, columns=["phase", "statistic", "value", "values"])


def comparison_table(run_dirs: Iterable[str | Path], last: int = END_VALUES) -> pd.DataFrame:
    """
    The statistics at the end of each phase, mean over seeds, per task, method, budgets and implementation.

    :param run_dirs: Run folders with a ``train_stats.csv``
    :param last: The values averaged at the end of a phase (:func:`phase_end_values`)
    :return: Columns task, method, offline_steps, online_steps, implementation, phase, statistic, runs, mean, std
        (the standard deviation over seeds, NaN for one seed)
    """
    frames = []
    for run_dir in run_dirs:
        run_dir = Path(run_dir)
        config = _read_config(run_dir)
        implementation = config.get("implementation", IMPLEMENTATION)
        ends = phase_end_values(statistic_names(read_train_stats(run_dir / TRAIN_STATS_FILE), implementation), last)
        frames.append(
            ends.assign(
                task=config["task"],
                method=config["method"],
                offline_steps=int(config["protocol"]["offline_steps"]),
                online_steps=int(config["protocol"]["online_steps"]),
                implementation=implementation,
                seed=config["seed"],
            )
        )
    keys = ["task", "method", "offline_steps", "online_steps", "implementation", "phase", "statistic"]
    if not frames:
        return pd.DataFrame(columns=[*keys, "runs", "mean", "std"])
    ends = pd.concat(frames, ignore_index=True)
    table = ends.groupby(keys, sort=True)["value"].agg(runs="count", mean="mean", std="std").reset_index()
    return table


def comparison_markdown(table: pd.DataFrame) -> str:
    """
    The statistics of :data:`STATISTICS` side by side: one line per task, method, budgets, phase and statistic, a
    column per implementation (mean over seeds, the number of runs in brackets).

    :param table: :func:`comparison_table`'s rows
    :return: The Markdown text
    """
    names = [name for name, _, _ in STATISTICS]
    shown = table[table["statistic"].isin(names)]
    lines = [
        f"| task | method | budgets | phase | statistic | {IMPLEMENTATION} | {REFERENCE} |",
        "|---|---|---|---|---|---|---|",
    ]
    keys = ["task", "method", "offline_steps", "online_steps", "phase", "statistic"]
    order = {name: index for index, name in enumerate(names)}
    groups = sorted(
        shown.groupby(keys, sort=False),
        key=lambda item: (*item[0][:4], PHASES.index(item[0][4]), order[item[0][5]]),
    )
    for (task, method, offline_steps, online_steps, phase, statistic), group in groups:
        cells = []
        for implementation in (IMPLEMENTATION, REFERENCE):
            row = group[group["implementation"] == implementation]
            cells.append("-" if row.empty else f"{row['mean'].iloc[0]:.4g} ({row['runs'].iloc[0]})")
        lines.append(
            f"| {task} | {method} | {offline_steps} + {online_steps} | {phase} | {statistic} | {cells[0]} | {cells[1]} |"
        )
    return "\n".join(lines) + "\n"


def training_stats_section(run_dirs: Iterable[str | Path], out: str | Path, last: int = END_VALUES) -> str:
    """
    The report's "Training statistics": writes ``<out>/training_stats.csv`` (:func:`comparison_table`) and returns
    the Markdown section; nothing (and no file) when no run has a ``train_stats.csv``.

    :param run_dirs: Run folders with a ``train_stats.csv``
    :param out: The report folder
    :param last: The values averaged at the end of a phase
    :return: The Markdown section, or ""
    """
    table = comparison_table(run_dirs, last)
    if table.empty:
        return ""
    with atomic_path(Path(out) / "training_stats.csv") as temporary:
        table.to_csv(temporary, index=False, float_format="%.7g")  # the logs' float32 precision
    mapping = "\n".join(f"| {name} | {column} | {meaning} |" for name, column, meaning in STATISTICS)
    return (
        "\n## Training statistics\n\n"
        f"Each run's statistic at the end of a phase is the mean of its last {last} logged values in that phase; the "
        "table gives its mean over seeds (runs in brackets). qc_sb3 logs the mean over the gradient steps since its "
        "previous log offline, over the last train() call's updates online; the reference one update's values every "
        "log interval (docs/evidence.md §5). Every statistic, including those one side logs alone, is in "
        "training_stats.csv. The names:\n\n"
        "| statistic (qc_sb3: offline/, train/) | reference | meaning in both |\n|---|---|---|\n"
        + mapping
        + "\n\n"
        + comparison_markdown(table)
    )


def export_results(results_dir: str | Path) -> tuple[list[Path], list[str]]:
    """
    Export every finished run under a folder that has no ``train_stats.csv`` yet (so a second call does nothing).

    :param results_dir: The results folder
    :return: The files written, and a message per run that could not be exported
    """
    written, failed = [], []
    for done in sorted(Path(results_dir).rglob("DONE")):
        run_dir = done.parent
        if (run_dir / TRAIN_STATS_FILE).exists() or not _is_run_folder(run_dir):
            continue
        try:
            written.append(export_run(run_dir))
        except (OSError, ValueError, KeyError) as error:
            failed.append(f"{run_dir}: {type(error).__name__}: {error}")
    return written, failed


def _is_run_folder(folder: Path) -> bool:
    """A run's own folder (``.../seed<k>/`` with its config.json), not a runner's scratch copy of one."""
    try:
        config = _read_config(folder)
    except (OSError, ValueError):
        return False
    return folder.name == f"seed{config.get('seed')}"


def main(argv: Sequence[str] | None = None) -> int:
    """
    The ``python -m qc_sb3.benchmarks.runner.training_stats`` command.

    :param argv: Arguments (default: the command line's)
    :return: The exit status: 1 if a run could not be exported
    """
    parser = argparse.ArgumentParser(
        prog="python -m qc_sb3.benchmarks.runner.training_stats", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "results_dir", help="a results folder (runs of qc_sb3.benchmarks.run or qc_sb3.benchmarks.parity.reference_runs)"
    )
    args = parser.parse_args(argv)
    if not Path(args.results_dir).is_dir():
        parser.error(f"{args.results_dir} is not a folder")
    written, failed = export_results(args.results_dir)
    for path in written:
        print(f"written: {path}")
    for message in failed:
        print(f"not exported: {message}", file=sys.stderr)
    print(f"{len(written)} run(s) exported, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
