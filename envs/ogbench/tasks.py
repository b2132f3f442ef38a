"""OGBench single-task tasks: names, episode limits, the env factory, the sparse reward (docs/algorithms.md §6).

Every task has a visual variant, ``visual-<task>``: the same env and task with 64 x 64 x 3 uint8 camera frames
as observations (OGBench's ``visual-*`` envs). Rendering is headless: set ``MUJOCO_GL=osmesa`` (Debian package
``libosmesa6``) or ``MUJOCO_GL=egl`` before MuJoCo is imported.
"""

from __future__ import annotations

import os
import re
import sys

import gymnasium as gym

# Importing ogbench registers its gymnasium ids ("<family>-singletask-task<K>-v0", "<family>-v0").
import ogbench  # noqa: F401

OGBENCH_FAMILIES: tuple[str, ...] = ("cube-single", "cube-double", "cube-triple", "cube-quadruple", "scene", "puzzle-3x3")
TASK_IDS: tuple[int, ...] = (1, 2, 3, 4, 5)
# The paper's (and OGBench's dataset) names: "<family>-play-singletask-task<K>-v0".
OGBENCH_TASKS: tuple[str, ...] = tuple(
    f"{family}-play-singletask-task{task_id}-v0" for family in OGBENCH_FAMILIES for task_id in TASK_IDS
)
# Their visual variants: "visual-<family>-play-singletask-task<K>-v0", images as observations.
VISUAL_OGBENCH_TASKS: tuple[str, ...] = tuple(f"visual-{task}" for task in OGBENCH_TASKS)
# Episode limits of OGBench's registered envs (docs/algorithms.md §6, docs/design.md).
EPISODE_LIMITS: dict[str, int] = {
    "cube-single": 200,
    "cube-double": 500,
    "cube-triple": 1000,
    "cube-quadruple": 1000,
    "scene": 750,
    "puzzle-3x3": 500,
}
# Families the paper trains with sparse rewards (docs/algorithms.md §6).
SPARSE_BY_DEFAULT: frozenset[str] = frozenset({"scene", "puzzle-3x3"})

_TASK_PATTERN = re.compile(r"^(?P<visual>visual-)?(?P<family>.+)-play-singletask-task(?P<task_id>\d+)-v0$")


def parse_task(task: str) -> tuple[str, int]:
    """
    Split a task name into its family and task number.

    :param task: The paper's task name, e.g. ``"cube-double-play-singletask-task2-v0"``, or its visual variant
        ``"visual-cube-double-play-singletask-task2-v0"``
    :return: The family and the task number, e.g. ``("cube-double", 2)`` (for both)
    """
    match = _TASK_PATTERN.match(task) if isinstance(task, str) else None
    if match is None or match["family"] not in OGBENCH_FAMILIES or int(match["task_id"]) not in TASK_IDS:
        raise ValueError(
            f"unknown OGBench task {task!r}; expected one of: {', '.join(OGBENCH_TASKS)}, or one of them prefixed "
            "with 'visual-' (image observations)"
        )
    return match["family"], int(match["task_id"])


def is_visual_task(task: str) -> bool:
    """
    Whether a task is a visual variant (image observations).

    :param task: A task name (checked as :func:`parse_task` does)
    :return: True for ``"visual-..."`` tasks
    """
    parse_task(task)
    return task.startswith("visual-")


def singletask_env_id(task: str) -> str:
    """
    The gymnasium id of a task's single-task env: the task name without ``-play`` (docs/algorithms.md §6).

    :param task: The paper's task name, e.g. ``"cube-double-play-singletask-task2-v0"``
    :return: The env id, e.g. ``"cube-double-singletask-task2-v0"`` (``"visual-cube-double-singletask-task2-v0"``
        for the visual variant)
    """
    family, task_id = parse_task(task)
    prefix = "visual-" if is_visual_task(task) else ""
    return f"{prefix}{family}-singletask-task{task_id}-v0"


def check_headless_rendering() -> None:
    """
    Refuse to build a visual env that cannot render: on Linux without a display, MuJoCo's default backend (GLFW) fails
    with an obscure OpenGL error, so ``MUJOCO_GL`` must name a headless one.

    :raises RuntimeError: On Linux with neither ``MUJOCO_GL`` nor ``DISPLAY`` set
    """
    if sys.platform.startswith("linux") and not os.environ.get("MUJOCO_GL") and not os.environ.get("DISPLAY"):
        raise RuntimeError(
            "visual OGBench envs render camera frames, and this machine has no display (DISPLAY is unset): set "
            "MUJOCO_GL=osmesa (Debian package libosmesa6) or MUJOCO_GL=egl before Python imports mujoco, e.g. "
            "MUJOCO_GL=osmesa python ..."
        )


class SparseReward(gym.RewardWrapper):
    """
    Replace the env's reward r by ``-1 * [r != 0]`` (docs/algorithms.md §6: the paper's sparse reward, scene and puzzle-3x3).

    :param env: An OGBench single-task env (dense reward: minus the number of unsolved subtasks)
    """

    def reward(self, reward: float) -> float:
        """
        :param reward: The dense reward
        :return: -1.0 if any subtask is unsolved, else 0.0
        """
        return -1.0 if reward != 0 else 0.0


def make_env(
    task: str,
    *,
    sparse: bool | None = None,
    max_episode_steps: int | None = None,
    seed: int | None = None,
) -> gym.Env:
    """
    Make an OGBench single-task env: it terminates on success and reports ``info["success"]``.

    :param task: The paper's task name, e.g. ``"cube-double-play-singletask-task2-v0"``; a ``visual-`` task
        observes 64 x 64 x 3 uint8 frames (channels last; the algorithms transpose them as SB3 does)
    :param sparse: Whether to wrap the reward in :class:`SparseReward`; None takes the family's default
        (sparse for the families in ``SPARSE_BY_DEFAULT``)
    :param max_episode_steps: Time limit overriding OGBench's (``EPISODE_LIMITS``)
    :param seed: If given, the env is reset once with this seed, which seeds its random generator
    :return: The env
    """
    family, _ = parse_task(task)
    if max_episode_steps is not None and (isinstance(max_episode_steps, bool) or max_episode_steps < 1):
        raise ValueError(f"max_episode_steps must be a positive int or None, got {max_episode_steps!r}")
    if is_visual_task(task):
        check_headless_rendering()
    limit = {} if max_episode_steps is None else {"max_episode_steps": int(max_episode_steps)}
    env = gym.make(singletask_env_id(task), **limit)
    use_sparse = family in SPARSE_BY_DEFAULT if sparse is None else sparse
    if use_sparse:
        env = SparseReward(env)
    if seed is not None:
        env.reset(seed=seed)
    return env
