"""The checks of a config's hyperparameter values: their type (the constructor default's) and their range.

The numeric hyperparameters' valid values are checked here so that a bad one is named before anything runs; the
algorithm is also built once per method and domain on a dummy env (:mod:`qc_sb3.benchmarks.runner.planning`), which catches the
rest.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


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


# The numeric hyperparameters' valid values.
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
    "replan_interval": Range(1),  # and at most the chunk length: the algorithm checks that
    "temporal_ensemble_rate": Range(0.0),
}

# Arguments whose default is None (off) and that otherwise take a number of this type.
OPTIONAL_NUMBERS: dict[str, type] = {"replan_interval": int, "temporal_ensemble_rate": float}


def is_int(value: Any) -> bool:
    """Whether a config value is an integer (YAML's booleans are not)."""
    return isinstance(value, int) and not isinstance(value, bool)


def hyperparameter_problem(where: str, key: str, value: Any, default: Any) -> str | None:
    """
    What is wrong with a config's value of a constructor argument, if anything.

    :param where: How the message names the value (``methods.QC.alpha``)
    :param key: The argument
    :param value: The config's value
    :param default: The argument's constructor default
    :return: The problem, or None
    """
    if not matches_default_type(key, value, default):
        return f"{where} must be like its default {default!r}, got {value!r}"
    valid = HYPERPARAMETER_RANGES.get(key)
    if valid is not None and isinstance(value, int | float) and not valid.contains(value):
        return f"{where} must be {valid.describe()}, got {value!r}"
    return None


def matches_default_type(key: str, value: Any, default: Any) -> bool:
    """Whether a config value has a type the argument takes (its default's; None defaults take a mapping or None)."""
    if key == "train_freq" and isinstance(value, list):
        return len(value) == 2 and is_int(value[0]) and value[1] in ("step", "episode")
    if default is None and key in OPTIONAL_NUMBERS and value is not None:
        return matches_default_type(key, value, OPTIONAL_NUMBERS[key](0))
    if default is None:
        return value is None or isinstance(value, Mapping)
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, int):
        return is_int(value)
    if isinstance(default, float):
        return isinstance(value, int | float) and not isinstance(value, bool)
    if isinstance(default, str):
        return isinstance(value, str) or (isinstance(value, int | float) and not isinstance(value, bool))
    return True
