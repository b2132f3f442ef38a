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
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import minari
import numpy as np
from minari.data_collector import EpisodeBuffer
from minari.dataset.minari_dataset import parse_dataset_id
from minari.namespace import create_namespace, list_local_namespaces, validate_namespace
from minari.storage import get_dataset_path
from numpy.lib import format as npy_format
from ogbench.relabel_utils import relabel_dataset
from tqdm import tqdm

from envs.minari_root import minari_root, staging_root
from envs.ogbench.tasks import parse_task, singletask_env_id
from qc_sb3.common.datasets import ACTION_BOUNDS_TOLERANCE

# Families whose npz files carry button_states (upstream: envs with `_cur_button_states`).
BUTTON_FAMILIES = frozenset({"scene", "puzzle-3x3"})
# Errors numpy and zipfile raise on a missing, truncated or corrupt npz.
_NPZ_READ_ERRORS = (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error)
# Public readers of .npy headers by format version (np.savez writes 1.0, or 2.0 for huge headers).
_NPY_HEADER_READERS = {(1, 0): npy_format.read_array_header_1_0, (2, 0): npy_format.read_array_header_2_0}


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


@dataclass(frozen=True)
class _EnvDims:
    """What an npz must match: the single-task env's per-row sizes."""

    env_id: str
    observation: int
    action: int
    qpos: int
    buttons: int | None


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
    _check_new_dataset_id(dataset_id, overwrite)
    npz_path = _npz_file(npz_path)
    arrays = _read_npz(npz_path, family)
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
    for dataset_id in dataset_ids:
        _check_new_dataset_id(dataset_id, overwrite)
    shapes = {path: _inspect_npz(path) for path in shards}
    for path in shards:
        _check_npz_layout(path, shapes[path], family)
    root = _absolute_minari_root()
    with contextlib.closing(gym.make(singletask_env_id(task))) as env:
        dims = _env_dims(env, family)
        for path in shards:
            _check_row_shapes(path, shapes[path], dims)
        with staging_root(root) as staging:
            for path, dataset_id in zip(shards, dataset_ids, strict=True):
                _write_converted(path, task, dataset_id, _read_npz(path, family), env, progress)
            _publish(staging, root, dataset_ids, overwrite)
    return dataset_ids


def _npz_file(path: str | os.PathLike) -> Path:
    """The path, refused with a clear message when it is a folder (convert_shards takes folders)."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(
            f"{str(path)!r} is a directory; expected an npz file (convert_shards, or the command line, takes a folder "
            "of npz shards)"
        )
    return path


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


def _env_dims(env: gym.Env, family: str) -> _EnvDims:
    """The per-row sizes an npz for this single-task env must have."""
    env.reset(seed=0)
    unwrapped = env.unwrapped
    return _EnvDims(
        env_id=env.spec.id,
        observation=int(np.prod(env.observation_space.shape)),
        action=int(np.prod(env.action_space.shape)),
        qpos=int(unwrapped.model.nq),
        buttons=int(unwrapped._num_buttons) if family in BUTTON_FAMILIES else None,
    )


def _required_keys(family: str) -> tuple[str, ...]:
    """The npz keys a conversion reads (relabelling needs qpos, and button_states for scene and puzzle)."""
    keys = ("observations", "actions", "terminals", "qpos")
    return (*keys, "button_states") if family in BUTTON_FAMILIES else keys


def _read_npz(path: Path, family: str) -> dict[str, np.ndarray]:
    """The arrays a conversion reads, checked for everything that does not need the env."""
    _check_npz_layout(path, _inspect_npz(path), family)
    arrays = _load_npz(path, family)
    _check_npz_contents(path, arrays)
    return arrays


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
    in the current Minari root (a staging root: see :func:`_publish`).
    """
    family, _ = parse_task(task)
    dims = _env_dims(env, family)
    _check_row_shapes(npz_path, {key: array.shape for key, array in arrays.items()}, dims)
    _check_actions_in_bounds(npz_path, arrays["actions"], env.action_space)
    rewards, masks = _relabel(env, dims, arrays)
    description = (
        f"OGBench {task} from {npz_path.name}: one episode per trajectory; rewards (minus the number of unsolved "
        "subtasks) and terminations (task solved) from ogbench.relabel_utils.relabel_dataset; trajectories do not "
        "stop at success"
    )
    episodes = _episode_buffers(arrays, rewards, masks)
    n_episodes = int(arrays["terminals"].sum())
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
            observation_space=gym.spaces.Box(-np.inf, np.inf, (dims.observation,), np.float32),
            action_space=env.action_space,
            requirements=[f"ogbench>={importlib.metadata.version('ogbench')}"],
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


