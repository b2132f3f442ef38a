"""The task registry: which suites and tasks a config may name.

The built-in suites (:mod:`qc_sb3.benchmarks.runner.suites`) are registered on first use, their tasks with them (importing a
suite's :mod:`envs` package is what makes it slow, so a command that names no task never does);
:func:`register_suite` and :func:`register_task` add others.
"""

from __future__ import annotations

from qc_sb3.benchmarks.runner import suites
from qc_sb3.benchmarks.runner.paths import check_name
from qc_sb3.benchmarks.runner.specs import SuiteSpec, TaskSpec

_SUITES: dict[str, SuiteSpec] = {}
_TASKS: dict[str, TaskSpec] = {}
_UNAVAILABLE: dict[str, str] = {}
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
    Add a task to the registry; its suite must be registered and declare the settings of the task's domain.
    Its name becomes a folder name of results folders: it must follow :data:`~qc_sb3.benchmarks.runner.paths.NAME_RULE`.

    :param task: The task
    :param overwrite: Replace a task of the same name instead of raising
    """
    _load_builtins()
    check_name(task.name, "task")
    if task.suite not in _SUITES:
        raise ValueError(f"task {task.name!r} names an unregistered suite {task.suite!r}; known suites: {sorted(_SUITES)}")
    if task.name in _TASKS and not overwrite:
        raise ValueError(f"task {task.name!r} is already registered")
    declared = _SUITES[task.suite].domain_settings
    if task.domain not in declared:
        raise ValueError(
            f"task {task.name!r} has the domain {task.domain!r}, for which its suite {task.suite!r} declares no "
            f"per-domain settings (domain_settings[{task.domain!r}]); its domains: {', '.join(declared) or '(none)'}"
        )
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
    """Built-in suites whose :mod:`envs` packages do not import, with the reason."""
    _load_builtins()
    return dict(_UNAVAILABLE)


def _unavailable_note() -> str:
    """What an unknown-task message adds about suites that could not be loaded."""
    return "".join(f"; suite {name} unavailable: {reason}" for name, reason in unavailable_suites().items())


def _load_builtins() -> None:
    """Register the built-in suites and tasks once."""
    global _BUILTINS_LOADED
    if _BUILTINS_LOADED:
        return
    _BUILTINS_LOADED = True
    for suite in suites.builtin_suites():
        _SUITES[suite.name] = suite
    tasks, unavailable = suites.builtin_tasks()
    for task in tasks:
        _TASKS[task.name] = task
    _UNAVAILABLE.update(unavailable)
