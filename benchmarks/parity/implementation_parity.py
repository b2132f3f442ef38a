"""Whether qc_sb3 learns as the reference implementation does: the same task, method and protocol run by both, compared
(docs/evidence.md §2, §4).

The runs of another implementation are those of :mod:`qc_sb3.benchmarks.parity.reference_runs` (``implementation:
reference`` in
their ``config.json``). Tests of equal means per task and method, over seeds (each run is one sample), all exact
permutation tests (:func:`qc_sb3.benchmarks.reports.stats.permutation_test`):

* the verdict's test, over the curve: each run's mean success over its evaluations (the area under its curve, divided
  by its length), at 5%. The implementations agree on a task and method when it does not reject;
* per evaluation, to locate a difference: the success rates of the two implementations' runs at that step, each at
  the Bonferroni level 0.05 / (number of evaluations), so that together they are tested at 5%. They are reported, not
  part of the verdict: with them in it, "agree" would need two families at 5% each not to reject, a 10% error rate.

Beside each test, the difference of the means (qc_sb3 minus reference) and its 95% percentile bootstrap interval,
which say how large a difference is, not whether it is one. No verdict is given when the curve's test could not reject
whatever the runs (too few seeds: the smallest p-value of a permutation test with three runs a side is 0.1, with four
0.029); "evaluations apart" is left empty when the evaluations' tests could not (twelve evaluations need six a side).
A percentile bootstrap is no test here: with three runs a side its 99.6% interval excludes 0 whenever the runs of one
side all lie above the other's, which exchangeable seeds do at one evaluation with probability 1/10.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pandas as pd

from qc_sb3.benchmarks.reports.stats import CONFIDENCE, bootstrap_difference_ci, permutation_test, smallest_permutation_p_value

# The ``implementation`` of runs whose config.json names none (this library's), and the reference's.
IMPLEMENTATION = "qc_sb3"
REFERENCE = "reference"
# The level of the curve's test, and of the evaluations' tests together.
LEVEL = 1 - CONFIDENCE


def paired_results(results: pd.DataFrame) -> pd.DataFrame:
    """
    The rows of tasks and methods that both qc_sb3 and the reference ran, at steps both evaluated.

    :param results: :func:`qc_sb3.benchmarks.report.load_results` rows
    :return: Those rows (columns as given)
    """
    if results.empty or "implementation" not in results:
        return results.iloc[:0]
    keys = ["task", "base_method", "step"]
    ours = results[results["implementation"] == IMPLEMENTATION]
    theirs = results[results["implementation"] == REFERENCE]
    common = ours[keys].drop_duplicates().merge(theirs[keys].drop_duplicates(), on=keys)
    return results[results["implementation"].isin([IMPLEMENTATION, REFERENCE])].merge(common, on=keys)


def per_evaluation_differences(paired: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """
    qc_sb3's mean success minus the reference's at each evaluation: its bootstrap interval over seeds and the
    permutation test of equal means at the Bonferroni level.

    :param paired: :func:`paired_results` rows
    :param seed: Seed of the bootstrap (and of the permutation test where it samples)
    :return: Columns task, method, step, phase, seeds_ours, seeds_reference, ours, reference, difference, ci95_low,
        ci95_high, p_value, bonferroni_level, apart (p_value below the level)
    """
    rows = []
    for (task, method), group in paired.groupby(["task", "base_method"], sort=True):
        level = LEVEL / group["step"].nunique()
        for step, at_step in group.groupby("step", sort=True):
            ours, theirs = _split(at_step, "success")
            difference, low, high = bootstrap_difference_ci(ours, theirs, seed=seed)
            p_value = permutation_test(ours, theirs, seed=seed)
            rows.append(
                {
                    "task": task,
                    "method": method,
                    "step": int(step),
                    "phase": at_step["phase"].iloc[0],
                    "seeds_ours": len(ours),
                    "seeds_reference": len(theirs),
                    "ours": ours.mean(),
                    "reference": theirs.mean(),
                    "difference": difference,
                    "ci95_low": low,
                    "ci95_high": high,
                    "p_value": p_value,
                    "bonferroni_level": level,
                    "apart": p_value < level,
                }
            )
    return pd.DataFrame(rows)


def curve_differences(paired: pd.DataFrame, evaluations: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """
    Per task and method: each run's mean success over the evaluations, the difference of their means between the
    implementations with its bootstrap interval and permutation test, and the verdict.

    :param paired: :func:`paired_results` rows
    :param evaluations: :func:`per_evaluation_differences` of the same rows
    :param seed: Seed of the bootstrap (and of the permutation test where it samples)
    :return: Columns task, method, evaluations, seeds_ours, seeds_reference, ours, reference, difference, ci95_low,
        ci95_high, p_value, smallest_p_value (of the curve's test with these runs), evaluations_apart (None where the
        evaluations' tests could not reject), agree (the curve's test did not reject; None where it could not)
    """
    rows = []
    for (task, method), group in paired.groupby(["task", "base_method"], sort=True):
        # One sample per run (its folder): seeds may repeat across the folders of one comparison
        # (qc_sb3.benchmarks.reports.compare).
        per_run = group.groupby(["implementation", "run_dir"], as_index=False)["success"].mean()
        ours, theirs = _split(per_run, "success")
        difference, low, high = bootstrap_difference_ci(ours, theirs, seed=seed)
        p_value = permutation_test(ours, theirs, seed=seed)
        steps = evaluations[(evaluations["task"] == task) & (evaluations["method"] == method)]
        smallest = smallest_permutation_p_value(len(ours), len(theirs))
        # A verdict only where the curve's test could reject; evaluations apart only where theirs could.
        testable = smallest < LEVEL
        locatable = _evaluations_testable(steps)
        apart = int(steps["apart"].sum()) if locatable else None
        rows.append(
            {
                "task": task,
                "method": method,
                "evaluations": len(steps),
                "seeds_ours": len(ours),
                "seeds_reference": len(theirs),
                "ours": ours.mean(),
                "reference": theirs.mean(),
                "difference": difference,
                "ci95_low": low,
                "ci95_high": high,
                "p_value": p_value,
                "smallest_p_value": smallest,
                "evaluations_apart": apart,
                "agree": bool(p_value >= LEVEL) if testable else None,
            }
        )
    return pd.DataFrame(rows)


def _evaluations_testable(steps: pd.DataFrame) -> bool:
    """Whether each evaluation's test could reject at its Bonferroni level with the runs that reached it."""
    smallest = [
        smallest_permutation_p_value(int(row.seeds_ours), int(row.seeds_reference)) for row in steps.itertuples()
    ]
    return bool(smallest) and all(
        value < level for value, level in zip(smallest, steps["bonferroni_level"], strict=True)
    )


