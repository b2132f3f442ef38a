"""The figures of :mod:`qc_sb3.benchmarks.speed.seed_speed`: seed-steps per second by arrangement, the best one
against the reference's best single-seed figure, the share of the matmul roof, and the cost per 1000 offline
gradient steps per seed."""

from __future__ import annotations

import csv
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# How S seeds share the machine: one process at the machine's threads holding them (their updates stacked, or the
# seeds one after another), or two processes at one thread each (pinned to a core each), S / 2 seeds each, one after
# another; a process with one seed trains an ordinary model.
ONE_PROCESS, ONE_PROCESS_STACKED, ONE_PROCESS_SEQUENTIAL = "1 process", "1 process, stacked", "1 process, sequential"
TWO_PROCESSES = "2 processes"
ARRANGEMENT_TEXT = {
    ONE_PROCESS: "1 process at {threads} threads, an ordinary model",
    ONE_PROCESS_STACKED: "1 process at {threads} threads, SeedParallel of {S} stacked",
    ONE_PROCESS_SEQUENTIAL: "1 process at {threads} threads, SeedParallel of {S} one after another",
    TWO_PROCESSES: "2 processes at 1 thread each, {half} each",
}


@dataclass(frozen=True)
class Reference:
    """
    The reference's steps per second of one configuration and method, timed in the same command.

    :param one_process: One process at the machine's threads
    :param two_processes: Each of two processes at one thread each, run at the same time
    :param gflop_per_step: Its harness's analytic matmul GFLOP per update
    """

    one_process: float
    two_processes: tuple[float, float]
    gflop_per_step: float

    @property
    def best(self) -> float:
        """Its best single-seed figure: the higher of one process and the two processes' sum."""
        return max(self.one_process, sum(self.two_processes))

    @property
    def best_arrangement(self) -> str:
        """Which arrangement gives :attr:`best`."""
        return ONE_PROCESS if self.one_process >= sum(self.two_processes) else TWO_PROCESSES


def arrangement_text(arrangement: str, n_seeds: int, threads: int) -> str:
    """The arrangement of ``n_seeds`` seeds in words (two processes hold ``n_seeds // 2`` seeds each)."""
    half = n_seeds // 2
    return ARRANGEMENT_TEXT[arrangement].format(
        threads=threads, S=n_seeds, half="an ordinary model" if half == 1 else f"SeedParallel of {half} one after another"
    )


def seed_steps_per_second(seconds: Sequence[float], steps_per_block: int, n_seeds: int) -> float:
    """
    One process's seed-steps per second: its stacked gradient steps per second (the median block's) times its seeds
    (of two processes at once, the machine's figure is the sum of theirs).

    :param seconds: The timed blocks' wall times
    :param steps_per_block: Gradient steps per block
    :param n_seeds: The process's seeds
    :return: Seed-steps per second
    """
    return n_seeds * steps_per_block / statistics.median(seconds)


def best_arrangements(rates: Mapping[tuple[str, str, int, str], float]) -> dict[tuple[str, str, int], tuple[str, float]]:
    """
    The best arrangement of each configuration, method and S.

    :param rates: Seed-steps per second by (config, method, S, arrangement)
    :return: (arrangement, seed-steps per second) by (config, method, S)
    """
    best: dict[tuple[str, str, int], tuple[str, float]] = {}
    for (config, method, n_seeds, arrangement), rate in rates.items():
        key = (config, method, n_seeds)
        if key not in best or rate > best[key][1]:
            best[key] = (arrangement, rate)
    return best


def ratio_lines(
    best: Mapping[tuple[str, str, int], tuple[str, float]], references: Mapping[tuple[str, str], Reference]
) -> list[str]:
    """
    One line per configuration, method and S for scripts:
    ``seed-steps/s <config> <method> S=<S> <value> reference <value> ratio <r>x`` (``reference - ratio -`` where the
    reference was not timed).

    :param best: :func:`best_arrangements`
    :param references: The reference's figures by (config, method)
    :return: The lines
    """
    lines = []
    for (config, method, n_seeds), (_, rate) in best.items():
        reference = references.get((config, method))
        figures = f"reference {reference.best:.2f} ratio {rate / reference.best:.2f}x" if reference else "reference - ratio -"
        lines.append(f"seed-steps/s {config} {method} S={n_seeds} {rate:.2f} {figures}")
    return lines


