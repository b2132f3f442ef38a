"""The report: bootstrap intervals against exact enumeration, curves, tables and plots of a synthetic results folder."""

from __future__ import annotations

import itertools
import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from qc_sb3.benchmarks.report import main, plot_task, write_report
from qc_sb3.benchmarks.reports.paper_comparison import paper_curve_on_axis, paper_task_name, read_paper_curves
from qc_sb3.benchmarks.reports.stats import bootstrap_mean_ci, stratified_bootstrap_ci

CUBE_DOUBLE_2 = "cube-double-play-singletask-task2-v0"
CUBE_DOUBLE_3 = "cube-double-play-singletask-task3-v0"
SCENE_1 = "scene-play-singletask-task1-v0"


def exact_bootstrap_quantiles(groups: list[list[float]], confidence: float = 0.95) -> tuple[float, float]:
    """
    The quantiles of the exact bootstrap distribution of the mean of group means, by enumerating every equally likely
    resample (each group's values drawn with replacement, groups independent).
    """
    per_group = [list(itertools.product(group, repeat=len(group))) for group in groups]
    counts: dict[Fraction, int] = {}
    for combination in itertools.product(*per_group):
        value = sum(Fraction(sum(Fraction(str(x)) for x in draw), len(draw)) for draw in combination) / len(groups)
        counts[value] = counts.get(value, 0) + 1
    total = sum(counts.values())
    tail = Fraction(1 - confidence).limit_denominator(1000) / 2
    cumulative, low, high = Fraction(0), None, None
    for value in sorted(counts):
        previous = cumulative
        cumulative += Fraction(counts[value], total)
        # Keep clear of the atoms' edges, where a Monte Carlo percentile may fall either side.
        if low is None and cumulative >= tail:
            assert (cumulative - tail > Fraction(1, 100) and tail - previous > Fraction(1, 100)) or previous == 0
            low = float(value)
        if high is None and cumulative >= 1 - tail:
            assert cumulative - (1 - tail) > Fraction(1, 100) and (1 - tail) - previous > Fraction(1, 100)
            high = float(value)
    return low, high


def test_stratified_bootstrap_matches_exact_enumeration():
    groups = [[0.0, 1.0], [0.0, 0.0, 1.0]]
    point, low, high = stratified_bootstrap_ci(groups, seed=3)
    assert point == pytest.approx((0.5 + 1 / 3) / 2)
    assert (low, high) == pytest.approx(exact_bootstrap_quantiles(groups))
    assert (low, high) == pytest.approx((0.0, (1 + 2 / 3) / 2))  # worked by hand: P(stat = 1) = 1/4 * 1/27 < 2.5%


def test_bootstrap_of_one_group_matches_exact_enumeration():
    values = [0.1, 0.5, 0.5, 0.9]
    mean, low, high = bootstrap_mean_ci(values, seed=1)
    assert mean == pytest.approx(0.5)
    assert (low, high) == pytest.approx(exact_bootstrap_quantiles([values]))
    assert (low, high) == pytest.approx((0.2, 0.8))


def test_bootstrap_is_seeded_and_collapses_on_one_seed():
    assert stratified_bootstrap_ci([[0.1, 0.5, 0.7]], seed=4) == stratified_bootstrap_ci([[0.1, 0.5, 0.7]], seed=4)
    assert bootstrap_mean_ci([0.3]) == pytest.approx((0.3, 0.3, 0.3))
    with pytest.raises(ValueError):
        stratified_bootstrap_ci([[0.1], []])


def test_task_names_map_to_the_papers():
    assert paper_task_name(CUBE_DOUBLE_2) == "cube-double-play-task2"
    assert paper_task_name("puzzle-3x3-play-singletask-task5-v0") == "puzzle-3x3-play-task5"
    assert paper_task_name("square-mh-low_dim") == "square"
    assert paper_task_name("point-reach") is None
    paper = read_paper_curves()
    assert list(paper.columns) == ["suite", "task", "method", "step", "phase", "success_mean", "ci95_low", "ci95_high"]
    assert {"cube-double-play-task2", "lift"} <= set(paper["task"])


