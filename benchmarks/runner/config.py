"""Benchmark configs: a YAML file checked in full before anything runs (then planned,
:mod:`qc_sb3.benchmarks.runner.planning`).

Schema (every section but ``tasks`` and ``methods`` is optional)::

    name: quickstart                      # a label for summaries
    out: results/quickstart               # results folder (--out overrides)
    tasks: [cube-single-play-singletask-task2-v0]
    methods: [QC, QC-FQL]                 # or a mapping: {QC: {actor_num_samples: 8}, QC@k1: {replan_interval: 1}}
    seeds: 4                              # a count or a list; default per suite (OGBench 4, robomimic 5)
    protocol:                             # defaults: the paper's (docs/algorithms.md §5)
      offline_steps: 1000000              # offline gradient steps (methods with an offline phase)
      online_steps: 1000000               # online env steps
      eval_interval: 100000               # must divide both
      eval_episodes: 50                   # each with the stochastic policy (deterministic=False), as the paper
      eval_at_start: false                # also evaluate before any training
    datasets:                             # one entry per suite the tasks use
      ogbench: {source: official, directory: ~/.ogbench/data, files: {cube-quadruple: cube-quadruple-play-100m-v0}}
      robomimic: {source: generate, episodes: 100, seed: 0}
    dataset_cache: ~/.cache/qc_sb3       # generated and converted datasets (default: <out>/datasets)
    hyperparameters: {policy_kwargs: {net_arch: [256, 256]}}   # for every method that has the argument
    env: {max_episode_steps: 200}         # env keyword arguments, for every task that has them
    execution: {workers: 2, torch_threads: 1, device: auto, num_cpus: 1, num_gpus: 0, runtime_env: null,
                seeds_per_process: 1}         # or {QC: 4}: that many seeds of a method in one process

A run's hyperparameters are, from weakest to strongest: the algorithm's constructor defaults (the paper's common
settings), the method's flags (:mod:`qc_sb3.benchmarks.runner.methods`) and per-domain settings (declared by the task's
suite, :mod:`qc_sb3.benchmarks.runner.suites`), ``buffer_size`` = the online steps and ``offline_sparse_rewards`` = the
env's ``sparse``, then ``hyperparameters:``, then the method's own mapping under ``methods:``. Nested mappings
(``policy_kwargs``) merge key by key. Relative paths are relative to the current directory.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from qc_sb3.benchmarks.runner.execution_settings import parse_execution
from qc_sb3.benchmarks.runner.hyperparameters import hyperparameter_problem, is_int
from qc_sb3.benchmarks.runner.methods import RUNNER_ARGUMENTS, get_method
from qc_sb3.benchmarks.runner.paths import NAME_RULE, is_valid_name
from qc_sb3.benchmarks.runner.specs import REQUIRED, BenchmarkConfig, Option, Protocol, TaskSpec
from qc_sb3.benchmarks.runner.tasks import get_suite, get_task, task_names, unavailable_suites

SOURCES = ("official", "generate")
TOP_LEVEL_KEYS = (
    "name",
    "description",
    "out",
    "tasks",
    "methods",
    "seeds",
    "protocol",
    "datasets",
    "dataset_cache",
    "hyperparameters",
    "env",
    "execution",
)


class ConfigError(ValueError):
    """A config that cannot run; the message lists every problem found."""


class Problems:
    """Collects the problems of a config, to report them all at once."""

    def __init__(self) -> None:
        self.messages: list[str] = []

    def add(self, message: str) -> None:
        self.messages.append(message)

    def raise_if_any(self, source: str) -> None:
        if self.messages:
            listed = "\n".join(f"  - {message}" for message in self.messages)
            raise ConfigError(f"invalid benchmark config {source}:\n{listed}")


def read_config_data(path: str | os.PathLike) -> dict[str, Any]:
    """
    The content of a YAML config file.

    :param path: The file
    :return: Its top-level mapping
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"benchmark config {str(path)!r} does not exist")
    with path.open(encoding="utf-8") as file:
        try:
            data = yaml.safe_load(file)
        except yaml.YAMLError as error:
            raise ConfigError(f"benchmark config {str(path)!r} is not valid YAML: {error}") from None
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"invalid benchmark config {str(path)!r}: expected a mapping at the top level, got {type(data).__name__}"
        )
    return dict(data)


