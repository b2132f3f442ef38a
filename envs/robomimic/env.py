"""Gymnasium env around a headless robosuite env built from robomimic env metadata, with the paper's low-dim
observations and sparse rewards."""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import EnvSpec

from qc_sb3.envs.robomimic.tasks import (
    ACTION_DIM,
    HEADLESS_KWARGS,
    LOW_DIM_KEYS,
    check_env_args,
    default_env_args,
    resolve_task,
)

ENTRY_POINT = "qc_sb3.envs.robomimic.env:RobomimicEnv"

# robosuite's logger, and the warnings its import logs about optional parts the robomimic tasks do not use (a private
# macro file, robosuite_models' extra robots, the GR1 robot's whole-body IK).
ROBOSUITE_LOGGER = "robosuite_logs"
STARTUP_WARNINGS = (
    "No private macro file found!",
    "It is recommended to use a private macro file",
    "To setup, run: python ",
    "Could not import robosuite_models.",
    "Could not load the mink-based whole-body IK.",
)


def is_startup_warning(record: logging.LogRecord) -> bool:
    """
    Whether a log record is one of the warnings robosuite logs on import about parts the robomimic tasks do not use.

    :param record: A record of robosuite's logger
    :return: True for those start-up warnings, False for any other record
    """
    return record.levelno == logging.WARNING and record.getMessage().startswith(STARTUP_WARNINGS)


@contextlib.contextmanager
def quiet_robosuite_startup() -> Iterator[None]:
    """Within the block, drop robosuite's start-up warnings (:func:`is_startup_warning`) and pass its other records."""

    def keep(record: logging.LogRecord) -> bool:
        return not is_startup_warning(record)

    logger = logging.getLogger(ROBOSUITE_LOGGER)
    logger.addFilter(keep)
    try:
        yield
    finally:
        logger.removeFilter(keep)


def import_robosuite() -> Any:
    """Import robosuite without its start-up warnings, or raise an ImportError that says how to install it."""
    try:
        with quiet_robosuite_startup():
            import robosuite
    except ImportError as error:
        raise ImportError(
            "the robomimic envs need robosuite 1.5: pip install -e '.[robomimic]' && pip install --no-deps "
            "robosuite==1.5.2 (--no-deps: robosuite pins mink 0.0.5, which asks for numpy < 2)"
        ) from error
    return robosuite


def low_dim_observation(raw: dict[str, np.ndarray]) -> np.ndarray:
    """
    The low-dim observation from a robosuite observation dict: concat[eef_pos, eef_quat, gripper_qpos, object].

    :param raw: robosuite's observation dict (``object-state`` is robomimic's ``object``)
    :return: The observation as float32
    """
    parts = [raw["object-state"] if key == "object" else raw[key] for key in LOW_DIM_KEYS]
    return np.concatenate(parts).astype(np.float32)


def robosuite_kwargs(env_args: dict[str, Any], seed: int | None = None) -> dict[str, Any]:
    """
    The keyword arguments of ``robosuite.make`` for robomimic env metadata, headless with low-dim observations.

    :param env_args: robomimic env metadata
    :param seed: Seed of robosuite's random generator (object placement, initial joint noise); None: unseeded
    :return: ``env_kwargs`` with the headless settings applied over them
    """
    kwargs = {**copy.deepcopy(env_args.get("env_kwargs", {})), **HEADLESS_KWARGS}
    # Cameras and rendering devices mean nothing without renderers.
    for key in ("camera_names", "camera_heights", "camera_widths", "render_gpu_device_id"):
        kwargs.pop(key, None)
    if seed is not None:
        kwargs["seed"] = seed
    return kwargs


def reseed(robosuite_env: Any, seed: int) -> None:
    """
    Reseed a robosuite env's random generator (object placement, initial joint noise) for its next reset.

    :param robosuite_env: The robosuite env
    :param seed: The seed
    """
    # In place: robosuite's object samplers hold this generator.
    robosuite_env.rng.bit_generator.state = np.random.default_rng(seed).bit_generator.state


def reset_robosuite(robosuite_env: Any) -> dict[str, np.ndarray]:
    """
    Reset a robosuite env and observe the new state.

    The observation dict ``reset()`` returns holds zeros for sensors computed from other sensors (the object-to-eef
    poses of can and square); like robomimic's low-dim wrapper, observe again after the reset.

    :param robosuite_env: The robosuite env
    :return: robosuite's observation dict
    """
    robosuite_env.reset()
    return robosuite_env._get_observations(force_update=True)


