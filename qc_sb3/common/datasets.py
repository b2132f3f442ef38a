"""Reading offline data: Minari datasets (the one offline format qc_sb3 reads) and mappings of arrays as OfflineTransitions."""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from pathlib import Path

import gymnasium as gym
import minari
import numpy as np
from minari.dataset.minari_storage import is_image_space

from qc_sb3.common.dataset_checksums import verify_checksums
from qc_sb3.common.input_checks import user_stacklevel
from qc_sb3.common.offline_source import (
    OfflineSource,
)
from qc_sb3.common.offline_transitions import (
    OfflineTransitions,
    check_finite_as_float32,
)

# Accepted names of each field of a Mapping source, in the order they are looked up.
_MAPPING_KEYS: dict[str, tuple[str, ...]] = {
    "observations": ("observations",),
    "actions": ("actions",),
    "rewards": ("rewards",),
    "next_observations": ("next_observations",),
    "terminated": ("terminated", "terminals", "terminations"),
    "episode_end": ("episode_end", "timeouts", "truncations"),
}


def load_offline_transitions(source: OfflineSource, env_id: str | None = None) -> OfflineTransitions:
    """
    Read an offline dataset as per-step arrays, actions in the env's scale.

    From a Minari dataset, each episode of n steps gives observations ``[:-1]`` and next observations ``[1:]`` of
    its n+1 recorded observations; ``terminated`` is Minari's ``terminations`` and the last step of every episode
    is an episode end, whatever its termination and truncation flags say. A termination before an episode's last
    step stays a termination inside the episode (OGBench's relabelled play data: success mid-trajectory).

    From a mapping of arrays (D4RL-style), ``terminated`` may be called ``terminals`` or ``terminations``;
    ``episode_end`` may instead be given as ``timeouts`` or ``truncations`` (truncated steps). Episode ends are
    the given ones or'ed with the terminations, and the last step always ends its episode. Other keys are ignored.

    A Minari dataset is first checked against the checksums recorded with it by qc_sb3's converters
    (:mod:`qc_sb3.common.dataset_checksums`): a damaged file is refused, naming it. One recorded for an env other than
    ``env_id`` (by the id of the env spec Minari stores) is warned about: same shapes do not make the same task.

    :param source: A Minari dataset id (loaded locally from ``MINARI_DATASETS_PATH``, else ``~/.minari/datasets``;
        nothing is downloaded), a path to a Minari dataset folder (the dataset folder or its ``data`` subfolder),
        a ``MinariDataset``, a mapping of arrays, or ``OfflineTransitions`` (returned as they are)
    :param env_id: The id of the env the data will train on (its ``spec.id``); None: not checked
    :return: The dataset's per-step arrays
    """
    if isinstance(source, OfflineTransitions):
        return source
    if isinstance(source, minari.MinariDataset):
        return _from_minari_dataset(source, env_id)
    if isinstance(source, str | os.PathLike):
        return _from_minari_dataset(_open_minari_dataset(source), env_id)
    if isinstance(source, Mapping):
        return _from_mapping(source)
    raise TypeError(
        "source must be a Minari dataset id or folder path (str), a minari.MinariDataset, a mapping of arrays or "
        f"OfflineTransitions, got {type(source).__name__}"
    )


def _minari_root() -> Path:
    """The folder Minari keeps its local datasets in."""
    root = os.environ.get("MINARI_DATASETS_PATH")
    return Path(root) if root is not None else Path.home() / ".minari" / "datasets"


def _open_minari_dataset(source: str | os.PathLike) -> minari.MinariDataset:
    """Open a Minari dataset from an existing folder, or else from its id in the local Minari root."""
    path = Path(source)
    if isinstance(source, os.PathLike) or path.exists():
        # minari.load_dataset opens "<root>/<id>/data"; accept that folder or the dataset folder above it.
        data_path = path / "data" if (path / "data").is_dir() else path
        verify_checksums(data_path)
        try:
            return minari.MinariDataset(data_path)
        except ValueError as error:
            raise ValueError(
                f"{str(path)!r} is not a readable Minari dataset folder (expected a dataset folder or its 'data' "
                f"subfolder): {error}"
            ) from error
    try:
        return minari.load_dataset(source, download=False)
    except FileNotFoundError as error:
        raise ValueError(
            f"Minari dataset {source!r} is neither an existing folder nor a dataset id found locally under the "
            f"Minari root {str(_minari_root())!r} (MINARI_DATASETS_PATH, else ~/.minari/datasets); nothing is "
            "downloaded: download or convert it first"
        ) from error


