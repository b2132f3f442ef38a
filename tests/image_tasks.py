"""A small image task for the image variants of the contract tests: a drifting point seen as a uint8 picture."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces

# NatureCNN's smallest input (its 8x8/4, 4x4/2 and 3x3/1 convolutions leave one pixel of 36).
IMAGE_SIZE = 36
SQUARE = 6  # side of the point's square, in pixels
EPISODE_LENGTH = 12


def render(position: np.ndarray) -> np.ndarray:
    """
    The picture of a point in [-1, 1]^2: a black ``IMAGE_SIZE`` x ``IMAGE_SIZE`` RGB image, channels last (as
    gymnasium renders), with the point a red square and a fixed green bar at the top (so that no channel is empty).

    :param position: The point, shape (2,)
    :return: A uint8 image of shape ``(IMAGE_SIZE, IMAGE_SIZE, 3)``
    """
    image = np.zeros((IMAGE_SIZE, IMAGE_SIZE, 3), np.uint8)
    row, column = np.round((np.clip(position, -1.0, 1.0) + 1.0) / 2.0 * (IMAGE_SIZE - SQUARE)).astype(int)
    image[row : row + SQUARE, column : column + SQUARE, 0] = 255
    image[:2, :, 1] = 128
    return image


class ImagePointEnv(gym.Env):
    """
    A point in [-1, 1]^2 moved by the action, observed only through :func:`render`. Its action space is DriftEnv's
    (asymmetric bounds, [-2, 2] x [0, 4]), mapped to [-1, 1]^2; the point moves by a tenth of that per step. Reward:
    minus the point's L1 distance to the origin; it terminates when the second coordinate exceeds 0.9.
    """

    observation_space = spaces.Box(0, 255, (IMAGE_SIZE, IMAGE_SIZE, 3), np.uint8)
    action_space = spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 4.0], np.float32))

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position = self.np_random.uniform(-0.8, 0.8, size=2)
        return render(self.position), {}

    def step(self, action):
        low, high = self.action_space.low, self.action_space.high
        direction = 2.0 * (np.asarray(action) - low) / (high - low) - 1.0
        self.position = np.clip(self.position + 0.1 * direction, -1.0, 1.0)
        success = bool(self.position[1] > 0.9)
        return render(self.position), -float(np.abs(self.position).sum()), success, False, {"success": success}


def make_image_env() -> gym.Env:
    return gym.wrappers.TimeLimit(ImagePointEnv(), EPISODE_LENGTH)


def image_offline_arrays(n_episodes: int = 6, seed: int = 0) -> dict[str, np.ndarray]:
    """
    Episodes of :class:`ImagePointEnv` under uniformly random actions, recorded as the env gives them (images
    channels last, uint8), in the offline mapping format of :func:`qc_sb3.common.datasets.load_offline_transitions`.
    """
    env = make_image_env()
    rng = np.random.default_rng(seed)
    steps: dict[str, list] = {key: [] for key in ("observations", "actions", "rewards", "next_observations", "terminated")}
    episode_end: list[bool] = []
    for episode in range(n_episodes):
        observation, _ = env.reset(seed=seed * 1000 + episode)
        done = False
        while not done:
            action = rng.uniform(env.action_space.low, env.action_space.high).astype(np.float32)
            next_observation, reward, terminated, truncated, _ = env.step(action)
            for key, value in zip(steps, (observation, action, reward, next_observation, terminated), strict=True):
                steps[key].append(value)
            done = terminated or truncated
            episode_end.append(done)
            observation = next_observation
    arrays = {key: np.asarray(values) for key, values in steps.items()}
    return {**arrays, "terminated": arrays["terminated"].astype(bool), "episode_end": np.asarray(episode_end)}


# Observations to predict on: the point at four places, as the env shows them (channels last).
IMAGE_OBSERVATIONS = np.stack([render(np.array(position)) for position in ([-0.7, -0.7], [0.6, -0.2], [0.0, 0.8], [0.5, 0.5])])
