"""robomimic low-dim hdf5 files (official ``low_dim_v15.hdf5`` or generated here) to Minari datasets."""

from __future__ import annotations

import json
import os
import re
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import h5py
import minari
import numpy as np
from minari.data_collector import EpisodeBuffer
from minari.dataset.minari_dataset import parse_dataset_id

from qc_sb3.envs.disk_space import check_free_space, estimated_bytes
from qc_sb3.envs.minari_root import staging_root
from qc_sb3.envs.publish import publish_dataset, restore_interrupted_publishes
from qc_sb3.envs.robomimic.env import env_spec
from qc_sb3.envs.robomimic.tasks import ACTION_DIM, LOW_DIM_KEYS, TaskInfo, check_env_args, default_env_args, resolve_task

# Actions may exceed [-1, 1] by this much (float rounding) and still count as inside.
ACTION_TOLERANCE = 1e-6
# What recover_environment() needs installed.
REQUIREMENTS = ["robosuite>=1.5,<1.6", "mujoco>=3.3,<3.10"]

_DEMO_NAME = re.compile(r"demo_(\d+)")


def default_dataset_id(task: str) -> str:
    """
    The Minari id a task's data is converted to by default.

    :param task: The task name (full or short)
    :return: ``"robomimic/<task>-v0"``, e.g. ``"robomimic/lift-mh-low_dim-v0"``
    """
    return f"robomimic/{resolve_task(task).name}-v0"


@dataclass(frozen=True)
class RobomimicFile:
    """
    A robomimic file checked for conversion: its env metadata and the demos to convert.

    :param path: The hdf5 file
    :param task: The task
    :param env_args: The env metadata (the file's ``data.attrs["env_args"]``, else the official v1.5 settings)
    :param demos: Names of the demos to convert, sorted by their integer suffix
    """

    path: Path
    task: TaskInfo
    env_args: dict[str, Any]
    demos: list[str]


def _sort_demos(names: list[str]) -> list[str]:
    """Demo names sorted by their integer suffix (demo_2 before demo_10)."""
    return sorted(names, key=lambda name: int(_DEMO_NAME.fullmatch(name).group(1)))


def inspect_file(hdf5_path: str | os.PathLike, task: str, filter_key: str | None = None) -> RobomimicFile:
    """
    Check a robomimic file against a task without reading its arrays: env metadata, the filter key, every demo's
    keys and shapes (observation sizes per key, 7-D actions, one reward and done per action).

    :param hdf5_path: The robomimic hdf5 file
    :param task: The task name (full or short)
    :param filter_key: A key of the file's ``mask/`` group selecting demos; None: every demo
    :return: What conversion needs from the file
    """
    info = resolve_task(task)
    path = Path(hdf5_path)
    if path.is_dir():
        raise IsADirectoryError(f"{str(path)!r} is a directory; expected a robomimic low-dim hdf5 file")
    if not path.is_file():
        raise FileNotFoundError(f"robomimic file {str(path)!r} does not exist (expected a robomimic low-dim hdf5 file)")
    try:
        file = h5py.File(path, "r")
    except OSError as error:
        raise ValueError(f"{str(path)!r} is not a readable hdf5 file: {error}") from error
    with file:
        if not isinstance(file.get("data"), h5py.Group):
            raise ValueError(f"robomimic file {str(path)!r} has no 'data' group; expected data/demo_<i> groups")
        data = file["data"]
        env_args = default_env_args(info.name)
        if "env_args" in data.attrs:
            env_args = check_env_args(json.loads(data.attrs["env_args"]), info.name)
        demos = _select_demos(file, path, filter_key)
        for demo in demos:
            _check_demo(data[demo], f"{path}:data/{demo}", info)
    return RobomimicFile(path=path, task=info, env_args=env_args, demos=demos)


