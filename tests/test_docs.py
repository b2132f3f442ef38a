"""Every documentation citation in the code resolves to a file and a section inside the repository."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted(
    path
    for folder in ("qc_sb3", "envs", "benchmarks", "tests")
    for pattern in ("*.py", "*.yaml", "*.yml", "*.sh")
    for path in (ROOT / folder).rglob(pattern)
)
CITATION = re.compile(r"(docs/[\w-]+\.md)(?: ?(§ ?\d+(?:(?:, ?|-)§ ?\d+)*))?")


def cited_sections(text: str) -> list[tuple[str, int | None]]:
    """(document, section number or None) for every citation in ``text``."""
    found: list[tuple[str, int | None]] = []
    for match in CITATION.finditer(text):
        numbers = [int(n) for n in re.findall(r"§ ?(\d+)", match.group(2) or "")]
        found += [(match.group(1), n) for n in numbers] or [(match.group(1), None)]
    return found


def test_citation_parser_on_hand_examples() -> None:
    assert cited_sections("see docs/algorithms.md §3, §4 and docs/design.md") == [
        ("docs/algorithms.md", 3),
        ("docs/algorithms.md", 4),
        ("docs/design.md", None),
    ]
    assert cited_sections("(docs/algorithms.md §4-§6)") == [("docs/algorithms.md", 4), ("docs/algorithms.md", 6)]


def test_every_citation_names_a_document_and_section_of_the_repository() -> None:
    citations = {(path, cited) for path in [*SOURCES, ROOT / "README.md"] for cited in cited_sections(path.read_text())}
    assert len(citations) > 50, "the code cites its documents; the parser must find them"
    missing = []
    for path, (document, section) in sorted(citations, key=str):
        target = ROOT / document
        if not target.is_file():
            missing.append(f"{path.relative_to(ROOT)} cites {document}, which does not exist")
        elif section is not None and not re.search(rf"^## §{section} ", target.read_text(), flags=re.MULTILINE):
            missing.append(f"{path.relative_to(ROOT)} cites {document} §{section}, which has no such section")
    assert missing == []


def test_no_citation_points_outside_the_repository() -> None:
    outside = re.compile(r"spec/\w+\.md|spec ?§|(?<![\w/-])(?:data|design|algorithms)\.md")
    offenders = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in SOURCES
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if outside.search(line) and path.name != "test_docs.py"
    ]
    assert offenders == []