def _inspect_npz(path: Path) -> dict[str, tuple[int, ...]]:
    """
    The shape of every array of an npz, read from the .npy headers only (nothing is decompressed past them); arrays
    that are not real numbers (complex, strings, objects) are refused.
    """
    if not path.is_file():
        raise FileNotFoundError(f"npz file {str(path)!r} does not exist")
    try:
        shapes, dtypes = {}, {}
        with zipfile.ZipFile(path) as archive:
            for member in archive.namelist():
                if not member.endswith(".npy"):
                    continue
                with archive.open(member) as file:
                    version = npy_format.read_magic(file)
                    if version not in _NPY_HEADER_READERS:
                        raise ValueError(f"{member} has .npy format version {version}; expected 1.0 or 2.0")
                    shape, _, dtype = _NPY_HEADER_READERS[version](file)
                shapes[member.removesuffix(".npy")] = shape
                dtypes[member.removesuffix(".npy")] = dtype
    except _NPZ_READ_ERRORS as error:
        raise ValueError(f"{str(path)!r} is not a readable npz file (truncated or corrupt?): {error}") from error
    for key, dtype in dtypes.items():
        if not (np.issubdtype(dtype, np.integer) or np.issubdtype(dtype, np.floating) or dtype == np.bool_):
            raise ValueError(
                f"{str(path)!r} {key} have dtype {dtype}; expected real numbers (integers, floats or bools): a complex "
                "array would lose its imaginary part"
            )
    return shapes


def _check_npz_layout(path: Path, shapes: dict[str, tuple[int, ...]], family: str) -> None:
    """Required keys present, one row count of at least 2, one row per step (terminals) and flat rows elsewhere."""
    required = _required_keys(family)
    missing = [key for key in required if key not in shapes]
    if missing:
        raise ValueError(
            f"{str(path)!r} misses the keys {missing} that a {family} conversion needs; expected {sorted(required)}, "
            f"found {sorted(shapes)}"
        )
    expected_ndim = {key: 1 if key == "terminals" else 2 for key in required}
    for key, ndim in expected_ndim.items():
        if len(shapes[key]) != ndim:
            raise ValueError(f"{str(path)!r} {key} have shape {shapes[key]}; expected {ndim} dimension(s)")
    rows = {key: shapes[key][0] for key in required}
    if len(set(rows.values())) != 1:
        raise ValueError(f"{str(path)!r} arrays have different row counts {rows}; expected one count for all")
    if rows["observations"] < 2:
        raise ValueError(f"{str(path)!r} holds {rows['observations']} rows; expected at least 2 (a row and its successor)")


def _check_row_shapes(path: Path, shapes: dict[str, tuple[int, ...]], dims: _EnvDims) -> None:
    """Per-row shapes matching the single-task env."""
    expected = {"observations": (dims.observation,), "actions": (dims.action,), "qpos": (dims.qpos,)}
    if dims.buttons is not None:
        expected["button_states"] = (dims.buttons,)
    for key, row_shape in expected.items():
        if shapes[key][1:] != row_shape:
            raise ValueError(
                f"{str(path)!r} {key} have shape {shapes[key][1:]} per row but {dims.env_id} needs {row_shape}; "
                "is this npz from another OGBench family?"
            )


def _load_npz(path: Path, family: str) -> dict[str, np.ndarray]:
    """The required arrays, observations and actions as float32 (OGBench's loader casts them the same way)."""
    dtypes = {"observations": np.float32, "actions": np.float32}
    try:
        with np.load(path) as file, np.errstate(over="ignore"):
            return {key: np.asarray(file[key], dtype=dtypes.get(key)) for key in _required_keys(family)}
    except _NPZ_READ_ERRORS as error:
        raise ValueError(f"{str(path)!r} could not be read (truncated or corrupt?): {error}") from error


def _check_npz_contents(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """0/1 terminals ending the last row, no trajectory without a transition, finite values."""
    terminals = arrays["terminals"]
    if not np.isin(terminals, (0, 1)).all():
        raise ValueError(f"{str(path)!r} terminals hold values {np.unique(terminals)[:10]}; expected only 0/1")
    terminals = terminals.astype(bool)
    if not terminals[-1]:
        raise ValueError(f"{str(path)!r} last row is not a terminal; expected every trajectory to end with terminals = 1")
    # A trajectory of one row has no transition: OGBench's loader would drop it and misalign the next one.
    single_row = terminals & np.concatenate([[True], terminals[:-1]])
    if single_row.any():
        raise ValueError(
            f"{str(path)!r} row {int(np.argmax(single_row))} is a one-row trajectory; expected at least 2 rows each"
        )
    for key in ("observations", "actions", "qpos"):
        # Observations and actions are already float32 (a finite 1e39 has become inf), as stored.
        finite_rows = np.isfinite(arrays[key]).all(axis=1)
        if not finite_rows.all():
            raise ValueError(
                f"{str(path)!r} {key} hold NaN or inf, as float32 for observations and actions (first at row "
                f"{int(np.argmin(finite_rows))})"
            )


def _relabel(env: gym.Env, dims: _EnvDims, arrays: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
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
    ``overwrite`` (docs/design.md: a failed create leaves a half-made folder behind, so nothing is created in place).

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
        final = root / dataset_id
        final.parent.mkdir(parents=True, exist_ok=True)
        if final.exists():
            replaced = staging / ".replaced" / dataset_id
            replaced.parent.mkdir(parents=True, exist_ok=True)
            os.replace(final, replaced)
            try:
                os.replace(staging / dataset_id, final)
            except BaseException:
                os.replace(replaced, final)
                raise
        else:
            os.replace(staging / dataset_id, final)
        with minari_root(root):
            namespace = parse_dataset_id(dataset_id)[0]
            if namespace not in list_local_namespaces():
                create_namespace(namespace)
