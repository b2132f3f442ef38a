"""A toy suite for the benchmark runner's tests: PointReachEnv and its scripted demonstrations, registered by the tests
only (never in the library's registry), and small configs that run in seconds."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import yaml

from benchmarks.methods import paper_domain_settings
from benchmarks.specs import REQUIRED, DatasetRequest, OfflineData, Option, SuiteSpec, TaskSpec
from benchmarks.tasks import register_suite, register_task

from toy_tasks import PointReachEnv, scripted_demonstrations

TOY_TASK = "point-reach"
TOY_FILE = "point-reach.npz"


def make_point_reach(*, seed: int | None = None, max_episode_steps: int = 50) -> gym.Env:
    """The toy task's env, reset once with ``seed`` if given."""
    env = PointReachEnv(max_episode_steps=max_episode_steps)
    if seed is not None:
        env.reset(seed=seed)
    return env


def _check_official(task: TaskSpec, options: Mapping[str, Any]) -> None:
    path = Path(options["directory"]) / TOY_FILE
    if not path.is_file():
        raise ValueError(f"{task.name} needs {str(path)!r}, which does not exist")


def _prepare_official(request: DatasetRequest) -> OfflineData:
    return OfflineData((str(Path(request.options["directory"]) / TOY_FILE),))


def _prepare_generated(request: DatasetRequest) -> OfflineData:
    options = request.options
    path = request.cache / "toy" / f"point-reach-e{options['episodes']}-s{options['seed']}.npz"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, **scripted_demonstrations(options["episodes"], seed=options["seed"], goal_fraction=0.5))
    return OfflineData((str(path),))


TOY_SUITE = SuiteSpec(
    name="toy",
    default_seeds=2,
    official_options={"directory": Option(str)},
    generate_options={"episodes": Option(int, REQUIRED, minimum=1), "seed": Option(int, 0, minimum=0)},
    check_official=_check_official,
    prepare_official=_prepare_official,
    prepare_generated=_prepare_generated,
    # The constructor defaults: the toy domain is not the paper's.
    domain_settings={"toy": paper_domain_settings(qc_num_samples=32, qc_fql_alpha=100.0, fql_alpha=100.0, fql_n_alpha=100.0)},
)


def register_toy_suite() -> None:
    """Register the toy suite and its one task (idempotent)."""
    register_suite(TOY_SUITE, overwrite=True)
    register_task(
        TaskSpec(
            name=TOY_TASK,
            suite="toy",
            domain="toy",
            make_env=make_point_reach,
            env_kwargs={"max_episode_steps": 50},
            dataset="point-reach",
        ),
        overwrite=True,
    )


# A config that trains QC for 40 offline gradient steps and 40 online env steps, evaluated every 20 steps.
TOY_CONFIG: dict[str, Any] = {
    "name": "toy",
    "tasks": [TOY_TASK],
    "methods": {"QC": None},
    "seeds": [0],
    "protocol": {"offline_steps": 40, "online_steps": 40, "eval_interval": 20, "eval_episodes": 2},
    "datasets": {"toy": {"source": "generate", "episodes": 10, "seed": 0}},
    "hyperparameters": {
        "batch_size": 16,
        "learning_starts": 10,
        "flow_steps": 2,
        "actor_num_samples": 2,
        "policy_kwargs": {"net_arch": [16, 16]},
        "offline_log_interval": 10,
    },
    "execution": {"workers": 1, "torch_threads": 1, "device": "cpu"},
}


def toy_config(**changes: Any) -> dict[str, Any]:
    """:data:`TOY_CONFIG` with top-level keys replaced."""
    config = copy.deepcopy(TOY_CONFIG)
    config.update(copy.deepcopy(changes))
    return config


def write_config(path: Path, data: Mapping[str, Any]) -> Path:
    """Write a config as YAML and return its path."""
    path.write_text(yaml.safe_dump(dict(data), sort_keys=False), encoding="utf-8")
    return path