def _split(rows: pd.DataFrame, column: str) -> tuple[pd.Series, pd.Series]:
    return (
        rows.loc[rows["implementation"] == IMPLEMENTATION, column],
        rows.loc[rows["implementation"] == REFERENCE, column],
    )


def parity_markdown(curves: pd.DataFrame) -> str:
    """
    The verdicts as Markdown: one line per task and method.

    :param curves: :func:`curve_differences` rows
    :return: The Markdown text
    """
    lines = [
        "| task | method | seeds (qc_sb3 / reference) | evaluations | mean success over the curve: qc_sb3 | reference "
        "| difference [95% CI] | p (permutation) | evaluations apart (Bonferroni) | agree |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in curves.itertuples():
        lines.append(
            f"| {row.task} | {row.method} | {row.seeds_ours} / {row.seeds_reference} | {row.evaluations} | "
            f"{row.ours:.3f} | {row.reference:.3f} | {row.difference:+.3f} [{row.ci95_low:+.3f}, {row.ci95_high:+.3f}] | "
            f"{row.p_value:.3g} | {'-' if pd.isna(row.evaluations_apart) else int(row.evaluations_apart)} | "
            f"{_verdict(row)} |"
        )
    return "\n".join(lines) + "\n"


def _verdict(row: Any) -> str:
    """The verdict of one :func:`curve_differences` row (an ``itertuples`` record)."""
    if row.agree is None or pd.isna(row.agree):
        return f"n/a (smallest attainable p {row.smallest_p_value:.2g}: too few runs to test)"
    return "yes" if row.agree else "no"


def plot_parity(task: str, curves: pd.DataFrame, path: Path) -> None:
    """
    Both implementations' learning curves of one task, one colour per method: qc_sb3 solid, the reference dashed, each
    with its 95% bootstrap band over seeds.

    :param task: The task
    :param curves: :func:`qc_sb3.benchmarks.report.curve_statistics` rows of the task, both implementations' methods
    :param path: The PNG to write
    """
    figure, axis = plt.subplots(figsize=(7, 4.2))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    base_methods = sorted({method.removesuffix(f" ({REFERENCE})") for method in curves["method"]})
    for index, base in enumerate(base_methods):
        for method, style in ((base, "-"), (f"{base} ({REFERENCE})", "--")):
            group = curves[curves["method"] == method].sort_values("step")
            if group.empty:
                continue
            color = colors[index % len(colors)]
            n_seeds = int(group["n_seeds"].max())
            label = f"{base}, {'qc_sb3' if style == '-' else REFERENCE} ({n_seeds} seed{'s' if n_seeds > 1 else ''})"
            axis.plot(group["step"], group["success_mean"], style, color=color, marker="o", markersize=3, label=label)
            axis.fill_between(group["step"], group["ci95_low"], group["ci95_high"], color=color, alpha=0.12, linewidth=0)
    offline = curves.loc[curves["phase"] == "offline", "step"]
    if not offline.empty and (curves["phase"] == "online").any():
        axis.axvline(offline.max(), color="grey", linestyle=":", linewidth=1)
    axis.set_ylim(-0.02, 1.02)
    axis.set_xlabel("offline gradient steps, then online env steps")
    axis.set_ylabel("success rate")
    axis.set_title(f"{task}\nqc_sb3 (solid) and the reference implementation (dashed)", fontsize=10)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7, loc="best")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
