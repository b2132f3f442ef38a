"""One tiny real OGBench run end to end: a generated cube-single dataset, converted to Minari, QC offline then online."""

from __future__ import annotations

import csv
import json

import minari
import numpy as np

from qc_sb3.benchmarks.run import main

from test_benchmarks_toys import write_config

TASK = "cube-single-play-singletask-task2-v0"
CONFIG = {
    "name": "ogbench-tiny",
    "tasks": [TASK],
    "methods": ["QC"],
    "seeds": [0],
    "protocol": {"offline_steps": 10, "online_steps": 10, "eval_interval": 10, "eval_episodes": 2},
    "datasets": {"ogbench": {"source": "generate", "episodes": 2, "episode_length": 60, "seed": 0}},
    "env": {"max_episode_steps": 20},
    "hyperparameters": {
        "batch_size": 16,
        "learning_starts": 5,
        "flow_steps": 2,
        "actor_num_samples": 2,
        "policy_kwargs": {"net_arch": [16, 16]},
    },
    "execution": {"device": "cpu"},
}


def test_a_tiny_ogbench_run_goes_from_generated_data_to_the_report(tmp_path):
    config = write_config(tmp_path / "tiny.yaml", CONFIG)
    out = tmp_path / "results"
    assert main([str(config), "--out", str(out), "--workers", "0"]) == 0
    run_dir = out / TASK / "QC" / "seed0"
    with (run_dir / "eval.csv").open(newline="") as file:
        rows = list(csv.DictReader(file))
    assert [(row["step"], row["phase"], row["env_steps"]) for row in rows] == [("10", "offline", "0"), ("20", "online", "10")]
    # Episodes of the env's limit, 20 steps, unless one succeeds first; OGBench's dense reward is -1 per unsolved cube.
    assert all(1 <= float(row["length"]) <= 20 and -20 <= float(row["return"]) <= 0 for row in rows)
    config_record = json.loads((run_dir / "config.json").read_text())
    assert config_record["env_kwargs"] == {"sparse": False, "max_episode_steps": 20}
    assert config_record["dataset"] == {"source": "generate", "episodes": 2, "episode_length": 60, "seed": 0}
    # The generated play data (2 episodes of 60 rows: 59 transitions each) was converted once, into the cache.
    (dataset_dir,) = (path for path in (out / "datasets" / "minari" / "generated").iterdir() if path.is_dir())
    dataset = minari.MinariDataset(dataset_dir / "data")
    assert dataset.total_episodes == 2 and dataset.total_steps == 2 * 59
    assert np.isin(np.concatenate([episode.rewards for episode in dataset.iterate_episodes()]), (-1.0, 0.0)).all()
    assert (out / "report" / f"{TASK}.png").exists()
