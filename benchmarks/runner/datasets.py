"""Offline data of the runs: prepared once in the parent process (generated, converted, cached), read in each run.

Every task's data is prepared before any run starts, one task at a time, so that runs and seeds sharing a dataset
never race to generate or convert it; each suite caches what it makes (:mod:`qc_sb3.benchmarks.runner.cache`). A run
carries its
data as the algorithms' ``offline_dataset`` argument (a Minari dataset folder, or ``OfflineShards`` of folders),
which the algorithm checks when it reads it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from qc_sb3.benchmarks.runner.specs import DatasetRequest, RunSpec
from qc_sb3.benchmarks.runner.tasks import get_suite, get_task
from qc_sb3.common.offline_source import OfflineShards


class DatasetPreparationError(RuntimeError):
    """A task's dataset could not be prepared for a reason outside the config (a full disk, permissions)."""


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
    :return: The runs with ``offline_dataset`` set
    :raises DatasetPreparationError: A dataset could not be written or read (a full disk, a folder that cannot be
        written), naming the task, the cache and the path that failed; datasets already prepared stay in the cache
    """
    cache = Path(cache)
    prepared: dict[str, str | OfflineShards] = {}
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
            try:
                prepared[key] = prepare(request)
            except OSError as error:
                # A full disk, a folder that cannot be written: the converters' messages name the path.
                raise DatasetPreparationError(
                    f"preparing the {source} dataset of {run.task} in the dataset cache {str(cache)!r} failed: {error}"
                ) from error
        result.append(replace(run, offline_dataset=prepared[key]))
    return result


def _describe(options: Mapping[str, Any]) -> str:
    return ", ".join(f"{key}={value}" for key, value in options.items() if key != "source")
