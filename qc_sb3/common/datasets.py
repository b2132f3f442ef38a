"""Minari datasets (the one offline format qc_sb3 reads) as per-step arrays for ``ChunkReplayBuffer.add_offline``."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import gymnasium as gym
import minari
import numpy as np

from qc_sb3.common.buffers import ChunkReplayBuffer

# Actions may exceed the action space bounds by this much (float rounding in converters) and still count as inside.
ACTION_BOUNDS_TOLERANCE = 1e-6

# Accepted names of each field of a Mapping source, in the order they are looked up.
_MAPPING_KEYS: dict[str, tuple[str, ...]] = {
    "observations": ("observations",),
    "actions": ("actions",),
    "rewards": ("rewards",),
    "next_observations": ("next_observations",),
    "terminated": ("terminated", "terminals", "terminations"),
    "episode_end": ("episode_end", "timeouts", "truncations"),
}


@dataclass(frozen=True)
class OfflineTransitions:
    """
    Per-step arrays of an offline dataset, episodes one after another, actions in the env's scale.

    The arrays are checked at construction: equal lengths, at least one step, values finite as float32 (the replay
    buffer's dtype), boolean flags and the last step an episode end.

    ``terminated`` (the reference's ``1 - mask``) and ``episode_end`` (the reference's ``terminals``) are
    independent: in OGBench's single-task relabelling of play data a step that reaches the goal is terminated
    but its trajectory goes on (docs/algorithms.md §6), so windows past it keep ``valid = 1`` and stop bootstrapping there.

    :param observations: ``(N, *obs_shape)``, s_t
    :param actions: ``(N, *action_shape)``, a_t in the env's scale (not yet scaled to [-1, 1])
    :param rewards: ``(N,)``, r_t
    :param next_observations: ``(N, *obs_shape)``, s_{t+1}
    :param terminated: ``(N,)`` bool, true terminations (mask 0), also in the middle of an episode
    :param episode_end: ``(N,)`` bool, the last step of each episode (terminated, truncated or the episode's last
        recorded step)
    """

    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_observations: np.ndarray
    terminated: np.ndarray
    episode_end: np.ndarray

    def __post_init__(self) -> None:
        arrays = {field.name: getattr(self, field.name) for field in fields(self)}
        for name, array in arrays.items():
            if not isinstance(array, np.ndarray):
                raise TypeError(f"OfflineTransitions.{name} must be a numpy array, got {type(array).__name__}")
        for name in ("observations", "actions", "rewards", "next_observations"):
            if not np.issubdtype(arrays[name].dtype, np.number):
                raise TypeError(f"OfflineTransitions.{name} must hold numbers, got dtype {arrays[name].dtype}")
        for name in ("terminated", "episode_end"):
            if arrays[name].dtype != np.bool_:
                raise TypeError(f"OfflineTransitions.{name} must have dtype bool, got {arrays[name].dtype}")
        for name in ("rewards", "terminated", "episode_end"):
            if arrays[name].ndim != 1:
                raise ValueError(f"OfflineTransitions.{name} must have shape (N,), got {arrays[name].shape}")
        for name in ("observations", "actions", "next_observations"):
            if arrays[name].ndim < 1:
                raise ValueError(f"OfflineTransitions.{name} must have shape (N, ...), got a scalar")
        lengths = {name: len(array) for name, array in arrays.items()}
        if len(set(lengths.values())) != 1:
            raise ValueError(f"offline dataset arrays must all have the same number of steps, got lengths {lengths}")
        if lengths["rewards"] == 0:
            raise ValueError("offline dataset must hold at least one step, got 0")
        if self.observations.shape != self.next_observations.shape:
            raise ValueError(
                f"offline dataset observations have shape {self.observations.shape} but next_observations have "
                f"shape {self.next_observations.shape}; expected the same"
            )
        for name in ("observations", "actions", "rewards", "next_observations"):
            _check_finite(name, arrays[name])
        if not self.episode_end[-1]:
            raise ValueError(
                "offline dataset's last step must be an episode end (episode_end[-1] = True), got False; "
                "the last recorded step always ends its episode"
            )

    def __len__(self) -> int:
        """Number of steps N."""
        return len(self.rewards)


OfflineSource = str | os.PathLike | minari.MinariDataset | Mapping[str, np.ndarray] | OfflineTransitions


@dataclass(frozen=True)
class OfflineShards:
    """
    An offline dataset split into shards, of which the offline phase holds one in memory at a time (docs/algorithms.md §5: the
    reference's ``--ogbench_dataset_dir`` with ``dataset_replace_interval``, e.g. OGBench's 100M-transition
    cube-quadruple set as 100 shards of 1M).

    Offline gradient step ``s`` (counted from 1) trains on shard ``(s // swap_interval) % len(sources)``: the
    reference moves to the next shard, cyclically, before every step that is a multiple of ``swap_interval``.
    The QC family keeps the shard in memory when the offline phase ends for its whole online phase (the
    reference's ``main.py``). The RLPD family, which has no offline phase, rotates during the online phase
    instead (the reference's ``main_online.py``): the updates that follow online env step ``i`` (counted from 1)
    sample shard ``((i - 1) // swap_interval) % len(sources)`` (:meth:`online_shard_index`).

    :param sources: The shards in order, each anything :func:`load_offline_transitions` reads (typically Minari
        dataset ids)
    :param swap_interval: Offline gradient steps between two shard swaps (the reference's 1000)
    """

    sources: Sequence[OfflineSource]
    swap_interval: int = 1000

    def __post_init__(self) -> None:
        if isinstance(self.sources, str | os.PathLike | Mapping) or not isinstance(self.sources, Sequence):
            raise TypeError(f"OfflineShards.sources must be a sequence of datasets, got {type(self.sources).__name__}")
        if len(self.sources) == 0:
            raise ValueError("OfflineShards needs at least one shard, got an empty sequence")
        if isinstance(self.swap_interval, bool) or not isinstance(self.swap_interval, int) or self.swap_interval < 1:
            raise ValueError(f"OfflineShards.swap_interval must be an integer >= 1, got {self.swap_interval!r}")
        object.__setattr__(self, "sources", tuple(self.sources))

    def shard_index(self, gradient_step: int) -> int:
        """
        The shard that offline gradient step ``gradient_step`` (counted from 1) trains on.

        :param gradient_step: The step, 1-based
        :return: An index into ``sources``
        """
        return (gradient_step // self.swap_interval) % len(self.sources)

    def online_shard_index(self, online_step: int) -> int:
        """
        The shard that the updates after online env step ``online_step`` (counted from 1) sample, when shards
        rotate during the online phase: the reference moves to the next shard after every online step that is a
        multiple of ``swap_interval``, so steps 1 to ``swap_interval`` use shard 0.

        :param online_step: The env step, 1-based
        :return: An index into ``sources``
        """
        return ((online_step - 1) // self.swap_interval) % len(self.sources)

    def steps_on_same_shard(self, gradient_step: int) -> int:
        """
        Number of offline gradient steps from ``gradient_step`` (1-based, included) before the next swap.

        :param gradient_step: The step, 1-based
        :return: At least 1
        """
        return (gradient_step // self.swap_interval + 1) * self.swap_interval - gradient_step


def sparse_rewards(rewards: np.ndarray) -> np.ndarray:
    """
    The sparse reward of docs/algorithms.md §6 (scene and puzzle in the paper): r <- -1 * [r != 0].

    :param rewards: Rewards of any shape
    :return: -1.0 where a reward is non-zero, 0.0 elsewhere (float64)
    """
    return -(np.asarray(rewards) != 0).astype(np.float64)


def with_sparse_rewards(data: OfflineTransitions) -> OfflineTransitions:
    """
    The same transitions with :func:`sparse_rewards` applied to their rewards (docs/algorithms.md §6).

    :param data: The offline dataset
    :return: A copy whose rewards are sparse (the other arrays are shared, not copied)
    """
    return replace(data, rewards=sparse_rewards(data.rewards))


def _check_finite(name: str, array: np.ndarray) -> None:
    """
    Raise a ValueError naming ``name`` and the first step where ``array`` holds NaN or inf once cast to float32,
    the replay buffer's dtype (a finite 1e39 becomes inf there).
    """
    with np.errstate(over="ignore"):
        finite = np.isfinite(array.astype(np.float32))
    finite_steps = finite.all(axis=tuple(range(1, finite.ndim)))
    if not finite_steps.all():
        raise ValueError(
            f"offline dataset {name} hold NaN or inf (first at step {int(np.argmin(finite_steps))}) as float32, the "
            "replay buffer's dtype; expected finite values within float32's range (|x| < 3.4e38)"
        )


def load_offline_transitions(source: OfflineSource) -> OfflineTransitions:
    """
    Read an offline dataset as per-step arrays, actions in the env's scale.

    From a Minari dataset, each episode of n steps gives observations ``[:-1]`` and next observations ``[1:]`` of
    its n+1 recorded observations; ``terminated`` is Minari's ``terminations`` and the last step of every episode
    is an episode end, whatever its termination and truncation flags say. A termination before an episode's last
    step stays a termination inside the episode (OGBench's relabelled play data: success mid-trajectory).

    From a mapping of arrays (D4RL-style), ``terminated`` may be called ``terminals`` or ``terminations``;
    ``episode_end`` may instead be given as ``timeouts`` or ``truncations`` (truncated steps). Episode ends are
    the given ones or'ed with the terminations, and the last step always ends its episode. Other keys are ignored.

    :param source: A Minari dataset id (loaded locally from ``MINARI_DATASETS_PATH``, else ``~/.minari/datasets``;
        nothing is downloaded), a path to a Minari dataset folder (the dataset folder or its ``data`` subfolder),
        a ``MinariDataset``, a mapping of arrays, or ``OfflineTransitions`` (returned as they are)
    :return: The dataset's per-step arrays
    """
    if isinstance(source, OfflineTransitions):
        return source
    if isinstance(source, minari.MinariDataset):
        return _from_minari_dataset(source)
    if isinstance(source, str | os.PathLike):
        return _from_minari_dataset(_open_minari_dataset(source))
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


def _from_minari_dataset(dataset: minari.MinariDataset) -> OfflineTransitions:
    """Concatenate the episodes of a Minari dataset into per-step arrays."""
    for name, space in (("observation", dataset.observation_space), ("action", dataset.action_space)):
        if not isinstance(space, gym.spaces.Box):
            raise ValueError(f"Minari dataset {dataset.id!r} has a {type(space).__name__} {name} space; expected a Box")
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
        _check_finite(key, arrays[field])
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


def check_transitions_match_spaces(
    data: OfflineTransitions, observation_space: gym.spaces.Box, action_space: gym.spaces.Box
) -> None:
    """
    Check that an offline dataset fits the env: per-step observation and action shapes, actions within bounds.

    :param data: The offline dataset
    :param observation_space: The env's observation space
    :param action_space: The env's action space; actions may exceed its bounds by at most ``1e-6``
    """
    for name, space in (("observation_space", observation_space), ("action_space", action_space)):
        if not isinstance(space, gym.spaces.Box):
            raise TypeError(f"{name} must be a gymnasium.spaces.Box, got {type(space).__name__}")
    for name, array, space_name, space in (
        ("observations", data.observations, "observation", observation_space),
        ("actions", data.actions, "action", action_space),
    ):
        if array.shape[1:] != space.shape:
            raise ValueError(
                f"offline dataset {name} have shape {array.shape[1:]} per step but the env's {space_name} space has "
                f"shape {space.shape}"
            )
    found_low, found_high = data.actions.min(axis=0), data.actions.max(axis=0)
    if (found_low < action_space.low - ACTION_BOUNDS_TOLERANCE).any() or (
        found_high > action_space.high + ACTION_BOUNDS_TOLERANCE
    ).any():
        raise ValueError(
            f"offline dataset actions range from min {found_low.tolist()} to max {found_high.tolist()} but the env's "
            f"action space bounds are low {action_space.low.tolist()}, high {action_space.high.tolist()} "
            f"(tolerance {ACTION_BOUNDS_TOLERANCE})"
        )


def scale_actions(actions: np.ndarray, action_space: gym.spaces.Box) -> np.ndarray:
    """
    Rescale env-scale actions to the replay buffer's [-1, 1], as SB3's ``policy.scale_action`` does.

    :param actions: ``(..., *action_shape)`` actions in the env's scale
    :param action_space: The env's action space, with finite bounds
    :return: The actions in [-1, 1] for in-bounds input, as float32
    """
    if not isinstance(action_space, gym.spaces.Box):
        raise TypeError(f"action_space must be a gymnasium.spaces.Box, got {type(action_space).__name__}")
    if not (np.isfinite(action_space.low).all() and np.isfinite(action_space.high).all()):
        raise ValueError(
            f"scale_actions needs finite action space bounds, got low {action_space.low.tolist()}, "
            f"high {action_space.high.tolist()}"
        )
    actions = np.asarray(actions)
    shape = action_space.shape
    if actions.shape[actions.ndim - len(shape) :] != shape:
        raise ValueError(f"actions have shape {actions.shape}; expected (..., *{shape}) for the action space")
    low, high = action_space.low, action_space.high
    # The formula of stable_baselines3.common.policies.BasePolicy.scale_action.
    return (2.0 * ((actions - low) / (high - low)) - 1.0).astype(np.float32)


def add_transitions_to_buffer(buffer: ChunkReplayBuffer, data: OfflineTransitions, action_space: gym.spaces.Box) -> None:
    """
    Check an offline dataset against the buffer's spaces and append it to the buffer's offline segment, actions
    scaled to [-1, 1].

    :param buffer: The replay buffer to seed
    :param data: The offline dataset, actions in the env's scale
    :param action_space: The env's action space (the bounds the actions are scaled from)
    """
    if not isinstance(buffer, ChunkReplayBuffer):
        raise TypeError(f"buffer must be a qc_sb3 ChunkReplayBuffer, got {type(buffer).__name__}")
    if not isinstance(data, OfflineTransitions):
        raise TypeError(f"data must be OfflineTransitions (see load_offline_transitions), got {type(data).__name__}")
    check_transitions_match_spaces(data, buffer.observation_space, action_space)
    buffer.add_offline(
        data.observations,
        scale_actions(data.actions, action_space),
        data.rewards,
        data.next_observations,
        data.terminated,
        data.episode_end,
    )


def offline_source_record(source: OfflineSource | OfflineShards) -> dict[str, Any]:
    """
    What a saved model records of its offline dataset, so that ``load()`` can read it again.

    A Minari dataset id is recorded as given (it is looked up in the local Minari root at load), a folder by its
    absolute path, a ``MinariDataset`` by its folder when it holds all of that folder's episodes, and
    ``OfflineShards`` by their shards and swap interval. Data held only in memory (arrays, ``OfflineTransitions``, a
    ``MinariDataset`` restricted to some episodes, shards of those) cannot be read again: it is recorded as
    ``{"kind": "in_memory"}``.

    :param source: An ``offline_dataset`` argument
    :return: A JSON-able record, for :func:`open_offline_source_record`
    """
    if isinstance(source, OfflineShards):
        shards = [offline_source_record(shard) for shard in source.sources]
        if any(shard["kind"] == "in_memory" for shard in shards):
            return {"kind": "in_memory"}
        return {"kind": "shards", "shards": shards, "swap_interval": source.swap_interval}
    if isinstance(source, str | os.PathLike):
        path = Path(source)
        if isinstance(source, os.PathLike) or path.exists():
            return {"kind": "minari_folder", "path": str(path.resolve())}
        return {"kind": "minari_id", "id": str(source)}
    if isinstance(source, minari.MinariDataset):
        if not np.array_equal(np.sort(source.episode_indices), np.arange(source.storage.total_episodes)):
            return {"kind": "in_memory"}
        return {"kind": "minari_folder", "path": str(Path(source.spec.data_path).resolve())}
    return {"kind": "in_memory"}


def open_offline_source_record(record: Mapping[str, Any]) -> OfflineSource | OfflineShards | None:
    """
    The ``offline_dataset`` argument that a record of :func:`offline_source_record` describes.

    :param record: The record
    :return: A Minari id or folder path, ``OfflineShards`` of those, or None for data that was held in memory
    """
    kind = record.get("kind")
    if kind == "minari_folder":
        return record["path"]
    if kind == "minari_id":
        return record["id"]
    if kind == "shards":
        return OfflineShards([open_offline_source_record(shard) for shard in record["shards"]], record["swap_interval"])  # type: ignore[misc]
    if kind == "in_memory":
        return None
    raise ValueError(
        f"unknown offline dataset record {dict(record)!r}; expected kind minari_folder, minari_id, shards or in_memory"
    )


def describe_offline_source_record(record: Mapping[str, Any]) -> str:
    """
    A short human-readable name of a recorded offline dataset, for messages.

    :param record: A record of :func:`offline_source_record`
    :return: e.g. ``Minari dataset id 'ogbench/cube-double-play-singletask-task2-v0'``
    """
    kind = record.get("kind")
    if kind == "minari_folder":
        return f"Minari dataset folder {record['path']!r}"
    if kind == "minari_id":
        return f"Minari dataset id {record['id']!r}"
    if kind == "shards":
        names = ", ".join(describe_offline_source_record(shard) for shard in record["shards"])
        return f"OfflineShards (swap_interval {record['swap_interval']}) of {names}"
    return "offline data passed in memory"
