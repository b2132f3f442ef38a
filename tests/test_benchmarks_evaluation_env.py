"""A run's evaluation env: built once per run, its evaluations' episodes those of a fresh env seeded as each asks."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv

from qc_sb3.benchmarks.runner.config import load_config
from qc_sb3.benchmarks.runner.datasets import prepare_datasets
from qc_sb3.benchmarks.runner.evaluations import EvaluationEnv, evaluation_points
from qc_sb3.benchmarks.runner.planning import plan_runs
from qc_sb3.benchmarks.runner.runs import execute_run
from qc_sb3.common.evaluation import evaluate_success

from test_benchmarks_toys import make_point_reach, toy_config, toy_suite  # noqa: F401 (autouse fixture of this module)


class NoisyPolicy:
    """A predictor whose actions depend on the observation and on its own seeded noise."""

    def __init__(self, seed: int):
        self.random = np.random.default_rng(seed)

    def predict(self, observation, state=None, episode_start=None, deterministic=False):
        action = np.tanh(3.0 * (np.array([[0.6, 0.6]]) - observation)) + self.random.normal(0.0, 0.3, (1, 2))
        return np.clip(action, -1.0, 1.0).astype(np.float32), state


def fresh_env(run, index: int) -> DummyVecEnv:
    """A new evaluation env per evaluation, seeded as the runner always seeded it."""
    env = DummyVecEnv([lambda: Monitor(make_point_reach(seed=None, **run.env_kwargs))])
    env.seed(int(np.random.SeedSequence([run.seed, index]).generate_state(1)[0]))
    return env


def toy_run(out):
    (run,) = prepare_datasets(plan_runs(load_config(toy_config()), out), out / "datasets")
    return run


def test_a_reused_evaluation_env_gives_each_evaluation_the_episodes_of_a_fresh_one(tmp_path):
    run = toy_run(tmp_path)
    reused = EvaluationEnv(run)
    try:
        for index in range(4):
            env = fresh_env(run, index)
            expected = evaluate_success(NoisyPolicy(index), env, 5, warn=False)
            env.close()
            assert evaluate_success(NoisyPolicy(index), reused.seeded(index), 5, warn=False) == expected
    finally:
        reused.close()


def test_a_run_builds_its_evaluation_env_once(tmp_path):
    built = []

    def counting_env(**kwargs):
        built.append(kwargs.get("seed"))
        return make_point_reach(**kwargs)

    run = replace(toy_run(tmp_path), make_env=counting_env)
    execute_run(run)
    assert len(evaluation_points(run)) == 4
    assert built == [run.seed, None]  # the training env, then the evaluation env once
