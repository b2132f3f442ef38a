"""The task registry: which tasks a config may name, their suites, envs and offline data.

A *suite* (OGBench, robomimic, or one registered by a user or a test) knows how to turn a dataset source (official
files in a directory, or "generate N episodes locally") into offline data for each of its tasks. A *task* names its
suite, its *domain* (the unit of the paper's per-domain hyperparameters, e.g. ``cube-double`` or ``robomimic``), an
env factory and its default env keyword arguments. The built-in suites (:mod:`benchmarks.suites`) are registered on
first use; :func:`register_suite` and :func:`register_task` add others.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym


@dataclass(frozen=True)
class OfflineData:
    """
    Where a run's offline data lives, as the run process opens it (see :func:`benchmarks.datasets.open_offline_data`).

    :param paths: One Minari dataset folder, one ``.npz`` file of per-step arrays (the mapping format of
        :func:`qc_sb3.common.datasets.load_offline_transitions`), or several Minari folders (shards)
    :param swap_interval: For shards: offline gradient steps between two shard swaps (``OfflineShards``); None
        for a single dataset
    """

    paths: tuple[str, ...]
    swap_interval: int | None = None

    def __post_init__(self) -> None:
        if not self.paths:
            raise ValueError("OfflineData needs at least one path")
        if self.swap_interval is None and len(self.paths) != 1:
            raise ValueError(f"several offline datasets are shards and need a swap_interval, got {len(self.paths)} paths")


@dataclass(frozen=True)
class TaskSpec:
    """
    A benchmark task.

    :param name: The name configs use (for OGBench, the paper's ``<family>-play-singletask-task<K>-v0``)
    :param suite: The name of its suite
    :param domain: The domain of the paper's per-domain hyperparameters (``cube-double``, ``puzzle-3x3``,
        ``robomimic``, ...)
    :param make_env: ``make_env(seed=..., **env_kwargs) -> gym.Env``; must be picklable (a module-level function or
        a ``functools.partial`` of one) so that worker processes and Ray tasks can call it
    :param env_kwargs: Default keyword arguments of ``make_env`` (the paper's episode limit, sparse reward, ...)
    :param dataset: The name of the offline dataset the task reads, shared by the tasks of one family (OGBench:
        ``<family>-play-v0``); generated data is cached per dataset
    """

    name: str
    suite: str
    domain: str
    make_env: Callable[..., gym.Env]
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    dataset: str = ""


@dataclass(frozen=True)
class DatasetRequest:
    """
    What a suite needs to prepare one task's offline data.

    :param task: The task
    :param options: The validated options of the suite's dataset source (``source`` and its keys)
    :param cache: The folder where generated and converted datasets are cached
    :param workers: Processes a generator may use
    :param progress: Whether a generator shows a progress bar
    """

    task: TaskSpec
    options: Mapping[str, Any]
    cache: Path
    workers: int = 1
    progress: bool = False


@dataclass(frozen=True)
class SuiteSpec:
    """
    A family of tasks that share a data format.

    :param name: The name configs use under ``datasets:``
    :param default_seeds: Number of seeds per task when a config gives none (paper: OGBench 4, robomimic 5)
    :param official_options: Keys of an ``official`` source besides ``source``; empty if the suite has no official
        files
    :param generate_options: Keys of a ``generate`` source besides ``source``
    :param check_official: ``check_official(task, options)`` raises ``ValueError`` naming what is missing (folder,
        files) for the task; called before any run starts
    :param prepare_official: ``prepare_official(request) -> OfflineData``: convert (once, cached) the official files
    :param prepare_generated: ``prepare_generated(request) -> OfflineData``: generate and convert (once, cached)
    """

    name: str
    default_seeds: int
    official_options: Mapping[str, Option]
    generate_options: Mapping[str, Option]
    check_official: Callable[[TaskSpec, Mapping[str, Any]], None] | None
    prepare_official: Callable[[DatasetRequest], OfflineData] | None
    prepare_generated: Callable[[DatasetRequest], OfflineData] | None


class _Required:
    """Marker of an option without default."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()


@dataclass(frozen=True)
class Option:
    """
    One key of a dataset source in a config.

    :param kind: The accepted type(s) of its value (``int`` does not accept ``bool``; ``float`` accepts ``int``)
    :param default: Its default, or :data:`REQUIRED`
    :param minimum: The smallest accepted value, for numbers
    """

    kind: type | tuple[type, ...]
    default: Any = REQUIRED
    minimum: float | None = None


_SUITES: dict[str, SuiteSpec] = {}
_TASKS: dict[str, TaskSpec] = {}
_BUILTINS_LOADED = False


def register_suite(suite: SuiteSpec, overwrite: bool = False) -> None:
    """
    Add a suite to the registry.

    :param suite: The suite
    :param overwrite: Replace a suite of the same name instead of raising
    """
    _load_builtins()
    if suite.name in _SUITES and not overwrite:
        raise ValueError(f"suite {suite.name!r} is already registered")
    _SUITES[suite.name] = suite


def register_task(task: TaskSpec, overwrite: bool = False) -> None:
    """
    Add a task to the registry; its suite must be registered.

    :param task: The task
    :param overwrite: Replace a task of the same name instead of raising
    """
    _load_builtins()
    if task.suite not in _SUITES:
        raise ValueError(f"task {task.name!r} names an unregistered suite {task.suite!r}; known suites: {sorted(_SUITES)}")
    if task.name in _TASKS and not overwrite:
        raise ValueError(f"task {task.name!r} is already registered")
    _TASKS[task.name] = task


def get_task(name: str) -> TaskSpec:
    """
    The registered task of that name.

    :param name: The task name
    :return: The task
    """
    _load_builtins()
    if name not in _TASKS:
        raise KeyError(f"unknown task {name!r}; valid tasks: {', '.join(task_names())}{_unavailable_note()}")
    return _TASKS[name]


def get_suite(name: str) -> SuiteSpec:
    """
    The registered suite of that name.

    :param name: The suite name
    :return: The suite
    """
    _load_builtins()
    if name not in _SUITES:
        raise KeyError(f"unknown suite {name!r}; valid suites: {', '.join(sorted(_SUITES))}")
    return _SUITES[name]


def task_names() -> list[str]:
    """Every registered task name, in registration order."""
    _load_builtins()
    return list(_TASKS)


def unavailable_suites() -> dict[str, str]:
    """Built-in suites whose modules do not import, with the reason."""
    _load_builtins()
    from benchmarks import suites

    return dict(suites.UNAVAILABLE)


def expand_path(path: str | os.PathLike) -> Path:
    """
    A path from a config, with ``~`` and environment variables expanded.

    :param path: The path as written
    :return: The expanded path
    """
    return Path(os.path.expandvars(os.path.expanduser(str(path))))


def _unavailable_note() -> str:
    """What an unknown-task message adds about suites that could not be loaded."""
    unavailable = unavailable_suites()
    return "".join(f"; suite {name} unavailable: {reason}" for name, reason in unavailable.items())


def _load_builtins() -> None:
    """Register the built-in suites and tasks once."""
    global _BUILTINS_LOADED
    if _BUILTINS_LOADED:
        return
    _BUILTINS_LOADED = True
    from benchmarks import suites

    for suite in suites.builtin_suites():
        _SUITES[suite.name] = suite
    for task in suites.builtin_tasks():
        _TASKS[task.name] = task
