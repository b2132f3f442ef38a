"""The dataset cache: generated and converted datasets, made once and found again by what they were made from.

Each dataset is recorded under ``<cache>/index/<key>.json``: it is made again only if that record is missing (it is
written last, after the data is complete) or its files are gone. One runner at a time prepares datasets in a cache
(:mod:`benchmarks.run` holds the cache's folder lock meanwhile).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from benchmarks.atomic import read_json, write_json
from benchmarks.specs import OfflineData


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


def cached(cache: Path, key: Mapping[str, Any], build: Callable[[], OfflineData]) -> OfflineData:
    """
    The offline data recorded under ``key``, or ``build()``'s, recorded once it returns.

    :param cache: The cache folder
    :param key: JSON-able description of the data (source, task, parameters)
    :param build: Makes the data (generation, conversion) and returns where it lives
    :return: Where the data lives
    """
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    record_path = cache / "index" / f"{digest}.json"
    if record_path.exists():
        record = read_json(record_path)
        if record["key"] == key and all(Path(path).exists() for path in record["paths"]):
            return OfflineData(tuple(record["paths"]), record["swap_interval"])
    data = build()
    write_json(record_path, {"key": key, "paths": list(data.paths), "swap_interval": data.swap_interval})
    return data