def load_config(
    source: str | os.PathLike | Mapping[str, Any], label: str | None = None, name: str | None = None
) -> BenchmarkConfig:
    """
    Read and check a config; every problem found is reported in one :class:`ConfigError`.

    Checked here: YAML syntax, unknown keys (with the valid ones listed), tasks, methods, hyperparameter names, types
    and ranges (:mod:`qc_sb3.benchmarks.runner.hyperparameters`), the per-domain settings the methods need (each task's
    suite must
    declare them), protocol numbers, dataset sources (the official folders and files must exist), env keys and
    execution settings. :func:`qc_sb3.benchmarks.runner.planning.plan_runs` then has each algorithm check its resolved
    arguments.

    :param source: A YAML file, or its content as a mapping
    :param label: How errors name the config (default: its path)
    :param name: The config's name when it has no ``name:`` (default: the file's stem)
    :return: The config
    """
    if isinstance(source, Mapping):
        data = source
    else:
        data = read_config_data(source)
        label = label or repr(str(source))
        name = name or Path(source).stem
    label = label or "(mapping)"
    problems = Problems()
    _check_keys(problems, "config", data, TOP_LEVEL_KEYS)
    tasks = _parse_tasks(problems, data.get("tasks"))
    methods = _parse_methods(problems, data.get("methods"))
    seeds = parse_seeds(problems, data.get("seeds"))
    protocol = _parse_protocol(problems, data.get("protocol"))
    task_specs = [get_task(name) for name in tasks]
    _check_domain_settings(problems, task_specs, methods)
    datasets = _parse_datasets(problems, data.get("datasets"), task_specs)
    hyperparameters = _parse_hyperparameters(problems, data.get("hyperparameters"), methods)
    env = _parse_env(problems, data.get("env"), task_specs)
    execution, execution_problems = parse_execution(data.get("execution"), methods)
    for message in execution_problems:
        problems.add(message)
    for key in ("name", "description", "out", "dataset_cache"):
        if data.get(key) is not None and not isinstance(data[key], str):
            problems.add(f"{key} must be a string, got {data[key]!r}")
    config_name = data.get("name") or name or "benchmark"
    if isinstance(config_name, str) and not is_valid_name(config_name):
        problems.add(f"name {config_name!r} (the results folder's name, results/<name>) is not valid: use {NAME_RULE}")
    problems.raise_if_any(label)
    return BenchmarkConfig(
        name=str(config_name),
        tasks=tasks,
        methods=methods,
        seeds=seeds,
        protocol=protocol,
        datasets=datasets,
        hyperparameters=hyperparameters,
        env=env,
        execution=execution,
        out=data.get("out"),
        dataset_cache=data.get("dataset_cache"),
    )


def _check_keys(problems: Problems, where: str, data: Mapping[str, Any], valid: Sequence[str]) -> None:
    for key in data:
        if key not in valid:
            problems.add(f"unknown key {key!r} in {where}; valid keys: {', '.join(valid)}")


def _parse_tasks(problems: Problems, data: Any) -> tuple[str, ...]:
    if not isinstance(data, list) or not data or not all(isinstance(name, str) for name in data):
        problems.add(f"tasks must be a non-empty list of task names, got {data!r}")
        return ()
    valid = task_names()
    unknown = [name for name in data if name not in valid]
    for name in unknown:
        unavailable = "".join(f"; suite {suite} unavailable: {reason}" for suite, reason in unavailable_suites().items())
        problems.add(f"unknown task {name!r}; valid tasks: {', '.join(valid)}{unavailable}")
    if len(set(data)) != len(data):
        problems.add(f"tasks lists a task more than once: {data}")
    return tuple(name for name in dict.fromkeys(data) if name not in unknown)