def test_paper_curves_are_stretched_onto_the_protocol():
    paper = pd.DataFrame({"step": [0, 500_000, 1_000_000, 1_500_000, 2_000_000], "success_mean": [0, 0.1, 0.2, 0.3, 0.4]})
    mapped = paper_curve_on_axis(paper, offline_budget=200, online_budget=1000)
    assert mapped["step"].tolist() == [0.0, 100.0, 200.0, 700.0, 1200.0]


# Synthetic results: (task, method, seed) -> success at steps 100, 200 (offline) and 300, 400 (online).
SYNTHETIC = {
    (CUBE_DOUBLE_2, "QC", 0): [0.1, 0.4, 0.6, 1.0],
    (CUBE_DOUBLE_2, "QC", 1): [0.3, 0.2, 0.8, 0.8],
    (CUBE_DOUBLE_3, "QC", 0): [0.0, 0.0, 0.5, 0.5],
    (CUBE_DOUBLE_3, "QC", 1): [0.0, 0.2, 0.1, 0.3],
    (CUBE_DOUBLE_3, "QC", 2): [0.0, 0.5, 0.6, 0.6],
    (SCENE_1, "QC", 0): [0.5, 0.5, 0.5, 0.9],
    (CUBE_DOUBLE_2, "RLPD", 0): [None, None, 0.2, 0.4],
}
DOMAINS = {CUBE_DOUBLE_2: "cube-double", CUBE_DOUBLE_3: "cube-double", SCENE_1: "scene"}


@pytest.fixture
def results_dir(tmp_path) -> Path:
    """A results folder as the runner writes it, offline budget 200 and online budget 200, evaluated every 100."""
    for (task, method, seed), successes in SYNTHETIC.items():
        run_dir = tmp_path / "results" / task / method / f"seed{seed}"
        run_dir.mkdir(parents=True)
        config = {
            "task": task,
            "suite": "ogbench",
            "domain": DOMAINS[task],
            "method": method,
            "seed": seed,
            "protocol": {"offline_steps": 200, "online_steps": 200, "eval_interval": 100, "eval_episodes": 5},
        }
        (run_dir / "config.json").write_text(json.dumps(config))
        rows = [
            {"step": step, "phase": "offline" if step <= 200 else "online", "success": success, "return": -1.0}
            for step, success in zip((100, 200, 300, 400), successes, strict=True)
            if success is not None
        ]
        pd.DataFrame(rows).to_csv(run_dir / "eval.csv", index=False)
    return tmp_path / "results"


def test_report_writes_curves_tables_and_plots(results_dir, tmp_path):
    out = write_report(results_dir, tmp_path / "report")
    for task in (CUBE_DOUBLE_2, CUBE_DOUBLE_3, SCENE_1):
        png = out / f"{task}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    curves = pd.read_csv(out / "curves.csv")
    row = curves[(curves["task"] == CUBE_DOUBLE_3) & (curves["method"] == "QC") & (curves["step"] == 300)].iloc[0]
    assert row["n_seeds"] == 3 and row["success_mean"] == pytest.approx((0.5 + 0.1 + 0.6) / 3)
    assert 0.1 <= row["ci95_low"] <= row["success_mean"] <= row["ci95_high"] <= 0.6
    one_seed = curves[(curves["task"] == SCENE_1) & (curves["step"] == 400)].iloc[0]
    assert (one_seed["success_mean"], one_seed["ci95_low"], one_seed["ci95_high"]) == pytest.approx((0.9, 0.9, 0.9))

    table = pd.read_csv(out / "summary.csv")
    cell = table[(table["domain"] == "cube-double") & (table["method"] == "QC") & (table["phase"] == "online")].iloc[0]
    # Mean over the two tasks of each task's mean over seeds, at the online end (step 400).
    assert cell["success"] == pytest.approx(((1.0 + 0.8) / 2 + (0.5 + 0.3 + 0.6) / 3) / 2)
    assert (cell["tasks"], cell["runs"]) == (2, 5)
    offline = table[(table["domain"] == "cube-double") & (table["method"] == "QC") & (table["phase"] == "offline")].iloc[0]
    assert offline["success"] == pytest.approx(((0.4 + 0.2) / 2 + (0.0 + 0.2 + 0.5) / 3) / 2)
    # Over the suite's two domains: three tasks as strata.
    overall = table[(table["domain"] == "all") & (table["method"] == "QC") & (table["phase"] == "online")].iloc[0]
    assert overall["success"] == pytest.approx(((1.0 + 0.8) / 2 + (0.5 + 0.3 + 0.6) / 3 + 0.9) / 3)
    # RLPD has no offline phase: only an online cell.
    assert set(table[table["method"] == "RLPD"]["phase"]) == {"online"}
    markdown = (out / "summary.md").read_text()
    assert "| ogbench | cube-double | QC | 2 | 5 |" in markdown
    assert "| ogbench | cube-double | RLPD | 1 | 1 | - | 0.40 [0.40, 0.40] |" in markdown


