"""Whether qc_sb3 learns as the reference implementation does: the same task, method and protocol run by both, compared
(docs/evidence.md §2, §4).

The runs of another implementation are those of :mod:`benchmarks.reference_runs` (``implementation: reference`` in
their ``config.json``). Two tests per task and method, both over seeds (each run is one sample):

* per evaluation: the difference of the mean success rates (qc_sb3 minus reference) with a percentile bootstrap
  interval that resamples each implementation's seeds independently, at 95% and at the Bonferroni level
  1 - 0.05 / (number of evaluations), so that the curve as a whole is tested at 5%;
* over the curve: each run's mean success over its evaluations (the area under its curve, divided by its length),
  and the bootstrap interval of the difference of those means.

The implementations agree on a task and method when the curve's interval and every Bonferroni interval contain 0; with
fewer than three runs on a side there is no verdict. (With two runs a side, an evaluation's bootstrap distribution
holds four pairings of runs; for exchangeable seeds all four fall on one side of 0 with probability 1/3, so twelve
evaluations would show four "apart" by chance.)
With three seeds per side the intervals are wide: agreement rules out large differences only, which the table shows.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pandas as pd

from benchmarks.stats import CONFIDENCE, bootstrap_difference_ci

# The ``implementation`` of runs whose config.json names none (this library's), and the reference's.
IMPLEMENTATION = "qc_sb3"
REFERENCE = "reference"
# Seeds each implementation needs before a verdict is given (the module's docstring says why not two).
MIN_SEEDS = 3


def paired_results(results: pd.DataFrame) -> pd.DataFrame:
    """
    The rows of tasks and methods that both qc_sb3 and the reference ran, at steps both evaluated.

    :param results: :func:`benchmarks.report.load_results` rows
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
    qc_sb3's mean success minus the reference's at each evaluation, with bootstrap intervals over seeds.

    :param paired: :func:`paired_results` rows
    :param seed: Seed of the bootstrap
    :return: Columns task, method, step, phase, seeds_ours, seeds_reference, ours, reference, difference, ci95_low,
        ci95_high, bonferroni_level, bonferroni_low, bonferroni_high
    """
    rows = []
    for (task, method), group in paired.groupby(["task", "base_method"], sort=True):
        n_evaluations = group["step"].nunique()
        level = 1 - (1 - CONFIDENCE) / n_evaluations
        for step, at_step in group.groupby("step", sort=True):
            ours, theirs = _split(at_step, "success")
            difference, low, high = bootstrap_difference_ci(ours, theirs, seed=seed)
            _, wide_low, wide_high = bootstrap_difference_ci(ours, theirs, confidence=level, seed=seed)
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
                    "bonferroni_level": level,
                    "bonferroni_low": wide_low,
                    "bonferroni_high": wide_high,
                }
            )
    return pd.DataFrame(rows)


def curve_differences(paired: pd.DataFrame, evaluations: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """
    Per task and method: each run's mean success over the evaluations, the difference of their means between the
    implementations with its bootstrap interval, and the verdict.

    :param paired: :func:`paired_results` rows
    :param evaluations: :func:`per_evaluation_differences` of the same rows
    :param seed: Seed of the bootstrap
    :return: Columns task, method, evaluations, seeds_ours, seeds_reference, ours, reference, difference, ci95_low,
        ci95_high, evaluations_apart (Bonferroni intervals without 0), agree (both None below two runs a side)
    """
    rows = []
    for (task, method), group in paired.groupby(["task", "base_method"], sort=True):
        per_run = group.groupby(["implementation", "seed"], as_index=False)["success"].mean()
        ours, theirs = _split(per_run, "success")
        difference, low, high = bootstrap_difference_ci(ours, theirs, seed=seed)
        steps = evaluations[(evaluations["task"] == task) & (evaluations["method"] == method)]
        enough = min(len(ours), len(theirs)) >= MIN_SEEDS
        apart = int(((steps["bonferroni_low"] > 0) | (steps["bonferroni_high"] < 0)).sum()) if enough else None
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
                "evaluations_apart": apart,
                # Below MIN_SEEDS runs a side the intervals are too narrow to test with: no verdict.
                "agree": bool(low <= 0 <= high and apart == 0) if enough else None,
            }
        )
    return pd.DataFrame(rows)


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
        "| difference [95% CI] | evaluations apart (Bonferroni) | agree |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in curves.itertuples():
        lines.append(
            f"| {row.task} | {row.method} | {row.seeds_ours} / {row.seeds_reference} | {row.evaluations} | "
            f"{row.ours:.3f} | {row.reference:.3f} | {row.difference:+.3f} [{row.ci95_low:+.3f}, {row.ci95_high:+.3f}] | "
            f"{'-' if pd.isna(row.evaluations_apart) else int(row.evaluations_apart)} | {_verdict(row.agree)} |"
        )
    return "\n".join(lines) + "\n"


def _verdict(agree: bool | None) -> str:
    if agree is None or pd.isna(agree):
        return f"n/a (< {MIN_SEEDS} seeds a side)"
    return "yes" if agree else "no"


def plot_parity(task: str, curves: pd.DataFrame, path: Path) -> None:
    """
    Both implementations' learning curves of one task, one colour per method: qc_sb3 solid, the reference dashed, each
    with its 95% bootstrap band over seeds.

    :param task: The task
    :param curves: :func:`benchmarks.report.curve_statistics` rows of the task, both implementations' methods
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