def _parse_methods(problems: Problems, data: Any) -> dict[str, dict[str, Any]]:
    if isinstance(data, list) and all(isinstance(name, str) for name in data):
        if len(set(data)) != len(data):
            problems.add(f"methods lists a method more than once: {data}")
        data = dict.fromkeys(data)
    if not isinstance(data, Mapping) or not data:
        problems.add(f"methods must be a non-empty list of method names or a mapping name -> overrides, got {data!r}")
        return {}
    methods: dict[str, dict[str, Any]] = {}
    for name, overrides in data.items():
        try:
            defaults = get_method(name).constructor_defaults()
        except KeyError as error:
            problems.add(error.args[0])
            continue
        overrides = overrides or {}
        if not isinstance(overrides, Mapping):
            problems.add(f"methods.{name} must be a mapping of hyperparameters (or empty), got {overrides!r}")
            continue
        for key, value in overrides.items():
            _check_hyperparameter(problems, f"methods.{name}", key, value, defaults, name)
        methods[name] = dict(overrides)
    return methods


def _check_hyperparameter(
    problems: Problems, where: str, key: str, value: Any, defaults: Mapping[str, Any], method: str
) -> None:
    if key in RUNNER_ARGUMENTS:
        problems.add(f"{where}.{key} cannot be set: {RUNNER_ARGUMENTS[key]}")
    elif key not in defaults:
        problems.add(f"unknown hyperparameter {key!r} in {where}; valid for {method}: {', '.join(defaults)}")
    elif (problem := hyperparameter_problem(f"{where}.{key}", key, value, defaults[key])) is not None:
        problems.add(problem)


def _check_domain_settings(problems: Problems, tasks: Sequence[TaskSpec], methods: Mapping[str, Any]) -> None:
    """Each task's suite declares every per-domain argument of every method for the task's domain."""
    missing: dict[str, None] = {}
    for task in tasks:
        suite = get_suite(task.suite)
        for method in map(get_method, methods):
            for argument in method.per_domain:
                try:
                    suite.domain_setting(task.domain, method.name, argument)
                except LookupError as error:
                    missing[f"{method.name} on {task.name}: {error}"] = None
    for message in missing:
        problems.add(message)


def parse_seeds(problems: Problems, data: Any) -> tuple[int, ...] | None:
    if data is None:
        return None
    if is_int(data):
        if data < 1:
            problems.add(f"seeds must be a count >= 1 or a list of seeds, got {data}")
            return None
        return tuple(range(data))
    if isinstance(data, list) and data and all(is_int(seed) and seed >= 0 for seed in data):
        if len(set(data)) != len(data):
            problems.add(f"seeds lists a seed more than once: {data}")
        return tuple(data)
    problems.add(f"seeds must be a count >= 1 or a non-empty list of integers >= 0, got {data!r}")
    return None


def _parse_protocol(problems: Problems, data: Any) -> Protocol:
    if data is None:
        return Protocol()
    if not isinstance(data, Mapping):
        problems.add(f"protocol must be a mapping, got {data!r}")
        return Protocol()
    defaults = vars(Protocol())
    _check_keys(problems, "protocol", data, list(defaults))
    values = {**defaults, **{key: value for key, value in data.items() if key in defaults}}
    invalid = set()
    for key, minimum in (("offline_steps", 0), ("online_steps", 0), ("eval_interval", 1), ("eval_episodes", 1)):
        if not is_int(values[key]) or values[key] < minimum:
            problems.add(f"protocol.{key} must be an integer >= {minimum}, got {values[key]!r}")
            values[key] = defaults[key]
            invalid.add(key)
    if not isinstance(values["eval_at_start"], bool):
        problems.add(f"protocol.eval_at_start must be true or false, got {values['eval_at_start']!r}")
    for key in ("offline_steps", "online_steps"):
        if "eval_interval" in invalid or key in invalid:
            continue
        if values[key] % values["eval_interval"]:
            problems.add(
                f"protocol.eval_interval ({values['eval_interval']}) must divide protocol.{key} ({values[key]}): "
                "evaluations fall every eval_interval steps and at the end of each phase"
            )
    return Protocol(**values)


