"""CONTRIBUTING.md points at what exists: the files and folders it names, the sections it cites, the hooks it asks for."""

import re
from pathlib import Path

import pytest

from qc_sb3.common.chunked import ChunkedOffPolicyAlgorithm
from qc_sb3.common.flow_q import FlowQAlgorithm, FlowQPolicy
from qc_sb3.common.policies import ChunkPolicy

ROOT = Path(__file__).resolve().parents[1]
TEXT = (ROOT / "CONTRIBUTING.md").read_text()


def named_paths(text: str) -> list[str]:
    """Repository paths written in backquotes: with a folder, without placeholders (<algo>) or the local .venv."""
    quoted = re.findall(r"`([^`\s]+)`", text)
    return [path for path in quoted if "/" in path and re.fullmatch(r"[\w./-]+", path) and not path.startswith(".")]


def test_path_parser_on_a_hand_example():
    text = "see `qc_sb3/rlpd/`, `tests/test_<algo>.py`, `.venv/bin/ruff`, `a.b.C`, `docs/algorithms.md §4` and `x/y.py`"
    assert named_paths(text) == ["qc_sb3/rlpd/", "x/y.py"]


def test_every_named_path_exists():
    paths = named_paths(TEXT)
    assert len(paths) > 10, "the guide names the files to edit; the parser must find them"
    assert [path for path in paths if not (ROOT / path).exists()] == []


def test_every_cited_section_exists():
    sections = {int(number) for number in re.findall(r"docs/algorithms\.md §(\d+)", TEXT)}
    assert sections, "the guide cites the equations' document"
    headings = set(re.findall(r"^## §(\d+) ", (ROOT / "docs/algorithms.md").read_text(), flags=re.MULTILINE))
    assert {str(section) for section in sections} <= headings


@pytest.mark.parametrize(
    "owner, name",
    [
        (ChunkedOffPolicyAlgorithm, "_losses"),
        (ChunkedOffPolicyAlgorithm, "_optimized_loss"),
        (ChunkedOffPolicyAlgorithm, "_sample_action"),
        (ChunkedOffPolicyAlgorithm, "_get_torch_save_params"),
        (FlowQAlgorithm, "_actor_losses"),
        (FlowQAlgorithm, "_policy_hyperparameters"),
        (ChunkPolicy, "_predict_chunk"),
        (ChunkPolicy, "_get_constructor_parameters"),
        (FlowQPolicy, "optimizers"),
    ],
)
def test_the_hooks_it_names_exist_where_it_says(owner, name):
    assert f"`{name}" in TEXT and hasattr(owner, name)


def test_the_contract_test_has_the_variants_table_it_names():
    assert "`VARIANTS`" in TEXT
    assert re.search(r"^VARIANTS = \{", (ROOT / "tests" / "test_contract.py").read_text(), flags=re.MULTILINE)