def _from_minari_dataset(dataset: minari.MinariDataset, env_id: str | None) -> OfflineTransitions:
    """Concatenate the episodes of a Minari dataset into per-step arrays (warning if recorded for another env)."""
    for name, space in (("observation", dataset.observation_space), ("action", dataset.action_space)):
        if not isinstance(space, gym.spaces.Box):
            raise ValueError(f"Minari dataset {dataset.id!r} has a {type(space).__name__} {name} space; expected a Box")
    verify_checksums(dataset.spec.data_path)
    recorded = dataset.env_spec
    if env_id is not None and recorded is not None and recorded.id != env_id:
        warnings.warn(
            f"Minari dataset {dataset.id!r} ({dataset.spec.data_path}) was recorded for env {recorded.id!r}, but it "
            f"trains on env {env_id!r}: check that it is this env's data",
            stacklevel=user_stacklevel(),
        )
    _warn_if_lossy_images(dataset)
    try:
        return _concatenate_episodes(dataset)
    except OSError as error:
        raise ValueError(
            f"Minari dataset {dataset.id!r} at {dataset.spec.data_path!r} is not readable (truncated or damaged?): {error}"
        ) from error


def _warn_if_lossy_images(dataset: minari.MinariDataset) -> None:
    """
    Warn when a dataset stores its image observations JPEG-encoded (Minari's default for uint8 image spaces).

    :param dataset: The dataset; Minari records the encoding in its metadata (``jpeg_encoding``, read back as
        ``dataset.storage.jpeg_encoding``) and applies it to observation spaces it takes for images
    """
    if dataset.storage.jpeg_encoding and is_image_space(dataset.observation_space):
        warnings.warn(
            f"Minari dataset {dataset.id!r} ({dataset.spec.data_path}) stores its image observations JPEG-encoded "
            "(lossy): the frames it trains on differ from the exact pixels the env shows online; write it with "
            "jpeg_encoding=False (as qc_sb3's converters do) to keep them exact",
            stacklevel=user_stacklevel(),
        )


def _concatenate_episodes(dataset: minari.MinariDataset) -> OfflineTransitions:
    """The episodes of a Minari dataset as per-step arrays."""
    observations, next_observations, actions, rewards, terminated, lengths = [], [], [], [], [], []
    for episode in dataset.iterate_episodes():
        n_steps = len(episode.rewards)
        episode_observations = np.asarray(episode.observations)
        if len(episode_observations) != n_steps + 1:
            raise ValueError(
                f"Minari dataset {dataset.id!r} episode {episode.id} has {len(episode_observations)} observations for "
                f"{n_steps} steps; expected {n_steps + 1}"
            )
        observations.append(episode_observations[:-1])
        next_observations.append(episode_observations[1:])
        actions.append(np.asarray(episode.actions))
        rewards.append(np.asarray(episode.rewards, dtype=np.float64))
        terminated.append(np.asarray(episode.terminations, dtype=bool))
        lengths.append(n_steps)
    if sum(lengths) == 0:
        raise ValueError(f"Minari dataset {dataset.id!r} holds no steps; expected at least one")
    episode_end = np.zeros(sum(lengths), dtype=bool)
    episode_end[np.cumsum(lengths)[np.asarray(lengths) > 0] - 1] = True
    return OfflineTransitions(
        observations=np.concatenate(observations),
        actions=np.concatenate(actions),
        rewards=np.concatenate(rewards),
        next_observations=np.concatenate(next_observations),
        terminated=np.concatenate(terminated),
        episode_end=episode_end,
    )


def _from_mapping(source: Mapping[str, np.ndarray]) -> OfflineTransitions:
    """Per-step arrays from a mapping of arrays under the accepted key names."""
    found: dict[str, str] = {}
    missing = []
    for field, names in _MAPPING_KEYS.items():
        present = [name for name in names if name in source]
        if len(present) > 1:
            raise ValueError(f"offline dataset mapping has several keys for {field}: {present}; expected exactly one")
        if present:
            found[field] = present[0]
        else:
            missing.append(field)
    if missing:
        accepted = "; ".join(f"{field}: {' or '.join(_MAPPING_KEYS[field])}" for field in missing)
        raise ValueError(f"offline dataset mapping misses {missing} (accepted names: {accepted}); got keys {sorted(source)}")
    arrays = {field: np.asarray(source[key]) for field, key in found.items()}
    flags = {}
    for field in ("terminated", "episode_end"):
        key = found[field]
        if arrays[field].ndim != 1:
            raise ValueError(f"offline dataset {key} must have shape (N,), got {arrays[field].shape}")
        check_finite_as_float32(f"offline dataset {key}", arrays[field])
        if not np.isin(arrays[field], (0, 1)).all():
            raise ValueError(f"offline dataset {key} must hold only 0/1 or bools, got values {np.unique(arrays[field])}")
        flags[field] = arrays[field].astype(bool)
    if len(flags["episode_end"]) != len(flags["terminated"]):
        raise ValueError(
            f"offline dataset {found['terminated']} has {len(flags['terminated'])} steps but {found['episode_end']} has "
            f"{len(flags['episode_end'])}; expected the same"
        )
    episode_end = flags["episode_end"] | flags["terminated"]
    if len(episode_end) > 0:
        # The last recorded step ends its episode, even where the data was cut off mid-episode.
        episode_end[-1] = True
    return OfflineTransitions(
        observations=arrays["observations"],
        actions=arrays["actions"],
        rewards=arrays["rewards"],
        next_observations=arrays["next_observations"],
        terminated=flags["terminated"],
        episode_end=episode_end,
    )
