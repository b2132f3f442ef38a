"""The robomimic tasks of the paper (multi-human low-dim lift, can, square): names, limits, observation layout and the
official v1.5 environment settings."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

ROBOMIMIC_TASKS: tuple[str, ...] = ("lift-mh-low_dim", "can-mh-low_dim", "square-mh-low_dim")

# Episode limits of the reference code (the paper writes 500).
EPISODE_LIMITS: dict[str, int] = {"lift-mh-low_dim": 300, "can-mh-low_dim": 300, "square-mh-low_dim": 400}

# The low-dim observation is these keys of a robomimic file's obs/ group, concatenated in this order
# ("object" is robosuite's "object-state").
LOW_DIM_KEYS: tuple[str, ...] = ("robot0_eef_pos", "robot0_eef_quat", "robot0_gripper_qpos", "object")

# Key sizes shared by every task (the object key's size is per task).
ROBOT_KEY_SIZES: dict[str, int] = {"robot0_eef_pos": 3, "robot0_eef_quat": 4, "robot0_gripper_qpos": 2}

ACTION_DIM = 7


@dataclass(frozen=True)
class TaskInfo:
    """
    What distinguishes one robomimic task from another.

    :param name: The task's full name, e.g. ``"lift-mh-low_dim"``
    :param short_name: The task's short name, e.g. ``"lift"``
    :param env_name: The robosuite environment class
    :param object_dim: Size of the ``object`` observation key
    :param max_episode_steps: Episode limit
    """

    name: str
    short_name: str
    env_name: str
    object_dim: int
    max_episode_steps: int

    @property
    def obs_dim(self) -> int:
        """Size of the concatenated low-dim observation."""
        return sum(ROBOT_KEY_SIZES.values()) + self.object_dim

    @property
    def key_sizes(self) -> dict[str, int]:
        """Size of each low-dim key, in concatenation order."""
        return {**ROBOT_KEY_SIZES, "object": self.object_dim}


_ENV_NAMES = {"lift": "Lift", "can": "PickPlaceCan", "square": "NutAssemblySquare"}
# Lift: cube pos, quat, gripper-to-cube pos; can and square: object pos, quat, object-to-eef pos and quat.
_OBJECT_DIMS = {"lift": 10, "can": 14, "square": 14}

TASKS: dict[str, TaskInfo] = {
    name: TaskInfo(
        name=name,
        short_name=name.split("-")[0],
        env_name=_ENV_NAMES[name.split("-")[0]],
        object_dim=_OBJECT_DIMS[name.split("-")[0]],
        max_episode_steps=EPISODE_LIMITS[name],
    )
    for name in ROBOMIMIC_TASKS
}

# The arm controller of the official robomimic v1.5 datasets: robosuite's OSC_POSE with delta inputs in the world
# frame (a unit action moves 5 cm and turns 0.5 rad), written in robosuite 1.5's composite-controller format.
OSC_POSE_CONTROLLER: dict[str, Any] = {
    "type": "BASIC",
    "body_parts": {
        "right": {
            "type": "OSC_POSE",
            "input_max": 1,
            "input_min": -1,
            "output_max": [0.05, 0.05, 0.05, 0.5, 0.5, 0.5],
            "output_min": [-0.05, -0.05, -0.05, -0.5, -0.5, -0.5],
            "kp": 150,
            "damping": 1,
            "impedance_mode": "fixed",
            "kp_limits": [0, 300],
            "damping_limits": [0, 10],
            "position_limits": None,
            "orientation_limits": None,
            "uncouple_pos_ori": True,
            "control_delta": True,
            "interpolation": None,
            "ramp_ratio": 0.2,
            "input_ref_frame": "world",
            "gripper": {"type": "GRIP"},
        }
    },
}

# Settings that make the env headless with low-dim observations, applied over any env_args (as robomimic's
# EnvRobosuite does, minus the renderers).
HEADLESS_KWARGS: dict[str, Any] = {
    "has_renderer": False,
    "has_offscreen_renderer": False,
    "ignore_done": True,
    "use_object_obs": True,
    "use_camera_obs": False,
    "camera_depths": False,
}


def resolve_task(task: str) -> TaskInfo:
    """
    Look a task up by its full name (``"lift-mh-low_dim"``) or short name (``"lift"``).

    :param task: The task name
    :return: The task's description
    """
    if isinstance(task, str):
        if task in TASKS:
            return TASKS[task]
        for info in TASKS.values():
            if task == info.short_name:
                return info
    valid = ", ".join(f"{info.name!r} ({info.short_name!r})" for info in TASKS.values())
    raise ValueError(f"unknown robomimic task {task!r}; expected one of {valid}")


def default_env_args(task: str) -> dict[str, Any]:
    """
    The ``env_args`` of the official robomimic v1.5 multi-human low-dim files for a task (robomimic's env metadata:
    ``env_name``, ``type`` 1 for robosuite, ``env_kwargs``): Panda, OSC_POSE, 20 Hz control, sparse rewards, full
    physics (``lite_physics=False``, as the datasets were recorded).

    :param task: The task name (full or short)
    :return: A fresh dict, safe to modify
    """
    info = resolve_task(task)
    env_kwargs = {
        **HEADLESS_KWARGS,
        "control_freq": 20,
        "controller_configs": copy.deepcopy(OSC_POSE_CONTROLLER),
        "robots": ["Panda"],
        "camera_heights": 84,
        "camera_widths": 84,
        "lite_physics": False,
        "reward_shaping": False,
    }
    return {"env_name": info.env_name, "env_version": "1.5.1", "type": 1, "env_kwargs": env_kwargs}


def check_env_args(env_args: Any, task: str) -> dict[str, Any]:
    """
    Check that ``env_args`` describe a robosuite env of the task.

    :param env_args: robomimic env metadata (``env_name``, ``env_kwargs``, ...)
    :param task: The task name (full or short)
    :return: ``env_args`` as given
    """
    info = resolve_task(task)
    if not isinstance(env_args, dict) or not isinstance(env_args.get("env_kwargs", {}), dict):
        raise ValueError(
            f"env_args must be a dict with 'env_name' and an 'env_kwargs' dict (robomimic env metadata), got {env_args!r}"
        )
    if env_args.get("env_name") != info.env_name:
        raise ValueError(
            f"env_args are for the robosuite env {env_args.get('env_name')!r} but task {info.name!r} runs {info.env_name!r}"
        )
    if env_args.get("type", 1) != 1:
        raise ValueError(f"env_args have type {env_args.get('type')!r}; expected 1 (robosuite)")
    return env_args
