"""The README's "Results" are the committed evidence: its tables are the committed report's, the report's numbers are
those of its curves, the report rebuilds from the committed run files alone (``results/evidence``, and so do the
tasks pilot's in ``results/tasks-pilot`` and the tasks campaign's in ``results/tasks``), and its lines on the
fresh-seed comparison with the reference are what ``qc_sb3.benchmarks.reports.compare`` computes from those runs
(``results/diagnosis/confirm``)."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from qc_sb3.benchmarks.parity.implementation_parity import parity_markdown
from qc_sb3.benchmarks.report import write_report
from qc_sb3.benchmarks.reports.compare import compare_folders

ROOT = Path(__file__).parents[1]
EVIDENCE = ROOT / "results" / "evidence"
REPORT = EVIDENCE / "report"


def readme_results_rows() -> list[str]:
    """The data rows of the Markdown tables in the README's "## Results" section."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Results\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("| ")]
    return [line for line in lines if not line.startswith(("| task | method |", "| suite |"))]


def test_the_readme_results_tables_are_the_committed_reports():
    rows = readme_results_rows()
    assert rows, "the README's Results section has no table rows"
    summary = set((REPORT / "summary.md").read_text(encoding="utf-8").splitlines())
    missing = [row for row in rows if row not in summary]
    assert not missing, f"README rows not in results/evidence/report/summary.md: {missing}"


def committed_campaigns() -> list[Path]:
    """The committed report's folders of one protocol each: the report itself, or its sub-folders
    (qc_sb3.benchmarks.report)."""
    return sorted(path.parent for path in REPORT.rglob("tasks.csv"))


def test_the_report_tables_are_the_committed_curves():
    assert committed_campaigns()
    for campaign in committed_campaigns():
        curves = pd.read_csv(campaign / "curves.csv")
        tasks = pd.read_csv(campaign / "tasks.csv")
        assert not tasks.empty
        for row in tasks.itertuples():
            of_run = curves[(curves["task"] == row.task) & (curves["method"] == row.method)]
            # The protocol's offline budget: online-only methods (RLPD) plot their online phase after it too.
            offline = curves[(curves["task"] == row.task) & (curves["phase"] == "offline")]
            offline_budget = offline["step"].max() if not offline.empty else 0
            end = row.steps if row.phase == "offline" else offline_budget + row.steps
            point = of_run[(of_run["phase"] == row.phase) & (of_run["step"] == end)]
            assert len(point) == 1, (campaign.name, row.task, row.method, row.phase)
            assert row.success == pytest.approx(point["success_mean"].iloc[0])
            assert row.seeds == point["n_seeds"].iloc[0]


@pytest.mark.parametrize(
    "results", [EVIDENCE, ROOT / "results" / "tasks-pilot", ROOT / "results" / "tasks"], ids=lambda path: path.name
)
def test_the_report_rebuilds_from_the_committed_runs(tmp_path, results):
    report = results / "report"
    out = write_report(results, tmp_path / "report", finished_only=True)
    committed = (report / "summary.md").read_text(encoding="utf-8").splitlines()
    rebuilt = (out / "summary.md").read_text(encoding="utf-8").splitlines()
    assert rebuilt[1:] == committed[1:]  # the first line names the folder the report was written from
    tables = sorted(path.relative_to(report) for path in report.rglob("*.csv"))
    assert tables == sorted(path.relative_to(out) for path in out.rglob("*.csv"))
    for name in tables:
        pd.testing.assert_frame_equal(pd.read_csv(out / name), pd.read_csv(report / name))
    plots = sorted(path.relative_to(report) for path in report.rglob("*.png"))
    assert plots and plots == sorted(path.relative_to(out) for path in out.rglob("*.png"))


CONFIRMATORY_LINE = re.compile(
    r"^- (QC|QC-FQL), (\d+) seeds a side: qc_sb3 ([\d.]+), reference ([\d.]+), difference ([-+][\d.]+ \[[^\]]+\])$"
)


def readme_confirmatory_rows() -> dict[str, list[str]]:
    """The README's lines on the fresh-seed comparison with the reference (seeds, means, difference), by method."""
    section = (ROOT / "README.md").read_text(encoding="utf-8").split("\n## Results\n", 1)[1].split("\n## ", 1)[0]
    matches = [CONFIRMATORY_LINE.match(line) for line in section.splitlines()]
    return {match[1]: list(match.groups()) for match in matches if match}


def test_the_readme_confirmatory_lines_are_the_committed_confirmatory_runs():
    confirm = ROOT / "results" / "diagnosis" / "confirm"
    rows = readme_confirmatory_rows()
    assert set(rows) == {"QC", "QC-FQL"}
    curves, _ = compare_folders(confirm / "qc_sb3", confirm / "reference")
    for method, cells in rows.items():
        computed = [line for line in parity_markdown(curves).splitlines() if f"| {method} |" in line]
        assert len(computed) == 1, method
        seeds, ours, reference, difference = cells[1:5]
        assert f"| {seeds} / {seeds} | 12 | {ours} | {reference} | {difference} |" in computed[0]
        assert computed[0] in (confirm / f"compare-{method}.md").read_text(encoding="utf-8")
