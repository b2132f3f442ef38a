"""qc_sb3.benchmarks.speed.step_cost: the CPU cost of a config's runs, measured on the toy suite."""

from __future__ import annotations

from qc_sb3.benchmarks.speed.step_cost import main

from test_benchmarks_toys import TOY_TASK, keep_torch_threads, toy_config, toy_suite, write_config  # noqa: F401 (autouse fixtures of this module)


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