def _check_option(problems: Problems, where: str, value: Any, option: Option) -> None:
    kinds = option.kind if isinstance(option.kind, tuple) else (option.kind,)
    if (int in kinds and is_int(value)) or (float in kinds and isinstance(value, int | float) and not isinstance(value, bool)):
        if option.minimum is not None and value < option.minimum:
            problems.add(f"{where} must be >= {option.minimum}, got {value!r}")
        return
    if not any(isinstance(value, kind) for kind in kinds if kind not in (int, float)):
        problems.add(f"{where} must be of type {'/'.join(kind.__name__ for kind in kinds)}, got {value!r}")


def _parse_datasets(problems: Problems, data: Any, tasks: Sequence[TaskSpec]) -> dict[str, dict[str, Any]]:
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        problems.add(f"datasets must be a mapping suite -> source options, got {data!r}")
        return {}
    used = list(dict.fromkeys(task.suite for task in tasks))
    for name in data:
        if name not in used:
            try:
                get_suite(name)
            except KeyError as error:
                problems.add(str(error.args[0]))
    datasets: dict[str, dict[str, Any]] = {}
    for name in used:
        suite = get_suite(name)
        options = data.get(name)
        problems_before = len(problems.messages)
        if not isinstance(options, Mapping) or options.get("source") not in SOURCES:
            problems.add(
                f"datasets.{name} must be a mapping with source: official or source: generate (the tasks "
                f"{[task.name for task in tasks if task.suite == name]} need it), got {options!r}"
            )
            continue
        specs = suite.official_options if options["source"] == "official" else suite.generate_options
        if not specs:
            problems.add(
                f"suite {name!r} has no {options['source']} datasets; use source: {SOURCES[options['source'] == 'official']}"
            )
            continue
        _check_keys(problems, f"datasets.{name} (source: {options['source']})", options, ["source", *specs])
        resolved: dict[str, Any] = {"source": options["source"]}
        for key, option in specs.items():
            if key in options:
                _check_option(problems, f"datasets.{name}.{key}", options[key], option)
                resolved[key] = options[key]
            elif option.default is REQUIRED:
                problems.add(f"datasets.{name} (source: {options['source']}) needs {key!r}")
            else:
                resolved[key] = option.default
        datasets[name] = resolved
        if options["source"] == "official" and suite.check_official is not None and len(problems.messages) == problems_before:
            for task in tasks:
                if task.suite == name:
                    try:
                        suite.check_official(task, resolved)
                    except ValueError as error:
                        problems.add(f"datasets.{name}: {error}")
    return datasets


def _parse_hyperparameters(problems: Problems, data: Any, methods: Mapping[str, Any]) -> dict[str, Any]:
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        problems.add(f"hyperparameters must be a mapping, got {data!r}")
        return {}
    for key, value in data.items():
        accepting = [name for name in methods if key in get_method(name).constructor_defaults()]
        if key in RUNNER_ARGUMENTS:
            problems.add(f"hyperparameters.{key} cannot be set: {RUNNER_ARGUMENTS[key]}")
        elif not accepting:
            valid = sorted({name for method in methods for name in get_method(method).constructor_defaults()})
            problems.add(
                f"unknown hyperparameter {key!r}: none of the methods {list(methods)} takes it; valid: {', '.join(valid)}"
            )
        else:
            default = get_method(accepting[0]).constructor_defaults()[key]
            if (problem := hyperparameter_problem(f"hyperparameters.{key}", key, value, default)) is not None:
                problems.add(problem)
    return dict(data)


def _parse_env(problems: Problems, data: Any, tasks: Sequence[TaskSpec]) -> dict[str, Any]:
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        problems.add(f"env must be a mapping of env keyword arguments, got {data!r}")
        return {}
    valid = sorted({key for task in tasks for key in task.env_kwargs})
    for key, value in data.items():
        if key not in valid:
            problems.add(f"unknown env key {key!r}: none of the tasks takes it; valid: {', '.join(valid) or '(none)'}")
        elif key == "max_episode_steps" and (not is_int(value) or value < 1):
            problems.add(f"env.max_episode_steps must be an integer >= 1, got {value!r}")
        elif key == "sparse" and not isinstance(value, bool):
            problems.add(f"env.sparse must be true or false, got {value!r}")
    return dict(data)
