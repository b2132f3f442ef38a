"""Evidence reports: qc_sb3 against the reference implementation, the per-task table with the paper's numbers, and the
translation of a benchmark config into the reference's main.py flags."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from qc_sb3.benchmarks.parity.reference_runs import convert_eval_rows, reference_flags
from qc_sb3.benchmarks.report import write_report
from qc_sb3.benchmarks.reports.paper_comparison import paper_success_at, read_paper_curves
from qc_sb3.benchmarks.reports.stats import bootstrap_difference_ci, permutation_test, smallest_permutation_p_value
from qc_sb3.benchmarks.runner.config import load_config
from qc_sb3.benchmarks.runner.planning import plan_runs

TASK = "cube-single-play-singletask-task1-v0"
PUZZLE_2 = "puzzle-3x3-play-singletask-task2-v0"


def exact_difference_quantiles(first: list[float], second: list[float]) -> tuple[float, float]:
    """Quantiles (2.5%, 97.5%) of the exact bootstrap distribution of mean(first*) - mean(second*), by enumeration."""
    values = sorted(
        np.mean(a) - np.mean(b)
        for a in itertools.product(first, repeat=len(first))
        for b in itertools.product(second, repeat=len(second))
    )
    return float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))


def test_bootstrap_difference_matches_exact_enumeration():
    first, second = [0.2, 0.6, 0.7], [0.0, 0.1, 0.5]
    difference, low, high = bootstrap_difference_ci(first, second, n_resamples=200_000, seed=2)
    assert difference == pytest.approx(0.5 - 0.2)
    assert (low, high) == pytest.approx(exact_difference_quantiles(first, second), abs=0.02)
    assert bootstrap_difference_ci([0.4], [0.1]) == pytest.approx((0.3, 0.3, 0.3))
    with pytest.raises(ValueError):
        bootstrap_difference_ci([0.1], [])


def brute_force_permutation_p(first: list[float], second: list[float]) -> float:
    """The two-sided permutation p-value by relabelling every ordering of the pooled values (each split n! m! times)."""
    pooled, n = first + second, len(first)
    observed = abs(np.mean(first) - np.mean(second))
    extreme = [abs(np.mean(order[:n]) - np.mean(order[n:])) >= observed - 1e-12 for order in itertools.permutations(pooled)]
    return float(np.mean(extreme))


def test_permutation_test_matches_relabelling_every_ordering():
    for first, second in (([0.2, 0.6, 0.7], [0.0, 0.1, 0.5]), ([0.3, 0.3, 0.9], [0.3, 0.2, 0.1, 0.0]), ([0.5], [0.5, 0.1])):
        assert permutation_test(first, second) == pytest.approx(brute_force_permutation_p(first, second))
    # Hand-worked: three runs a side, all of one side above the other's: 2 of the 20 splits are as extreme.
    assert permutation_test([1.0, 0.9, 0.8], [0.0, 0.1, 0.2]) == pytest.approx(0.1)
    assert permutation_test([0.4, 0.4], [0.4, 0.4]) == 1.0
    with pytest.raises(ValueError):
        permutation_test([0.1], [])


def test_sampled_permutation_test_agrees_with_the_exact_one():
    rng = np.random.default_rng(5)
    first, second = rng.uniform(0.2, 0.9, size=5).tolist(), rng.uniform(0.0, 0.7, size=5).tolist()
    exact = permutation_test(first, second)
    sampled = permutation_test(first, second, n_resamples=50_000, seed=1, max_exact=0)
    assert sampled == pytest.approx(exact, abs=0.01)
    # The sampled p-value counts the observed split: never 0 (here 999 draws of C(24, 12) = 2.7M splits, two extreme).
    assert permutation_test([1.0] * 12, [0.0] * 12, n_resamples=999, max_exact=0) == pytest.approx(1 / 1000)


def test_the_smallest_p_value_is_that_of_fully_separated_runs():
    for n_first, n_second in ((3, 3), (3, 4), (2, 5)):
        separated = brute_force_permutation_p([10.0 + i for i in range(n_first)], [float(i) for i in range(n_second)])
        assert smallest_permutation_p_value(n_first, n_second) == pytest.approx(separated)
    assert smallest_permutation_p_value(3, 3) == pytest.approx(0.1)
    assert smallest_permutation_p_value(20, 20, n_resamples=999) == pytest.approx(1 / 1000)


def test_paper_success_is_read_at_the_first_evaluation_at_or_after_the_step():
    paper = read_paper_curves()
    # From benchmarks/data/paper_curves.csv: puzzle-3x3 task 2, QC, 1.00 at 100k; BFN 0.28 at 100k and 1.00 at 200k.
    assert paper_success_at(paper, "puzzle-3x3-play-task2", "QC", "offline", 50_000) == (pytest.approx(1.0), 100_000)
    assert paper_success_at(paper, "puzzle-3x3-play-task2", "BFN", "offline", 100_000) == (
        pytest.approx(0.28, abs=0.005),
        100_000,
    )
    assert paper_success_at(paper, "puzzle-3x3-play-task2", "BFN", "offline", 100_001)[1] == 200_000
    # The online phase is read after the paper's 1M offline steps: 20k online steps -> its 1.1M point.
    assert paper_success_at(paper, "puzzle-3x3-play-task2", "BFN", "online", 20_000)[1] == 1_100_000
    assert paper_success_at(paper, None, "QC", "offline", 1000) is None
    assert paper_success_at(paper, "puzzle-3x3-play-task2", "QC", "offline", 2_000_000) is None


def _write_run(root: Path, task: str, method: str, seed: int, successes: list[float], implementation: str | None) -> None:
    run_dir = root / (implementation or "ours") / task / method / f"seed{seed}"
    run_dir.mkdir(parents=True)
    config = {
        "task": task,
        "suite": "ogbench",
        "domain": task.split("-play")[0],
        "method": method,
        "seed": seed,
        "protocol": {"offline_steps": 200, "online_steps": 200, "eval_interval": 100, "eval_episodes": 5},
    }
    if implementation:
        config["implementation"] = implementation
    (run_dir / "config.json").write_text(json.dumps(config))
    steps = (100, 200, 300, 400)
    rows = [
        {"step": s, "phase": "offline" if s <= 200 else "online", "success": v} for s, v in zip(steps, successes, strict=True)
    ]
    pd.DataFrame(rows).to_csv(run_dir / "eval.csv", index=False)


def test_report_compares_implementations_and_tabulates_tasks_with_the_paper(tmp_path):
    root = tmp_path / "evidence"
    # QC: the two implementations alike; QC-FQL: qc_sb3 always succeeds, the reference never. Five runs a side: the
    # fewest whose permutation test can reject at the Bonferroni level of four evaluations (2 / 252 < 0.05 / 4).
    for seed, implementation in itertools.product(range(5), (None, "reference")):
        _write_run(root, TASK, "QC", seed, [0.1 * seed, 0.2, 0.4, 0.6 + 0.1 * seed], implementation)
        _write_run(root, TASK, "QC-FQL", seed, [1.0] * 4 if implementation is None else [0.0] * 4, implementation)
    for seed in range(2):
        _write_run(root, PUZZLE_2, "BFN", seed, [0.0, 0.5 * seed, 0.5, 1.0], None)
    out = write_report(root)

    verdicts = pd.read_csv(out / "parity.csv").set_index("method")
    assert verdicts.loc["QC", "difference"] == pytest.approx(0.0)
    # Each run's mean over its four evaluations is 0.3 + 0.05 seed, for both implementations.
    assert verdicts.loc["QC", "ci95_low"] < 0 < verdicts.loc["QC", "ci95_high"]
    assert verdicts.loc["QC", "p_value"] == 1.0
    assert bool(verdicts.loc["QC", "agree"]) and verdicts.loc["QC", "evaluations_apart"] == 0
    assert verdicts.loc["QC-FQL", "difference"] == pytest.approx(1.0)
    assert verdicts.loc["QC-FQL", "p_value"] == pytest.approx(2 / 252)
    assert not verdicts.loc["QC-FQL", "agree"] and verdicts.loc["QC-FQL", "evaluations_apart"] == 4
    per_step = pd.read_csv(out / "parity_evaluations.csv")
    qc_100 = per_step[(per_step["method"] == "QC") & (per_step["step"] == 100)].iloc[0]
    assert (qc_100["ours"], qc_100["reference"], qc_100["seeds_ours"]) == pytest.approx((0.2, 0.2, 5))
    assert qc_100["bonferroni_level"] == pytest.approx(0.05 / 4)
    assert qc_100["p_value"] == 1.0 and not qc_100["apart"]
    assert (out / f"parity-{TASK}.png").read_bytes()[:4] == b"\x89PNG"

    tasks = pd.read_csv(out / "tasks.csv")
    bfn = tasks[(tasks["task"] == PUZZLE_2) & (tasks["method"] == "BFN") & (tasks["phase"] == "offline")].iloc[0]
    assert (bfn["success"], bfn["seeds"], bfn["paper_step"]) == pytest.approx((0.25, 2, 100_000))
    assert bfn["paper_success"] == pytest.approx(0.28, abs=0.005)
    reference_row = tasks[(tasks["method"] == "QC-FQL (reference)") & (tasks["phase"] == "online")].iloc[0]
    assert reference_row["success"] == 0.0 and np.isnan(reference_row["paper_success"])
    summary = (out / "summary.md").read_text()
    assert f"| {PUZZLE_2} | BFN | 2 | 0.25 [0.00, 0.50] @200 | 0.28 (100k) |" in summary
    assert f"| {TASK} | QC-FQL | 5 / 5 | 4 | 1.000 | 0.000 | +1.000 [+1.000, +1.000] | 0.00794 | 4 | no |" in summary


def test_a_config_becomes_the_reference_flags_of_the_same_settings():
    config = load_config(Path(__file__).parents[1] / "benchmarks" / "configs" / "evidence-parity.yaml")
    runs = {(run.method, run.seed): run for run in plan_runs(config, "unused")}
    flags = reference_flags(runs[("QC", 1)])
    expected = {
        "--env_name=cube-single-play-singletask-task1-v0",
        "--seed=1",
        "--offline_steps=10000",
        "--online_steps=20000",
        "--eval_interval=2500",
        "--eval_episodes=20",
        "--sparse=False",
        "--agent.actor_type=best-of-n",
        "--agent.actor_num_samples=8",
        "--horizon_length=5",
        "--agent.action_chunking=True",
        "--agent.flow_steps=10",
        "--agent.batch_size=256",
        "--agent.lr=0.0003",
        "--discount=0.99",
        "--agent.num_qs=2",
        "--start_training=5000",
        "--agent.actor_hidden_dims=(256,256)",
        "--agent.value_hidden_dims=(256,256)",
    }
    assert expected <= set(flags)
    fql = reference_flags(runs[("QC-FQL", 0)])
    assert {"--agent.actor_type=distill-ddpg", "--agent.alpha=300.0"} <= set(fql)
    assert not any(flag.startswith("--agent.actor_num_samples") for flag in fql)


def test_settings_without_a_reference_flag_are_refused():
    config = load_config(Path(__file__).parents[1] / "benchmarks" / "configs" / "evidence-parity.yaml")
    run = plan_runs(config, "unused")[0]
    changed = run.hyperparameters | {"gradient_steps": 2}
    with pytest.raises(ValueError, match="no flag for gradient_steps=2"):
        reference_flags(type(run)(**{**vars(run), "hyperparameters": changed}))
    for key, value, message in (
        ("offline_sparse_rewards", True, "offline_sparse_rewards=True differs from the env's sparse=False"),
        ("buffer_size", 100, "buffer_size=100 is below the online steps"),
    ):
        with pytest.raises(ValueError, match=message):
            reference_flags(type(run)(**{**vars(run), "hyperparameters": run.hyperparameters | {key: value}}))
    with pytest.raises(ValueError, match="no flag for env"):
        reference_flags(type(run)(**{**vars(run), "env_kwargs": run.env_kwargs | {"max_episode_steps": 50}}))
    # compile_step computes the same updates: nothing to refuse.
    compiled = run.hyperparameters | {"compile_step": True}
    assert reference_flags(type(run)(**{**vars(run), "hyperparameters": compiled})) == reference_flags(run)


def test_the_references_extra_evaluations_before_each_phase_end_are_left_out():
    config = load_config(Path(__file__).parents[1] / "benchmarks" / "configs" / "evidence-parity.yaml")
    run = plan_runs(config, "unused")[0]
    rows = [{"step": str(step), "success": "0.5"} for step in (2500, 5000, 7500, 9999, 10000, 12500, 29999, 30000)]
    converted = convert_eval_rows(rows, run)
    assert [(row["step"], row["phase"]) for row in converted] == [
        (2500, "offline"),
        (5000, "offline"),
        (7500, "offline"),
        (10000, "offline"),
        (12500, "online"),
        (30000, "online"),
    ]


def test_finished_only_reads_the_runs_that_have_finished(tmp_path):
    from qc_sb3.benchmarks.report import load_results

    _write_run(tmp_path, TASK, "QC", 0, [0.1, 0.2, 0.3, 0.4], None)
    _write_run(tmp_path, TASK, "QC", 1, [0.5, 0.5, 0.5, 0.5], None)
    (tmp_path / "ours" / TASK / "QC" / "seed1" / "DONE").write_text("{}")
    assert sorted(load_results(tmp_path)["seed"].unique()) == [0, 1]
    assert load_results(tmp_path, finished_only=True)["seed"].unique().tolist() == [1]


def test_no_verdict_where_the_tests_cannot_reject(tmp_path):
    # Three runs a side, every qc_sb3 run above every reference run: the permutation test's smallest p-value is 0.1,
    # so no test can reject and no verdict is given, however far apart the runs are.
    for seed in range(3):
        _write_run(tmp_path, TASK, "QC", seed, [0.9, 0.9, 0.9, 0.9 - 0.01 * seed], None)
        _write_run(tmp_path, TASK, "QC", seed, [0.1, 0.1, 0.1, 0.1 + 0.01 * seed], "reference")
    out = write_report(tmp_path)
    verdict = pd.read_csv(out / "parity.csv").iloc[0]
    assert verdict["p_value"] == pytest.approx(0.1) and verdict["smallest_p_value"] == pytest.approx(0.1)
    assert pd.isna(verdict["agree"]) and pd.isna(verdict["evaluations_apart"])
    assert "| - | n/a (smallest attainable p 0.1: too few runs to test) |" in (out / "summary.md").read_text()


def test_four_runs_a_side_give_a_verdict_but_locate_nothing(tmp_path):
    # Four runs a side: the curve's test can reject (2 / 70 < 0.05), an evaluation's cannot at 0.05 / 4.
    for seed in range(4):
        _write_run(tmp_path, TASK, "QC", seed, [0.9, 0.9, 0.9, 0.9 - 0.01 * seed], None)
        _write_run(tmp_path, TASK, "QC", seed, [0.1, 0.1, 0.1, 0.1 + 0.01 * seed], "reference")
    verdict = pd.read_csv(write_report(tmp_path) / "parity.csv").iloc[0]
    assert verdict["p_value"] == pytest.approx(2 / 70) and not verdict["agree"]
    assert pd.isna(verdict["evaluations_apart"])


def test_two_folders_of_runs_are_compared_as_the_implementations_are(tmp_path):
    from qc_sb3.benchmarks.reports.compare import compare_folders

    # The second folder pools two sets of runs whose seeds repeat (0-2 and 0-1): five runs, not three.
    for folder, success, seeds in (("first", 0.9, range(5)), ("second/a", 0.1, range(3)), ("second/b", 0.05, range(2))):
        for seed in seeds:
            _write_run(tmp_path / folder, TASK, "QC", seed, [success - 0.01 * seed] * 4, None)
            (tmp_path / folder / "ours" / TASK / "QC" / f"seed{seed}" / "DONE").write_text("{}")
    curves, evaluations = compare_folders(tmp_path / "first", tmp_path / "second")
    row = curves.iloc[0]
    # Every run of the first folder above every run of the second: the most extreme of C(10, 5) = 252 splits, twice.
    assert (row["seeds_ours"], row["seeds_reference"]) == (5, 5)
    assert row["difference"] == pytest.approx(0.88 - (0.1 + 0.09 + 0.08 + 0.05 + 0.04) / 5)
    assert row["p_value"] == pytest.approx(2 / 252)
    assert not row["agree"] and row["evaluations_apart"] == 4 and len(evaluations) == 4
    # The same runs given as two folders pooled on the second side.
    pooled, _ = compare_folders(tmp_path / "first", [tmp_path / "second" / "a", tmp_path / "second" / "b"])
    assert pooled.iloc[0]["seeds_reference"] == 5 and pooled.iloc[0]["p_value"] == pytest.approx(2 / 252)
    with pytest.raises(ValueError, match="no finished run"):
        compare_folders(tmp_path / "first", tmp_path / "missing")
