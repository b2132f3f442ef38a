"""Part A's tests between any two folders of finished runs (docs/evidence.md §4): e.g. the reference on two versions of
an environment package, or qc_sb3 with a changed setting against the reference.

Run: ``python -m benchmarks.compare FIRST SECOND [--first-label A] [--second-label B]``. The runs of ``FIRST`` stand
where :mod:`benchmarks.implementation_parity` puts qc_sb3's, those of ``SECOND`` where it puts the reference's, whatever
implementation ran them; tasks and methods are paired by name, and only evaluations at steps both folders have are
compared. It prints the per-curve table of the report (difference of the means, 95% bootstrap interval, permutation
test, evaluations apart at the Bonferroni level) and each evaluation's means and p-value.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from benchmarks.implementation_parity import (
    IMPLEMENTATION,
    REFERENCE,
    curve_differences,
    paired_results,
    parity_markdown,
    per_evaluation_differences,
)
from benchmarks.report import load_results


def compare_folders(first: str | Path, second: str | Path, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """
    The tests of part A between the finished runs of two folders.

    :param first: A results folder (its runs take qc_sb3's place in the tests)
    :param second: Another results folder (its runs take the reference's place)
    :param seed: Seed of the bootstrap (and of the permutation test where it samples)
    :return: :func:`~benchmarks.implementation_parity.curve_differences` and
        :func:`~benchmarks.implementation_parity.per_evaluation_differences` rows
    :raises ValueError: If a folder has no finished run, or the two share no task, method and step
    """
    frames = []
    for folder, side in ((first, IMPLEMENTATION), (second, REFERENCE)):
        runs = load_results(folder, finished_only=True)
        if runs.empty:
            raise ValueError(f"{folder} holds no finished run (eval.csv, config.json and DONE)")
        frames.append(runs.assign(implementation=side))
    if frames[0]["protocol_key"].nunique() != 1 or set(frames[0]["protocol_key"]) != set(frames[1]["protocol_key"]):
        raise ValueError(f"the runs of {first} and {second} must share one protocol to be compared")
    paired = paired_results(pd.concat(frames, ignore_index=True))
    if paired.empty:
        raise ValueError(f"{first} and {second} share no task and method evaluated at the same steps")
    evaluations = per_evaluation_differences(paired, seed=seed)
    return curve_differences(paired, evaluations, seed=seed), evaluations


def main(argv: Sequence[str] | None = None) -> int:
    """
    The ``python -m benchmarks.compare`` command.

    :param argv: Arguments (default: the command line's)
    :return: The exit status
    """
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("first", type=Path, help="a folder of finished runs (in qc_sb3's place)")
    parser.add_argument("second", type=Path, help="a folder of finished runs (in the reference's place)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap and of sampled permutation splits")
    args = parser.parse_args(argv)
    for folder in (args.first, args.second):
        if not folder.is_dir():
            parser.error(f"{folder} is not a folder")
    try:
        curves, evaluations = compare_folders(args.first, args.second, seed=args.seed)
    except ValueError as error:
        parser.error(str(error))
    print(f"In the tables, {IMPLEMENTATION!r} stands for {args.first} and {REFERENCE!r} for {args.second}.\n")
    print(parity_markdown(curves))
    columns = ["task", "method", "step", "seeds_ours", "seeds_reference", "ours", "reference", "p_value", "apart"]
    print(evaluations[columns].rename(columns={"ours": "first", "reference": "second"}).to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
