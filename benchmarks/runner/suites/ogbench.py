"""The OGBench suite: the paper's single-task manipulation tasks (cube, scene, puzzle; :mod:`qc_sb3.envs.ogbench`).

Its data is read from the official files in a folder (``<family>-play-v0.npz``, or a folder of ``.npz`` shards such
as the 100M-transition cube-quadruple set), or generated locally with the domain's scripted policies, and converted
to Minari once, in the dataset cache. Its domains are the task families.

Its visual tasks (``visual-<task>``: 64 x 64 x 3 camera frames as observations) read ``visual-<family>-play-v0``, from
the same sources (play data generated in the visual env records a few frames per second on a CPU: see
docs/guides/own-env-and-data.md). Their domains are ``visual-<family>``, with the family's per-domain settings, and
their runs follow the reference's protocol for images (:data:`IMAGE_HYPERPARAMETERS`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym

from qc_sb3.benchmarks.runner.cache import cached, cached_file, file_fingerprint, short_digest
from qc_sb3.benchmarks.runner.methods import paper_domain_settings
from qc_sb3.benchmarks.runner.specs import REQUIRED, DatasetRequest, Option, SuiteSpec, TaskSpec, expand_path
from qc_sb3.common.offline_source import OfflineShards
from qc_sb3.envs.minari_root import minari_root

# docs/algorithms.md §5: seeds per task in the paper.
DEFAULT_SEEDS = 4
# The reference's dataset_replace_interval for sharded datasets.
DEFAULT_SWAP_INTERVAL = 1000
# Rows per generated OGBench episode (upstream's play episodes).
EPISODE_LENGTH = 1001

# docs/algorithms.md §4: N of QC (32; puzzle-3x3 64), alpha of QC-FQL (scene, puzzle-3x3, cube-double 300;
# cube-triple, cube-quadruple 100), of FQL (300; puzzle-3x3 100) and of FQL-n (100). cube-single is not in the
# paper: it takes cube-double's, the closest domain.
DOMAIN_SETTINGS: dict[str, dict[str, dict[str, Any]]] = {
    "cube-single": paper_domain_settings(qc_num_samples=32, qc_fql_alpha=300.0, fql_alpha=300.0, fql_n_alpha=100.0),
    "cube-double": paper_domain_settings(qc_num_samples=32, qc_fql_alpha=300.0, fql_alpha=300.0, fql_n_alpha=100.0),
    "cube-triple": paper_domain_settings(qc_num_samples=32, qc_fql_alpha=100.0, fql_alpha=300.0, fql_n_alpha=100.0),
    "cube-quadruple": paper_domain_settings(qc_num_samples=32, qc_fql_alpha=100.0, fql_alpha=300.0, fql_n_alpha=100.0),
    "scene": paper_domain_settings(qc_num_samples=32, qc_fql_alpha=300.0, fql_alpha=300.0, fql_n_alpha=100.0),
    "puzzle-3x3": paper_domain_settings(qc_num_samples=64, qc_fql_alpha=300.0, fql_alpha=100.0, fql_n_alpha=100.0),
}

DOMAIN_SETTINGS.update({f"visual-{family}": settings for family, settings in list(DOMAIN_SETTINGS.items())})

# The reference's protocol for images (agents/acfql.py, config encoder="impala_small"): CnnPolicy, the impala_small
# encoder, the critic's own encoder apart from the actor side's (share_features_extractor=False). The reference gives
# QC-FQL's flow and one-step policy an encoder each; here they share the actor side's. It stacks no frames.
IMAGE_POLICY = "CnnPolicy"
IMAGE_HYPERPARAMETERS: dict[str, Any] = {
    "policy_kwargs": {"features_extractor_class": "ImpalaSmallExtractor", "share_features_extractor": False}
}


def tasks() -> list[TaskSpec]:
    """
    The suite's tasks.

    :raises ImportError: If :mod:`qc_sb3.envs.ogbench` does not import (the ogbench extra installs its packages)
    """
    from qc_sb3.envs.ogbench import (
        EPISODE_LIMITS,
        OGBENCH_TASKS,
        SPARSE_BY_DEFAULT,
        VISUAL_OGBENCH_TASKS,
        is_visual_task,
        parse_task,
    )

    specs = []
    for name in OGBENCH_TASKS + VISUAL_OGBENCH_TASKS:
        family, _ = parse_task(name)
        visual = is_visual_task(name)
        prefix = "visual-" if visual else ""
        image = {"policy": IMAGE_POLICY, "hyperparameters": IMAGE_HYPERPARAMETERS} if visual else {}
        specs.append(
            TaskSpec(
                name=name,
                suite="ogbench",
                domain=f"{prefix}{family}",
                make_env=functools.partial(_make_env, name),
                # docs/algorithms.md §6: the paper's episode limits, sparse rewards for scene and puzzle-3x3.
                env_kwargs={"sparse": family in SPARSE_BY_DEFAULT, "max_episode_steps": EPISODE_LIMITS[family]},
                dataset=f"{prefix}{family}-play-v0",
                **image,
            )
        )
    return specs


def _make_env(task: str, *, seed: int | None = None, **env_kwargs: Any) -> gym.Env:
    """An OGBench single-task env (``qc_sb3.envs.ogbench.make_env``)."""
    from qc_sb3.envs.ogbench import make_env

    return make_env(task, seed=seed, **env_kwargs)


def _stem(task: str) -> str:
    """A task name without its ``-v0``, for dataset ids."""
    return task.removesuffix("-v0")


def _official_path(task: TaskSpec, options: Mapping[str, Any]) -> Path:
    files = options["files"]
    name = files.get(task.name, files.get(task.domain, f"{task.dataset}.npz"))
    return expand_path(options["directory"]) / expand_path(name)


def _shards(folder: Path) -> list[Path]:
    """The training shards of a folder: its ``.npz`` files but the validation ones, sorted."""
    return sorted(path for path in folder.glob("*.npz") if not path.name.endswith("-val.npz"))


def _check_official(task: TaskSpec, options: Mapping[str, Any]) -> None:
    directory = expand_path(options["directory"])
    if not directory.is_dir():
        raise ValueError(f"the official OGBench folder {str(directory)!r} (directory:) does not exist")
    path = _official_path(task, options)
    if path.is_dir():
        if not _shards(path):
            raise ValueError(f"{task.name} reads the shard folder {str(path)!r}, which holds no .npz shards")
    elif not path.is_file():
        raise ValueError(
            f"{task.name} needs {str(path)!r}, which does not exist (OGBench's {task.dataset}.npz, or the file or shard "
            f"folder named under files: {task.domain})"
        )


def _prepare_official(request: DatasetRequest) -> str | OfflineShards:
    from qc_sb3.envs.ogbench import convert_shards, convert_to_minari

    task, options, cache = request.task, request.options, request.cache
    path = _official_path(task, options)
    fingerprint = file_fingerprint(path)
    key = {"suite": "ogbench", "task": task.name, "official": fingerprint}
    if path.is_dir():
        key["swap_interval"] = options["swap_interval"]

        def build() -> str | OfflineShards:
            # The shards' ids are fixed by the task: each shard folder gets a Minari root of its own, so that another
            # folder of the same task never overwrites them under this key's record.
            with minari_root(cache / "minari" / f"shards-{short_digest(fingerprint)}") as root:
                ids = convert_shards(path, task.name, overwrite=True, progress=request.progress)
            return OfflineShards([str(root / dataset_id) for dataset_id in ids], swap_interval=options["swap_interval"])

    else:

        def build() -> str | OfflineShards:
            dataset_id = f"official/{_stem(task.name)}-{short_digest(fingerprint)}-v0"
            with minari_root(cache / "minari") as root:
                convert_to_minari(path, task.name, dataset_id=dataset_id, overwrite=True, progress=request.progress)
            return str(root / dataset_id)

    return cached(cache, key, build)


def _generation_tag(options: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    parameters = {key: options[key] for key in ("episodes", "episode_length", "seed")}
    return parameters, "e{episodes}-l{episode_length}-s{seed}".format(**parameters)


def _generated_play_data(request: DatasetRequest) -> Path:
    """The generated play data of a task's family (an ``.npz`` in the cache), generated once."""
    from qc_sb3.envs.ogbench import generate_dataset

    task, cache = request.task, request.cache
    parameters, tag = _generation_tag(request.options)

    def generate() -> Path:
        return generate_dataset(
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

    # The play data is shared by the family's tasks; each task relabels it into its own Minari dataset.
    return cached_file(cache, {"suite": "ogbench", "dataset": task.dataset, "generate": parameters}, generate)


def play_data_files(request: DatasetRequest) -> list[Path]:
    """
    The ``.npz`` training files a task's runs read, in shard order, in OGBench's own format (for programs that read
    OGBench's files, such as the reference implementation's ``--ogbench_dataset_dir``); generated data is generated
    into the cache first, as :func:`_prepare_generated` does.

    :param request: The task, its dataset options and the cache
    :return: One file, or a shard folder's training files
    """
    if request.options["source"] == "generate":
        return [_generated_play_data(request)]
    path = _official_path(request.task, request.options)
    return _shards(path) if path.is_dir() else [path]


def _prepare_generated(request: DatasetRequest) -> str | OfflineShards:
    from qc_sb3.envs.ogbench import convert_to_minari

    task, cache = request.task, request.cache
    parameters, tag = _generation_tag(request.options)
    play_data = _generated_play_data(request)

    def convert() -> str:
        dataset_id = f"generated/{_stem(task.name)}-{tag}-v0"
        with minari_root(cache / "minari") as root:
            convert_to_minari(play_data, task.name, dataset_id=dataset_id, overwrite=True, progress=request.progress)
        return str(root / dataset_id)

    return cached(cache, {"suite": "ogbench", "task": task.name, "generate": parameters}, convert)


SUITE = SuiteSpec(
    name="ogbench",
    default_seeds=DEFAULT_SEEDS,
    official_options={
        "directory": Option(str),
        "files": Option(dict, {}),
        "swap_interval": Option(int, DEFAULT_SWAP_INTERVAL, minimum=1),
    },
    generate_options={
        "episodes": Option(int, REQUIRED, minimum=1),
        "episode_length": Option(int, EPISODE_LENGTH, minimum=2),
        "seed": Option(int, 0, minimum=0),
    },
    check_official=_check_official,
    prepare_official=_prepare_official,
    prepare_generated=_prepare_generated,
    domain_settings=DOMAIN_SETTINGS,
)
