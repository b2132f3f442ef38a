"""Offline data of the image reaching task: noisy scripted episodes, stored losslessly as a Minari dataset.

The scripted policy heads for the goal (the state the image shows), with Gaussian noise on each action whose scale
is drawn per episode from [``NOISE_LOW``, ``NOISE_HIGH``]: some episodes go nearly straight to the goal, others
wander and run out of time, so the data succeeds only part of the time and a policy cloned from it is not the best
one.
"""

from __future__ import annotations

import warnings
from typing import Any

import minari
import numpy as np
from minari.data_collector import EpisodeBuffer

from qc_sb3.envs.image_reach.env import EPISODE_LIMIT, STEP, ImageReachEnv, make_env

NOISE_LOW = 1.0
NOISE_HIGH = 4.0
DATASET_FIELDS = ("observations", "actions", "rewards", "terminations", "truncations")


def scripted_action(position: np.ndarray, goal: np.ndarray, noise: float, rng: np.random.Generator) -> np.ndarray:
    """
    The scripted policy's action: the step toward the goal (``(goal - position) / STEP``, clipped to [-1, 1]^2) plus
    Gaussian noise of scale ``noise``, clipped to [-1, 1]^2.

    :param position: The point
    :param goal: The goal
    :param noise: Standard deviation of the noise
    :param rng: The noise's generator
    :return: The action, float32
    """
    toward = np.clip((goal - position) / STEP, -1.0, 1.0)
    return np.clip(toward + noise * rng.standard_normal(2), -1.0, 1.0).astype(np.float32)


def generate_episodes(episodes: int, seed: int = 0, max_episode_steps: int = EPISODE_LIMIT) -> list[dict[str, Any]]:
    """
    Scripted episodes, each a dict of ``observations`` (one more than steps: the last is the final observation),
    ``actions``, ``rewards``, ``terminations``, ``truncations`` and ``success`` (per step), as Minari stores them.
    The same ``seed`` gives the same episodes.

    :param episodes: Number of episodes
    :param seed: Seed of the resets and the noise
    :param max_episode_steps: The episode limit
    :return: The episodes
    """
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    env = make_env(max_episode_steps=max_episode_steps)
    task: ImageReachEnv = env.unwrapped
    rng = np.random.default_rng(seed)
    result = []
    for index in range(episodes):
        observation, _ = env.reset(seed=int(rng.integers(2**31)))
        noise = rng.uniform(NOISE_LOW, NOISE_HIGH)
        steps: dict[str, list] = {key: [] for key in (*DATASET_FIELDS, "success")}
        steps["observations"].append(observation)
        done = False
        while not done:
            action = scripted_action(*task.state(), noise, rng)
            observation, reward, terminated, truncated, info = env.step(action)
            for key, value in zip(
                (*DATASET_FIELDS, "success"),
                (observation, action, reward, terminated, truncated, info["success"]),
                strict=True,
            ):
                steps[key].append(value)
            done = terminated or truncated
        result.append({key: np.asarray(values) for key, values in steps.items()} | {"id": index})
    env.close()
    return result


def write_minari_dataset(dataset_id: str, episodes: list[dict[str, Any]], overwrite: bool = False) -> minari.MinariDataset:
    """
    Create a Minari dataset of these episodes in the current Minari root (``MINARI_DATASETS_PATH``), with the images
    stored as raw arrays (``jpeg_encoding=False``: lossless; Minari's default JPEG changes pixels).

    :param dataset_id: The dataset's id (``<namespace>/<name>-v<N>``)
    :param episodes: Episodes of :func:`generate_episodes`
    :param overwrite: Replace a dataset of that id in the root instead of raising ``FileExistsError``
    :return: The dataset
    """
    if dataset_id in minari.list_local_datasets():
        if not overwrite:
            raise FileExistsError(f"Minari dataset {dataset_id!r} already exists; pass overwrite=True to replace it")
        minari.delete_dataset(dataset_id)
    buffers = [
        EpisodeBuffer(
            id=episode["id"],
            observations=episode["observations"],
            actions=episode["actions"],
            rewards=episode["rewards"],
            terminations=episode["terminations"],
            truncations=episode["truncations"],
            infos={"success": episode["success"]},
        )
        for episode in episodes
    ]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`(code_permalink|author|author_email)` is set to None")
        warnings.filterwarnings("ignore", message="env_spec is None")
        warnings.filterwarnings("ignore", message="`eval_env` is set to None")
        return minari.create_dataset_from_buffers(
            dataset_id,
            buffers,
            observation_space=ImageReachEnv.observation_space,
            action_space=ImageReachEnv.action_space,
            algorithm_name="noisy scripted reaching",
            description="image-reach: scripted episodes toward the goal with per-episode Gaussian action noise",
            jpeg_encoding=False,
        )


def success_rate(episodes: list[dict[str, Any]]) -> float:
    """The fraction of episodes that reach the goal."""
    return float(np.mean([episode["success"][-1] for episode in episodes]))
