"""qc_sb3.benchmarks.parity.window_parity's pieces that need no reference environment: the step recorder and the start
numbering.

The comparison itself runs the reference's code, so it is a benchmark (``python -m qc_sb3.benchmarks.parity.window_parity``).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from qc_sb3.benchmarks.parity.window_parity import EndingEnv, StepRecorder, largest_difference, windows_at
from qc_sb3.common.buffers import ChunkReplayBuffer


def test_recorder_keeps_each_step_as_the_env_made_it() -> None:
    env = StepRecorder(gym.wrappers.TimeLimit(EndingEnv(), max_episode_steps=3))
    observation, _ = env.reset(seed=0)
    actions = [np.array([0.5, -0.5], np.float32), np.array([1.0, 0.0], np.float32), np.array([-1.0, 1.0], np.float32)]
    truncated = terminated = False
    for action in actions:
        if terminated or truncated:
            break
        _, _, terminated, truncated, _ = env.step(action)
    for step, (state, action, _, _, _, next_state) in enumerate(env.steps):
        np.testing.assert_array_equal(action, actions[step])
        # EndingEnv's dynamics: s' = s + 0.1 [a, a]
        np.testing.assert_allclose(next_state, state + 0.1 * np.concatenate([action, action]), rtol=1e-6)
    np.testing.assert_array_equal(env.steps[0][0], observation)
    assert env.steps[-1][3] or env.steps[-1][4], "the last recorded step ends its episode (terminated or time limit)"


def test_starts_number_offline_steps_first_then_online_ones() -> None:
    observation_space = spaces.Box(-np.inf, np.inf, (1,), np.float32)
    action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
    buffer = ChunkReplayBuffer(10, observation_space, action_space, chunk_size=2)
    offline_observations = np.array([[10.0], [11.0], [12.0]], np.float32)
    buffer.add_offline(
        offline_observations,
        np.zeros((3, 1), np.float32),
        np.zeros(3, np.float32),
        offline_observations + 1,
        np.zeros(3),
        np.array([0, 0, 1]),
    )
    for value in (20.0, 21.0, 22.0):
        buffer.add(np.array([[value]]), np.array([[value + 1]]), np.zeros((1, 1)), np.zeros(1), np.zeros(1), [{}])
    windows = windows_at(buffer, np.array([4, 0, 2, 3]))
    np.testing.assert_array_equal(windows.observations.numpy()[:, 0], [21.0, 10.0, 12.0, 20.0])


def test_largest_difference_only_where_asked() -> None:
    ours, reference = np.array([[1.0, 5.0], [2.0, 2.0]]), np.array([[1.5, 0.0], [2.0, 1.0]])
    assert largest_difference(ours, reference) == 5.0
    assert largest_difference(ours, reference, np.array([[True, False], [True, True]])) == 1.0
