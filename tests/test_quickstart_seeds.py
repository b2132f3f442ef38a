"""The committed five-seed quickstart runs: their README's table is what each run's eval.csv holds, and the runs are the
quickstart's config on different seeds."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

ROOT = Path(__file__).parents[1]
RUNS = ROOT / "results" / "quickstart-seeds"


def readme_rows() -> dict[int, list[float]]:
    """The README's per-seed table: seed -> its three successes."""
    rows = {}
    for line in (RUNS / "README.md").read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if line.startswith("| ") and cells[0].isdigit():
            rows[int(cells[0])] = [float(cell) for cell in cells[1:]]
    return rows


def test_readme_table_is_the_runs_eval_files():
    rows = readme_rows()
    assert sorted(rows) == [0, 1, 2, 3, 4]
    for seed, successes in rows.items():
        evaluations = pd.read_csv(RUNS / "lift-mh-low_dim" / "QC" / f"seed{seed}" / "eval.csv")
        assert list(evaluations["step"]) == [1500, 3000, 4500]
        assert successes == pytest.approx(list(evaluations["success"]))


def test_readme_means_are_the_mean_of_its_table():
    rows = readme_rows()
    text = (RUNS / "README.md").read_text(encoding="utf-8")
    offline_end = sum(row[1] for row in rows.values()) / len(rows)
    online_end = sum(row[2] for row in rows.values()) / len(rows)
    assert f"{offline_end:.2f} [" in text and f"{online_end:.2f} [" in text


def test_runs_are_the_quickstart_config_on_five_seeds():
    quickstart = yaml.safe_load((ROOT / "benchmarks" / "configs" / "quickstart.yaml").read_text(encoding="utf-8"))
    seeds = yaml.safe_load((ROOT / "benchmarks" / "configs" / "quickstart-seeds.yaml").read_text(encoding="utf-8"))
    for key in ("tasks", "methods", "protocol", "datasets", "hyperparameters"):
        assert seeds[key] == quickstart[key], key
    assert seeds["seeds"] == [0, 1, 2, 3, 4]
    for seed in seeds["seeds"]:
        config = json.loads((RUNS / "lift-mh-low_dim" / "QC" / f"seed{seed}" / "config.json").read_text())
        assert config["seed"] == seed


def test_readme_quotes_the_five_seeds_and_the_quickstarts_seed():
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    summary = (RUNS / "report" / "summary.md").read_text(encoding="utf-8")
    quoted = readme.split("Five seeds of the same config give ", 1)[1].split(" after the online one", 1)[0]
    offline, online = quoted.split(" after the offline phase and ")
    row = next(line for line in summary.splitlines() if line.startswith("| robomimic | robomimic | QC |"))
    assert row.endswith(f"| {offline} | {online} |"), (row, offline, online)
    seed0 = pd.read_csv(RUNS / "lift-mh-low_dim" / "QC" / "seed0" / "eval.csv")
    offline_successes, online_successes = round(seed0["success"].iloc[1] * 20), round(seed0["success"].iloc[2] * 20)
    assert f"{offline_successes} of 20 episodes after the offline phase and {online_successes} of 20" in readme
