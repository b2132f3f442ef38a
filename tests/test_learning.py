"""End-to-end learning: offline pre-training then online fine-tuning on a sparse-reward reaching task.

The demonstrations head for the goal in about half of the episodes and for a decoy point in the others, so
behavior cloning alone succeeds about half of the time and a random policy never: a success rate well above the
demonstrations' needs a critic that tells the two modes apart.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch as th
from stable_baselines3.common.monitor import Monitor

from qc_sb3 import QC, QCFQL
from qc_sb3.common.datasets import load_offline_transitions
from qc_sb3.common.evaluation import evaluate_success

from toy_tasks import PointReachEnv, scripted_demonstrations

SEED = 0
N_EVAL_EPISODES = 30
# Small networks and budgets that learn the task in a few seconds of CPU each.
COMMON_KWARGS: dict[str, Any] = dict(
    learning_rate=1e-3,
    batch_size=64,
    flow_steps=5,
    offline_gradient_steps=1500,
    learning_starts=100,
    policy_kwargs=dict(net_arch=[64, 64]),
    seed=SEED,
    device="cpu",
)
ONLINE_STEPS = 500


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Train on one thread: with networks this small, more threads only contend for the cores."""
    n_threads = th.get_num_threads()
    th.set_num_threads(1)
    yield
    th.set_num_threads(n_threads)


def demonstrations() -> dict[str, np.ndarray]:
    """40 demonstrations, half of them (in expectation) heading for the decoy."""
    return scripted_demonstrations(40, noise=0.5, seed=SEED, goal_fraction=0.5)


def episode_success_rate(data: dict[str, np.ndarray]) -> float:
    """Fraction of the recorded episodes that reach the goal (an episode ends in success iff it terminates)."""
    return float(data["terminated"].sum() / data["episode_end"].sum())


def eval_env() -> Monitor:
    """A seeded evaluation env."""
    env = Monitor(PointReachEnv())
    env.reset(seed=SEED + 1000)
    return env


class UniformRandomModel:
    """Uniformly random primitive actions, seeded."""

    def __init__(self, action_space: Any, seed: int):
        self.action_space = action_space
        self.rng = np.random.default_rng(seed)

    def predict(
        self, observation: np.ndarray, state: Any = None, episode_start: np.ndarray | None = None, deterministic: bool = False
    ) -> tuple[np.ndarray, Any]:
        shape = (len(observation), *self.action_space.shape)
        return self.rng.uniform(self.action_space.low, self.action_space.high, shape).astype(np.float32), state


def test_demonstrations_are_consistent_transitions():
    data = demonstrations()
    transitions = load_offline_transitions(data)
    assert len(transitions) == len(data["rewards"])
    ends = np.flatnonzero(data["episode_end"])
    starts = np.concatenate(([0], ends[:-1] + 1))
    for start, end in zip(starts, ends, strict=True):
        # Within an episode each next observation is the following observation; every step moves by at most 0.1.
        np.testing.assert_array_equal(data["next_observations"][start:end], data["observations"][start + 1 : end + 1])
        steps = np.abs(data["next_observations"][start : end + 1] - data["observations"][start : end + 1])
        assert (steps <= 0.1 + 1e-6).all()
        # Robomimic-style sparse reward: -1 on every step but the one that reaches the goal, which terminates.
        assert not data["terminated"][start:end].any()
        np.testing.assert_array_equal(data["rewards"][start : end + 1], -1.0 + data["terminated"][start : end + 1])
        assert data["terminated"][end] or end - start + 1 == PointReachEnv().max_episode_steps
    assert 0.3 <= episode_success_rate(data) <= 0.7


def test_random_policy_fails():
    env = eval_env()
    results = evaluate_success(UniformRandomModel(env.action_space, SEED), env, N_EVAL_EPISODES)
    assert results["success"] <= 0.1


@pytest.mark.parametrize(
    ("algorithm", "algorithm_kwargs"), [(QC, dict(actor_num_samples=8)), (QCFQL, dict(alpha=30.0))], ids=["QC", "QC-FQL"]
)
def test_offline_then_online_beats_the_demonstrations(algorithm: type[QC | QCFQL], algorithm_kwargs: dict[str, Any]):
    data = demonstrations()
    env = Monitor(PointReachEnv())
    env.reset(seed=SEED)
    model = algorithm("MlpPolicy", env, offline_dataset=data, **COMMON_KWARGS, **algorithm_kwargs)
    model.learn(total_timesteps=ONLINE_STEPS)
    assert model.offline_steps_done == COMMON_KWARGS["offline_gradient_steps"]
    assert model.num_timesteps == ONLINE_STEPS
    results = evaluate_success(model, eval_env(), N_EVAL_EPISODES)
    assert results["success"] >= 0.7
    assert results["success"] >= episode_success_rate(data) + 0.2
