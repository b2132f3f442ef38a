"""The tasks campaign's README (``results/tasks/README.md``): each section's table of success rates is what its runs'
``eval.csv`` files hold, with each curve mean the mean of its row, and every run that the section's config plans has
finished and has its row."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

ROOT = Path(__file__).parents[1]
RESULTS = ROOT / "results" / "tasks"
CONFIG = re.compile(r"^`(benchmarks/configs/evidence-tasks-[a-z]+\.yaml)`", re.MULTILINE)
ROW = re.compile(r"^\| (\S+), seed (\d+) \|(.*)\|$")


def readme_sections() -> dict[str, str]:
    """The README's sections that report runs: the path of the config they name first -> the section's text."""
    text = RESULTS.joinpath("README.md").read_text(encoding="utf-8")
    sections = {}
    for section in text.split("\n## ")[1:]:
        match = CONFIG.search(section)
        if match:
            sections[match[1]] = section
    return sections


def table_rows(section: str) -> dict[tuple[str, int], list[str]]:
    """A section's table: (method, seed) -> the row's cells after its label."""
    rows = {}
    for line in section.splitlines():
        match = ROW.match(line)
        if match:
            rows[(match[1], int(match[2]))] = [cell.strip() for cell in match[3].split("|")]
    return rows


def test_the_readme_reports_both_configs():
    assert sorted(readme_sections()) == [
        "benchmarks/configs/evidence-tasks-can.yaml",
        "benchmarks/configs/evidence-tasks-puzzle.yaml",
    ]


@pytest.mark.parametrize("config_path", sorted(readme_sections()))
def test_each_row_is_its_runs_eval_file(config_path):
    config = yaml.safe_load((ROOT / config_path).read_text(encoding="utf-8"))
    (task,) = config["tasks"]
    rows = table_rows(readme_sections()[config_path])
    planned = {(method, seed) for method in config["methods"] for seed in config["seeds"]}
    assert set(rows) == planned, "the table's rows are not the config's methods and seeds"
    for (method, seed), cells in rows.items():
        run = RESULTS / task / method / f"seed{seed}"
        assert (run / "DONE").is_file(), f"{run} has not finished"
        evaluations = pd.read_csv(run / "eval.csv")
        offline = evaluations[evaluations["phase"] == "offline"]
        interval = config["protocol"]["eval_interval"]
        steps = range(interval, config["protocol"]["offline_steps"] + 1, interval)
        assert list(offline["step"]) == list(steps), run
        *successes, curve_mean = cells
        assert [float(cell) for cell in successes] == pytest.approx(list(offline["success"]), abs=1e-9), run
        decimals = len(curve_mean.split(".")[1])
        # The row's own mean, computed here from its cells, rounded as the README prints it.
        mean = sum(float(cell) for cell in successes) / len(successes)
        assert abs(float(curve_mean) - mean) <= 0.5 * 10**-decimals + 1e-12, (run, curve_mean, mean)
