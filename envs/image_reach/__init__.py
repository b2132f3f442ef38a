"""A point mass reaching a goal, observed as a small RGB image: env, scripted data, lossless Minari datasets."""

from qc_sb3.envs.image_reach.data import generate_episodes, scripted_action, success_rate, write_minari_dataset
from qc_sb3.envs.image_reach.env import EPISODE_LIMIT, IMAGE_SIZE, ImageReachEnv, make_env, render

__all__ = [
    "EPISODE_LIMIT",
    "IMAGE_SIZE",
    "ImageReachEnv",
    "generate_episodes",
    "make_env",
    "render",
    "scripted_action",
    "success_rate",
    "write_minari_dataset",
]