class RobomimicEnv(gym.Env):
    """
    A robomimic task as a Gymnasium env: robosuite built from the dataset's env metadata, headless.

    Observation: concat[robot0_eef_pos, robot0_eef_quat, robot0_gripper_qpos, object] as float32 (19-D lift, 23-D
    can and square). Action: 7-D in [-1, 1] (OSC_POSE deltas and the gripper). Reward: robosuite's sparse reward
    minus 1, so -1 per step and 0 on success; the episode terminates on success and ``info["success"]`` tells
    whether the state reached is a success. Episode limits come from the TimeLimit of :func:`make_env` (or
    ``gym.make`` with the env spec), not from robosuite (``ignore_done``).

    :param task: The task name (full or short)
    :param env_args: robomimic env metadata (a dataset's ``data.attrs["env_args"]``, parsed); None: the official
        v1.5 multi-human files' settings
    :param seed: Seed of robosuite's random generator before the first reset; ``reset(seed=...)`` reseeds it
    """

    metadata = {"render_modes": []}

    def __init__(self, task: str, env_args: dict[str, Any] | None = None, seed: int | None = None):
        self.task = resolve_task(task)
        self.env_args = check_env_args(default_env_args(task) if env_args is None else env_args, self.task.name)
        robosuite = import_robosuite()
        self.robosuite_env = robosuite.make(self.env_args["env_name"], **robosuite_kwargs(self.env_args, seed))
        low, high = self.robosuite_env.action_spec
        if low.shape != (ACTION_DIM,):
            raise ValueError(
                f"env_args give a robosuite env with {low.shape[0]}-D actions; expected {ACTION_DIM} (one arm, OSC_POSE "
                "and a gripper)"
            )
        self.action_space = gym.spaces.Box(low.astype(np.float32), high.astype(np.float32), dtype=np.float32)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (self.task.obs_dim,), np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        if seed is not None:
            reseed(self.robosuite_env, seed)
        observation = self._observation(reset_robosuite(self.robosuite_env))
        return observation, {"success": bool(self.robosuite_env._check_success())}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        raw, reward, _, _ = self.robosuite_env.step(np.asarray(action, dtype=np.float64))
        success = bool(self.robosuite_env._check_success())
        return self._observation(raw), float(reward) - 1.0, success, False, {"success": success}

    def close(self) -> None:
        self.robosuite_env.close()

    def _observation(self, raw: dict[str, np.ndarray]) -> np.ndarray:
        observation = low_dim_observation(raw)
        if observation.shape != self.observation_space.shape:
            raise ValueError(
                f"robosuite env {self.env_args['env_name']!r} gives {observation.shape[0]}-D low-dim observations; task "
                f"{self.task.name!r} expects {self.task.obs_dim}"
            )
        return observation


def env_spec(task: str, env_args: dict[str, Any] | None = None, max_episode_steps: int | None = None) -> EnvSpec:
    """
    The Gymnasium spec of a robomimic task's env: ``gym.make(spec)`` builds it (robosuite needed then, not here), and
    Minari stores it so that ``recover_environment()`` rebuilds it.

    :param task: The task name (full or short)
    :param env_args: robomimic env metadata; None: the official v1.5 multi-human files' settings
    :param max_episode_steps: Episode limit; None: the task's (lift 300, can 300, square 400)
    :return: The spec, id ``robomimic/<task>-v0``
    """
    info = resolve_task(task)
    env_args = check_env_args(default_env_args(info.name) if env_args is None else copy.deepcopy(env_args), info.name)
    if max_episode_steps is not None and max_episode_steps < 1:
        raise ValueError(f"max_episode_steps must be >= 1, got {max_episode_steps}")
    return EnvSpec(
        id=f"robomimic/{info.name}-v0",
        entry_point=ENTRY_POINT,
        max_episode_steps=info.max_episode_steps if max_episode_steps is None else max_episode_steps,
        kwargs={"task": info.name, "env_args": env_args},
    )


def make_env(
    task: str, *, env_args: dict[str, Any] | None = None, max_episode_steps: int | None = None, seed: int | None = None
) -> gym.Env:
    """
    Build a robomimic task's env (see :class:`RobomimicEnv`) under Gymnasium's usual wrappers and a TimeLimit.

    :param task: ``"lift-mh-low_dim"``, ``"can-mh-low_dim"`` or ``"square-mh-low_dim"`` (or ``"lift"``, ...)
    :param env_args: robomimic env metadata, e.g. ``json.loads(f["data"].attrs["env_args"])`` of a dataset; None: the
        official v1.5 multi-human files' settings
    :param max_episode_steps: Episode limit; None: the task's (lift 300, can 300, square 400)
    :param seed: Seed of robosuite's random generator before the first reset
    :return: The env
    """
    return gym.make(env_spec(task, env_args, max_episode_steps), seed=seed)
