"""The visual OGBench tasks of the runner: a config naming them parses and plans CnnPolicy runs with the reference's
image protocol (no training runs here)."""

from __future__ import annotations

import pytest
import yaml

from qc_sb3.benchmarks.runner.config import ConfigError, load_config
from qc_sb3.benchmarks.runner.methods import constructor_arguments
from qc_sb3.benchmarks.runner.planning import plan_runs
from qc_sb3.benchmarks.runner.tasks import get_task
from qc_sb3.common.encoders import ImpalaSmallExtractor

TASK = "visual-cube-single-play-singletask-task1-v0"
CONFIG = f"""
name: visual
tasks: [{TASK}, visual-scene-play-singletask-task2-v0]
methods: [QC, QC-FQL]
seeds: [0]
protocol: {{offline_steps: 10, online_steps: 10, eval_interval: 10, eval_episodes: 2}}
datasets:
  ogbench: {{source: generate, episodes: 2}}
execution: {{device: cpu}}
"""

STATE_CONFIG = CONFIG.replace(f"{TASK}, visual-scene-play-singletask-task2-v0", "cube-single-play-singletask-task1-v0")
STATE_CONFIG = STATE_CONFIG.replace("[QC, QC-FQL]", "[QC]")


def test_a_visual_config_plans_cnn_runs_with_separate_impala_small_encoders():
    runs = plan_runs(load_config(yaml.safe_load(CONFIG)), "unused")
    assert [(run.task, run.method) for run in runs] == [
        (TASK, "QC"),
        (TASK, "QC-FQL"),
        ("visual-scene-play-singletask-task2-v0", "QC"),
        ("visual-scene-play-singletask-task2-v0", "QC-FQL"),
    ]
    for run in runs:
        assert run.suite == "ogbench" and run.policy == "CnnPolicy"
        policy_kwargs = run.hyperparameters["policy_kwargs"]
        assert policy_kwargs == {"features_extractor_class": "ImpalaSmallExtractor", "share_features_extractor": False}
        assert constructor_arguments(run.hyperparameters, None)["policy_kwargs"]["features_extractor_class"] is (
            ImpalaSmallExtractor
        )
    qc, qc_fql, scene_qc, _ = runs
    # The state tasks' per-domain settings (cube-single takes cube-double's; scene is sparse, with N 32 and alpha 300).
    assert qc.domain == "visual-cube-single" and qc.hyperparameters["actor_num_samples"] == 32
    assert qc_fql.hyperparameters["alpha"] == 300.0
    assert scene_qc.env_kwargs == {"sparse": True, "max_episode_steps": 750}
    assert qc.dataset == {"source": "generate", "episodes": 2, "episode_length": 1001, "seed": 0}
    assert get_task(TASK).dataset == "visual-cube-single-play-v0"
    # The state task beside it keeps MlpPolicy and no encoder.
    (state_run,) = plan_runs(load_config(yaml.safe_load(STATE_CONFIG)), "unused")
    assert state_run.policy == "MlpPolicy" and state_run.hyperparameters["policy_kwargs"] is None


def test_a_config_may_override_the_encoder_by_name_and_an_unknown_name_is_refused():
    data = yaml.safe_load(CONFIG)
    data["hyperparameters"] = {"policy_kwargs": {"features_extractor_class": "NatureCNN"}}
    (run, _, _, _) = plan_runs(load_config(data), "unused")
    assert run.hyperparameters["policy_kwargs"] == {
        "features_extractor_class": "NatureCNN",
        "share_features_extractor": False,
    }
    data["hyperparameters"] = {"policy_kwargs": {"features_extractor_class": "ResNet"}}
    with pytest.raises(ConfigError, match="'ResNet' is not a known features extractor; expected one of"):
        plan_runs(load_config(data), "unused")