def roof_lines(
    best: Mapping[tuple[str, str, int], tuple[str, float]],
    gflop_per_seed_step: Mapping[tuple[str, str], float],
    matmul_gflops: float,
    references: Mapping[tuple[str, str], Reference],
) -> list[str]:
    """
    The matmul work each best arrangement achieves (counted GFLOP per seed's step times seed-steps per second)
    against the plain matmul's GFLOP/s at the machine's threads, and the reference's at its best.
    """
    lines = [
        f"matmul work per seed-step (counted; reference: its harness's analytic count), of the plain matmul's "
        f"{matmul_gflops:.0f} GFLOP/s:",
        f"{'config':8s} {'method':6s} {'S':>2s} {'GFLOP/step':>11s} {'GFLOP/s':>8s} {'of matmul':>10s} "
        f"{'reference':>10s} {'of matmul':>10s}",
    ]
    for (config, method, n_seeds), (_, rate) in best.items():
        gflop = gflop_per_seed_step[config, method]
        line = f"{config:8s} {method:6s} {n_seeds:2d} {gflop:11.2f} {gflop * rate:8.1f} {gflop * rate / matmul_gflops:9.0%}"
        if (config, method) in references:
            reference = references[config, method]
            achieved = reference.gflop_per_step * reference.best
            line += f" {achieved:10.1f} {achieved / matmul_gflops:9.0%}"
        lines.append(line)
    return lines


def cost_rows(best: Mapping[tuple[str, str, int], tuple[str, float]], threads: int) -> list[dict[str, object]]:
    """
    The cost per 1000 offline gradient steps per seed at S = 1 and at the best S of each configuration and method:
    the machine's wall seconds (all its cores busy) and core-seconds (times the cores).

    :param best: :func:`best_arrangements`
    :param threads: The machine's cores (the threads of one process)
    :return: One row per configuration, method and chosen S
    """
    rows = []
    for config, method in dict.fromkeys((config, method) for config, method, _ in best):
        rates = {n_seeds: best[c, m, n_seeds] for c, m, n_seeds in best if (c, m) == (config, method)}
        best_seeds = max(rates, key=lambda n_seeds: rates[n_seeds][1])
        for label, n_seeds in (("S=1", min(rates)), ("best S", best_seeds)):
            arrangement, rate = rates[n_seeds]
            rows.append(
                {
                    "config": config, "method": method, "which": label, "S": n_seeds,
                    "arrangement": arrangement_text(arrangement, n_seeds, threads),
                    "seed_steps_per_s": round(rate, 2), "machine_s_per_1k_steps_per_seed": round(1000 / rate, 2),
                    "core_s_per_1k_steps_per_seed": round(threads * 1000 / rate, 2),
                }
            )  # fmt: skip
    return rows


def cost_lines(rows: Sequence[Mapping[str, object]]) -> list[str]:
    """:func:`cost_rows` as a table."""
    lines = [
        "cost per 1000 offline gradient steps per seed (machine s: wall seconds of the whole machine; core s: times "
        "its cores):",
        f"{'config':8s} {'method':6s} {'':6s} {'S':>2s} {'seed-steps/s':>13s} {'machine s':>10s} {'core s':>8s}  arrangement",
    ]
    for row in rows:
        lines.append(
            f"{row['config']:8s} {row['method']:6s} {row['which']:6s} {row['S']:2d} {row['seed_steps_per_s']:13.2f} "
            f"{row['machine_s_per_1k_steps_per_seed']:10.2f} {row['core_s_per_1k_steps_per_seed']:8.2f}  {row['arrangement']}"
        )
    return lines


def write_cost_csv(rows: Sequence[Mapping[str, object]], path: str | Path) -> None:
    """Write :func:`cost_rows` to ``path`` as CSV (a header row, then one row each)."""
    with open(path, "w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
