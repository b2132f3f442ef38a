"""Offline data of the runs: prepared once in the parent process (generated, converted, cached), opened in each run.

Every task's data is prepared before any run starts, one task at a time, so that runs and seeds sharing a dataset
never race to generate or convert it. Conversions are cached under ``<cache>/index/<key>.json``: a dataset is made
again only if that record is missing (it is written last, after the data is complete) or its files are gone.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.atomic import read_json, write_json
from benchmarks.config import RunSpec
from benchmarks.tasks import DatasetRequest, OfflineData, get_suite, get_task


def file_fingerprint(path: str | os.PathLike) -> dict[str, Any]:
    """
    What identifies an input file (or the ``.npz`` files of a folder): absolute path, sizes and modification times.

    :param path: A file or folder
    :return: A JSON-able description
    """
    path = Path(path).resolve()
    files = sorted(path.glob("*.npz")) if path.is_dir() else [path]
    return {"path": str(path), "files": [[file.name, file.stat().st_size, file.stat().st_mtime_ns] for file in files]}


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


def prepare_datasets(
    runs: Sequence[RunSpec],
    cache: str | os.PathLike,
    workers: int = 1,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
) -> list[RunSpec]:
    """
    Prepare every task's offline data once and attach it to the runs.

    :param runs: The runs (their ``dataset`` options say where the data comes from)
    :param cache: The folder of generated and converted datasets
    :param workers: Processes a generator may use
    :param progress: Whether generators show progress bars
    :param log: Called with one line per dataset prepared
    :return: The runs with ``offline_data`` set
    """
    cache = Path(cache)
    prepared: dict[str, OfflineData] = {}
    result = []
    for run in runs:
        key = json.dumps({"task": run.task, "dataset": run.dataset}, sort_keys=True)
        if key not in prepared:
            task = get_task(run.task)
            suite = get_suite(task.suite)
            source = run.dataset["source"]
            prepare = suite.prepare_official if source == "official" else suite.prepare_generated
            if prepare is None:
                raise ValueError(f"suite {suite.name!r} cannot prepare {source} datasets")
            if log is not None:
                log(f"dataset for {run.task}: {source} {_describe(run.dataset)}")
            request = DatasetRequest(task=task, options=run.dataset, cache=cache, workers=workers, progress=progress)
            prepared[key] = prepare(request)
        result.append(replace(run, offline_data=prepared[key]))
    return result


def _describe(options: Mapping[str, Any]) -> str:
    return ", ".join(f"{key}={value}" for key, value in options.items() if key != "source")


def open_offline_data(data: OfflineData) -> Any:
    """
    The ``offline_dataset`` argument of the algorithms for prepared data.

    :param data: Where the data lives
    :return: An ``OfflineShards`` of Minari folders, a Minari folder path, or a mapping of arrays read from ``.npz``
    """
    if data.swap_interval is not None:
        from qc_sb3.common.datasets import OfflineShards

        return OfflineShards(list(data.paths), swap_interval=data.swap_interval)
    path = data.paths[0]
    if path.endswith(".npz"):
        with np.load(path) as arrays:
            return {key: arrays[key] for key in arrays.files}
    return path
