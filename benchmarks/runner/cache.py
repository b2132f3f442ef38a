"""The dataset cache: generated and converted datasets, made once and found again by what they were made from.

Each dataset is recorded under ``<cache>/index/<key>.json``: it is made again only if that record is missing (it is
written last, after the data is complete) or its files are gone. A converted dataset is recorded as the library's
record of an ``offline_dataset`` argument (:func:`qc_sb3.common.datasets.offline_source_record`), an intermediate
file (e.g. generated OGBench play data before its conversion) by its path. One runner at a time prepares datasets in
a cache (:mod:`qc_sb3.benchmarks.run` holds the cache's folder lock meanwhile).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from qc_sb3.benchmarks.runner.atomic import read_json, write_json
from qc_sb3.common.offline_source import OfflineShards, offline_source_record, open_offline_source_record


def file_fingerprint(path: str | os.PathLike) -> dict[str, Any]:
    """
    What identifies an input file (or the ``.npz`` files of a folder): absolute path, sizes and modification times.

    :param path: A file or folder
    :return: A JSON-able description
    """
    path = Path(path).resolve()
    files = sorted(path.glob("*.npz")) if path.is_dir() else [path]
    return {"path": str(path), "files": [[file.name, file.stat().st_size, file.stat().st_mtime_ns] for file in files]}


def short_digest(data: Any) -> str:
    """Eight hex digits identifying JSON-able data, for dataset ids."""
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:8]


def cached(cache: Path, key: Mapping[str, Any], build: Callable[[], str | OfflineShards]) -> str | OfflineShards:
    """
    The dataset recorded under ``key``, or ``build()``'s, recorded once it returns.

    :param cache: The cache folder
    :param key: JSON-able description of the data (source, task, parameters)
    :param build: Makes the dataset (generation, conversion) and returns the algorithms' ``offline_dataset``
        argument for it: a Minari dataset folder, or ``OfflineShards`` of folders
    :return: That argument
    :raises ValueError: If ``build()`` returns data that is not in existing folders
    """
    record_path = _record_path(cache, key)
    record = _read_record(record_path, key)
    if record is not None:
        source = record.get("offline_dataset") or _source_of_old_record(record)
        if all(Path(path).exists() for path in _folders(source)):
            return open_offline_source_record(source)  # type: ignore[return-value]
    data = build()
    source = offline_source_record(data)
    _folders(source)
    write_json(record_path, {"key": key, "offline_dataset": source})
    return data


def cached_file(cache: Path, key: Mapping[str, Any], build: Callable[[], Path]) -> Path:
    """
    The intermediate file recorded under ``key``, or ``build()``'s, recorded once it returns.

    :param cache: The cache folder
    :param key: JSON-able description of the file (source, parameters)
    :param build: Makes the file and returns its path
    :return: The file's path
    """
    record_path = _record_path(cache, key)
    record = _read_record(record_path, key)
    if record is not None:
        path = Path(record["path"] if "path" in record else record["paths"][0])
        if path.exists():
            return path
    path = build()
    write_json(record_path, {"key": key, "path": str(path)})
    return path


def _record_path(cache: Path, key: Mapping[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache / "index" / f"{digest}.json"


def _read_record(record_path: Path, key: Mapping[str, Any]) -> dict[str, Any] | None:
    """The record at ``record_path`` if it is ``key``'s."""
    if not record_path.exists():
        return None
    record = read_json(record_path)
    return record if record["key"] == key else None


def _source_of_old_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """The library's record of a dataset that a cache written before it used it recorded as paths and swap interval."""
    folders = [{"kind": "minari_folder", "path": path} for path in record["paths"]]
    if record["swap_interval"] is None:
        return folders[0]
    return {"kind": "shards", "shards": folders, "swap_interval": record["swap_interval"]}


def _folders(source: Mapping[str, Any]) -> list[str]:
    """The dataset folders of a record of :func:`offline_source_record`, which must name only folders."""
    if source["kind"] == "minari_folder":
        return [source["path"]]
    if source["kind"] == "shards":
        return [path for shard in source["shards"] for path in _folders(shard)]
    raise ValueError(f"the dataset cache records datasets in folders, got a dataset recorded as {dict(source)!r}")
