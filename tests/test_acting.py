"""What ``learn()`` executes online: each chunk the policy decides, in time order, from the observation it was decided
at, and a fresh chunk when an episode ends (docs/algorithms.md §5), checked against the env's own record of its steps.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch as th

from qc_sb3 import QC, QCFQL
from qc_sb3.benchmarks.parity.window_parity import EndingEnv, StepRecorder, random_offline_data

CHUNK = 5


@pytest.mark.parametrize("algorithm", [QC, QCFQL])
def test_executed_actions_are_the_decided_chunks_in_order(algorithm: type) -> None:
    env = StepRecorder(gym.wrappers.TimeLimit(EndingEnv(), max_episode_steps=12))
    model = algorithm(
        "MlpPolicy",
        env,
        offline_dataset=random_offline_data(300, np.random.default_rng(0)),
        offline_gradient_steps=0,
        learning_starts=100,
        batch_size=16,
        chunk_size=CHUNK,
        policy_kwargs={"net_arch": [16, 16]},
        seed=0,
        device="cpu",
    )
    decisions: list[tuple[np.ndarray, np.ndarray]] = []
    decide = model.policy._predict_chunk

    def recorded(observation: th.Tensor, deterministic: bool = False) -> th.Tensor:
        chunk = decide(observation, deterministic)
        decisions.append((observation.numpy().copy(), chunk.numpy().copy()))
        return chunk

    model.policy._predict_chunk = recorded
    model.learn(300)  # updates from step 101 on: a queued chunk must not change with the weights

    steps = iter(env.steps)
    step = next(steps, None)
    for observation, chunk in decisions:
        np.testing.assert_allclose(observation[0], step[0], rtol=1e-6, err_msg="a chunk starts at its observation")
        for action in chunk.reshape(CHUNK, -1):
            np.testing.assert_allclose(step[1], np.clip(action, -1.0, 1.0), atol=1e-6)
            episode_ended = step[3] or step[4]
            step = next(steps, None)
            if step is None or episode_ended:
                break
    assert step is None, "every executed step belongs to a decided chunk"
    terminations = sum(recorded_step[3] for recorded_step in env.steps)
    assert terminations > 0 and len(decisions) > 300 / CHUNK, "episodes ended inside chunks, which were dropped"