def _select_demos(file: h5py.File, path: Path, filter_key: str | None) -> list[str]:
    """The demos listed by ``mask/<filter_key>``, or every demo, sorted by their integer suffix."""
    all_demos = [name for name in file["data"] if _DEMO_NAME.fullmatch(name)]
    if filter_key is None:
        demos = all_demos
    else:
        masks = file.get("mask")
        available = sorted(masks) if isinstance(masks, h5py.Group) else []
        if filter_key not in available:
            raise ValueError(
                f"filter key {filter_key!r} is not in robomimic file {str(path)!r}; its filter keys (mask/) are "
                f"{available if available else 'none'}"
            )
        demos = [name.decode() if isinstance(name, bytes) else str(name) for name in file["mask"][filter_key][()]]
        repeated = sorted({name for name in demos if demos.count(name) > 1})
        if repeated:
            counts = ", ".join(f"{name} {demos.count(name)} times" for name in repeated[:5])
            raise ValueError(
                f"filter key {filter_key!r} of {str(path)!r} lists demos more than once ({counts}); expected each demo "
                "at most once"
            )
        unknown = [name for name in demos if name not in all_demos]
        if unknown:
            raise ValueError(
                f"filter key {filter_key!r} of {str(path)!r} lists demos {unknown[:5]} that are not data/demo_<i> groups"
            )
    if not demos:
        selection = "" if filter_key is None else f" under filter key {filter_key!r}"
        raise ValueError(f"robomimic file {str(path)!r} holds no demos{selection}; expected at least one")
    return _sort_demos(demos)


def _check_demo(demo: h5py.Group, where: str, info: TaskInfo) -> None:
    """Check one demo's datasets and shapes against the task."""
    required = ["actions", "rewards", "dones"] + [f"{group}/{key}" for group in ("obs", "next_obs") for key in LOW_DIM_KEYS]
    missing = [name for name in required if not isinstance(demo.get(name), h5py.Dataset)]
    if missing:
        raise ValueError(
            f"robomimic demo {where} lacks {missing}; a low-dim file needs actions, rewards, dones and obs/ and "
            f"next_obs/ {list(LOW_DIM_KEYS)}"
        )
    for name in required:
        dtype = demo[name].dtype
        if not (np.issubdtype(dtype, np.integer) or np.issubdtype(dtype, np.floating) or dtype == np.bool_):
            raise ValueError(
                f"robomimic demo {where} has {name} of dtype {dtype}; expected real numbers (a complex array would "
                "lose its imaginary part)"
            )
    actions = demo["actions"].shape
    if len(actions) != 2 or actions[1] != ACTION_DIM or actions[0] < 1:
        raise ValueError(f"robomimic demo {where} has actions of shape {actions}; expected (n >= 1, {ACTION_DIM})")
    steps = actions[0]
    for name in ("rewards", "dones"):
        if demo[name].shape != (steps,):
            raise ValueError(f"robomimic demo {where} has {name} of shape {demo[name].shape}; expected ({steps},)")
    for group in ("obs", "next_obs"):
        shapes = {key: demo[f"{group}/{key}"].shape for key in LOW_DIM_KEYS}
        sizes = {key: shape[1] if len(shape) == 2 else None for key, shape in shapes.items()}
        if sizes != info.key_sizes:
            found = sum(size or 0 for size in sizes.values())
            raise ValueError(
                f"robomimic demo {where} has {group} sizes {sizes} ({found}-D in all); task {info.name!r} expects "
                f"{info.key_sizes} ({info.obs_dim}-D)"
            )
        lengths = {key: shape[0] for key, shape in shapes.items() if shape[0] != steps}
        if lengths:
            raise ValueError(f"robomimic demo {where} has {group} lengths {lengths} for {steps} actions; expected {steps}")


