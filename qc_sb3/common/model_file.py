"""Checks that a file given to ``load()`` is a complete model zip of the loading algorithm, before SB3 reads it."""

from __future__ import annotations

import io
import json
import pathlib
import zipfile
import zlib
from typing import Any

from stable_baselines3 import A2C, DDPG, DQN, PPO, SAC, TD3
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.save_util import json_to_data, open_path

# What SB3's save() always writes into the zip.
_REQUIRED_MEMBERS = ("data", "policy.pth")
# Errors zipfile and zlib raise on a truncated or corrupt archive.
_ZIP_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, OSError, json.JSONDecodeError, UnicodeDecodeError)


def check_model_file(
    path: str | pathlib.Path | io.BufferedIOBase,
    algorithm: type[BaseAlgorithm],
    known_algorithms: list[type[BaseAlgorithm]],
    custom_objects: dict[str, Any] | None = None,
) -> None:
    """
    Raise a ValueError unless ``path`` is a complete model zip (every member intact) whose policy class is one of
    ``algorithm``'s; a file object is read and then put back at the position it was given at.

    :param path: What ``load()`` was given: a path (``.zip`` may be left out, as in SB3) or a file object
    :param algorithm: The class whose ``load()`` was called
    :param known_algorithms: Algorithms to name when the file holds another one's model (SB3's are added)
    :param custom_objects: As in SB3's ``load()``: saved objects replaced instead of deserialized
    """
    file = open_path(path, "r", verbose=0, suffix="zip")
    start = file.tell()
    where = repr(str(path)) if isinstance(path, str | pathlib.Path) else "the file object"
    try:
        with zipfile.ZipFile(file) as archive:
            missing = [name for name in _REQUIRED_MEMBERS if name not in archive.namelist()]
            if missing:
                raise zipfile.BadZipFile(f"it misses {missing}")
            damaged = archive.testzip()
            if damaged is not None:
                raise zipfile.BadZipFile(f"its member {damaged!r} fails its CRC check")
            data = json_to_data(archive.read("data").decode(), custom_objects=custom_objects)
    except _ZIP_ERRORS as error:
        raise ValueError(
            f"{where} is not a complete qc_sb3 model file (a zip written by save(); truncated or corrupt?): {error}"
        ) from error
    finally:
        if isinstance(path, str | pathlib.Path):
            file.close()
        else:
            file.seek(start)
    policy_class = data.get("policy_class")
    expected = tuple(algorithm.policy_aliases.values())
    if isinstance(policy_class, type) and issubclass(policy_class, expected):
        return
    found = _algorithms_of_policy(policy_class, [*known_algorithms, A2C, DDPG, DQN, PPO, SAC, TD3])
    raise ValueError(
        f"{where} holds a model of {' or '.join(found) if found else 'an unknown algorithm'} (policy class "
        f"{_class_name(policy_class)}), not of {algorithm.__name__} (policy classes "
        f"{', '.join(_class_name(policy) for policy in expected)}); load it with that algorithm's load()"
    )


def _algorithms_of_policy(policy_class: Any, candidates: list[type[BaseAlgorithm]]) -> list[str]:
    """Names of the candidates that have ``policy_class`` (or a base of it) among their policies."""
    if not isinstance(policy_class, type):
        return []
    return [
        candidate.__name__ for candidate in candidates if issubclass(policy_class, tuple(candidate.policy_aliases.values()))
    ]


def _class_name(value: Any) -> str:
    """``module.QualName`` of a class, else the value's repr."""
    return f"{value.__module__}.{value.__qualname__}" if isinstance(value, type) else repr(value)
