"""The interquartile mean over tasks and seeds: hand-worked examples, exact bootstrap enumeration, the report's table."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from test_benchmarks_report import results_dir  # noqa: F401 (the synthetic results folder fixture)

from qc_sb3.benchmarks.report import write_report
from qc_sb3.benchmarks.reports.aggregates import interquartile_mean, stratified_bootstrap_iqm_ci


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([7.0, 0.0, 5.0, 1.0, 6.0, 2.0, 4.0, 3.0], (2 + 3 + 4 + 5) / 4),  # n = 8: the lowest and highest two dropped
        ([1.0, 0.0, 0.9, 0.1, 1.0], (0.1 + 0.9 + 1.0) / 3),  # n = 5: one dropped at each end
        ([0.2, 0.8, 0.5], 0.5),  # n = 3: floor(3 / 4) = 0, the plain mean
        ([0.4], 0.4),
    ],
)
def test_interquartile_mean_drops_a_quarter_at_each_end(values, expected):
    assert interquartile_mean(np.array(values)) == pytest.approx(expected)


def test_iqm_interval_is_the_quantiles_of_the_exact_stratified_bootstrap():
    groups = [[0.0, 1.0], [0.0, 0.5, 1.0]]
    point, low, high = stratified_bootstrap_iqm_ci(groups, n_resamples=20_000, seed=2)
    # Pooled [0, 0, 0.5, 1, 1], n = 5: drop one at each end -> mean(0, 0.5, 1).
    assert point == pytest.approx(0.5)
    # Every equally likely resample: each task's runs drawn with replacement, the IQM of the pooled five.
    statistics = sorted(
        (sum(sorted(first + second)[1:4]) / 3)
        for first in itertools.product(groups[0], repeat=2)
        for second in itertools.product(groups[1], repeat=3)
    )
    exact = np.quantile(statistics, [0.025, 0.975], method="inverted_cdf")
    assert (low, high) == pytest.approx(tuple(exact))


def test_iqm_refuses_an_empty_task():
    with pytest.raises(ValueError, match="non-empty"):
        stratified_bootstrap_iqm_ci([[0.5], []])


def test_report_gives_each_methods_iqm_over_tasks_and_seeds(results_dir, tmp_path):  # noqa: F811
    out = write_report(results_dir, tmp_path / "report")
    table = pd.read_csv(out / "iqm.csv").set_index(["method", "phase"])
    # QC's six runs over three tasks at the online end (step 400): 1.0, 0.8 | 0.5, 0.3, 0.6 | 0.9.
    assert table.loc[("QC", "online"), "iqm"] == pytest.approx((0.5 + 0.6 + 0.8 + 0.9) / 4)
    # At the offline end (step 200): 0.4, 0.2 | 0.0, 0.2, 0.5 | 0.5.
    assert table.loc[("QC", "offline"), "iqm"] == pytest.approx((0.2 + 0.2 + 0.4 + 0.5) / 4)
    assert tuple(table.loc[("QC", "online"), ["tasks", "runs"]]) == (3, 6)
    assert table.loc[("QC", "online"), "ci95_low"] <= 0.7 <= table.loc[("QC", "online"), "ci95_high"]
    assert ("RLPD", "offline") not in table.index
    assert "| QC | 3 | 6 | 0.33 [" in (out / "summary.md").read_text()


def test_a_one_task_campaign_has_no_iqm_section(results_dir, tmp_path):  # noqa: F811
    import shutil

    for task in ("cube-double-play-singletask-task3-v0", "scene-play-singletask-task1-v0"):
        shutil.rmtree(results_dir / task)
    out = write_report(results_dir, tmp_path / "report")
    assert not (out / "iqm.csv").exists()
    assert "Interquartile" not in (out / "summary.md").read_text()
