"""The paper's curves, and success per task and method at the end of each phase with the paper's success at the same
step beside it (docs/evidence.md §3).

The paper evaluates every 100k steps (1M offline gradient steps, then 1M online env steps); a protocol's phase end is
compared with the paper's first evaluation at or after the same number of steps of that phase, and the table names
that step (e.g. ``100k`` offline, ``1M+200k`` online).
"""

from __future__ import annotations

import re
from importlib import resources

import numpy as np
import pandas as pd

from qc_sb3.benchmarks.reports.stats import bootstrap_mean_ci

PAPER_CURVES = "paper_curves.csv"
# The paper's x-axis: 1M offline gradient steps, then 1M online env steps.
PAPER_OFFLINE_STEPS = 1_000_000
PAPER_ONLINE_STEPS = 1_000_000
_OGBENCH_TASK = re.compile(r"^(?P<family>.+)-play-singletask-task(?P<number>\d+)-v0$")


def paper_task_name(task: str) -> str | None:
    """
    A task's name in the paper's curves: ``cube-double-play-singletask-task2-v0`` -> ``cube-double-play-task2``,
    ``lift-mh-low_dim`` -> ``lift``; None for other tasks.

    :param task: Our task name
    :return: The paper's, or None
    """
    match = _OGBENCH_TASK.match(task)
    if match:
        return f"{match['family']}-play-task{match['number']}"
    if task in ("lift-mh-low_dim", "can-mh-low_dim", "square-mh-low_dim"):
        return task.split("-")[0]
    return None


def read_paper_curves() -> pd.DataFrame:
    """The paper's curves (``benchmarks/reports/paper_curves.csv``, shipped with the package)."""
    with resources.files("qc_sb3.benchmarks.reports").joinpath(PAPER_CURVES).open("r", encoding="utf-8") as file:
        return pd.read_csv(file)


def paper_curve_on_axis(paper: pd.DataFrame, offline_budget: int, online_budget: int) -> pd.DataFrame:
    """
    A paper curve with its steps mapped onto a protocol's axis: its offline phase [0, 1M] onto [0, offline_budget],
    its online phase [1M, 2M] onto [offline_budget, offline_budget + online_budget].

    :param paper: Rows of one task and method of the paper's curves
    :param offline_budget: This protocol's offline gradient steps
    :param online_budget: This protocol's online env steps
    :return: The rows with ``step`` mapped
    """
    steps = paper["step"].to_numpy(dtype=float)
    mapped = np.where(
        steps <= PAPER_OFFLINE_STEPS,
        steps / PAPER_OFFLINE_STEPS * offline_budget,
        offline_budget + (steps - PAPER_OFFLINE_STEPS) / PAPER_ONLINE_STEPS * online_budget,
    )
    return paper.assign(step=mapped)


def paper_success_at(
    paper: pd.DataFrame, paper_task: str | None, method: str, phase: str, steps: int
) -> tuple[float, int] | None:
    """
    The paper's mean success of a task and method at its first evaluation at or after ``steps`` steps of a phase.

    :param paper: The paper's curves (:func:`read_paper_curves`)
    :param paper_task: The task's name in the paper's curves, or None
    :param method: The method
    :param phase: ``offline`` or ``online``
    :param steps: Steps done in that phase
    :return: (success, the paper's step on its own axis), or None where the paper has no such point
    """
    if paper_task is None:
        return None
    target = steps if phase == "offline" else PAPER_OFFLINE_STEPS + steps
    rows = paper[(paper["task"] == paper_task) & (paper["method"] == method) & (paper["step"] >= target)]
    if phase == "offline":
        rows = rows[rows["step"] <= PAPER_OFFLINE_STEPS]
    if rows.empty:
        return None
    first = rows.sort_values("step").iloc[0]
    return float(first["success_mean"]), int(first["step"])


def task_table(results: pd.DataFrame, paper: pd.DataFrame, paper_names: dict[str, str | None], seed: int = 0) -> pd.DataFrame:
    """
    Per task, method and phase: the mean success over seeds at the phase's end, its 95% bootstrap interval, and the
    paper's success at the same step.

    :param results: :func:`qc_sb3.benchmarks.report.load_results` rows
    :param paper: The paper's curves
    :param paper_names: Each task's name in the paper's curves (None if it has none)
    :param seed: Seed of the bootstrap
    :return: Columns task, method, phase, steps, seeds, success, ci95_low, ci95_high, paper_success, paper_step
    """
    rows = []
    for (task, method), group in results.groupby(["task", "method"], sort=True):
        offline_budget = int(group["offline_budget"].iloc[0])
        online_budget = int(group["online_budget"].iloc[0])
        for phase, steps, end in (
            ("offline", offline_budget, offline_budget),
            ("online", online_budget, offline_budget + online_budget),
        ):
            at_end = group[(group["phase"] == phase) & (group["step"] == end)]
            if at_end.empty:
                continue
            mean, low, high = bootstrap_mean_ci(at_end["success"].to_numpy(), seed=seed)
            paper_point = paper_success_at(paper, paper_names.get(str(task)), str(group["base_method"].iloc[0]), phase, steps)
            rows.append(
                {
                    "task": task,
                    "method": method,
                    "phase": phase,
                    "steps": steps,
                    "seeds": len(at_end),
                    "success": mean,
                    "ci95_low": low,
                    "ci95_high": high,
                    "paper_success": None if paper_point is None else paper_point[0],
                    "paper_step": None if paper_point is None else paper_point[1],
                }
            )
    return pd.DataFrame(rows)


def _steps_label(steps: int) -> str:
    if steps < 1000:
        return str(steps)
    if steps >= 1_000_000 and steps % 1_000_000 == 0:
        return f"{steps // 1_000_000}M"
    return f"{steps / 1000:g}k"


def _paper_step_label(phase: str, step: int) -> str:
    if phase == "offline":
        return _steps_label(step)
    return f"1M+{_steps_label(step - PAPER_OFFLINE_STEPS)}"


def task_markdown(table: pd.DataFrame) -> str:
    """
    The task table as Markdown: one line per task and method, each phase's end (ours, then the paper's) side by side.

    :param table: :func:`task_table` rows
    :return: The Markdown text
    """
    lines = [
        "| task | method | seeds | offline end | paper (step) | online end | paper (step) |",
        "|---|---|---|---|---|---|---|",
    ]
    for (task, method), group in table.groupby(["task", "method"], sort=True):
        cells = []
        for phase in ("offline", "online"):
            row = group[group["phase"] == phase]
            if row.empty:
                cells += ["-", "-"]
                continue
            row = row.iloc[0]
            cells.append(
                f"{row['success']:.2f} [{row['ci95_low']:.2f}, {row['ci95_high']:.2f}] @{_steps_label(int(row['steps']))}"
            )
            paper_cell = "-"
            if pd.notna(row["paper_success"]):
                paper_cell = f"{row['paper_success']:.2f} ({_paper_step_label(phase, int(row['paper_step']))})"
            cells.append(paper_cell)
        lines.append(f"| {task} | {method} | {group['seeds'].max()} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
