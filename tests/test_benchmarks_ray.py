"""The Ray path: each run a Ray task on a local Ray instance, writing the same results layout."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest

from qc_sb3.benchmarks.run import main

from test_benchmarks_toys import TOY_TASK, register_toy_suite, toy_config, write_config

TESTS_DIR = Path(__file__).parent


# 2: the two seeds as one Ray task (execution.seeds_per_process)
@pytest.mark.parametrize("seeds_per_process", [1, 2])
def test_runs_execute_as_ray_tasks_on_a_local_instance(tmp_path, monkeypatch, seeds_per_process):
    try:
        import ray
    except ImportError as error:
        pytest.skip(f"ray is not importable: {error}")
    register_toy_suite()
    # Ray's workers start from this environment: they import the toy env's module from the tests folder.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS_DIR), os.environ.get("PYTHONPATH")])))
    protocol = {"offline_steps": 20, "online_steps": 20, "eval_interval": 20, "eval_episodes": 1}
    execution = {**toy_config()["execution"], "seeds_per_process": seeds_per_process}
    config = write_config(tmp_path / "toy.yaml", toy_config(seeds=[0, 1], protocol=protocol, execution=execution))
    out = tmp_path / "results"
    assert main([str(config), "--ray", "local", "--workers", "2", "--out", str(out), "--no-report"]) == 0
    assert not ray.is_initialized()  # the instance it started is shut down
    for seed in (0, 1):
        run_dir = out / TOY_TASK / "QC" / f"seed{seed}"
        with (run_dir / "eval.csv").open(newline="") as file:
            assert [(row["step"], row["phase"]) for row in csv.DictReader(file)] == [("20", "offline"), ("40", "online")]
        assert json.loads((run_dir / "config.json").read_text())["seed"] == seed
        assert (run_dir / "DONE").exists() and (run_dir / "checkpoints" / "latest.json").exists()
    if seeds_per_process == 2:  # each run's lock names the process that ran it: one task's for both
        assert len({(out / TOY_TASK / "QC" / f"seed{seed}" / ".lock").read_text() for seed in (0, 1)}) == 1
