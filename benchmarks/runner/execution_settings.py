"""The ``execution:`` section of a config: where and how runs execute, checked before anything runs.

``seeds_per_process`` runs the seeds of one task and method together, that many in one process
(:mod:`qc_sb3.benchmarks.runner.seed_groups`): an integer for every method of the config, or a mapping method ->
integer (the methods it does not name run one seed per process). Only the methods whose algorithm is a
:class:`~qc_sb3.common.flow_q.FlowQAlgorithm` (QC, QC-FQL and their variants) can; asking it of another is an error
naming the method.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from qc_sb3.benchmarks.runner.hyperparameters import is_int
from qc_sb3.benchmarks.runner.methods import get_method
from qc_sb3.benchmarks.runner.specs import Execution
from qc_sb3.common.flow_q import FlowQAlgorithm


def parse_execution(data: Any, methods: Mapping[str, Any]) -> tuple[Execution, list[str]]:
    """
    The ``execution:`` section, checked.

    :param data: The section as written (None: the defaults)
    :param methods: The config's methods (their names are the keys)
    :return: The settings (defaults where a value is bad) and the problems found
    """
    if data is None:
        return Execution(), []
    if not isinstance(data, Mapping):
        return Execution(), [f"execution must be a mapping, got {data!r}"]
    defaults = vars(Execution())
    problems = [f"unknown key {key!r} in execution; valid keys: {', '.join(defaults)}" for key in data if key not in defaults]
    values = {**defaults, **{key: value for key, value in data.items() if key in defaults}}
    if values["workers"] is not None and (not is_int(values["workers"]) or values["workers"] < 1):
        problems.append(f"execution.workers must be an integer >= 1, got {values['workers']!r}")
    if not is_int(values["torch_threads"]) or values["torch_threads"] < 1:
        problems.append(f"execution.torch_threads must be an integer >= 1, got {values['torch_threads']!r}")
    if not isinstance(values["device"], str):
        problems.append(f"execution.device must be a string, got {values['device']!r}")
    for key, minimum in (("num_cpus", 0.0), ("num_gpus", 0.0)):
        value = values[key]
        if isinstance(value, bool) or not isinstance(value, int | float) or value < minimum:
            problems.append(f"execution.{key} must be a number >= {minimum}, got {value!r}")
    if values["runtime_env"] is not None and not isinstance(values["runtime_env"], Mapping):
        problems.append(f"execution.runtime_env must be a mapping, got {values['runtime_env']!r}")
    seeds_problems = _seeds_per_process_problems(values["seeds_per_process"], methods)
    problems += seeds_problems
    if seeds_problems:
        values["seeds_per_process"] = defaults["seeds_per_process"]
    elif isinstance(values["seeds_per_process"], Mapping):
        values["seeds_per_process"] = dict(values["seeds_per_process"])
    return Execution(**values), problems


def seeds_per_process(execution: Execution, method: str) -> int:
    """
    How many seeds of a method run together in one process.

    :param execution: The checked settings
    :param method: The method's name (as the config names it: a variant is its own entry)
    :return: The count (1: every run in its own process)
    """
    value = execution.seeds_per_process
    return value.get(method, 1) if isinstance(value, Mapping) else value


def grouping_problem(method: str, hyperparameters: Mapping[str, Any]) -> str | None:
    """
    Why a method's resolved hyperparameters cannot train seeds together, or None if they can.

    :param method: The method's name
    :param hyperparameters: Its resolved constructor arguments
    :return: The problem, naming the method and the setting
    """
    if hyperparameters.get("compile_step"):
        return f"{method}: execution.seeds_per_process > 1 needs compile_step: false (the seeds' update runs eagerly)"
    train_freq = hyperparameters.get("train_freq")
    if isinstance(train_freq, list | tuple) and len(train_freq) == 2 and train_freq[1] != "step":
        return (
            f"{method}: execution.seeds_per_process > 1 needs train_freq in steps (the seeds train in lockstep), "
            f"got {train_freq!r}"
        )
    return None


def _seeds_per_process_problems(value: Any, methods: Mapping[str, Any]) -> list[str]:
    where = "execution.seeds_per_process"
    if isinstance(value, Mapping):
        counts = dict(value)
        problems = [
            f"{where} names {name!r}, which is not one of the config's methods ({', '.join(methods)})"
            for name in counts
            if name not in methods
        ]
    elif is_int(value):
        counts, problems = dict.fromkeys(methods, value), []
        if value < 1:
            return [f"{where} must be an integer >= 1 (seeds of a method run in one process), got {value!r}"]
    else:
        return [f"{where} must be an integer >= 1 or a mapping method -> integer >= 1, got {value!r}"]
    for name, count in counts.items():
        key = f"{where}.{name}" if isinstance(value, Mapping) else where
        if not is_int(count) or count < 1:
            problems.append(f"{key} must be an integer >= 1 (seeds of a method run in one process), got {count!r}")
        elif count > 1 and name in methods and not issubclass(get_method(name).algorithm, FlowQAlgorithm):
            problems.append(
                f"{key} is {count} for {name}, whose algorithm {get_method(name).algorithm.__name__} cannot train "
                "seeds together (only QC and QC-FQL methods can); give a mapping naming the methods to group, e.g. "
                "{QC: 4}"
            )
    return problems
