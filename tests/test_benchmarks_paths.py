"""Results folders hold only what the runner and the reports write there: names are never paths, links never followed."""

from __future__ import annotations

import os

import pytest

from qc_sb3.benchmarks.run import main
from qc_sb3.benchmarks.runner.config import ConfigError, load_config

from test_benchmarks_toys import toy_config, toy_suite, write_config  # noqa: F401 (autouse fixture of this module)


@pytest.mark.parametrize("name", ["../escaped", "/tmp/escaped", "a/b", "..", ".hidden", ""])
def test_a_config_name_that_is_a_path_is_refused_with_the_rule(name):
    with pytest.raises(ConfigError, match=r"name .* is not valid: use letters, digits"):
        load_config(toy_config(name=name or "."))


def test_the_runner_refuses_a_config_name_that_leaves_the_results_folder(tmp_path, monkeypatch, capsys):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    config = write_config(tmp_path / "toy.yaml", toy_config(name="../../escaped"))
    assert main([str(config), "--no-report"]) == 2
    assert "is not valid" in " ".join(capsys.readouterr().out.split())
    assert sorted(os.listdir(tmp_path)) == ["toy.yaml", "work"] and not os.listdir(work)
