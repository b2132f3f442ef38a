"""The benchmark runner: tasks x methods x seeds of a config, offline then online, on local processes or on Ray.

Run: ``python -m qc_sb3.benchmarks.run CONFIG [--seeds 0 1 2 3] [--tasks TASK ...] [--methods METHOD ...]
[--workers N] [--ray ADDRESS] [--out DIR] [--data-dir [SUITE=]DIR] [--no-report]``.

In order: the config is checked in full (unknown tasks, methods or keys, bad values, hyperparameters the algorithms
refuse, missing dataset folders and files, run folders holding another configuration's results or symbolic links, a
results folder or dataset cache that cannot be written in) before any folder is made; the offline datasets are
prepared once, in this process (generated and converted, or converted from the official files, and cached; a second
runner on the same cache waits for the first); the runs execute, finished ones skipped and interrupted ones resumed
(:mod:`qc_sb3.benchmarks.runner.runs`), with one progress line per run; a run another runner is working on is skipped
as ``busy``, and a run whose folder is damaged fails alone; last, the report (:mod:`qc_sb3.benchmarks.report`) is
written to ``OUT/report``.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from qc_sb3.benchmarks.report import write_report
from qc_sb3.benchmarks.runner.atomic import remove_stale_temporaries
from qc_sb3.benchmarks.runner.config import ConfigError, load_config, read_config_data
from qc_sb3.benchmarks.runner.datasets import DatasetPreparationError, prepare_datasets
from qc_sb3.benchmarks.runner.evaluations import DamagedRunError
from qc_sb3.benchmarks.runner.executors import local_workers, run_in_process, run_local_pool, run_on_ray
from qc_sb3.benchmarks.runner.locks import folder_lock
from qc_sb3.benchmarks.runner.paths import NotWritableError, UnsafePathError, check_run_paths, check_writable_folder
from qc_sb3.benchmarks.runner.planning import default_dataset_cache, plan_runs
from qc_sb3.benchmarks.runner.progress import ProgressMonitor
from qc_sb3.benchmarks.runner.runs import RunConflictError, check_run_folder, execute_run_safely, is_done
from qc_sb3.benchmarks.runner.specs import Execution, RunSpec

DEFAULT_RESULTS_ROOT = "results"
# The exit status of a runner stopped by Ctrl-C, as shells report a process that SIGINT ended (128 + 2).
INTERRUPTED = 130


class ReportError(OSError):
    """The runs finished but their report could not be written (the message says where and why)."""


def apply_data_dirs(data: Mapping[str, Any], data_dirs: Sequence[str]) -> dict[str, Any]:
    """
    A config with official dataset folders given on the command line.

    :param data: The config's content
    :param data_dirs: ``SUITE=DIR`` (that suite's folder) or ``DIR`` (every suite with an official source)
    :return: The updated content
    """
    data = dict(data)
    datasets = {name: dict(options or {}) for name, options in (data.get("datasets") or {}).items()}
    for item in data_dirs:
        suite, separator, directory = item.partition("=")
        if separator:
            datasets.setdefault(suite, {"source": "official"})["directory"] = directory
        else:
            for options in datasets.values():
                if options.get("source") == "official":
                    options["directory"] = item
    data["datasets"] = datasets
    return data


def run_benchmark(
    config_path: str | Path,
    out: str | Path | None = None,
    seeds: Sequence[int] | None = None,
    tasks: Sequence[str] | None = None,
    methods: Sequence[str] | None = None,
    workers: int | None = None,
    ray_address: str | None = None,
    data_dirs: Sequence[str] = (),
    report: bool = True,
    console: Console | None = None,
) -> list[dict[str, Any]]:
    """
    Run a benchmark config.

    :param config_path: The YAML config
    :param out: The results folder (default: the config's ``out``, else ``results/<name>``)
    :param seeds: Seeds overriding the config's
    :param tasks: Only these of the config's tasks (default: all)
    :param methods: Only these of the config's methods (default: all)
    :param workers: Local worker processes, also used to generate datasets (default: the config's
        ``execution.workers``, else the cores; 0: everything in this process, one run after another)
    :param ray_address: Run on this Ray cluster instead (``local``: start one here)
    :param data_dirs: Official dataset folders (``SUITE=DIR`` or ``DIR``)
    :param report: Whether to write the report at the end
    :param console: Where summaries and progress go
    :return: One summary per run (``status``: done, skipped or failed)
    """
    console = console or Console()
    data = apply_data_dirs(read_config_data(config_path), data_dirs)
    config = load_config(data, label=repr(str(config_path)), name=Path(config_path).stem)
    out = Path(out or config.out or Path(DEFAULT_RESULTS_ROOT) / config.name)
    runs = plan_runs(config, out, seeds, tasks=tasks, methods=methods)
    damaged: dict[str, dict[str, Any]] = {}
    for run in runs:
        check_run_paths(run.run_dir, len(Path(run.name).parts))
        try:
            check_run_folder(run)
        except DamagedRunError as error:
            damaged[run.name] = {"run": run.name, "status": "failed", "error": f"{type(error).__name__}: {error}"}
    runs_to_do = [run for run in runs if run.name not in damaged]
    pending = [run for run in runs_to_do if not is_done(run)]
    cache = default_dataset_cache(config, out)
    for folder, what, needed in ((out, "results folder", pending or report), (cache, "dataset cache", pending)):
        if needed:
            check_writable_folder(folder, what)  # before any work, rather than once datasets are made
    console.print(f"[bold]{config.name}[/]: {len(runs)} runs ({len(runs_to_do) - len(pending)} finished already) -> {out}")
    requested = config.execution.workers if workers is None else workers
    n_workers = 0 if requested == 0 else local_workers(requested)
    if requested is not None and requested > n_workers:
        console.print(f"{requested} workers requested; this machine has {n_workers} cores: using {n_workers}")
    if pending:

        def log(line: str) -> None:
            console.print(line, highlight=False)

        # One runner at a time prepares datasets in a cache; another waits for it, then finds them made.
        with folder_lock(cache, wait=True, on_wait=log):
            remove_stale_temporaries(cache, recursive=True)  # of generators and converters killed mid-write
            pending = prepare_datasets(pending, cache, workers=max(n_workers, 1), progress=console.is_terminal, log=log)
    # Finished runs are reported as skipped here; only the others go to the executor.
    by_name = {**damaged, **{run.name: execute_run_safely(run) for run in runs_to_do if is_done(run)}}
    if pending:
        by_name.update((summary["run"], summary) for summary in _execute(pending, n_workers, ray_address, config.execution))
    summaries = [by_name[run.name] for run in runs]
    _print_summary(summaries, console)
    if report:
        try:
            report_dir = write_report(out)
        except OSError as error:  # a full disk: the runs hold, the report can be rebuilt from them
            raise ReportError(
                f"the runs are kept, but writing their report in {Path(out) / 'report'} failed: {error}; once fixed, "
                f"rebuild it with: python -m qc_sb3.benchmarks.report {out}"
            ) from error
        console.print(f"report: {report_dir}")
    return summaries


def _execute(runs: list[RunSpec], workers: int, ray_address: str | None, execution: Execution) -> list[dict[str, Any]]:
    with ProgressMonitor([(run.name, run.run_dir) for run in runs]) as monitor:
        if ray_address is not None:
            return run_on_ray(runs, ray_address, execution, local_cpus=workers or None, refresh=monitor.refresh)
        if workers == 0:
            return run_in_process(runs, refresh=monitor.refresh)
        return run_local_pool(runs, workers, refresh=monitor.refresh)


def _print_summary(summaries: Sequence[dict[str, Any]], console: Console) -> None:
    table = Table(title="runs")
    for column in ("run", "status", "offline end", "online end"):
        table.add_column(column)
    for summary in summaries:
        cells = [
            f"{summary[key]:.2f}" if summary.get(key) is not None else "-" for key in ("offline_success", "online_success")
        ]
        table.add_row(summary["run"], summary["status"], *cells)
    console.print(table)
    for summary in summaries:
        if summary["status"] == "failed":
            console.print(f"[red]{summary['run']} failed[/]: {summary['error']}", highlight=False)
        elif summary["status"] == "busy":
            console.print(f"[yellow]{summary['run']} busy[/]: {summary['error']}", highlight=False)


def main(argv: Sequence[str] | None = None) -> int:
    """
    The ``python -m qc_sb3.benchmarks.run`` command (console script ``qc-bench``).

    :param argv: Arguments (default: the command line's)
    :return: The exit status: 0 if every run finished, 1 if some failed or were busy (another runner works on them),
        2 for a bad config, a run folder that holds another configuration's results, or one that is or holds a
        symbolic link, or a results folder or dataset cache that cannot be written in (nothing runs then), 130 when
        Ctrl-C stopped it (its workers too; one line says how to resume)
    """
    parser = argparse.ArgumentParser(prog="python -m qc_sb3.benchmarks.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("config", help="a benchmark config (YAML), e.g. benchmarks/configs/quickstart.yaml")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="seeds of every task (default: the config's)")
    parser.add_argument("--tasks", nargs="+", default=None, help="only these of the config's tasks (default: all)")
    parser.add_argument("--methods", nargs="+", default=None, help="only these of the config's methods (default: all)")
    parser.add_argument("--workers", type=int, default=None, help="local worker processes (0: everything in this process)")
    parser.add_argument("--ray", default=None, metavar="ADDRESS", help="run on a Ray cluster ('local': start one here)")
    parser.add_argument("--out", default=None, help="results folder (default: the config's out, else results/<name>)")
    parser.add_argument(
        "--data-dir", action="append", default=[], metavar="[SUITE=]DIR", help="folder of a suite's official dataset files"
    )
    parser.add_argument("--no-report", action="store_true", help="do not write the report at the end")
    arguments = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(arguments)
    if args.workers is not None and args.workers < 0:
        parser.error(f"--workers must be >= 0, got {args.workers}")
    console = Console()
    try:
        summaries = run_benchmark(
            args.config,
            out=args.out,
            seeds=args.seeds,
            tasks=args.tasks,
            methods=args.methods,
            workers=args.workers,
            ray_address=args.ray,
            data_dirs=args.data_dir,
            report=not args.no_report,
            console=console,
        )
    except (ConfigError, RunConflictError, UnsafePathError, NotWritableError, DatasetPreparationError, ReportError) as error:
        console.print(f"[red]error:[/] {error}", highlight=False)
        return 2
    except KeyboardInterrupt:
        command = shlex.join(["python", "-m", "qc_sb3.benchmarks.run", *arguments])
        console.print(f"interrupted: the runs keep their latest checkpoints; to resume, run again: {command}", highlight=False)
        return INTERRUPTED
    return 0 if all(summary["status"] in ("done", "skipped") for summary in summaries) else 1


if __name__ == "__main__":
    sys.exit(main())
