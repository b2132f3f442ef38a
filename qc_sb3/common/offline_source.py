"""Where offline data comes from: its sources, shards of them, and the record a saved model keeps of them."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import minari
import numpy as np

from qc_sb3.common.offline_transitions import OfflineTransitions

# What an ``offline_dataset`` names or holds: read into OfflineTransitions by datasets.load_offline_transitions.
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
