"""The planning of a benchmark: one :class:`~qc_sb3.benchmarks.runner.specs.RunSpec` per task, method and seed of a
checked config, with every setting resolved and each algorithm's own argument checks passed before any folder is made.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from qc_sb3.benchmarks.runner.config import Problems, parse_seeds
from qc_sb3.benchmarks.runner.execution_settings import grouping_problem, seeds_per_process
from qc_sb3.benchmarks.runner.methods import constructor_arguments, get_method, merge
from qc_sb3.benchmarks.runner.specs import BenchmarkConfig, Protocol, RunSpec, TaskSpec, expand_path
from qc_sb3.benchmarks.runner.tasks import get_suite, get_task


def plan_runs(
    config: BenchmarkConfig,
    out: str | os.PathLike,
    seeds: Sequence[int] | None = None,
    tasks: Sequence[str] | None = None,
    methods: Sequence[str] | None = None,
) -> list[RunSpec]:
    """
    One run per task, method and seed, with every setting resolved.

    :param config: The config
    :param out: The results folder
    :param seeds: Seeds overriding the config's and the suites' defaults
    :param tasks: Only these of the config's tasks (default: all); their runs are those of the whole config
    :param methods: Only these of the config's methods (default: all); their runs are those of the whole config
    :return: The runs, task by task, then method, then seed
    :raises ConfigError: If a seed, task or method of the selection is not valid, or if an algorithm refuses its
        resolved arguments (it is built once per method and distinct arguments on a dummy env, before any folder is
        made)
    """
    if seeds is not None:
        problems = Problems()
        parse_seeds(problems, list(seeds))
        problems.raise_if_any("(--seeds)")
    selected_tasks = _select(config.tasks, tasks, "task", "--tasks")
    selected_methods = _select(list(config.methods), methods, "method", "--methods")
    runs = []
    problems = Problems()
    checked: set[str] = set()
    for task in map(get_task, selected_tasks):
        suite = get_suite(task.suite)
        task_seeds = tuple(seeds) if seeds is not None else config.seeds or tuple(range(suite.default_seeds))
        env_kwargs = {**task.env_kwargs, **{key: value for key, value in config.env.items() if key in task.env_kwargs}}
        for method_name in selected_methods:
            method_overrides = config.methods[method_name]
            method = get_method(method_name)
            hyperparameters = resolve_hyperparameters(method_name, task, config, env_kwargs)
            hyperparameters = merge(hyperparameters, method_overrides)
            _check_constructible(problems, method_name, task, hyperparameters, config.protocol, checked)
            group_size = seeds_per_process(config.execution, method_name)
            problem = grouping_problem(method_name, hyperparameters) if group_size > 1 else None
            if problem is not None and problem not in problems.messages:  # once per method, not per task
                problems.add(problem)
            for seed in task_seeds:
                runs.append(
                    RunSpec(
                        task=task.name,
                        suite=task.suite,
                        domain=task.domain,
                        method=method_name,
                        seed=int(seed),
                        algorithm=method.algorithm_path,
                        offline_phase=method.offline_phase,
                        hyperparameters=hyperparameters,
                        make_env=task.make_env,
                        env_kwargs=env_kwargs,
                        protocol=config.protocol,
                        dataset=config.datasets[task.suite],
                        run_dir=str(Path(out) / task.name / method_name / f"seed{seed}"),
                        torch_threads=config.execution.torch_threads,
                        device=config.execution.device,
                        seeds_per_process=group_size,
                        policy=task.policy,
                    )
                )
    problems.raise_if_any("(the algorithms' own argument checks)")
    return runs


def _select(names: Sequence[str], selection: Sequence[str] | None, what: str, flag: str) -> list[str]:
    """The config's names that a selection keeps, in the config's order; a selected name not in the config is refused."""
    if selection is None:
        return list(names)
    problems = Problems()
    if not selection:
        problems.add(f"no {what} selected; expected some of the config's: {', '.join(names)}")
    for name in dict.fromkeys(selection):
        if name not in names:
            problems.add(f"{name!r} is not a {what} of this config; its {what}s: {', '.join(names)}")
    problems.raise_if_any(f"({flag})")
    return [name for name in names if name in selection]


def _check_constructible(
    problems: Problems,
    method_name: str,
    task: TaskSpec,
    hyperparameters: Mapping[str, Any],
    protocol: Protocol,
    checked: set[str],
) -> None:
    """Build a method's algorithm once per distinct set of arguments; a refused argument is a problem of the config."""
    method = get_method(method_name)
    key = json.dumps([method_name, task.policy, hyperparameters, protocol.offline_steps], sort_keys=True, default=repr)
    if key in checked:
        return
    checked.add(key)
    offline_steps = protocol.offline_steps if method.offline_phase else None
    try:
        method.check_arguments(constructor_arguments(hyperparameters, offline_steps), task.policy)
    except Exception as error:
        problems.add(
            f"{method_name} (domain {task.domain}) refuses its hyperparameters: {type(error).__name__}: {error}"
        )


def resolve_hyperparameters(
    method_name: str, task: TaskSpec, config: BenchmarkConfig, env_kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """
    A method's constructor arguments on a task before its own overrides: constructor defaults, the paper's settings
    (the method's flags, the per-domain values the task's suite declares), the protocol's buffer size and sparse
    offline rewards, the task's own (an image task's encoder), then the config's ``hyperparameters:``.

    :param method_name: The method
    :param task: The task
    :param config: The config
    :param env_kwargs: The task's resolved env keyword arguments
    :return: Every constructor argument a config may set
    """
    method = get_method(method_name)
    defaults = method.constructor_defaults()
    settings = merge(defaults, method.paper_settings(get_suite(task.suite), task.domain))
    # docs/algorithms.md §5: the buffer holds every online step (the offline data sits in its own segment on top).
    settings["buffer_size"] = max(config.protocol.online_steps, 1)
    # docs/algorithms.md §6: the offline rewards are made sparse exactly where the env's are.
    settings["offline_sparse_rewards"] = bool(env_kwargs.get("sparse", False))
    settings = merge(settings, task.hyperparameters)
    return merge(settings, {key: value for key, value in config.hyperparameters.items() if key in defaults})


def default_dataset_cache(config: BenchmarkConfig, out: str | os.PathLike) -> Path:
    """
    The dataset cache folder: the config's ``dataset_cache``, else ``<out>/datasets``.

    :param config: The config
    :param out: The results folder
    :return: The folder
    """
    return expand_path(config.dataset_cache) if config.dataset_cache else Path(out) / "datasets"
