"""The built-in suites: OGBench's single-task manipulation tasks and robomimic's multi-human low-dim tasks.

Each suite reads the official files from a folder (OGBench: ``<family>-play-v0.npz``, or a folder of ``.npz``
shards such as the 100M-transition cube-quadruple set; robomimic: ``<task>/mh/low_dim_v15.hdf5``, the layout of
robomimic's download script), or generates a dataset locally with the domain's scripted policies (:mod:`envs`),
and converts it to Minari once, in the dataset cache. The suites' modules are imported only when their data or envs
are needed; a suite whose module cannot be imported is left out of the registry and the reason kept.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym

from benchmarks.datasets import cached, file_fingerprint
from benchmarks.tasks import REQUIRED, DatasetRequest, OfflineData, Option, SuiteSpec, TaskSpec, expand_path
from envs.minari_root import minari_root

# docs/algorithms.md §5: seeds per task in the paper.
OGBENCH_SEEDS = 4
ROBOMIMIC_SEEDS = 5
# The reference's dataset_replace_interval for sharded datasets.
DEFAULT_SWAP_INTERVAL = 1000
# Rows per generated OGBench episode (upstream's play episodes).
OGBENCH_EPISODE_LENGTH = 1001

# Suites whose modules could not be imported, with the reason.
UNAVAILABLE: dict[str, str] = {}


def builtin_suites() -> list[SuiteSpec]:
    """The OGBench and robomimic suites."""
    return [
        SuiteSpec(
            name="ogbench",
            default_seeds=OGBENCH_SEEDS,
            official_options={
                "directory": Option(str),
                "files": Option(dict, {}),
                "swap_interval": Option(int, DEFAULT_SWAP_INTERVAL, minimum=1),
            },
            generate_options={
                "episodes": Option(int, REQUIRED, minimum=1),
                "episode_length": Option(int, OGBENCH_EPISODE_LENGTH, minimum=2),
                "seed": Option(int, 0, minimum=0),
            },
            check_official=_check_ogbench_official,
            prepare_official=_prepare_ogbench_official,
            prepare_generated=_prepare_ogbench_generated,
        ),
        SuiteSpec(
            name="robomimic",
            default_seeds=ROBOMIMIC_SEEDS,
            official_options={"directory": Option(str), "files": Option(dict, {})},
            generate_options={"episodes": Option(int, REQUIRED, minimum=1), "seed": Option(int, 0, minimum=0)},
            check_official=_check_robomimic_official,
            prepare_official=_prepare_robomimic_official,
            prepare_generated=_prepare_robomimic_generated,
        ),
    ]


def builtin_tasks() -> list[TaskSpec]:
    """The tasks of the suites whose modules import."""
    tasks: list[TaskSpec] = []
    try:
        from envs.ogbench import EPISODE_LIMITS, OGBENCH_TASKS, SPARSE_BY_DEFAULT, parse_task
    except ImportError as error:
        UNAVAILABLE["ogbench"] = f"envs.ogbench does not import ({error}; the ogbench extra installs its packages)"
    else:
        for name in OGBENCH_TASKS:
            family, _ = parse_task(name)
            tasks.append(
                TaskSpec(
                    name=name,
                    suite="ogbench",
                    domain=family,
                    make_env=functools.partial(_make_ogbench_env, name),
                    # docs/algorithms.md §6: the paper's episode limits, sparse rewards for scene and puzzle-3x3.
                    env_kwargs={"sparse": family in SPARSE_BY_DEFAULT, "max_episode_steps": EPISODE_LIMITS[family]},
                    dataset=f"{family}-play-v0",
                )
            )
    try:
        from envs.robomimic import EPISODE_LIMITS as ROBOMIMIC_LIMITS
        from envs.robomimic import ROBOMIMIC_TASKS
    except ImportError as error:
        UNAVAILABLE["robomimic"] = f"envs.robomimic does not import ({error}; the robomimic extra installs its packages)"
    else:
        for name in ROBOMIMIC_TASKS:
            tasks.append(
                TaskSpec(
                    name=name,
                    suite="robomimic",
                    domain="robomimic",
                    make_env=functools.partial(_make_robomimic_env, name),
                    env_kwargs={"max_episode_steps": ROBOMIMIC_LIMITS[name]},
                    dataset=name,
                )
            )
    return tasks


def _make_ogbench_env(task: str, *, seed: int | None = None, **env_kwargs: Any) -> gym.Env:
    """An OGBench single-task env (``envs.ogbench.make_env``)."""
    from envs.ogbench import make_env

    return make_env(task, seed=seed, **env_kwargs)


def _make_robomimic_env(task: str, *, seed: int | None = None, **env_kwargs: Any) -> gym.Env:
    """A robomimic env (``envs.robomimic.make_env``) with the official files' settings."""
    from envs.robomimic import make_env

    return make_env(task, seed=seed, **env_kwargs)


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:8]


def _stem(task: str) -> str:
    """A task name without its ``-v0``, for dataset ids."""
    return task.removesuffix("-v0")


def _ogbench_official_path(task: TaskSpec, options: Mapping[str, Any]) -> Path:
    files = options["files"]
    name = files.get(task.name, files.get(task.domain, f"{task.dataset}.npz"))
    return expand_path(options["directory"]) / expand_path(name)


def _shards(folder: Path) -> list[Path]:
    """The training shards of a folder: its ``.npz`` files but the validation ones, sorted."""
    return sorted(path for path in folder.glob("*.npz") if not path.name.endswith("-val.npz"))


