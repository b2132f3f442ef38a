"""The speed tool's --seeds figures (qc_sb3.benchmarks.speed.seed_speed, seed_report)."""

from __future__ import annotations

import csv
import re

import pytest
import torch as th

from qc_sb3.benchmarks.speed.seed_report import (
    ONE_PROCESS,
    ONE_PROCESS_STACKED,
    TWO_PROCESSES,
    Reference,
    best_arrangements,
    cost_rows,
    ratio_lines,
    seed_steps_per_second,
    write_cost_csv,
)
from qc_sb3.benchmarks.speed.seed_speed import main, run

LINE = re.compile(r"seed-steps/s (\S+) (\S+) S=(\d+) ([\d.]+) reference ([\d.]+) ratio ([\d.]+)x")


def test_seed_steps_are_gradient_steps_times_seeds_at_the_median_block():
    # blocks of 10 stacked steps of 4 seeds: medians 2 s -> 5 stacked steps/s -> 20 seed-steps/s
    assert seed_steps_per_second([2.0, 1.0, 4.0], 10, 4) == pytest.approx(20.0)


def test_lines_compare_the_best_arrangement_with_the_reference_best_and_price_a_seed():
    rates = {
        ("small", "QC", 1, ONE_PROCESS): 40.0,
        ("small", "QC", 1, ONE_PROCESS_STACKED): 30.0,
        ("small", "QC", 4, ONE_PROCESS_STACKED): 60.0,
        ("small", "QC", 4, TWO_PROCESSES): 80.0,
        ("small", "FQL", 1, ONE_PROCESS): 100.0,
    }
    # the reference's best: two processes, 25 + 30 = 55 > 50
    references = {("small", "QC"): Reference(50.0, (25.0, 30.0), 4.0)}
    best = best_arrangements(rates)
    assert best == {
        ("small", "QC", 1): (ONE_PROCESS, 40.0),
        ("small", "QC", 4): (TWO_PROCESSES, 80.0),
        ("small", "FQL", 1): (ONE_PROCESS, 100.0),
    }
    assert ratio_lines(best, references) == [
        "seed-steps/s small QC S=1 40.00 reference 55.00 ratio 0.73x",
        "seed-steps/s small QC S=4 80.00 reference 55.00 ratio 1.45x",
        "seed-steps/s small FQL S=1 100.00 reference - ratio -",
    ]
    assert references["small", "QC"].best_arrangement == TWO_PROCESSES
    rows = cost_rows(best, threads=2)
    # 1000 steps per seed at 40 and 80 seed-steps/s: 25 s and 12.5 s of the machine, twice that of its 2 cores
    assert [(r["method"], r["which"], r["S"], r["machine_s_per_1k_steps_per_seed"]) for r in rows] == [
        ("QC", "S=1", 1, 25.0),
        ("QC", "best S", 4, 12.5),
        ("FQL", "S=1", 1, 10.0),
        ("FQL", "best S", 1, 10.0),
    ]
    assert rows[1]["core_s_per_1k_steps_per_seed"] == 25.0
    assert rows[1]["arrangement"] == "2 processes at 1 thread each, SeedParallel of 2 one after another each"


def test_the_tool_times_every_arrangement_in_a_tiny_configuration(tmp_path):
    reference = Reference(10.0, (6.0, 7.0), 0.5)
    lines, costs = run(
        {"tiny": {"net_arch": [8], "actor_num_samples": 2}},
        ["QCFQL"],
        [1, 2],
        rounds=1,
        steps=2,
        reference=lambda config, method: reference,
    )
    arrangements = lines[3 : lines.index(next(line for line in lines if line.startswith("reference ")))]
    # an ordinary model, SeedParallel of 1 stacked, of 2 stacked and one after another, two processes of one each
    assert len(arrangements) == 5
    parsed = [LINE.fullmatch(line) for line in lines if line.startswith("seed-steps/s")]
    assert [match.group(3) for match in parsed] == ["1", "2"]
    by_arrangement = {line.split(maxsplit=4)[4]: float(line.split()[3]) for line in arrangements}
    for match in parsed:
        value, reference_value, ratio = (float(match.group(i)) for i in (4, 5, 6))
        assert reference_value == 13.0  # the two processes' sum, the higher
        assert ratio == pytest.approx(value / 13.0, abs=0.006)
    # S = 2: the better of one process holding both seeds and two processes of one seed each
    threads = th.get_num_threads()  # what the tool found (an earlier test may have set it)
    two = max(
        by_arrangement[f"1 process at {threads} threads, SeedParallel of 2 stacked"],
        by_arrangement[f"1 process at {threads} threads, SeedParallel of 2 one after another"],
        by_arrangement["2 processes at 1 thread each, an ordinary model each"],
    )
    assert float(parsed[1].group(4)) == pytest.approx(two, abs=0.006)
    write_cost_csv(costs, tmp_path / "cost.csv")
    with open(tmp_path / "cost.csv", encoding="utf-8") as file:
        rows = list(csv.DictReader(file))
    assert [row["which"] for row in rows] == ["S=1", "best S"]
    assert float(rows[0]["machine_s_per_1k_steps_per_seed"]) == pytest.approx(1000 / float(parsed[0].group(4)), rel=1e-3)


@pytest.mark.parametrize(
    "argv",
    [["--seeds", "2", "--methods", "RLPDAC"], ["--seeds", "2", "--compile-step"], ["--seeds", "0"], ["--methods", "BFN"]],
)
def test_unsupported_options_are_refused_before_any_work(argv, capsys):
    with pytest.raises(SystemExit):
        main(argv)
    assert "error" in capsys.readouterr().err
