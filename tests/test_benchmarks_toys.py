"""A toy suite for the benchmark runner's tests: PointReachEnv and its scripted demonstrations, registered by the tests
only (never in the library's registry), and small configs that run in seconds."""

from __future__ import annotations

import copy
import shutil
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import minari
import numpy as np
import pytest
import torch as th
import yaml
from minari.data_collector import EpisodeBuffer

from qc_sb3.benchmarks.runner.cache import cached, file_fingerprint
from qc_sb3.benchmarks.runner.methods import paper_domain_settings
from qc_sb3.benchmarks.runner.specs import REQUIRED, DatasetRequest, Option, SuiteSpec, TaskSpec
from qc_sb3.benchmarks.runner.tasks import register_suite, register_task
from qc_sb3.envs.minari_root import minari_root

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


def _write_minari(cache: Path, dataset_id: str, steps: Mapping[str, np.ndarray]) -> str:
    """Write per-step arrays (the format of :func:`scripted_demonstrations`) as a Minari dataset; return its folder."""
    ends = np.flatnonzero(steps["episode_end"]) + 1
    buffers = []
    for index, (start, stop) in enumerate(zip(np.r_[0, ends[:-1]], ends, strict=True)):
        terminated = steps["terminated"][start:stop].astype(bool)
        buffers.append(
            EpisodeBuffer(
                id=index,
                observations=np.concatenate([steps["observations"][start:stop], steps["next_observations"][stop - 1 : stop]]),
                actions=steps["actions"][start:stop],
                rewards=steps["rewards"][start:stop],
                terminations=terminated,
                truncations=~terminated & (np.arange(start, stop) == stop - 1),
            )
        )
    env = PointReachEnv()
    with minari_root(cache / "minari") as root, warnings.catch_warnings():
        # Minari warns about every metadata field left unset (author, code permalink, env spec, ...).
        warnings.simplefilter("ignore", UserWarning)
        shutil.rmtree(root / dataset_id, ignore_errors=True)  # an unrecorded, maybe partial, earlier attempt
        minari.create_dataset_from_buffers(
            dataset_id, buffers, observation_space=env.observation_space, action_space=env.action_space
        )
    return str(root / dataset_id)


def _prepare_official(request: DatasetRequest) -> str:
    path = Path(request.options["directory"]) / TOY_FILE

    def build() -> str:
        with np.load(path) as arrays:
            return _write_minari(request.cache, "official/point-reach-v0", {key: arrays[key] for key in arrays.files})

    return cached(request.cache, {"suite": "toy", "official": file_fingerprint(path)}, build)


def _prepare_generated(request: DatasetRequest) -> str:
    episodes, seed = request.options["episodes"], request.options["seed"]

    def build() -> str:
        steps = scripted_demonstrations(episodes, seed=seed, goal_fraction=0.5)
        return _write_minari(request.cache, f"generated/point-reach-e{episodes}-s{seed}-v0", steps)

    return cached(request.cache, {"suite": "toy", "generate": {"episodes": episodes, "seed": seed}}, build)


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


@pytest.fixture(autouse=True, scope="module")
def toy_suite():
    """The toy suite, registered for a test module (import this fixture into the module to use it)."""
    register_toy_suite()


@pytest.fixture(autouse=True)
def keep_torch_threads():
    """Runs in the test process set the torch thread count; put it back."""
    n_threads = th.get_num_threads()
    yield
    th.set_num_threads(n_threads)