def _episodes(demo: h5py.Group, where: str) -> list[EpisodeBuffer]:
    """
    One demo as Minari episodes, split after every step whose ``dones`` is 1 (the reference reads ``dones`` as
    both episode ends and termination masks): each piece is terminated at such a step, and a last piece whose
    final step has ``dones`` 0 is truncated there. Rewards r - 1; ``infos["success"]`` per observation.
    """
    observations = np.concatenate([demo[f"obs/{key}"][()] for key in LOW_DIM_KEYS], axis=1)
    next_observations = np.concatenate([demo[f"next_obs/{key}"][()] for key in LOW_DIM_KEYS], axis=1)
    actions = np.asarray(demo["actions"][()], dtype=np.float64)
    rewards = np.asarray(demo["rewards"][()], dtype=np.float64)
    dones = np.asarray(demo["dones"][()])
    with np.errstate(over="ignore"):
        # Checked as stored: float32, where a finite 1e39 becomes inf.
        observations = observations.astype(np.float32)
        next_observations = next_observations.astype(np.float32)
    for name, values in (("observations", observations), ("next observations", next_observations), ("actions", actions)):
        finite_rows = np.isfinite(values).all(axis=1)
        if not finite_rows.all():
            raise ValueError(
                f"robomimic demo {where} has {name} holding NaN or inf (as float32 for observations; first at row "
                f"{int(np.argmin(finite_rows))}); expected finite values"
            )
    if not np.isin(rewards, (0.0, 1.0)).all():
        raise ValueError(
            f"robomimic demo {where} has rewards {np.unique(rewards)[:5]}; expected sparse rewards 0/1 "
            "(reward_shaping=False, as in the official low-dim files)"
        )
    if not np.isin(dones, (0, 1)).all():
        raise ValueError(f"robomimic demo {where} has dones {np.unique(dones)[:5]}; expected 0/1")
    if np.abs(actions).max() > 1.0 + ACTION_TOLERANCE:
        raise ValueError(f"robomimic demo {where} has actions up to {np.abs(actions).max()} in size; expected [-1, 1]")
    # Whether each observation (the first one, then the state after each action) is a success.
    success = np.concatenate([[False], rewards == 1.0])
    done = dones == 1
    last_steps = np.flatnonzero(done)
    if not done[-1]:
        last_steps = np.append(last_steps, len(rewards) - 1)
    episodes = []
    for first, last in zip(np.concatenate([[0], last_steps[:-1] + 1]), last_steps, strict=True):
        n_steps = last - first + 1
        terminations = np.zeros(n_steps, dtype=bool)
        terminations[-1] = done[last]
        piece_observations = np.concatenate([observations[first : last + 1], next_observations[last][None]])
        episodes.append(
            EpisodeBuffer(
                observations=piece_observations.astype(np.float32),
                actions=np.clip(actions[first : last + 1], -1.0, 1.0).astype(np.float32),
                rewards=(rewards[first : last + 1] - 1.0).tolist(),
                terminations=terminations.tolist(),
                truncations=(~terminations & (np.arange(n_steps) == n_steps - 1)).tolist(),
                infos={"success": success[first : last + 2]},
            )
        )
    return episodes


