"""benchmarks.step_cost: the CPU cost of a config's runs, measured on the toy suite."""

from __future__ import annotations

import pytest
import torch as th

from benchmarks.step_cost import main

from test_benchmarks_toys import TOY_TASK, register_toy_suite, toy_config, write_config


@pytest.fixture(autouse=True, scope="module")
def toy_suite():
    register_toy_suite()


@pytest.fixture(autouse=True)
def keep_torch_threads():
    n_threads = th.get_num_threads()
    yield
    th.set_num_threads(n_threads)


def test_step_cost_prints_one_row_per_task_and_method(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = toy_config(methods=["QC", "RLPD"], out=str(tmp_path / "results"))
    assert main([str(write_config(tmp_path / "config.yaml", config)), "--steps", "5", "--episodes", "1"]) == 0
    rows = [line.split("|")[1:-1] for line in capsys.readouterr().out.splitlines() if line.startswith(f"| {TOY_TASK}")]
    assert [row[1].strip() for row in rows] == ["QC", "RLPD (online)"]
    for row in rows:
        step_cost, episode_cost, episode_steps = (float(cell) for cell in row[2:])
        assert step_cost > 0 and episode_cost > 0
        assert 1 <= episode_steps <= 50  # the toy env's episode limit
    # Only the dataset cache (by default <out>/datasets) is written, no run folder.
    assert [path.name for path in (tmp_path / "results").iterdir()] == ["datasets"]
