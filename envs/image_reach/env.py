"""A point mass reaching a goal, seen only as a small RGB picture: an image task that trains in minutes on a CPU.

A point in the square [-1, 1]^2 and a goal at its centre; the action, in [-1, 1]^2, moves the point by a tenth of
itself per step. The observation is a ``IMAGE_SIZE`` x ``IMAGE_SIZE`` RGB uint8 image, channels last (as gymnasium
renders): the point a red square, the goal a green one, on black. The reward is sparse, 0 on the step that reaches
the goal (within ``SUCCESS_RADIUS``) and -1 on every other; the episode terminates there, with ``info["success"]``
True. The episode limit (``EPISODE_LIMIT``) is about twice the straight path from the farthest start, so a
policy that wanders fails: success measures how directly it goes.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

# NatureCNN's smallest input (its 8x8/4, 4x4/2 and 3x3/1 convolutions leave one pixel of 36).
IMAGE_SIZE = 36
SQUARE = 4  # side of the point's and the goal's squares, in pixels
STEP = 0.1  # how far a unit action moves the point
SUCCESS_RADIUS = 0.15
START_RANGE = 0.8  # the point starts in [-START_RANGE, START_RANGE]^2 ...
MIN_START_DISTANCE = 0.6  # ... at least this far from the goal
EPISODE_LIMIT = 15


def pixel_corner(position: np.ndarray) -> np.ndarray:
    """
    The (row, column) of the top-left pixel of the square drawn at a position in [-1, 1]^2: -1 maps to pixel 0,
    1 to the last row or column where a square fits; the first coordinate is the row.

    :param position: The position, shape (2,)
    :return: Two integers
    """
    return np.round((np.clip(position, -1.0, 1.0) + 1.0) / 2.0 * (IMAGE_SIZE - SQUARE)).astype(int)


def render(position: np.ndarray, goal: np.ndarray) -> np.ndarray:
    """
    The picture of a point and a goal: black, the goal a green square (channel 1 at 255), the point a red one
    (channel 0 at 255), each ``SQUARE`` pixels wide at :func:`pixel_corner`.

    :param position: The point, shape (2,)
    :param goal: The goal, shape (2,)
    :return: A uint8 image of shape ``(IMAGE_SIZE, IMAGE_SIZE, 3)``
    """
    image = np.zeros((IMAGE_SIZE, IMAGE_SIZE, 3), np.uint8)
    for channel, place in ((1, goal), (0, position)):
        row, column = pixel_corner(place)
        image[row : row + SQUARE, column : column + SQUARE, channel] = 255
    return image


class ImageReachEnv(gym.Env):
    """
    The point-mass reaching task of this module. ``reset`` draws the point uniformly in
    [-``START_RANGE``, ``START_RANGE``]^2, at least ``MIN_START_DISTANCE`` from the goal (the origin);
    :meth:`state` gives both (for scripted policies, which see the state the image shows).
    """

    metadata = {"render_modes": ["rgb_array"]}
    observation_space = spaces.Box(0, 255, (IMAGE_SIZE, IMAGE_SIZE, 3), np.uint8)
    action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)

    def __init__(self) -> None:
        self.render_mode = "rgb_array"
        self.position = np.zeros(2)
        self.goal = np.zeros(2)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.goal = np.zeros(2)
        self.position = self.goal
        while np.linalg.norm(self.position - self.goal) < MIN_START_DISTANCE:
            self.position = self.np_random.uniform(-START_RANGE, START_RANGE, size=2)
        return self.render(), {"success": False}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        action = np.clip(np.asarray(action, dtype=np.float64), -1.0, 1.0)
        self.position = np.clip(self.position + STEP * action, -1.0, 1.0)
        success = bool(np.linalg.norm(self.position - self.goal) <= SUCCESS_RADIUS)
        return self.render(), 0.0 if success else -1.0, success, False, {"success": success}

    def render(self) -> np.ndarray:
        return render(self.position, self.goal)

    def state(self) -> tuple[np.ndarray, np.ndarray]:
        """The point and the goal, copies."""
        return self.position.copy(), self.goal.copy()


def make_env(*, seed: int | None = None, max_episode_steps: int = EPISODE_LIMIT) -> gym.Env:
    """
    The task with its episode limit, reset once with ``seed`` if one is given (so that the env's generator is seeded).

    :param seed: Seed of the first reset, or None
    :param max_episode_steps: The episode limit (``TimeLimit``)
    :return: The env
    """
    if max_episode_steps < 1:
        raise ValueError(f"max_episode_steps must be >= 1, got {max_episode_steps}")
    env = gym.wrappers.TimeLimit(ImageReachEnv(), max_episode_steps)
    if seed is not None:
        env.reset(seed=seed)
    return env
