"""The specs of the benchmark runner, plain frozen dataclasses that every other module of :mod:`benchmarks` reads.

A *suite* (:mod:`qc_sb3.benchmarks.runner.suites`) turns a dataset source (official files in a directory, or "generate
N episodes
locally") into each of its tasks' offline data, in the form the algorithms' ``offline_dataset`` argument takes (a
Minari dataset folder, or ``OfflineShards`` of folders), and declares the paper's per-domain settings of its domains.
A *task* names its suite, its *domain* (the unit of the paper's per-domain hyperparameters, e.g. ``cube-double`` or
``robomimic``), an env factory and its default env keyword arguments. A config (:mod:`qc_sb3.benchmarks.runner.config`) is
planned (:mod:`qc_sb3.benchmarks.runner.planning`) into one :class:`RunSpec` per run. This module imports nothing of
:mod:`benchmarks`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym

from qc_sb3.common.offline_source import OfflineShards


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
    :param policy: The policy its runs build (``"CnnPolicy"`` for image observations)
    :param hyperparameters: Constructor arguments the task's protocol sets, on top of the paper's per-method
        settings and under a config's own (an image task's encoder); names of features extractors stand for the
        classes (:data:`~qc_sb3.benchmarks.runner.methods.FEATURES_EXTRACTORS`)
    """

    name: str
    suite: str
    domain: str
    make_env: Callable[..., gym.Env]
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    dataset: str = ""
    policy: str = "MlpPolicy"
    hyperparameters: Mapping[str, Any] = field(default_factory=dict)


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
    :param prepare_official: ``prepare_official(request)``: convert (once, cached) the official files and return the
        algorithms' ``offline_dataset`` argument for them: a Minari dataset folder, or ``OfflineShards`` of folders
    :param prepare_generated: ``prepare_generated(request)``: generate and convert (once, cached), and return the
        same
    :param domain_settings: Domain -> method name -> the method's per-domain constructor arguments there (the
        paper's N, alpha, ...); every domain of the suite's tasks is a key, and each method's
        ``MethodSpec.per_domain`` arguments must be given: a missing one is an error, never a silent default
    """

    name: str
    default_seeds: int
    official_options: Mapping[str, Option]
    generate_options: Mapping[str, Option]
    check_official: Callable[[TaskSpec, Mapping[str, Any]], None] | None
    prepare_official: Callable[[DatasetRequest], str | OfflineShards] | None
    prepare_generated: Callable[[DatasetRequest], str | OfflineShards] | None
    domain_settings: Mapping[str, Mapping[str, Mapping[str, Any]]]

    def domain_setting(self, domain: str, method: str, argument: str) -> Any:
        """
        A method's per-domain constructor argument in one of the suite's domains.

        :param domain: The domain
        :param method: The method name
        :param argument: The constructor argument
        :return: Its value
        :raises LookupError: Naming the missing key, if the suite does not declare it
        """
        if domain not in self.domain_settings:
            raise LookupError(
                f"suite {self.name!r} declares no per-domain settings for domain {domain!r} "
                f"(domain_settings[{domain!r}]); its domains: {', '.join(self.domain_settings) or '(none)'}"
            )
        by_method = self.domain_settings[domain].get(method, {})
        if argument not in by_method:
            raise LookupError(
                f"suite {self.name!r} declares no per-domain setting {argument!r} of {method} for domain {domain!r} "
                f"(domain_settings[{domain!r}][{method!r}][{argument!r}])"
            )
        return by_method[argument]


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
    :param seeds_per_process: Seeds of one task and method that run together in one process (one job of the
        executor), for every method, or per method (a mapping; the others 1); 1: every run its own process
    """

    workers: int | None = None
    torch_threads: int = 1
    device: str = "auto"
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    runtime_env: dict[str, Any] | None = None
    seeds_per_process: int | dict[str, int] = 1


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
    :param offline_dataset: The algorithms' ``offline_dataset`` argument for the prepared data, a Minari dataset
        folder or ``OfflineShards`` of folders (set once datasets are prepared; the algorithms check it)
    :param seeds_per_process: How many runs of its task and method (other seeds) run in one process with it; not
        part of its results (:mod:`qc_sb3.benchmarks.runner.seed_groups`)
    :param policy: The task's policy (fixed by the task, so its name in the record stands for it)
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
    offline_dataset: str | OfflineShards | None = None
    seeds_per_process: int = 1
    policy: str = "MlpPolicy"

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


def expand_path(path: str | os.PathLike) -> Path:
    """
    A path from a config, with ``~`` and environment variables expanded.

    :param path: The path as written
    :return: The expanded path
    """
    return Path(os.path.expandvars(os.path.expanduser(str(path))))
