"""Aggregates over tasks and seeds at the end of each phase: the interquartile mean (IQM) of the runs' success rates
with a stratified bootstrap interval, as rliable reports it (Agarwal et al. 2021; docs/evidence.md §4)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from qc_sb3.benchmarks.reports.stats import CONFIDENCE, N_RESAMPLES


def interquartile_mean(values: np.ndarray) -> np.ndarray:
    """
    rliable's IQM along the last axis: the mean of the values left after dropping the lowest and the highest
    ``floor(n / 4)`` of the ``n`` values (SciPy's ``trim_mean(values, 0.25)``).

    :param values: Scores, shape (..., n) with n >= 1
    :return: The IQM of each row, shape (...)
    """
    ordered = np.sort(np.asarray(values, dtype=np.float64), axis=-1)
    cut = ordered.shape[-1] // 4
    return ordered[..., cut : ordered.shape[-1] - cut].mean(axis=-1)


def stratified_bootstrap_iqm_ci(
    groups: Sequence[Sequence[float]],
    n_resamples: int = N_RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = 0,
) -> tuple[float, float, float]:
    """
    The IQM of all runs of all groups, with a percentile bootstrap interval that resamples each group's runs with
    replacement (tasks as strata, rliable's ``StratifiedBootstrap``).

    :param groups: One sequence of run scores per task; none may be empty
    :param n_resamples: Bootstrap resamples
    :param confidence: Coverage of the interval
    :param seed: Seed of the resampling
    :return: (IQM, lower bound, upper bound)
    """
    arrays = [np.asarray(group, dtype=np.float64) for group in groups]
    if not arrays or any(array.ndim != 1 or array.size == 0 for array in arrays):
        raise ValueError("stratified_bootstrap_iqm_ci needs at least one group, each a non-empty 1-D sequence of values")
    rng = np.random.default_rng(seed)
    resampled = np.concatenate(
        [array[rng.integers(0, array.size, size=(n_resamples, array.size))] for array in arrays], axis=1
    )
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(interquartile_mean(resampled), [tail, 100 - tail])
    return float(interquartile_mean(np.concatenate(arrays))), float(low), float(high)


def phase_end_rows(results: pd.DataFrame) -> pd.DataFrame:
    """
    Each run's evaluation at the end of each of its phases, with the phase in column ``end``.

    :param results: ``load_results``'s rows (qc_sb3.benchmarks.report)
    :return: The rows at step ``offline_budget`` of the offline phase and ``offline_budget + online_budget`` of the
        online phase
    """
    ends = []
    for phase, end_step in (
        ("offline", results["offline_budget"]),
        ("online", results["offline_budget"] + results["online_budget"]),
    ):
        ends.append(results[(results["phase"] == phase) & (results["step"] == end_step)].assign(end=phase))
    return pd.concat(ends, ignore_index=True)


def iqm_table(results: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """
    IQM of the runs' success at the end of each phase per method, over all tasks and seeds of the results.

    :param results: ``load_results``'s rows of one campaign
    :param seed: Seed of the bootstrap
    :return: Columns method, phase, tasks, runs, iqm, ci95_low, ci95_high
    """
    rows = []
    for (method, phase), group in phase_end_rows(results).groupby(["method", "end"], sort=True):
        per_task = [task_group["success"].to_numpy() for _, task_group in group.groupby("task")]
        point, low, high = stratified_bootstrap_iqm_ci(per_task, seed=seed)
        rows.append(
            {"method": method, "phase": phase, "tasks": len(per_task), "runs": len(group), "iqm": point}
            | {"ci95_low": low, "ci95_high": high}
        )
    return pd.DataFrame(rows, columns=["method", "phase", "tasks", "runs", "iqm", "ci95_low", "ci95_high"])


def iqm_markdown(table: pd.DataFrame) -> str:
    """
    The IQM table as Markdown: one line per method, the offline and online ends side by side.

    :param table: :func:`iqm_table`'s rows
    :return: The Markdown text
    """
    lines = ["| method | tasks | runs | offline end | online end |", "|---|---|---|---|---|"]
    for method, group in table.groupby("method", sort=True):
        cells = {
            phase: "-"
            if (row := group[group["phase"] == phase]).empty
            else f"{row['iqm'].iloc[0]:.2f} [{row['ci95_low'].iloc[0]:.2f}, {row['ci95_high'].iloc[0]:.2f}]"
            for phase in ("offline", "online")
        }
        lines.append(f"| {method} | {group['tasks'].max()} | {group['runs'].max()} | {cells['offline']} | {cells['online']} |")
    return "\n".join(lines) + "\n"