def test_the_papers_curve_is_drawn_where_the_task_matches(results_dir, tmp_path):
    from qc_sb3.benchmarks.report import curve_statistics, load_results

    results = load_results(results_dir)
    curves = curve_statistics(results)
    paper = read_paper_curves()
    for task, expected in ((CUBE_DOUBLE_2, True), ("point-reach", False)):
        task_results = results[results["task"] == CUBE_DOUBLE_2].assign(task=task)
        task_curves = curves[curves["task"] == CUBE_DOUBLE_2].assign(task=task)
        assert plot_task(task, task_curves, task_results, paper, tmp_path / f"{task}.png") is expected
    drawn = paper[(paper["task"] == "cube-double-play-task2") & (paper["method"] == "QC")]
    assert len(drawn) == 21 and np.isclose(drawn["success_mean"].max(), 1.0)


def test_report_command(results_dir, capsys):
    assert main([str(results_dir)]) == 0
    assert (results_dir / "report" / "summary.md").exists()
    assert "| suite | domain | method |" in capsys.readouterr().out


def write_pilot_run(folder: Path, successes: list[float]) -> None:
    """One offline-only QC run of CUBE_DOUBLE_2 (offline budget 400, evaluated every 100) under ``folder``."""
    run_dir = folder / CUBE_DOUBLE_2 / "QC" / "seed0"
    run_dir.mkdir(parents=True)
    config = {
        "task": CUBE_DOUBLE_2,
        "suite": "ogbench",
        "domain": "cube-double",
        "method": "QC",
        "seed": 0,
        "protocol": {"offline_steps": 400, "online_steps": 0, "eval_interval": 100, "eval_episodes": 5},
    }
    (run_dir / "config.json").write_text(json.dumps(config))
    rows = [{"step": 100 * (k + 1), "phase": "offline", "success": value, "return": -1.0} for k, value in enumerate(successes)]
    pd.DataFrame(rows).to_csv(run_dir / "eval.csv", index=False)


def test_runs_of_different_protocols_are_reported_apart(results_dir, tmp_path):
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    results_dir.rename(evidence / "campaign")
    write_pilot_run(evidence / "pilot", [0.0, 0.0, 0.0, 1.0])
    out = write_report(evidence)
    assert not (out / "curves.csv").exists()
    # The campaign's numbers are those of the fixture alone, as if the pilot were not there.
    table = pd.read_csv(out / "campaign" / "summary.csv")
    cell = table[(table["domain"] == "cube-double") & (table["method"] == "QC") & (table["phase"] == "offline")].iloc[0]
    assert cell["success"] == pytest.approx(((0.4 + 0.2) / 2 + (0.0 + 0.2 + 0.5) / 3) / 2)
    assert (cell["tasks"], cell["runs"]) == (2, 5)
    pilot = pd.read_csv(out / "pilot" / "curves.csv")
    assert pilot["success_mean"].tolist() == [0.0, 0.0, 0.0, 1.0] and set(pilot["n_seeds"]) == {1}
    pilot_table = pd.read_csv(out / "pilot" / "summary.csv")
    assert pilot_table[pilot_table["method"] == "QC"]["success"].tolist() == [1.0]  # its offline end, step 400
    summary = (out / "summary.md").read_text()
    assert summary.count("\n## campaign\n") == 1 and summary.count("\n## pilot\n") == 1
    assert "400 offline gradient steps + 0 online env steps" in summary
    assert summary.count("| ogbench | cube-double | QC | 2 | 5 |") == 1
    assert summary.count("| ogbench | cube-double | QC | 1 | 1 | 1.00 [1.00, 1.00] | - |") == 1
    assert (out / "campaign" / f"{SCENE_1}.png").exists() and not (out / "pilot" / f"{SCENE_1}.png").exists()