def _check_ogbench_official(task: TaskSpec, options: Mapping[str, Any]) -> None:
    directory = expand_path(options["directory"])
    if not directory.is_dir():
        raise ValueError(f"the official OGBench folder {str(directory)!r} (directory:) does not exist")
    path = _ogbench_official_path(task, options)
    if path.is_dir():
        if not _shards(path):
            raise ValueError(f"{task.name} reads the shard folder {str(path)!r}, which holds no .npz shards")
    elif not path.is_file():
        raise ValueError(
            f"{task.name} needs {str(path)!r}, which does not exist (OGBench's {task.dataset}.npz, or the file or shard "
            f"folder named under files: {task.domain})"
        )


def _prepare_ogbench_official(request: DatasetRequest) -> OfflineData:
    from envs.ogbench import convert_shards, convert_to_minari

    task, options, cache = request.task, request.options, request.cache
    path = _ogbench_official_path(task, options)
    fingerprint = file_fingerprint(path)
    key = {"suite": "ogbench", "task": task.name, "official": fingerprint}
    if path.is_dir():
        key["swap_interval"] = options["swap_interval"]

        def build() -> OfflineData:
            with minari_root(cache / "minari") as root:
                ids = convert_shards(path, task.name, overwrite=True, progress=request.progress)
            return OfflineData(tuple(str(root / dataset_id) for dataset_id in ids), options["swap_interval"])

    else:

        def build() -> OfflineData:
            dataset_id = f"official/{_stem(task.name)}-{_digest(fingerprint)}-v0"
            with minari_root(cache / "minari") as root:
                convert_to_minari(path, task.name, dataset_id=dataset_id, overwrite=True, progress=request.progress)
            return OfflineData((str(root / dataset_id),))

    return cached(cache, key, build)


def _prepare_ogbench_generated(request: DatasetRequest) -> OfflineData:
    from envs.ogbench import convert_to_minari, generate_dataset

    task, options, cache = request.task, request.options, request.cache
    parameters = {key: options[key] for key in ("episodes", "episode_length", "seed")}
    tag = "e{episodes}-l{episode_length}-s{seed}".format(**parameters)

    def generate() -> OfflineData:
        train_path = generate_dataset(
            task.dataset,
            episodes=parameters["episodes"],
            out_dir=cache / "ogbench" / f"{task.dataset}-{tag}",
            workers=request.workers,
            seed=parameters["seed"],
            val_episodes=1,  # the runs read only the training episodes
            episode_length=parameters["episode_length"],
            progress=request.progress,
            overwrite=True,
        )
        return OfflineData((str(train_path),))

    # The play data is shared by the family's tasks; each task relabels it into its own Minari dataset.
    play_data = cached(cache, {"suite": "ogbench", "dataset": task.dataset, "generate": parameters}, generate)

    def convert() -> OfflineData:
        dataset_id = f"generated/{_stem(task.name)}-{tag}-v0"
        with minari_root(cache / "minari") as root:
            convert_to_minari(play_data.paths[0], task.name, dataset_id=dataset_id, overwrite=True, progress=request.progress)
        return OfflineData((str(root / dataset_id),))

    return cached(cache, {"suite": "ogbench", "task": task.name, "generate": parameters}, convert)


def _robomimic_official_path(task: TaskSpec, options: Mapping[str, Any]) -> Path:
    name, kind, observations = task.name.split("-")
    relative = options["files"].get(task.name, f"{name}/{kind}/{observations}_v15.hdf5")
    return expand_path(options["directory"]) / expand_path(relative)


def _check_robomimic_official(task: TaskSpec, options: Mapping[str, Any]) -> None:
    directory = expand_path(options["directory"])
    if not directory.is_dir():
        raise ValueError(f"the official robomimic folder {str(directory)!r} (directory:) does not exist")
    path = _robomimic_official_path(task, options)
    if not path.is_file():
        raise ValueError(
            f"{task.name} needs {str(path)!r}, which does not exist (robomimic's layout <task>/mh/low_dim_v15.hdf5, or "
            f"the file named under files: {task.name})"
        )


def _prepare_robomimic_official(request: DatasetRequest) -> OfflineData:
    from envs.robomimic import convert_to_minari

    task, cache = request.task, request.cache
    path = _robomimic_official_path(task, request.options)
    fingerprint = file_fingerprint(path)

    def build() -> OfflineData:
        dataset_id = f"official/{task.name}-{_digest(fingerprint)}-v0"
        with minari_root(cache / "minari") as root:
            convert_to_minari(path, task.name, dataset_id=dataset_id, overwrite=True)
        return OfflineData((str(root / dataset_id),))

    return cached(cache, {"suite": "robomimic", "task": task.name, "official": fingerprint}, build)


def _prepare_robomimic_generated(request: DatasetRequest) -> OfflineData:
    from envs.robomimic import convert_to_minari, generate_demos

    task, options, cache = request.task, request.options, request.cache
    parameters = {key: options[key] for key in ("episodes", "seed")}
    tag = "e{episodes}-s{seed}".format(**parameters)

    def build() -> OfflineData:
        hdf5_path = generate_demos(
            task.name,
            episodes=parameters["episodes"],
            out_path=cache / "robomimic" / f"{task.name}-{tag}.hdf5",
            seed=parameters["seed"],
            workers=request.workers,
            progress=request.progress,
            overwrite=True,
        )
        dataset_id = f"generated/{task.name}-{tag}-v0"
        with minari_root(cache / "minari") as root:
            convert_to_minari(hdf5_path, task.name, dataset_id=dataset_id, overwrite=True)
        return OfflineData((str(root / dataset_id),))

    return cached(cache, {"suite": "robomimic", "task": task.name, "generate": parameters}, build)
