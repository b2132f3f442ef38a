"""Part A's tests between any two sets of finished runs (docs/evidence.md §4): e.g. the reference on two versions of
an environment package, or qc_sb3 with a changed setting against the reference.

Run: ``python -m qc_sb3.benchmarks.reports.compare FIRST SECOND [--first-also DIR ...] [--second-also DIR ...]``. The runs of
``FIRST`` (pooled with those of every ``--first-also`` folder) stand where
:mod:`qc_sb3.benchmarks.parity.implementation_parity`
puts qc_sb3's, whatever implementation ran them, and those of ``SECOND`` (and ``--second-also``) where it puts the
reference's; each run folder is one sample, tasks and methods are paired by name, and only evaluations at steps both
sides have are compared. It prints the per-curve table of the report (difference of the means, 95% bootstrap
interval, permutation test, evaluations apart at the Bonferroni level) and each evaluation's means and p-value.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from qc_sb3.benchmarks.parity.implementation_parity import (
    IMPLEMENTATION,
    REFERENCE,
    curve_differences,
    paired_results,
    parity_markdown,
    per_evaluation_differences,
)
from qc_sb3.benchmarks.report import load_results


def compare_folders(
    first: str | Path | Sequence[str | Path], second: str | Path | Sequence[str | Path], seed: int = 0
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """
    The tests of part A between the finished runs of two sets of folders (one sample per run folder).

    :param first: A results folder, or several pooled (their runs take qc_sb3's place in the tests)
    :param second: Another folder, or several pooled (their runs take the reference's place)
    :param seed: Seed of the bootstrap (and of the permutation test where it samples)
    :return: :func:`~qc_sb3.benchmarks.parity.implementation_parity.curve_differences` and
        :func:`~qc_sb3.benchmarks.parity.implementation_parity.per_evaluation_differences` rows
    :raises ValueError: If a folder has no finished run, the runs span several protocols, or the two sides share no
        task, method and step
    """
    frames = []
    for folders, side in ((first, IMPLEMENTATION), (second, REFERENCE)):
        for folder in [folders] if isinstance(folders, str | Path) else folders:
            runs = load_results(folder, finished_only=True)
            if runs.empty:
                raise ValueError(f"{folder} holds no finished run (eval.csv, config.json and DONE)")
            frames.append(runs.assign(implementation=side))
    runs = pd.concat(frames, ignore_index=True)
    if runs["protocol_key"].nunique() != 1:
        raise ValueError("the runs compared must share one protocol")
    paired = paired_results(runs)
    if paired.empty:
        raise ValueError("the two sides share no task and method evaluated at the same steps")
    evaluations = per_evaluation_differences(paired, seed=seed)
    return curve_differences(paired, evaluations, seed=seed), evaluations


def main(argv: Sequence[str] | None = None) -> int:
    """
    The ``python -m qc_sb3.benchmarks.reports.compare`` command.

    :param argv: Arguments (default: the command line's)
    :return: The exit status
    """
    parser = argparse.ArgumentParser(prog="python -m qc_sb3.benchmarks.reports.compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("first", type=Path, help="a folder of finished runs (in qc_sb3's place)")
    parser.add_argument("second", type=Path, help="a folder of finished runs (in the reference's place)")
    parser.add_argument("--first-also", type=Path, nargs="+", default=[], help="folders pooled with FIRST")
    parser.add_argument("--second-also", type=Path, nargs="+", default=[], help="folders pooled with SECOND")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap and of sampled permutation splits")
    args = parser.parse_args(argv)
    first, second = [args.first, *args.first_also], [args.second, *args.second_also]
    for folder in (*first, *second):
        if not folder.is_dir():
            parser.error(f"{folder} is not a folder")
    try:
        curves, evaluations = compare_folders(first, second, seed=args.seed)
    except ValueError as error:
        parser.error(str(error))
    names = [", ".join(str(folder) for folder in side) for side in (first, second)]
    print(f"In the tables, {IMPLEMENTATION!r} stands for {names[0]} and {REFERENCE!r} for {names[1]}.\n")
    print(parity_markdown(curves))
    columns = ["task", "method", "step", "seeds_ours", "seeds_reference", "ours", "reference", "p_value", "apart"]
    print(evaluations[columns].rename(columns={"ours": "first", "reference": "second"}).to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