def convert_to_minari(
    hdf5_path: str | os.PathLike,
    task: str,
    *,
    filter_key: str | None = None,
    dataset_id: str | None = None,
    overwrite: bool = False,
) -> str:
    """
    Convert a robomimic low-dim hdf5 file into a Minari dataset whose env spec rebuilds the task's env.

    The file's ``dones`` are read as the Q-chunking reference reads them: each step with ``dones`` = 1 ends an
    episode and is a termination (no bootstrap past it). robomimic's released low-dim files are extracted with
    ``--done_mode 2`` (robomimic's docs): ``dones`` is 1 on every success state and on each demo's last step, so a
    success state before the last step (an operator holding or repeating the goal) splits its demo there.

    Each demo (sorted by its integer suffix) gives one episode per such piece: observations
    concat[robot0_eef_pos, robot0_eef_quat, robot0_gripper_qpos, object] of obs/ plus the piece's last next_obs
    (n + 1 rows, float32), the actions, rewards r - 1 (-1 per step, 0 where the state reached is a success) and
    ``infos["success"]`` per observation. A piece is terminated at its ``dones`` = 1 step; a demo whose last step
    has ``dones`` = 0 (cut short) ends with a truncated piece.

    ``minari.load_dataset(id).recover_environment()`` builds the env from the file's ``env_args`` with the
    task's episode limit (robosuite needed then). Every demo is checked (finite values, actions in [-1, 1], real
    dtypes, each demo listed once by the filter key) before anything is written; the dataset is then written under
    a staging Minari root in the same folder (staging folders of killed converts are removed by the next one) and
    moved into place when complete.

    :param hdf5_path: The robomimic hdf5 file
    :param task: The task name (full or short)
    :param filter_key: A key of the file's ``mask/`` group (e.g. ``"train"``); None: every demo
    :param dataset_id: The Minari id; None: ``"robomimic/<task>-v0"``
    :param overwrite: Whether to replace an existing dataset with that id
    :return: The dataset id
    """
    info = resolve_task(task)
    dataset_id = default_dataset_id(info.name) if dataset_id is None else dataset_id
    namespace = parse_dataset_id(dataset_id)[0]
    if namespace is None:
        raise ValueError(f"dataset_id {dataset_id!r} has no namespace; expected '<namespace>/<name>-v<N>'")
    source = inspect_file(hdf5_path, info.name, filter_key)
    root = _minari_root()
    restore_interrupted_publishes(root)
    target = root / dataset_id
    if target.exists() and not overwrite:
        raise FileExistsError(
            f"Minari dataset {dataset_id!r} already exists at {str(target)!r}; pass overwrite=True (--overwrite) to replace it"
        )
    spec = env_spec(info.name, source.env_args)
    with h5py.File(source.path, "r") as file:
        episodes = [
            episode for demo in source.demos for episode in _episodes(file["data"][demo], f"{source.path}:data/{demo}")
        ]
    selection = "all demos" if filter_key is None else f"the demos of filter key {filter_key!r}"
    with staging_root(root) as staging, warnings.catch_warnings():
        # Minari warns about metadata it does not need here (author, permalink, the env spec set just after).
        warnings.filterwarnings("ignore", message=r"`(code_permalink|author|author_email)` is set to None")
        warnings.filterwarnings("ignore", message="env_spec is None")
        check_free_space(root, _estimated_size(episodes), f"Minari dataset {dataset_id!r}")
        dataset = minari.create_dataset_from_buffers(
            dataset_id,
            episodes,
            eval_env=spec,
            observation_space=gym.spaces.Box(-np.inf, np.inf, (info.obs_dim,), np.float32),
            action_space=gym.spaces.Box(-1.0, 1.0, (ACTION_DIM,), np.float32),
            algorithm_name="robomimic demonstrations",
            description=f"robomimic {info.name}: {selection} of {source.path.name}, converted by qc_sb3.envs.robomimic",
            requirements=REQUIREMENTS,
            # Minari JPEG-encodes uint8 image spaces by default; qc_sb3's datasets keep every value exact.
            jpeg_encoding=False,
        )
        dataset.storage.update_metadata({"env_spec": spec.to_json()})
        _move_into_place(staging, root, dataset_id)
    return dataset_id


def _estimated_size(episodes: list[EpisodeBuffer]) -> int:
    """The bytes the Minari dataset of these episodes takes, about (:func:`~qc_sb3.envs.disk_space.estimated_bytes`)."""
    arrays = [
        np.asarray(getattr(episode, field), dtype=np.float64 if field == "rewards" else None)
        for episode in episodes
        for field in ("observations", "actions", "rewards", "terminations", "truncations")
    ]
    return estimated_bytes(arrays + [episode.infos["success"] for episode in episodes], len(episodes))


def _minari_root() -> Path:
    """The folder Minari keeps its local datasets in (``MINARI_DATASETS_PATH``, else ``~/.minari/datasets``)."""
    root = os.environ.get("MINARI_DATASETS_PATH")
    # Absolute: Minari joins a relative root with itself when it writes.
    return Path(root).resolve() if root is not None else Path.home() / ".minari" / "datasets"


def _move_into_place(staging: Path, root: Path, dataset_id: str) -> None:
    """
    Move a dataset from the staging root to the real root, creating its namespaces and replacing an old copy (a kill
    meanwhile leaves the old copy for the next convert to restore: :mod:`qc_sb3.envs.publish`).
    """
    for namespace in reversed(Path(dataset_id).parents[:-1]):
        (root / namespace).mkdir(exist_ok=True)
        metadata = staging / namespace / "namespace_metadata.json"
        if metadata.exists() and not (root / namespace / metadata.name).exists():
            shutil.copy(metadata, root / namespace / metadata.name)
    publish_dataset(staging, root, dataset_id)