def test_protocols_without_a_folder_of_their_own_are_numbered(results_dir):
    write_pilot_run(results_dir / "pilot", [0.0, 0.5, 0.5, 0.5])
    (results_dir / "pilot" / CUBE_DOUBLE_2 / "QC" / "seed0").rename(results_dir / CUBE_DOUBLE_2 / "QC" / "seed7")
    out = write_report(results_dir)
    folders = sorted(path.name for path in out.iterdir() if path.is_dir())
    assert folders == ["protocol-0", "protocol-1"]
    sizes = sorted(len(pd.read_csv(out / folder / "curves.csv")) for folder in folders)
    assert sizes == [4, 3 * 4 + 2]  # the pilot's 4 evaluations; the fixture's three QC curves of 4 and RLPD's of 2


def test_a_campaign_is_a_protocol_with_one_dataset_per_suite():
    from qc_sb3.benchmarks.runner.campaigns import campaign_keys

    protocol, other_protocol = json.dumps({"offline_steps": 200}), json.dumps({"offline_steps": 400})
    ogbench_60, ogbench_100, robomimic = (json.dumps({"episodes": n}) for n in (60, 100, 200))
    runs = pd.DataFrame(
        [
            (protocol, "ogbench", ogbench_60),
            (protocol, "ogbench", ogbench_60),
            (protocol, "robomimic", robomimic),  # another suite's data: the same campaign (one config, two suites)
            (other_protocol, "ogbench", ogbench_60),  # another protocol
            (other_protocol, "ogbench", ogbench_100),  # the same suite with other data: apart
        ],
        columns=["protocol_key", "suite", "dataset_key"],
    )
    keys = campaign_keys(runs).tolist()
    assert keys[0] == keys[1] == keys[2] and len(set(keys)) == 3
    datasets = {"ogbench": {"episodes": 60}, "robomimic": {"episodes": 200}}
    assert json.loads(keys[0]) == {"protocol": {"offline_steps": 200}, "datasets": datasets}
    assert json.loads(keys[4])["datasets"] == {"ogbench": {"episodes": 100}}


def test_a_new_report_replaces_the_old_one_whole(results_dir, tmp_path):
    out = tmp_path / "report"
    write_report(results_dir, out)
    assert (out / "curves.csv").exists()
    write_pilot_run(results_dir / "pilot", [0.0, 0.0, 0.0, 1.0])  # now two protocols: sub-folders
    write_report(results_dir, out)
    assert not (out / "curves.csv").exists() and not list(out.glob("*.png"))  # no file of the first report is left
    names = {path.name for path in out.iterdir()}
    assert names - {"pilot", "summary.md"} == {"protocol-0"}  # the fixture's runs sit in no folder of their own
    assert [path.name for path in tmp_path.iterdir() if path.name.startswith(".")] == []  # no staging folder left
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="holds no report"):
        write_report(results_dir, tmp_path / "notes")
    assert (tmp_path / "notes" / "todo.txt").read_text() == "mine"


def test_also_pools_runs_of_other_folders_once(results_dir, tmp_path):
    # seed 2 of one curve moved to a folder of its own, given as a method's folder
    moved = tmp_path / "other" / CUBE_DOUBLE_3 / "QC"
    moved.mkdir(parents=True)
    (results_dir / CUBE_DOUBLE_3 / "QC" / "seed2").rename(moved / "seed2")
    alone = pd.read_csv(write_report(results_dir, tmp_path / "alone") / "curves.csv")
    pooled_dir = write_report(results_dir, tmp_path / "pooled", also=[moved, moved.parent.parent, results_dir])
    pooled = pd.read_csv(pooled_dir / "curves.csv")
    for curves, seeds, mean in ((alone, 2, (0.5 + 0.1) / 2), (pooled, 3, (0.5 + 0.1 + 0.6) / 3)):
        row = curves[(curves["task"] == CUBE_DOUBLE_3) & (curves["method"] == "QC") & (curves["step"] == 300)].iloc[0]
        assert row["n_seeds"] == seeds and row["success_mean"] == pytest.approx(mean)
