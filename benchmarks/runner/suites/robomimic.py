"""The robomimic suite: the paper's multi-human low-dim tasks (lift, can, square; :mod:`qc_sb3.envs.robomimic`).

Its data is read from the official files in a folder (``<task>/mh/low_dim_v15.hdf5``, the layout of robomimic's
download script), or generated locally with the scripted demonstrators, and converted to Minari once, in the
dataset cache. All its tasks are one domain, ``robomimic``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym

from qc_sb3.benchmarks.runner.cache import cached, file_fingerprint, short_digest
from qc_sb3.benchmarks.runner.methods import paper_domain_settings
from qc_sb3.benchmarks.runner.specs import REQUIRED, DatasetRequest, Option, SuiteSpec, TaskSpec, expand_path
from qc_sb3.envs.minari_root import minari_root

# docs/algorithms.md §5: seeds per task in the paper.
DEFAULT_SEEDS = 5
DOMAIN = "robomimic"
# docs/algorithms.md §4: N of QC 16; alpha 10000 for QC-FQL, FQL and FQL-n.
DOMAIN_SETTINGS: dict[str, dict[str, dict[str, Any]]] = {
    DOMAIN: paper_domain_settings(qc_num_samples=16, qc_fql_alpha=10000.0, fql_alpha=10000.0, fql_n_alpha=10000.0),
}


def tasks() -> list[TaskSpec]:
    """
    The suite's tasks.

    :raises ImportError: If :mod:`qc_sb3.envs.robomimic` does not import (the robomimic extra installs its packages)
    """
    from qc_sb3.envs.robomimic import EPISODE_LIMITS, ROBOMIMIC_TASKS

    return [
        TaskSpec(
            name=name,
            suite="robomimic",
            domain=DOMAIN,
            make_env=functools.partial(_make_env, name),
            env_kwargs={"max_episode_steps": EPISODE_LIMITS[name]},
            dataset=name,
        )
        for name in ROBOMIMIC_TASKS
    ]


def _make_env(task: str, *, seed: int | None = None, **env_kwargs: Any) -> gym.Env:
    """A robomimic env (``qc_sb3.envs.robomimic.make_env``) with the official files' settings."""
    from qc_sb3.envs.robomimic import make_env

    return make_env(task, seed=seed, **env_kwargs)


def _official_path(task: TaskSpec, options: Mapping[str, Any]) -> Path:
    name, kind, observations = task.name.split("-")
    relative = options["files"].get(task.name, f"{name}/{kind}/{observations}_v15.hdf5")
    return expand_path(options["directory"]) / expand_path(relative)


def _check_official(task: TaskSpec, options: Mapping[str, Any]) -> None:
    directory = expand_path(options["directory"])
    if not directory.is_dir():
        raise ValueError(f"the official robomimic folder {str(directory)!r} (directory:) does not exist")
    path = _official_path(task, options)
    if not path.is_file():
        raise ValueError(
            f"{task.name} needs {str(path)!r}, which does not exist (robomimic's layout <task>/mh/low_dim_v15.hdf5, or "
            f"the file named under files: {task.name})"
        )


def _prepare_official(request: DatasetRequest) -> str:
    from qc_sb3.envs.robomimic import convert_to_minari

    task, cache = request.task, request.cache
    path = _official_path(task, request.options)
    fingerprint = file_fingerprint(path)

    def build() -> str:
        dataset_id = f"official/{task.name}-{short_digest(fingerprint)}-v0"
        with minari_root(cache / "minari") as root:
            convert_to_minari(path, task.name, dataset_id=dataset_id, overwrite=True)
        return str(root / dataset_id)

    return cached(cache, {"suite": "robomimic", "task": task.name, "official": fingerprint}, build)


def _prepare_generated(request: DatasetRequest) -> str:
    from qc_sb3.envs.robomimic import convert_to_minari, generate_demos

    task, options, cache = request.task, request.options, request.cache
    parameters = {key: options[key] for key in ("episodes", "seed")}
    tag = "e{episodes}-s{seed}".format(**parameters)

    def build() -> str:
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
        return str(root / dataset_id)

    return cached(cache, {"suite": "robomimic", "task": task.name, "generate": parameters}, build)


SUITE = SuiteSpec(
    name="robomimic",
    default_seeds=DEFAULT_SEEDS,
    official_options={"directory": Option(str), "files": Option(dict, {})},
    generate_options={"episodes": Option(int, REQUIRED, minimum=1), "seed": Option(int, 0, minimum=0)},
    check_official=_check_official,
    prepare_official=_prepare_official,
    prepare_generated=_prepare_generated,
    domain_settings=DOMAIN_SETTINGS,
)
