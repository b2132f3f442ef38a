"""The documentation site: generated pages match their sources, examples run, the nav lists existing pages."""

import csv
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
EXAMPLE_PAGES = [
    "getting-started.md",
    "algorithms/qc.md",
    "algorithms/qc_fql.md",
    "algorithms/rlpd.md",
    "guides/sb3-over-chunks.md",
    "guides/chunk-execution.md",
    "guides/seeds.md",
]


def load_generator():
    spec = importlib.util.spec_from_file_location("gen_pages", DOCS / "gen_pages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_pages_are_committed_as_generated():
    generator = load_generator()
    assert (DOCS / "results.md").read_text(encoding="utf-8") == generator.results_page()
    assert (DOCS / "speed.md").read_text(encoding="utf-8") == generator.speed_page()


def test_pages_carry_no_dates():
    # User pages hold no dated narrative: run windows stay in the results files' "Run record" sections.
    date = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b|\b\d\d:\d\d UTC\b")
    pages = [ROOT / "README.md", *DOCS.rglob("*.md")]
    dated = {str(page.relative_to(ROOT)): date.findall(page.read_text(encoding="utf-8")) for page in pages}
    assert {page: found for page, found in dated.items() if found} == {}


def test_results_page_shows_each_tasks_csv_row():
    # Every (method, offline end, online end) mean in a report's tasks.csv appears in the page's table rows.
    page = (DOCS / "results.md").read_text(encoding="utf-8")
    files = sorted((ROOT / "results" / "evidence" / "report").glob("*/tasks.csv"))
    assert files
    for path in files:
        with path.open() as handle:
            rows = list(csv.DictReader(handle))
        assert rows
        for row in rows:
            assert row["method"] in page
    # The summary table's cells, parsed independently from the source, appear verbatim in the page.
    summary = (ROOT / "results" / "evidence" / "report" / "summary.md").read_text(encoding="utf-8")
    cells = [line for line in summary.splitlines() if re.match(r"\| \w+ \| [\w-]+ \| .* \| \d+ \| \d+ \|", line)]
    assert cells
    for line in cells:
        assert line in page


def test_results_page_shows_each_confirmatory_p_value():
    # Each compare-<method>.md's p-value for its method, parsed from the committed file by column name, is the one in
    # the page's row for that method under that method's test.
    page = (DOCS / "results.md").read_text(encoding="utf-8")
    files = sorted((ROOT / "results" / "diagnosis" / "confirm").glob("compare-*.md"))
    assert {path.stem for path in files} == {"compare-QC", "compare-QC-FQL"}
    for path in files:
        method = path.stem[len("compare-") :]
        rows = [line.strip("|").split("|") for line in path.read_text(encoding="utf-8").splitlines() if line[:1] == "|"]
        header = [cell.strip() for cell in rows[0]]
        expected = [row for row in rows[2:] if row[header.index("method")].strip() == method]
        assert len(expected) == 1
        p_value = float(expected[0][header.index("p (permutation)")])
        section = page.split(f"### {method}'s test")[1].split("\n#")[0]
        shown = [line.strip("|").split("|") for line in section.splitlines() if line.startswith("| cube")]
        assert len(shown) == 1 and shown[0][header.index("method")].strip() == method
        assert float(shown[0][header.index("p (permutation)")]) == p_value
        assert 0 < p_value <= 1


def test_speed_page_holds_each_step_time_median():
    page = (DOCS / "speed.md").read_text(encoding="utf-8")
    logs = sorted((ROOT / "results" / "speed").glob("step-time-*.txt"))
    assert logs
    for log in logs:
        medians = re.findall(r"^\w+\s+\w+\s+(\d+\.\d+) \(", log.read_text(encoding="utf-8"), flags=re.M)
        assert medians
        section = page.split(f"## `{log.name}`")[1].split("\n## ")[0]
        assert re.findall(r"^\w+\s+\w+\s+(\d+\.\d+) \(", section, flags=re.M) == medians
    for log in sorted((ROOT / "results" / "speed").glob("*.txt")):
        assert f"## `{log.name}`" in page


def test_laptop_sizes_are_the_step_time_logs_first_runs():
    # Each row's steps/s is the first run's median in its log, and its durations are 10k and 1M steps at that pace.
    guide = (DOCS / "guides" / "speed-options.md").read_text(encoding="utf-8")
    rows = [line.strip("|").split("|") for line in guide.split("## Sizes for a laptop")[1].splitlines()]
    rows = [[cell.strip() for cell in row] for row in rows if len(row) == 6 and row[0].strip().startswith("`QC")]
    assert len(rows) == 4
    for algorithm, arch, _, rate, ten_k, one_m in rows:
        config = "small" if "256" in arch else "default"
        log = (ROOT / "results" / "speed" / f"step-time-{config}.txt").read_text(encoding="utf-8")
        method = algorithm.strip("`")
        first = re.search(rf"^{config}\s+{method}\s+(\d+\.\d+) \(", log, flags=re.M)
        assert first is not None and float(rate) == float(first.group(1))
        minutes, hours = 1e4 / float(rate) / 60, 1e6 / float(rate) / 3600
        assert ten_k == (f"{minutes:.0f} min" if minutes >= 10 or minutes.is_integer() else f"{minutes:.2g} min")
        assert one_m == (f"{hours:.2g} h" if hours < 100 else f"{hours:.0f} h")


def nav_pages(entries):
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        if isinstance(value, list):
            yield from nav_pages(value)
        else:
            yield value


def test_nav_pages_exist():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    pages = list(nav_pages(config["nav"]))
    assert "results.md" in pages and "algorithms/qc.md" in pages
    for page in pages:
        assert (DOCS / page).is_file(), page


@pytest.mark.parametrize("page", EXAMPLE_PAGES)
def test_page_examples_run(page, tmp_path):
    text = (DOCS / page).read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)
    assert blocks
    env = dict(os.environ, MINARI_DATASETS_PATH=str(tmp_path / "minari"), OMP_NUM_THREADS="1")
    result = subprocess.run(
        [sys.executable, "-c", "\n".join(blocks)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
