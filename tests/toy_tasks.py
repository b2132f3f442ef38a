"""A small sparse-reward reaching task and scripted demonstrations for the learning tests."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class PointReachEnv(gym.Env):
    """
    A point in [-1, 1]^2 must reach a goal disc near the opposite corner.

    Each episode starts at ``start`` plus uniform noise in ``[-start_noise, start_noise]^2`` (drawn from the env's
    seeded ``np_random``). An action in [-1, 1]^2 moves the point by ``step_size * action``, clipped to the box.
    Sparse reward in robomimic's ``r - 1`` style: -1 per step, 0 on the step that reaches the goal, which terminates
    the episode. ``info["success"]`` says whether the point is in the goal disc. Episodes are truncated after
    ``max_episode_steps`` steps. Reaching the goal takes at least 13 steps; a uniformly random policy (a random walk
    of about 0.06 per axis and step) practically never gets there.

    :param max_episode_steps: Steps after which an episode is truncated
    :param goal: Centre of the goal disc
    :param goal_radius: Radius of the goal disc
    :param start: Mean starting position
    :param start_noise: Half-width of the uniform noise on the starting position, per axis
    :param step_size: Displacement per unit of action
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        max_episode_steps: int = 50,
        goal: tuple[float, float] = (0.7, 0.7),
        goal_radius: float = 0.15,
        start: tuple[float, float] = (-0.75, -0.75),
        start_noise: float = 0.1,
        step_size: float = 0.1,
    ):
        self.observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.max_episode_steps = max_episode_steps
        self.goal = np.asarray(goal, dtype=np.float32)
        self.goal_radius = goal_radius
        self.start = np.asarray(start, dtype=np.float32)
        self.start_noise = start_noise
        self.step_size = step_size
        self.position = self.start.copy()
        self.elapsed_steps = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        noise = self.np_random.uniform(-self.start_noise, self.start_noise, size=2)
        self.position = (self.start + noise).astype(np.float32)
        self.elapsed_steps = 0
        return self.position.copy(), {"success": False}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        action = np.clip(np.asarray(action, dtype=np.float32), -1.0, 1.0)
        self.position = np.clip(self.position + self.step_size * action, -1.0, 1.0).astype(np.float32)
        self.elapsed_steps += 1
        success = bool(np.linalg.norm(self.position - self.goal) <= self.goal_radius)
        truncated = not success and self.elapsed_steps >= self.max_episode_steps
        return self.position.copy(), float(success) - 1.0, success, truncated, {"success": success}


def scripted_demonstrations(
    n_episodes: int,
    noise: float = 0.5,
    seed: int = 0,
    goal_fraction: float = 1.0,
    decoy: tuple[float, float] = (0.7, -0.7),
    gain: float = 5.0,
) -> dict[str, np.ndarray]:
    """
    Demonstrations of :class:`PointReachEnv` by a noisy proportional controller toward a target,
    ``a = clip(gain * (target - position) + noise * N(0, I), -1, 1)``, in the offline mapping format of
    :func:`qc_sb3.common.datasets.load_offline_transitions`.

    Each episode's target is the goal with probability ``goal_fraction``, else a decoy point away from the goal
    where the controller hovers until the episode is truncated: with ``goal_fraction < 1`` behavior cloning
    succeeds in about that fraction of episodes, and only a learned critic tells the two modes apart.

    :param n_episodes: Number of episodes to record
    :param noise: Standard deviation of the Gaussian action noise
    :param seed: Seed of the env's starts, of the targets and of the action noise
    :param goal_fraction: Probability that an episode heads for the goal rather than the decoy
    :param decoy: The decoy target
    :param gain: Proportional gain of the controller
    :return: Per-step arrays ``observations``, ``actions`` (env scale), ``rewards``, ``next_observations``,
        ``terminated`` and ``episode_end``
    """
    env = PointReachEnv()
    rng = np.random.default_rng(seed)
    steps: dict[str, list[Any]] = {
        key: [] for key in ("observations", "actions", "rewards", "next_observations", "terminated", "episode_end")
    }
    for episode in range(n_episodes):
        observation, _ = env.reset(seed=seed * 100_003 + episode)
        target = env.goal if rng.random() < goal_fraction else np.asarray(decoy, dtype=np.float32)
        done = False
        while not done:
            action = np.clip(gain * (target - observation) + noise * rng.standard_normal(2), -1.0, 1.0)
            next_observation, reward, terminated, truncated, _ = env.step(action)
            done = terminated or truncated
            for key, value in zip(steps, (observation, action, reward, next_observation, terminated, done), strict=True):
                steps[key].append(value)
            observation = next_observation
    return {
        "observations": np.asarray(steps["observations"], dtype=np.float32),
        "actions": np.asarray(steps["actions"], dtype=np.float32),
        "rewards": np.asarray(steps["rewards"], dtype=np.float64),
        "next_observations": np.asarray(steps["next_observations"], dtype=np.float32),
        "terminated": np.asarray(steps["terminated"], dtype=bool),
        "episode_end": np.asarray(steps["episode_end"], dtype=bool),
    }
