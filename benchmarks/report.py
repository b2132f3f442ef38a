"""Learning curves and final-success tables of a results folder, with the paper's curves alongside.

Run: ``python -m qc_sb3.benchmarks.report RESULTS_DIR [--also DIR ...] [--out DIR] [--finished-only]`` (default
``RESULTS_DIR/report``); ``--also`` pools the runs under other folders (a results folder, or one task's or method's
folder in it) with those of ``RESULTS_DIR``, e.g. a variant's runs beside the committed runs of the method it varies.
Runs of another implementation (``implementation`` in their ``config.json``,
:mod:`qc_sb3.benchmarks.parity.reference_runs`) are methods of their own, named ``<method> (<implementation>)``. Writes:

* ``<task>.png``: success rate against the paper's x-axis (offline gradient steps, then the offline budget plus
  online env steps), the mean over seeds with a 95% bootstrap band, one colour per method; the paper's curve of the
  same task and method dashed, its two phases stretched onto this protocol's when the budgets differ;
* ``curves.csv``: those means and bands;
* ``summary.md`` and ``summary.csv``: success at the end of the offline and of the online phase per domain and
  method (and over a suite's domains), with 95% stratified bootstrap intervals over tasks and seeds; then the same
  per task, with the paper's success at the same step beside it (``tasks.csv``,
  :mod:`qc_sb3.benchmarks.reports.paper_comparison`);
* ``iqm.csv``, where runs span two tasks or more: each method's interquartile mean over tasks and seeds at each
  phase's end (:mod:`qc_sb3.benchmarks.reports.aggregates`), and its table in ``summary.md``;
* where qc_sb3 and the reference ran the same task and method: ``parity-<task>.png`` (both curves),
  ``parity.csv`` and ``parity_evaluations.csv`` (the tests of :mod:`qc_sb3.benchmarks.parity.implementation_parity`), and their
  table in ``summary.md``;
* where runs have a ``train_stats.csv``: ``training_stats.csv``, their training statistics at the end of each phase
  per implementation and method (:mod:`qc_sb3.benchmarks.runner.training_stats`), and their table in ``summary.md``.

Runs are pooled only within a campaign: runs that share a protocol and each suite's data
(:mod:`qc_sb3.benchmarks.runner.campaigns`).
A folder holding several campaigns gets one report each, in sub-folders, and one ``summary.md`` with a section each.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pandas as pd

from qc_sb3.benchmarks.parity.implementation_parity import (
    IMPLEMENTATION,
    curve_differences,
    paired_results,
    parity_markdown,
    per_evaluation_differences,
    plot_parity,
)
from qc_sb3.benchmarks.reports.aggregates import iqm_markdown, iqm_table, phase_end_rows
from qc_sb3.benchmarks.reports.paper_comparison import (
    PAPER_OFFLINE_STEPS,
    PAPER_ONLINE_STEPS,
    paper_curve_on_axis,
    paper_task_name,
    read_paper_curves,
    task_markdown,
    task_table,
)
from qc_sb3.benchmarks.reports.stats import bootstrap_mean_ci, stratified_bootstrap_ci
from qc_sb3.benchmarks.runner.campaigns import campaign_keys, campaign_names, describe_campaign
from qc_sb3.benchmarks.runner.paths import NAME_RULE, find_files, is_valid_name
from qc_sb3.benchmarks.runner.training_stats import TRAIN_STATS_FILE, training_stats_section


def load_results(results_dir: str | Path | Sequence[str | Path], finished_only: bool = False) -> pd.DataFrame:
    """
    Every evaluation row of a results folder, with its run's task, suite, domain, method, seed and protocol.

    :param results_dir: The results folder (``<task>/<method>/seed<k>/eval.csv`` and ``config.json`` under it;
        symbolic links to folders are followed), or several, pooled (a run under two of them counted once)
    :param finished_only: Read only finished runs (those with a ``DONE`` file)
    :return: One row per evaluation; empty if there is none. ``run_dir`` is the run's folder, ``campaign`` its
        campaign's key, ``folder`` the folders between ``results_dir`` and its task folder. ``method`` is
        ``"<method> (<implementation>)"`` for runs of another implementation (their config.json's ``implementation``),
        ``base_method`` the method alone. A run whose task is not a valid name
        (:data:`~qc_sb3.benchmarks.runner.paths.NAME_RULE`) is skipped with a warning naming its ``config.json``
    """
    frames, seen = [], set()
    folders = [results_dir] if isinstance(results_dir, str | Path) else results_dir
    for folder, path in ((Path(given), path) for given in folders for path in find_files(Path(given), "eval.csv")):
        if path.resolve() in seen:
            continue
        seen.add(path.resolve())
        config_path = path.with_name("config.json")
        if not config_path.exists() or (finished_only and not path.with_name("DONE").exists()):
            continue
        config = json.loads(config_path.read_text(encoding="utf-8"))
        if not is_valid_name(config.get("task")):
            # It names the task's plots: a path there would write outside the report.
            message = f"{config_path}: task {config.get('task')!r} is not a valid name ({NAME_RULE}); run skipped"
            warnings.warn(message, stacklevel=2)
            continue
        frame = pd.read_csv(path)
        if frame.empty:
            continue
        protocol = config["protocol"]
        implementation = config.get("implementation", IMPLEMENTATION)
        location = path.relative_to(folder).parts[:-4]  # <folders>/<task>/<method>/seed<k>/eval.csv
        frame = frame.assign(
            run_dir=str(path.parent),
            protocol_key=json.dumps(protocol, sort_keys=True),
            dataset_key=json.dumps(config.get("dataset"), sort_keys=True),
            folder="/".join(location),
            task=config["task"],
            suite=config["suite"],
            domain=config["domain"],
            # Another implementation's runs of a method (qc_sb3.benchmarks.parity.reference_runs) are a method of their
            # own here.
            method=config["method"] if implementation == IMPLEMENTATION else f"{config['method']} ({implementation})",
            base_method=config["method"],
            implementation=implementation,
            seed=config["seed"],
            offline_budget=protocol["offline_steps"],
            online_budget=protocol["online_steps"],
        )
        frames.append(frame)
    if not frames:
        return pd.DataFrame()
    results = pd.concat(frames, ignore_index=True)
    return results.assign(campaign=campaign_keys(results))


def curve_statistics(results: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """
    Mean success over seeds and its 95% bootstrap interval, per task, method and step.

    :param results: :func:`load_results`'s rows
    :param seed: Seed of the bootstrap
    :return: Columns task, method, step, phase, n_seeds, success_mean, ci95_low, ci95_high
    """
    rows = []
    for (task, method, step), group in results.groupby(["task", "method", "step"], sort=True):
        mean, low, high = bootstrap_mean_ci(group["success"].to_numpy(), seed=seed)
        rows.append(
            {
                "task": task,
                "method": method,
                "step": int(step),
                "phase": group["phase"].iloc[0],
                "n_seeds": len(group),
                "success_mean": mean,
                "ci95_low": low,
                "ci95_high": high,
            }
        )
    return pd.DataFrame(rows)


def final_success_table(results: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """
    Success at the end of each phase per suite, domain and method, with stratified bootstrap intervals (tasks are
    strata, seeds are resampled); a suite with several domains also gets an ``all`` row per method.

    :param results: :func:`load_results`'s rows
    :param seed: Seed of the bootstrap
    :return: Columns suite, domain, method, phase, tasks, runs, success, ci95_low, ci95_high
    """
    finals = phase_end_rows(results)
    scopes = [finals.assign(scope=finals["domain"])]
    for _, group in finals.groupby("suite"):
        if group["domain"].nunique() > 1:
            scopes.append(group.assign(scope="all"))
    rows = []
    for (suite, scope, method, phase), group in pd.concat(scopes, ignore_index=True).groupby(
        ["suite", "scope", "method", "end"]
    ):
        per_task = [task_group["success"].to_numpy() for _, task_group in group.groupby("task")]
        point, low, high = stratified_bootstrap_ci(per_task, seed=seed)
        rows.append(
            {
                "suite": suite,
                "domain": scope,
                "method": method,
                "phase": phase,
                "tasks": len(per_task),
                "runs": len(group),
                "success": point,
                "ci95_low": low,
                "ci95_high": high,
            }
        )
    return pd.DataFrame(rows)


def markdown_table(table: pd.DataFrame) -> str:
    """
    The final-success table as Markdown: one line per suite, domain and method, the offline and online ends side by side.

    :param table: :func:`final_success_table`'s rows
    :return: The Markdown text
    """
    lines = [
        "| suite | domain | method | tasks | runs | offline end | online end |",
        "|---|---|---|---|---|---|---|",
    ]
    if table.empty:
        return "\n".join(lines) + "\n"
    for (suite, domain, method), group in table.groupby(["suite", "domain", "method"], sort=True):
        cells = {}
        for phase in ("offline", "online"):
            row = group[group["phase"] == phase]
            cells[phase] = (
                "-"
                if row.empty
                else f"{row['success'].iloc[0]:.2f} [{row['ci95_low'].iloc[0]:.2f}, {row['ci95_high'].iloc[0]:.2f}]"
            )
        lines.append(
            f"| {suite} | {domain} | {method} | {group['tasks'].max()} | {group['runs'].max()} | "
            f"{cells['offline']} | {cells['online']} |"
        )
    return "\n".join(lines) + "\n"


def plot_task(task: str, curves: pd.DataFrame, results: pd.DataFrame, paper: pd.DataFrame, path: Path) -> bool:
    """
    Plot one task's learning curves, with the paper's where it has the task and method.

    :param task: The task
    :param curves: :func:`curve_statistics` rows of the task
    :param results: :func:`load_results` rows of the task
    :param paper: The paper's curves
    :param path: The PNG to write
    :return: Whether a paper curve was drawn
    """
    offline_budget = int(results["offline_budget"].max())
    online_budget = int(results["online_budget"].max())
    same_axis = offline_budget == PAPER_OFFLINE_STEPS and online_budget == PAPER_ONLINE_STEPS
    paper_name = paper_task_name(task)
    figure, axis = plt.subplots(figsize=(7, 4.2))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    drew_paper = False
    for index, (method, group) in enumerate(curves.groupby("method", sort=True)):
        color = colors[index % len(colors)]
        n_seeds = int(group["n_seeds"].max())
        axis.plot(
            group["step"],
            group["success_mean"],
            color=color,
            marker="o",
            markersize=3,
            label=f"{method} ({n_seeds} seed{'s' if n_seeds > 1 else ''})",
        )
        axis.fill_between(group["step"], group["ci95_low"], group["ci95_high"], color=color, alpha=0.2, linewidth=0)
        reference = paper[(paper["task"] == paper_name) & (paper["method"] == method)] if paper_name else paper.iloc[:0]
        if not reference.empty:
            reference = paper_curve_on_axis(reference.sort_values("step"), offline_budget, online_budget)
            label = f"{method} (paper)" if same_axis else f"{method} (paper, phases rescaled)"
            axis.plot(reference["step"], reference["success_mean"], color=color, linestyle="--", linewidth=1.2, label=label)
            drew_paper = True
    if offline_budget > 0:
        axis.axvline(offline_budget, color="grey", linestyle=":", linewidth=1)
    axis.set_xlim(0, offline_budget + online_budget)
    axis.set_ylim(-0.02, 1.02)
    axis.set_xlabel("offline gradient steps, then online env steps")
    axis.set_ylabel("success rate")
    axis.set_title(task)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7, loc="best")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return drew_paper


def write_report(
    results_dir: str | Path,
    out: str | Path | None = None,
    seed: int = 0,
    finished_only: bool = False,
    also: Sequence[str | Path] = (),
) -> Path:
    """
    Write the plots and tables of a results folder: in ``out`` when its runs share one protocol, else in one
    sub-folder per protocol (:func:`campaign_names`), with a section each in ``summary.md``.

    :param results_dir: The results folder
    :param out: The report folder (default ``<results_dir>/report``)
    :param seed: Seed of the bootstraps
    :param finished_only: Report only finished runs (a campaign's committed evidence, while others are under way)
    :param also: Other folders whose runs are pooled with these (each run counted once)
    :return: The report folder
    """
    results_dir = Path(results_dir)
    out = results_dir / "report" if out is None else Path(out)
    if out.exists() and any(out.iterdir()) and not (out / "summary.md").exists():
        raise FileExistsError(f"{out} is not empty and holds no report (no summary.md): refusing to replace it")
    results = load_results([results_dir, *also], finished_only=finished_only)
    title = f"# Results: {' + '.join(str(folder) for folder in [results_dir, *also])}\n\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    # Written whole into a staging folder, then swapped in: no file of an earlier report is left beside the new one.
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}-") as staging:
        staged = Path(staging) / "report"
        staged.mkdir()
        if results.empty:
            text = "No evaluations found.\n"
        elif len(names := campaign_names(results)) == 1:
            text = title + _write_campaign(results, staged, seed)
        else:
            text = title + f"These runs follow {len(names)} protocols, never pooled: each has its own report and section.\n"
            for key, name in sorted(names.items(), key=lambda item: item[1]):
                body = _write_campaign(results[results["campaign"] == key], staged / name, seed)
                demoted = "\n".join("#" + line if line.startswith("#") else line for line in body.splitlines())
                text += f"\n## {name}\n\n{describe_campaign(key)}. Files: `{name}/`.\n\n{demoted}\n"
        (staged / "summary.md").write_text(text, encoding="utf-8")
        if out.exists():
            out.rename(Path(staging) / "replaced")
        staged.rename(out)
    return out


def _write_campaign(results: pd.DataFrame, out: Path, seed: int) -> str:
    """The plots and tables of runs of one protocol, written to ``out``; returns their Markdown, without a title."""
    out.mkdir(parents=True, exist_ok=True)
    curves = curve_statistics(results, seed=seed)
    curves.to_csv(out / "curves.csv", index=False)
    paper = read_paper_curves()
    for task, task_results in results.groupby("task"):
        plot_task(str(task), curves[curves["task"] == task], task_results, paper, out / f"{task}.png")
    table = final_success_table(results, seed=seed)
    table.to_csv(out / "summary.csv", index=False)
    per_task = task_table(results, paper, {str(task): paper_task_name(str(task)) for task in results["task"].unique()}, seed)
    per_task.to_csv(out / "tasks.csv", index=False)
    text = (
        "Success rate at the end of each phase: mean over the tasks of each task's mean over seeds, with a 95% "
        "stratified bootstrap interval (tasks as strata, seeds resampled).\n\n" + markdown_table(table) + "\n"
        "## Per task, with the paper's\n\n"
        "Mean success over seeds at the end of each phase (@ its steps), with a 95% bootstrap interval over seeds; "
        "beside it, the paper's mean success at its first evaluation at or after the same steps of the phase.\n\n"
        + task_markdown(per_task)
    )
    if results["task"].nunique() > 1:
        iqm = iqm_table(results, seed=seed)
        iqm.to_csv(out / "iqm.csv", index=False)
        text += "\n## Interquartile mean over tasks and seeds\n\nSuccess at the end of each phase (docs/evidence.md §4).\n\n"
        text += iqm_markdown(iqm)
    text += _parity_section(results, curves, out, seed)
    run_dirs = [Path(run_dir) for run_dir in sorted(results["run_dir"].unique())]
    with_stats = [run_dir for run_dir in run_dirs if (run_dir / TRAIN_STATS_FILE).is_file()]
    return text + training_stats_section(with_stats, out)


def _parity_section(results: pd.DataFrame, curves: pd.DataFrame, out: Path, seed: int) -> str:
    """Where both qc_sb3 and the reference ran a task and method: the comparison's tables, plots and Markdown."""
    paired = paired_results(results)
    if paired.empty:
        return ""
    evaluations = per_evaluation_differences(paired, seed=seed)
    evaluations.to_csv(out / "parity_evaluations.csv", index=False)
    verdicts = curve_differences(paired, evaluations, seed=seed)
    verdicts.to_csv(out / "parity.csv", index=False)
    for task in paired["task"].unique():
        plot_parity(
            str(task), curves[(curves["task"] == task) & curves["method"].isin(paired["method"])], out / f"parity-{task}.png"
        )
    return (
        "\n## qc_sb3 and the reference implementation\n\n"
        "The same task, method, settings and data run by both (qc_sb3.benchmarks.parity.reference_runs). Per run, the "
        "mean success "
        "over its evaluations; the difference of the implementations' means over seeds (qc_sb3 minus reference) with "
        "a 95% bootstrap interval and the p-value of a permutation test of equal means; the evaluations whose own "
        "permutation test rejects at the Bonferroni level 0.05 / evaluations (parity_evaluations.csv), which locate a "
        "difference. They agree when the curve's p-value is at least 0.05; where too few runs make a test unable to "
        "reject, its column is empty (docs/evidence.md §4).\n\n" + parity_markdown(verdicts)
    )


def main(argv: Sequence[str] | None = None) -> int:
    """
    The ``python -m qc_sb3.benchmarks.report`` command.

    :param argv: Arguments (default: the command line's)
    :return: The exit status
    """
    parser = argparse.ArgumentParser(prog="python -m qc_sb3.benchmarks.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("results_dir", help="a results folder written by qc_sb3.benchmarks.run")
    parser.add_argument("--also", nargs="+", default=[], metavar="DIR", help="other folders whose runs are pooled in")
    parser.add_argument("--out", default=None, help="report folder (default: RESULTS_DIR/report)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap resampling")
    parser.add_argument("--finished-only", action="store_true", help="only runs that have finished (a DONE file)")
    args = parser.parse_args(argv)
    for folder in [args.results_dir, *args.also]:
        if not Path(folder).is_dir():
            parser.error(f"{folder} is not a folder")
    out = write_report(args.results_dir, args.out, seed=args.seed, finished_only=args.finished_only, also=args.also)
    print(f"report written to {out}")
    print((out / "summary.md").read_text(encoding="utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
