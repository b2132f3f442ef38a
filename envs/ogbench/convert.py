"""
Convert an OGBench npz dataset (official or generated) into a single-task Minari dataset.

Rewards and masks are OGBench's single-task relabelling (``ogbench.relabel_utils.relabel_dataset``, docs/algorithms.md §6), on
the rows ``ogbench.utils.load_dataset(..., compact_dataset=False)`` keeps: every row but each trajectory's last, whose
successor is the next row. One Minari episode per npz trajectory (its end is OGBench's ``terminals``); trajectories do
not stop at success, so ``terminations`` (``1 - masks``) may be set before an episode's last step; the last step is
truncated unless terminated. The dataset stores the single-task env's spec, so ``recover_environment()`` rebuilds it.
It is written under a staging folder of the Minari root and moved into place only when complete.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import warnings
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import minari
import numpy as np
from minari.data_collector import EpisodeBuffer
from minari.dataset.minari_dataset import parse_dataset_id
from minari.namespace import create_namespace, list_local_namespaces, validate_namespace
from minari.storage import get_dataset_path
from ogbench.relabel_utils import relabel_dataset
from tqdm import tqdm

from qc_sb3.common.offline_transitions import ACTION_BOUNDS_TOLERANCE
from qc_sb3.envs.disk_space import check_free_space, estimated_bytes
from qc_sb3.envs.minari_root import minari_root, staging_root
from qc_sb3.envs.ogbench.npz_file import (
    BUTTON_FAMILIES,
    EnvDims,
    check_npz_layout,
    check_row_shapes,
    inspect_npz,
    npz_file,
    read_npz,
)
from qc_sb3.envs.ogbench.tasks import is_visual_task, parse_task, singletask_env_id
from qc_sb3.envs.publish import publish_dataset, restore_interrupted_publishes


def default_dataset_id(task: str) -> str:
    """
    :param task: The paper's task name, e.g. ``"cube-double-play-singletask-task2-v0"``
    :return: Its Minari id, e.g. ``"ogbench/cube-double-play-singletask-task2-v0"``
    """
    parse_task(task)
    return f"ogbench/{task}"


def shard_dataset_id(task: str, shard: int) -> str:
    """
    :param task: The paper's task name, e.g. ``"cube-double-play-singletask-task2-v0"``
    :param shard: The shard's index
    :return: The shard's Minari id, e.g. ``"ogbench/cube-double-play-singletask-task2-shard000-v0"``
    """
    parse_task(task)
    return f"ogbench/{task.removesuffix('-v0')}-shard{shard:03d}-v0"


def convert_to_minari(
    npz_path: str | os.PathLike,
    task: str,
    *,
    dataset_id: str | None = None,
    overwrite: bool = False,
    progress: bool = False,
) -> str:
    """
    Write one single-task Minari dataset from an OGBench npz file.

    Everything is checked before anything is written (the id, the file, its keys, shapes and terminals); an existing
    dataset is replaced only with ``overwrite=True`` and only once the new one is complete.

    :param npz_path: An OGBench npz (``<family>-play-v0.npz``, official or from ``generate_dataset``)
    :param task: The paper's task name, e.g. ``"cube-double-play-singletask-task2-v0"``
    :param dataset_id: The Minari id; default ``"ogbench/<task>"``
    :param overwrite: Whether to replace an existing dataset with this id
    :param progress: Whether to show a progress bar while writing
    :return: The Minari id (local root: ``MINARI_DATASETS_PATH``, else Minari's default)
    """
    family, _ = parse_task(task)
    dataset_id = default_dataset_id(task) if dataset_id is None else dataset_id
    restore_interrupted_publishes(_absolute_minari_root())
    _check_new_dataset_id(dataset_id, overwrite)
    npz_path = npz_file(npz_path)
    arrays = read_npz(npz_path, family, is_visual_task(task))
    root = _absolute_minari_root()
    with contextlib.closing(gym.make(singletask_env_id(task))) as env, staging_root(root) as staging:
        _write_converted(npz_path, task, dataset_id, arrays, env, progress)
        _publish(staging, root, [dataset_id], overwrite)
    return dataset_id


def convert_shards(
    npz_dir: str | os.PathLike,
    task: str,
    *,
    overwrite: bool = False,
    progress: bool = False,
) -> list[str]:
    """
    Convert every training npz of a folder (not the ``-val`` ones), sorted by file name, each to its own Minari id
    ``"ogbench/<task without -v0>-shard<NNN>-v0"``.

    The ids, and the keys, dtypes and shapes of all shards, are checked before the first one is converted; each
    shard's values (terminals, finiteness, action bounds) are checked when it is read. Every shard is written to a
    staging folder and the datasets are moved into place only once all are complete: a failed convert leaves
    nothing new behind.

    :param npz_dir: A folder of npz shards
    :param task: The paper's task name, e.g. ``"cube-double-play-singletask-task2-v0"``
    :param overwrite: Whether to replace existing datasets with these ids
    :param progress: Whether to show progress bars
    :return: The Minari ids, in the order of the sorted file names
    """
    family, _ = parse_task(task)
    npz_dir = Path(npz_dir)
    if not npz_dir.is_dir():
        raise FileNotFoundError(f"npz folder {str(npz_dir)!r} does not exist or is not a folder")
    shards = sorted(path for path in npz_dir.glob("*.npz") if not path.stem.endswith("-val"))
    if not shards:
        raise ValueError(f"npz folder {str(npz_dir)!r} holds no training npz file (*.npz not ending in -val.npz)")
    dataset_ids = [shard_dataset_id(task, index) for index in range(len(shards))]
    restore_interrupted_publishes(_absolute_minari_root())
    for dataset_id in dataset_ids:
        _check_new_dataset_id(dataset_id, overwrite)
    shapes = {path: inspect_npz(path) for path in shards}
    for path in shards:
        check_npz_layout(path, shapes[path], family, is_visual_task(task))
    root = _absolute_minari_root()
    with contextlib.closing(gym.make(singletask_env_id(task))) as env:
        dims = _env_dims(env, family)
        for path in shards:
            check_row_shapes(path, shapes[path], dims)
        with staging_root(root) as staging:
            for path, dataset_id in zip(shards, dataset_ids, strict=True):
                _write_converted(path, task, dataset_id, read_npz(path, family, is_visual_task(task)), env, progress)
            _publish(staging, root, dataset_ids, overwrite)
    return dataset_ids


def _absolute_minari_root() -> Path:
    """The local Minari root, absolute: Minari joins a relative root with itself when it writes."""
    return Path(get_dataset_path()).resolve()


def _check_new_dataset_id(dataset_id: str, overwrite: bool) -> None:
    """A well-formed ``namespace/name-vN`` id, not taken unless overwriting."""
    if not isinstance(dataset_id, str):
        raise TypeError(f"dataset_id must be a str, got {type(dataset_id).__name__}")
    try:
        namespace, _, version = parse_dataset_id(dataset_id)
    except (ValueError, TypeError) as error:
        raise ValueError(f"invalid Minari dataset id {dataset_id!r}: {error}") from error
    if namespace is None or version is None:
        raise ValueError(f"invalid Minari dataset id {dataset_id!r}; expected 'namespace/name-vN'")
    try:
        validate_namespace(namespace)
    except ValueError as error:
        raise ValueError(f"invalid Minari dataset id {dataset_id!r}: {error}") from error
    path = get_dataset_path(dataset_id)
    if path.exists() and not overwrite:
        raise FileExistsError(
            f"Minari dataset {dataset_id!r} already exists at {str(path)!r}; pass overwrite=True (--overwrite) to replace it"
        )


def _env_dims(env: gym.Env, family: str) -> EnvDims:
    """The per-row sizes an npz for this single-task env must have."""
    env.reset(seed=0)
    unwrapped = env.unwrapped
    return EnvDims(
        env_id=env.spec.id,
        observation=tuple(env.observation_space.shape),
        action=int(np.prod(env.action_space.shape)),
        qpos=int(unwrapped.model.nq),
        buttons=int(unwrapped._num_buttons) if family in BUTTON_FAMILIES else None,
    )


def _write_converted(
    npz_path: Path,
    task: str,
    dataset_id: str,
    arrays: dict[str, np.ndarray],
    env: gym.Env,
    progress: bool,
) -> None:
    """
    Check the arrays' per-row shapes and action bounds against the env, relabel them and create the Minari dataset
    in the current Minari root (a staging root: see :func:`_publish`), once the free space there is checked.
    """
    family, _ = parse_task(task)
    dims = _env_dims(env, family)
    check_row_shapes(npz_path, {key: array.shape for key, array in arrays.items()}, dims)
    _check_actions_in_bounds(npz_path, arrays["actions"], env.action_space)
    rewards, masks = _relabel(env, dims, arrays)
    description = (
        f"OGBench {task} from {npz_path.name}: one episode per trajectory; rewards (minus the number of unsolved "
        "subtasks) and terminations (task solved) from ogbench.relabel_utils.relabel_dataset; trajectories do not "
        "stop at success"
    )
    episodes = _episode_buffers(arrays, rewards, masks)
    n_episodes = int(arrays["terminals"].sum())
    # Per step: an observation, an action, a reward, a termination and a truncation flag.
    size = estimated_bytes([arrays["observations"], arrays["actions"], rewards, masks, masks], n_episodes)
    # A visual task's frames are stored as the env's image space; state rows as float32.
    if is_visual_task(task):
        observation_space = env.observation_space
    else:
        observation_space = gym.spaces.Box(-np.inf, np.inf, dims.observation, np.float32)
    # The current root is a staging folder directly inside the Minari root, on its file system.
    check_free_space(get_dataset_path().parent, size, f"Minari dataset {dataset_id!r}")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`(code_permalink|author_email)` is set to None")
        minari.create_dataset_from_buffers(
            dataset_id,
            tqdm(episodes, total=n_episodes, unit="episode", desc=dataset_id, disable=not progress),
            env=env,
            eval_env=env,
            algorithm_name="OGBench play data, single-task relabelled",
            author="qc_sb3",
            description=description,
            observation_space=observation_space,
            action_space=env.action_space,
            requirements=[f"ogbench>={importlib.metadata.version('ogbench')}"],
            # A visual task's frames stay exact (Minari JPEG-encodes uint8 image spaces by default).
            jpeg_encoding=False,
        )


def _check_actions_in_bounds(path: Path, actions: np.ndarray, action_space: gym.spaces.Box) -> None:
    """Actions within the env's bounds, up to the tolerance the library allows (``qc_sb3.common.datasets``)."""
    outside = (actions < action_space.low - ACTION_BOUNDS_TOLERANCE) | (actions > action_space.high + ACTION_BOUNDS_TOLERANCE)
    outside_rows = outside.any(axis=1)
    if outside_rows.any():
        row = int(np.argmax(outside_rows))
        raise ValueError(
            f"{str(path)!r} actions leave the env's bounds [{action_space.low.min()}, {action_space.high.max()}] "
            f"(tolerance {ACTION_BOUNDS_TOLERANCE}): first at row {row}, {actions[row].tolist()}"
        )


def _relabel(env: gym.Env, dims: EnvDims, arrays: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """OGBench's single-task rewards and masks of the rows with a successor (``load_dataset``'s ``ob_mask``)."""
    has_successor = ~arrays["terminals"].astype(bool)
    info = {key: arrays[key][has_successor] for key in ("qpos", "button_states") if key in arrays}
    relabel_dataset(dims.env_id, env, info)
    return info["rewards"], info["masks"]


def _episode_buffers(arrays: dict[str, np.ndarray], rewards: np.ndarray, masks: np.ndarray) -> Iterator[EpisodeBuffer]:
    """One Minari episode per trajectory: its rows as the n+1 observations, the relabelled rewards and terminations."""
    ends = np.flatnonzero(arrays["terminals"])
    starts = np.concatenate([[0], ends[:-1] + 1])
    terminations = masks == 0
    for episode, (start, end) in enumerate(zip(starts, ends, strict=True)):
        # Trajectory rows start..end hold transitions start..end-1; `episode` terminal rows precede it.
        steps = slice(start - episode, end - episode)
        episode_terminations = terminations[steps]
        truncations = np.zeros_like(episode_terminations)
        truncations[-1] = not episode_terminations[-1]
        yield EpisodeBuffer(
            id=episode,
            observations=arrays["observations"][start : end + 1],
            actions=arrays["actions"][start:end],
            rewards=rewards[steps],
            terminations=episode_terminations,
            truncations=truncations,
        )


def _publish(staging: Path, root: Path, dataset_ids: list[str], overwrite: bool) -> None:
    """
    Move complete datasets from the staging root into the real root, each replacing an existing one only if
    ``overwrite`` (docs/design.md: a failed create leaves a half-made folder behind, so nothing is created in place;
    :mod:`qc_sb3.envs.publish`: a kill while replacing leaves the old copy for the next convert to restore).

    :param staging: The staging root the datasets were created in
    :param root: The real Minari root
    :param dataset_ids: The datasets to move
    :param overwrite: Whether an existing dataset with one of these ids may be replaced
    """
    for dataset_id in dataset_ids:
        final = root / dataset_id
        if final.exists() and not overwrite:
            raise FileExistsError(f"Minari dataset {dataset_id!r} appeared at {str(final)!r} during the conversion")
    for dataset_id in dataset_ids:
        publish_dataset(staging, root, dataset_id)
        with minari_root(root):
            namespace = parse_dataset_id(dataset_id)[0]
            if namespace not in list_local_namespaces():
                create_namespace(namespace)
