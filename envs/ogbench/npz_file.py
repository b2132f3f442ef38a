"""The npz files of OGBench datasets: their layout read from the .npy headers, and their contents checked."""

from __future__ import annotations

import os
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.lib import format as npy_format

# Families whose npz files carry button_states (upstream: envs with `_cur_button_states`).
BUTTON_FAMILIES = frozenset({"scene", "puzzle-3x3"})
# Errors numpy and zipfile raise on a missing, truncated or corrupt npz.
_NPZ_READ_ERRORS = (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error)
# Public readers of .npy headers by format version (np.savez writes 1.0, or 2.0 for huge headers).
_NPY_HEADER_READERS = {(1, 0): npy_format.read_array_header_1_0, (2, 0): npy_format.read_array_header_2_0}


@dataclass(frozen=True)
class EnvDims:
    """What an npz must match: the single-task env's per-row sizes."""

    env_id: str
    observation: tuple[int, ...]
    action: int
    qpos: int
    buttons: int | None


def npz_file(path: str | os.PathLike) -> Path:
    """The path, refused with a clear message when it is a folder (convert_shards takes folders)."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(
            f"{str(path)!r} is a directory; expected an npz file (convert_shards, or the command line, takes a folder "
            "of npz shards)"
        )
    return path


def _required_keys(family: str) -> tuple[str, ...]:
    """The npz keys a conversion reads (relabelling needs qpos, and button_states for scene and puzzle)."""
    keys = ("observations", "actions", "terminals", "qpos")
    return (*keys, "button_states") if family in BUTTON_FAMILIES else keys


def read_npz(path: Path, family: str, visual: bool = False) -> dict[str, np.ndarray]:
    """The arrays a conversion reads, checked for everything that does not need the env (``visual``: uint8 frames)."""
    check_npz_layout(path, inspect_npz(path), family, visual)
    arrays = _load_npz(path, family, visual)
    _check_npz_contents(path, arrays)
    return arrays


def inspect_npz(path: Path) -> dict[str, tuple[int, ...]]:
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


def check_npz_layout(path: Path, shapes: dict[str, tuple[int, ...]], family: str, visual: bool = False) -> None:
    """
    Required keys present, one row count of at least 2, one row per step (terminals) and flat rows elsewhere, but
    (height, width, channels) frames as the observations of a visual dataset.
    """
    required = _required_keys(family)
    missing = [key for key in required if key not in shapes]
    if missing:
        raise ValueError(
            f"{str(path)!r} misses the keys {missing} that a {family} conversion needs; expected {sorted(required)}, "
            f"found {sorted(shapes)}"
        )
    expected_ndim = {key: 1 if key == "terminals" else 2 for key in required}
    if visual:
        expected_ndim["observations"] = 4
    for key, ndim in expected_ndim.items():
        if len(shapes[key]) != ndim:
            raise ValueError(f"{str(path)!r} {key} have shape {shapes[key]}; expected {ndim} dimension(s)")
    rows = {key: shapes[key][0] for key in required}
    if len(set(rows.values())) != 1:
        raise ValueError(f"{str(path)!r} arrays have different row counts {rows}; expected one count for all")
    if rows["observations"] < 2:
        raise ValueError(f"{str(path)!r} holds {rows['observations']} rows; expected at least 2 (a row and its successor)")


def check_row_shapes(path: Path, shapes: dict[str, tuple[int, ...]], dims: EnvDims) -> None:
    """Per-row shapes matching the single-task env."""
    expected = {"observations": dims.observation, "actions": (dims.action,), "qpos": (dims.qpos,)}
    if dims.buttons is not None:
        expected["button_states"] = (dims.buttons,)
    for key, row_shape in expected.items():
        if shapes[key][1:] != row_shape:
            raise ValueError(
                f"{str(path)!r} {key} have shape {shapes[key][1:]} per row but {dims.env_id} needs {row_shape}; "
                "is this npz from another OGBench family?"
            )


def _load_npz(path: Path, family: str, visual: bool) -> dict[str, np.ndarray]:
    """
    The required arrays, observations and actions as float32 (OGBench's loader casts them the same way); the frames
    of a visual dataset as they are, which must be uint8.
    """
    dtypes = {"observations": None if visual else np.float32, "actions": np.float32}
    try:
        with np.load(path) as file, np.errstate(over="ignore"):
            arrays = {key: np.asarray(file[key], dtype=dtypes.get(key)) for key in _required_keys(family)}
    except _NPZ_READ_ERRORS as error:
        raise ValueError(f"{str(path)!r} could not be read (truncated or corrupt?): {error}") from error
    if visual and arrays["observations"].dtype != np.uint8:
        raise ValueError(
            f"{str(path)!r} observations have dtype {arrays['observations'].dtype}; a visual dataset's frames must be "
            "uint8 (is this a state dataset?)"
        )
    return arrays


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
        if not np.issubdtype(arrays[key].dtype, np.floating):
            continue  # the uint8 frames of a visual dataset
        # Observations and actions are already float32 (a finite 1e39 has become inf), as stored.
        finite_rows = np.isfinite(arrays[key]).all(axis=1)
        if not finite_rows.all():
            raise ValueError(
                f"{str(path)!r} {key} hold NaN or inf, as float32 for observations and actions (first at row "
                f"{int(np.argmin(finite_rows))})"
            )
