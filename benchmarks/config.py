"""Benchmark configs: a YAML file checked in full before anything runs, then one :class:`RunSpec` per run.

Schema (every section but ``tasks`` and ``methods`` is optional)::

    name: quickstart                      # a label for summaries
    out: results/quickstart               # results folder (--out overrides)
    tasks: [cube-single-play-singletask-task2-v0]
    methods: [QC, QC-FQL]                 # or a mapping: {QC: {actor_num_samples: 8}, QC-FQL: null}
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
    execution: {workers: 2, torch_threads: 1, device: auto, num_cpus: 1, num_gpus: 0, runtime_env: null}

A run's hyperparameters are, from weakest to strongest: the algorithm's constructor defaults (the paper's common
settings), the method's paper settings for the task's domain (:mod:`benchmarks.methods`), ``buffer_size`` = the
online steps and ``offline_sparse_rewards`` = the env's ``sparse``, then ``hyperparameters:``, then the method's own
mapping under ``methods:``. Nested mappings (``policy_kwargs``) merge key by key. Relative paths are relative to the
current directory.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from benchmarks.methods import METHODS, RUNNER_ARGUMENTS, constructor_arguments, get_method, merge
from benchmarks.tasks import (
    REQUIRED,
    OfflineData,
    Option,
    TaskSpec,
    expand_path,
    get_suite,
    get_task,
    task_names,
    unavailable_suites,
)

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


@dataclass(frozen=True)
class Range:
    """
    The values a numeric hyperparameter takes.

    :param low: Lower bound
    :param high: Upper bound, or None
    :param low_open: Whether ``low`` itself is excluded
    :param also: Another value allowed outside the range (SB3's ``gradient_steps=-1``)
    """

    low: float
    high: float | None = None
    low_open: bool = False
    also: float | None = None

    def contains(self, value: float) -> bool:
        above = value > self.low if self.low_open else value >= self.low
        return value == self.also or (above and (self.high is None or value <= self.high))

    def describe(self) -> str:
        if self.high is not None:
            text = f"in {'(' if self.low_open else '['}{self.low}, {self.high}]"
        else:
            text = f"{'>' if self.low_open else '>='} {self.low}"
        return text + (f", or {self.also}" if self.also is not None else "")


# The numeric hyperparameters' valid values, checked here so that a bad one is named before anything runs; the
# algorithm is also built once per method and domain on a dummy env (plan_runs), which catches the rest.
HYPERPARAMETER_RANGES: dict[str, Range] = {
    "learning_rate": Range(0.0, low_open=True),
    "buffer_size": Range(1),
    "learning_starts": Range(0),
    "batch_size": Range(1),
    "tau": Range(0.0, 1.0, low_open=True),
    "gamma": Range(0.0, 1.0),
    "gradient_steps": Range(1, also=-1),
    "chunk_size": Range(1),
    "offline_log_interval": Range(1),
    "stats_window_size": Range(1),
    "flow_steps": Range(1),
    "n_critics": Range(1),
    "actor_num_samples": Range(1),
    "alpha": Range(0.0),
    "bc_alpha": Range(0.0),
    "initial_ent_coef": Range(0.0, low_open=True),
}


@dataclass(frozen=True)
class Protocol:
    """
    The offline-to-online protocol of every run (docs/algorithms.md §5).

    :param offline_steps: Offline gradient steps (methods without an offline phase skip them)
    :param online_steps: Online env steps
    :param eval_interval: Steps between two evaluations, in each phase; it divides both step counts
    :param eval_episodes: Episodes per evaluation
    :param eval_at_start: Also evaluate before any training (the reference does not)
    """

    offline_steps: int = 1_000_000
    online_steps: int = 1_000_000
    eval_interval: int = 100_000
    eval_episodes: int = 50
    eval_at_start: bool = False


@dataclass(frozen=True)
class Execution:
    """
    Where and how runs execute.

    :param workers: Runs at a time on this machine (local pool; at most the number of cores); None: the cores
    :param torch_threads: ``torch.set_num_threads`` in each run
    :param device: Torch device of the models (``auto``, ``cpu``, ``cuda``, ...)
    :param num_cpus: CPUs a Ray task reserves
    :param num_gpus: GPUs a Ray task reserves
    :param runtime_env: Ray runtime environment of the tasks (``working_dir``, ``env_vars``, ...)
    """

    workers: int | None = None
    torch_threads: int = 1
    device: str = "auto"
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    runtime_env: dict[str, Any] | None = None


@dataclass(frozen=True)
class BenchmarkConfig:
    """
    A validated config.

    :param name: Its label
    :param tasks: Task names
    :param methods: Method name -> its own hyperparameter overrides
    :param seeds: Seeds of every task, or None for each suite's default count
    :param protocol: The protocol
    :param datasets: Suite -> the options of its dataset source (``source`` and the source's keys, defaults filled)
    :param hyperparameters: Overrides for every method that has the argument
    :param env: Env keyword arguments for every task that has them
    :param execution: Execution settings
    :param out: Results folder, if the config names one
    :param dataset_cache: Cache folder of datasets, if the config names one
    """

    name: str
    tasks: tuple[str, ...]
    methods: dict[str, dict[str, Any]]
    seeds: tuple[int, ...] | None
    protocol: Protocol
    datasets: dict[str, dict[str, Any]]
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    env: dict[str, Any] = field(default_factory=dict)
    execution: Execution = field(default_factory=Execution)
    out: str | None = None
    dataset_cache: str | None = None


@dataclass(frozen=True)
class RunSpec:
    """
    Everything one run needs, picklable for worker processes and Ray tasks.

    :param task: Task name
    :param suite: Its suite
    :param domain: Its domain
    :param method: Method name
    :param seed: Seed
    :param algorithm: ``module:ClassName`` of the algorithm
    :param offline_phase: Whether the method pre-trains offline
    :param hyperparameters: Every constructor argument a config may set, resolved
    :param make_env: The task's env factory
    :param env_kwargs: Its keyword arguments, resolved
    :param protocol: The protocol
    :param dataset: The dataset source's options (what the results record)
    :param run_dir: The run's folder
    :param torch_threads: ``torch.set_num_threads`` in the run
    :param device: Torch device
    :param offline_data: Where the prepared offline data lives (set once datasets are prepared)
    """

    task: str
    suite: str
    domain: str
    method: str
    seed: int
    algorithm: str
    offline_phase: bool
    hyperparameters: dict[str, Any]
    make_env: Callable[..., Any]
    env_kwargs: dict[str, Any]
    protocol: Protocol
    dataset: dict[str, Any]
    run_dir: str
    torch_threads: int = 1
    device: str = "auto"
    offline_data: OfflineData | None = None

    @property
    def name(self) -> str:
        """``<task>/<method>/seed<k>``, the run's folder under the results folder."""
        return f"{self.task}/{self.method}/seed{self.seed}"

    @property
    def offline_steps(self) -> int:
        """Offline gradient steps this run takes (0 without an offline phase)."""
        return self.protocol.offline_steps if self.offline_phase else 0

    def record(self) -> dict[str, Any]:
        """
        What defines the run's results, as saved in its folder and compared when it is resumed. The official files'
        folder is left out: the same files may be mounted elsewhere on another machine.
        """
        return {
            "task": self.task,
            "suite": self.suite,
            "domain": self.domain,
            "method": self.method,
            "seed": self.seed,
            "algorithm": self.algorithm,
            "offline_phase": self.offline_phase,
            "hyperparameters": self.hyperparameters,
            "env_kwargs": self.env_kwargs,
            "protocol": vars(self.protocol),
            "dataset": {key: value for key, value in self.dataset.items() if key != "directory"},
        }


class _Problems:
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
    and ranges (:data:`HYPERPARAMETER_RANGES`), protocol numbers, dataset sources (the official folders and files must
    exist), env keys and execution settings. :func:`plan_runs` then has each algorithm check its resolved arguments.

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
    problems = _Problems()
    _check_keys(problems, "config", data, TOP_LEVEL_KEYS)
    tasks = _parse_tasks(problems, data.get("tasks"))
    methods = _parse_methods(problems, data.get("methods"))
    seeds = _parse_seeds(problems, data.get("seeds"))
    protocol = _parse_protocol(problems, data.get("protocol"))
    task_specs = [get_task(name) for name in tasks]
    datasets = _parse_datasets(problems, data.get("datasets"), task_specs)
    hyperparameters = _parse_hyperparameters(problems, data.get("hyperparameters"), methods)
    env = _parse_env(problems, data.get("env"), task_specs)
    execution = _parse_execution(problems, data.get("execution"))
    for key in ("name", "description", "out", "dataset_cache"):
        if data.get(key) is not None and not isinstance(data[key], str):
            problems.add(f"{key} must be a string, got {data[key]!r}")
    problems.raise_if_any(label)
    return BenchmarkConfig(
        name=str(data.get("name") or name or "benchmark"),
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


def plan_runs(config: BenchmarkConfig, out: str | os.PathLike, seeds: Sequence[int] | None = None) -> list[RunSpec]:
    """
    One run per task, method and seed, with every setting resolved.

    :param config: The config
    :param out: The results folder
    :param seeds: Seeds overriding the config's and the suites' defaults
    :return: The runs, task by task, then method, then seed
    :raises ConfigError: If an algorithm refuses its resolved arguments (it is built once per method and distinct
        arguments on a dummy env, before any folder is made)
    """
    if seeds is not None:
        problems = _Problems()
        _parse_seeds(problems, list(seeds))
        problems.raise_if_any("(--seeds)")
    runs = []
    problems = _Problems()
    checked: set[str] = set()
    for task in map(get_task, config.tasks):
        suite = get_suite(task.suite)
        task_seeds = tuple(seeds) if seeds is not None else config.seeds or tuple(range(suite.default_seeds))
        env_kwargs = {**task.env_kwargs, **{key: value for key, value in config.env.items() if key in task.env_kwargs}}
        for method_name, method_overrides in config.methods.items():
            method = get_method(method_name)
            hyperparameters = resolve_hyperparameters(method_name, task.domain, config, env_kwargs)
            hyperparameters = merge(hyperparameters, method_overrides)
            _check_constructible(problems, method_name, task.domain, hyperparameters, config.protocol, checked)
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
                    )
                )
    problems.raise_if_any("(the algorithms' own argument checks)")
    return runs


def _check_constructible(
    problems: _Problems,
    method_name: str,
    domain: str,
    hyperparameters: Mapping[str, Any],
    protocol: Protocol,
    checked: set[str],
) -> None:
    """Build a method's algorithm once per distinct set of arguments; a refused argument is a problem of the config."""
    method = get_method(method_name)
    key = json.dumps([method_name, hyperparameters, protocol.offline_steps], sort_keys=True, default=repr)
    if key in checked:
        return
    checked.add(key)
    offline_steps = protocol.offline_steps if method.offline_phase else None
    try:
        method.check_arguments(constructor_arguments(hyperparameters, offline_steps))
    except Exception as error:
        problems.add(f"{method_name} (domain {domain}) refuses its hyperparameters: {type(error).__name__}: {error}")


def resolve_hyperparameters(
    method_name: str, domain: str, config: BenchmarkConfig, env_kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """
    A method's constructor arguments in a domain before its own overrides: constructor defaults, the paper's settings,
    the protocol's buffer size and sparse offline rewards, then the config's ``hyperparameters:``.

    :param method_name: The method
    :param domain: The task's domain
    :param config: The config
    :param env_kwargs: The task's resolved env keyword arguments
    :return: Every constructor argument a config may set
    """
    method = get_method(method_name)
    defaults = method.constructor_defaults()
    settings = merge(defaults, method.paper_settings(domain))
    # docs/algorithms.md §5: the buffer holds every online step (the offline data sits in its own segment on top).
    settings["buffer_size"] = max(config.protocol.online_steps, 1)
    # docs/algorithms.md §6: the offline rewards are made sparse exactly where the env's are.
    settings["offline_sparse_rewards"] = bool(env_kwargs.get("sparse", False))
    return merge(settings, {key: value for key, value in config.hyperparameters.items() if key in defaults})


def _check_keys(problems: _Problems, where: str, data: Mapping[str, Any], valid: Sequence[str]) -> None:
    for key in data:
        if key not in valid:
            problems.add(f"unknown key {key!r} in {where}; valid keys: {', '.join(valid)}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _parse_tasks(problems: _Problems, data: Any) -> tuple[str, ...]:
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


def _parse_methods(problems: _Problems, data: Any) -> dict[str, dict[str, Any]]:
    if isinstance(data, list) and all(isinstance(name, str) for name in data):
        if len(set(data)) != len(data):
            problems.add(f"methods lists a method more than once: {data}")
        data = dict.fromkeys(data)
    if not isinstance(data, Mapping) or not data:
        problems.add(f"methods must be a non-empty list of method names or a mapping name -> overrides, got {data!r}")
        return {}
    methods: dict[str, dict[str, Any]] = {}
    for name, overrides in data.items():
        if name not in METHODS:
            problems.add(f"unknown method {name!r}; valid methods: {', '.join(METHODS)}")
            continue
        overrides = overrides or {}
        if not isinstance(overrides, Mapping):
            problems.add(f"methods.{name} must be a mapping of hyperparameters (or empty), got {overrides!r}")
            continue
        defaults = METHODS[name].constructor_defaults()
        for key, value in overrides.items():
            _check_hyperparameter(problems, f"methods.{name}", key, value, defaults, name)
        methods[name] = dict(overrides)
    return methods


def _check_hyperparameter(
    problems: _Problems, where: str, key: str, value: Any, defaults: Mapping[str, Any], method: str
) -> None:
    if key in RUNNER_ARGUMENTS:
        problems.add(f"{where}.{key} cannot be set: {RUNNER_ARGUMENTS[key]}")
    elif key not in defaults:
        problems.add(f"unknown hyperparameter {key!r} in {where}; valid for {method}: {', '.join(defaults)}")
    elif not _matches_default_type(key, value, defaults[key]):
        problems.add(f"{where}.{key} must be like its default {defaults[key]!r}, got {value!r}")
    else:
        _check_range(problems, f"{where}.{key}", key, value)


def _check_range(problems: _Problems, where: str, key: str, value: Any) -> None:
    if key in HYPERPARAMETER_RANGES and isinstance(value, int | float) and not HYPERPARAMETER_RANGES[key].contains(value):
        problems.add(f"{where} must be {HYPERPARAMETER_RANGES[key].describe()}, got {value!r}")


def _matches_default_type(key: str, value: Any, default: Any) -> bool:
    """Whether a config value has a type the argument takes (its default's; None defaults take a mapping or None)."""
    if key == "train_freq" and isinstance(value, list):
        return len(value) == 2 and _is_int(value[0]) and value[1] in ("step", "episode")
    if default is None:
        return value is None or isinstance(value, Mapping)
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, int):
        return _is_int(value)
    if isinstance(default, float):
        return isinstance(value, int | float) and not isinstance(value, bool)
    if isinstance(default, str):
        return isinstance(value, str) or (isinstance(value, int | float) and not isinstance(value, bool))
    return True


def _parse_seeds(problems: _Problems, data: Any) -> tuple[int, ...] | None:
    if data is None:
        return None
    if _is_int(data):
        if data < 1:
            problems.add(f"seeds must be a count >= 1 or a list of seeds, got {data}")
            return None
        return tuple(range(data))
    if isinstance(data, list) and data and all(_is_int(seed) and seed >= 0 for seed in data):
        if len(set(data)) != len(data):
            problems.add(f"seeds lists a seed more than once: {data}")
        return tuple(data)
    problems.add(f"seeds must be a count >= 1 or a non-empty list of integers >= 0, got {data!r}")
    return None


def _parse_protocol(problems: _Problems, data: Any) -> Protocol:
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
        if not _is_int(values[key]) or values[key] < minimum:
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


def _check_option(problems: _Problems, where: str, value: Any, option: Option) -> None:
    kinds = option.kind if isinstance(option.kind, tuple) else (option.kind,)
    if (int in kinds and _is_int(value)) or (
        float in kinds and isinstance(value, int | float) and not isinstance(value, bool)
    ):
        if option.minimum is not None and value < option.minimum:
            problems.add(f"{where} must be >= {option.minimum}, got {value!r}")
        return
    if not any(isinstance(value, kind) for kind in kinds if kind not in (int, float)):
        problems.add(f"{where} must be of type {'/'.join(kind.__name__ for kind in kinds)}, got {value!r}")


def _parse_datasets(problems: _Problems, data: Any, tasks: Sequence[TaskSpec]) -> dict[str, dict[str, Any]]:
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


def _parse_hyperparameters(problems: _Problems, data: Any, methods: Mapping[str, Any]) -> dict[str, Any]:
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        problems.add(f"hyperparameters must be a mapping, got {data!r}")
        return {}
    for key, value in data.items():
        accepting = [name for name in methods if key in METHODS[name].constructor_defaults()]
        if key in RUNNER_ARGUMENTS:
            problems.add(f"hyperparameters.{key} cannot be set: {RUNNER_ARGUMENTS[key]}")
        elif not accepting:
            valid = sorted({name for method in methods for name in METHODS[method].constructor_defaults()})
            problems.add(
                f"unknown hyperparameter {key!r}: none of the methods {list(methods)} takes it; valid: {', '.join(valid)}"
            )
        else:
            defaults = METHODS[accepting[0]].constructor_defaults()
            if not _matches_default_type(key, value, defaults[key]):
                problems.add(f"hyperparameters.{key} must be like its default {defaults[key]!r}, got {value!r}")
            else:
                _check_range(problems, f"hyperparameters.{key}", key, value)
    return dict(data)


def _parse_env(problems: _Problems, data: Any, tasks: Sequence[TaskSpec]) -> dict[str, Any]:
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        problems.add(f"env must be a mapping of env keyword arguments, got {data!r}")
        return {}
    valid = sorted({key for task in tasks for key in task.env_kwargs})
    for key, value in data.items():
        if key not in valid:
            problems.add(f"unknown env key {key!r}: none of the tasks takes it; valid: {', '.join(valid) or '(none)'}")
        elif key == "max_episode_steps" and (not _is_int(value) or value < 1):
            problems.add(f"env.max_episode_steps must be an integer >= 1, got {value!r}")
        elif key == "sparse" and not isinstance(value, bool):
            problems.add(f"env.sparse must be true or false, got {value!r}")
    return dict(data)


def _parse_execution(problems: _Problems, data: Any) -> Execution:
    if data is None:
        return Execution()
    if not isinstance(data, Mapping):
        problems.add(f"execution must be a mapping, got {data!r}")
        return Execution()
    defaults = vars(Execution())
    _check_keys(problems, "execution", data, list(defaults))
    values = {**defaults, **{key: value for key, value in data.items() if key in defaults}}
    if values["workers"] is not None and (not _is_int(values["workers"]) or values["workers"] < 1):
        problems.add(f"execution.workers must be an integer >= 1, got {values['workers']!r}")
    if not _is_int(values["torch_threads"]) or values["torch_threads"] < 1:
        problems.add(f"execution.torch_threads must be an integer >= 1, got {values['torch_threads']!r}")
    if not isinstance(values["device"], str):
        problems.add(f"execution.device must be a string, got {values['device']!r}")
    for key, minimum in (("num_cpus", 0.0), ("num_gpus", 0.0)):
        value = values[key]
        if isinstance(value, bool) or not isinstance(value, int | float) or value < minimum:
            problems.add(f"execution.{key} must be a number >= {minimum}, got {value!r}")
    if values["runtime_env"] is not None and not isinstance(values["runtime_env"], Mapping):
        problems.add(f"execution.runtime_env must be a mapping, got {values['runtime_env']!r}")
    return Execution(**values)


def default_dataset_cache(config: BenchmarkConfig, out: str | os.PathLike) -> Path:
    """
    The dataset cache folder: the config's ``dataset_cache``, else ``<out>/datasets``.

    :param config: The config
    :param out: The results folder
    :return: The folder
    """
    return expand_path(config.dataset_cache) if config.dataset_cache else Path(out) / "datasets"
