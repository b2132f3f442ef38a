"""A run's latest checkpoint: model, optimizers, replay buffer, step counters, random generators and phase.

A checkpoint is a folder ``checkpoints/ckpt-<evaluations>`` written in full under a temporary name unique to the
writing process, renamed into place, then made current by rewriting ``checkpoints/latest.json`` (atomically); older
checkpoints are deleted only after that. A kill at any moment leaves ``latest.json`` naming a complete checkpoint (or
none).

Nothing in a checkpoint is a pickle, so that resuming from a results folder made elsewhere runs no code from it:

* ``tensors.pt``: the policy's and optimizers' state dicts and torch's random generator states, read with
  ``torch.load(weights_only=True)``, which builds tensors and plain containers only;
* ``replay_buffer.npz``: the buffer's arrays, read with ``np.load(allow_pickle=False)``;
* ``model.json``: the model's counters and episode statistics; ``rng.json``: Python's, NumPy's and the spaces'
  random generator states; ``state.json``: where the run stands.

The model itself is built again from the run's config (its hyperparameters, never read from the checkpoint), then
these states are put into it. Checkpoints of the earlier format (``model.zip``, ``*.pkl``: SB3's cloudpickle) are
refused, never opened.
"""

from __future__ import annotations

import os
import random
import secrets
import shutil
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch as th

from qc_sb3.benchmarks.runner.atomic import read_json, write_json
from qc_sb3.common.chunked import ChunkedOffPolicyAlgorithm

CHECKPOINTS_DIR = "checkpoints"
LATEST_FILE = "latest.json"
TENSORS_FILE = "tensors.pt"
BUFFER_FILE = "replay_buffer.npz"
MODEL_STATE_FILE = "model.json"
RNG_FILE = "rng.json"
STATE_FILE = "state.json"
CHECKPOINT_FILES = (TENSORS_FILE, BUFFER_FILE, MODEL_STATE_FILE, RNG_FILE, STATE_FILE)
# What the earlier checkpoint format wrote (SB3's save formats, cloudpickle inside): never loaded.
PICKLED_FILES = ("model.zip", "replay_buffer.pkl", "rng.pkl")
# The model's counters and statistics that training changes (its hyperparameters come from the run's config).
MODEL_COUNTERS = (
    "num_timesteps",
    "_n_updates",
    "_episode_num",
    "_num_timesteps_at_start",
    "_total_timesteps",
    "_current_progress_remaining",
    "offline_steps_done",
    "offline_shard_index",
)
# The replay buffer's position in its online ring.
BUFFER_COUNTERS = ("pos", "full")


class CheckpointError(RuntimeError):
    """A run's checkpoint cannot be resumed: damaged, incomplete, of another shape, or of the earlier pickle format."""


@dataclass(frozen=True)
class CheckpointState:
    """
    Where a run stands at a checkpoint.

    :param phase: The phase of the last evaluation, ``offline`` or ``online``
    :param evaluations_done: Evaluations done, which is the number of rows of the evaluation CSV
    :param offline_steps_done: Offline gradient steps done
    :param num_timesteps: Online env steps done
    :param wall_time: Seconds the run has trained and evaluated so far, over all its sessions
    """

    phase: str
    evaluations_done: int
    offline_steps_done: int
    num_timesteps: int
    wall_time: float


def rng_states(model: ChunkedOffPolicyAlgorithm) -> tuple[dict[str, Any], dict[str, Any]]:
    """
    Every random generator a run draws from: Python's, NumPy's global one (the buffers sample from it), torch's (CPU
    and CUDA), and those of the model's spaces (RLPD's random warm-up samples the action space).

    :param model: The model
    :return: The states as JSON data, and torch's as tensors
    """
    python_version, python_state, python_gauss = random.getstate()
    name, keys, position, has_gauss, cached_gaussian = np.random.get_state(legacy=True)
    as_json = {
        "python": [python_version, list(python_state), python_gauss],
        "numpy": [name, keys.tolist(), int(position), int(has_gauss), float(cached_gaussian)],
        **{name: getattr(model, name).np_random.bit_generator.state for name in ("action_space", "observation_space")},
    }
    tensors = {"torch": th.get_rng_state(), "cuda": th.cuda.get_rng_state_all() if th.cuda.is_available() else None}
    return as_json, tensors


def restore_rng_states(model: ChunkedOffPolicyAlgorithm, as_json: dict[str, Any], tensors: dict[str, Any]) -> None:
    """
    Put back the states of :func:`rng_states`.

    :param model: The model
    :param as_json: The JSON states
    :param tensors: Torch's states
    """
    python_version, python_state, python_gauss = as_json["python"]
    random.setstate((python_version, tuple(python_state), python_gauss))
    name, keys, position, has_gauss, cached_gaussian = as_json["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), position, has_gauss, cached_gaussian))
    th.set_rng_state(tensors["torch"])
    if tensors["cuda"] is not None and th.cuda.is_available():
        th.cuda.set_rng_state_all(tensors["cuda"])
    for name in ("action_space", "observation_space"):
        getattr(model, name).np_random.bit_generator.state = as_json[name]


def _model_state(model: ChunkedOffPolicyAlgorithm) -> dict[str, Any]:
    state: dict[str, Any] = {name: getattr(model, name) for name in MODEL_COUNTERS}
    # SB3 makes the episode statistics' buffers in the first learn() call: None before it.
    infos, successes = model.ep_info_buffer, model.ep_success_buffer
    state["ep_info_buffer"] = (
        None if infos is None else [{key: _plain_number(value) for key, value in info.items()} for info in infos]
    )
    state["ep_success_buffer"] = None if successes is None else [bool(success) for success in successes]
    return state


def _plain_number(value: Any) -> int | float:
    """A Python int or float of a number that may be a NumPy scalar (JSON writes only Python's)."""
    return int(value) if isinstance(value, int | np.integer) else float(value)


def _restore_model_state(model: ChunkedOffPolicyAlgorithm, state: dict[str, Any]) -> None:
    for name in MODEL_COUNTERS:
        setattr(model, name, state[name])
    for name in ("ep_info_buffer", "ep_success_buffer"):
        saved = state[name]
        setattr(model, name, None if saved is None else deque(saved, maxlen=model._stats_window_size))


def _is_ring_array(buffer: Any, name: str, value: np.ndarray) -> bool:
    """Whether an array of the buffer is one of its online ring's, one row per ring position."""
    return not name.startswith("offline_") and value.ndim > 0 and value.shape[0] == buffer.buffer_size


def _buffer_arrays(model: ChunkedOffPolicyAlgorithm) -> dict[str, np.ndarray]:
    """The buffer's arrays as saved: the offline segment whole, the online ring up to its stored rows only."""
    buffer = model.replay_buffer
    stored = buffer.buffer_size if buffer.full else buffer.pos
    arrays = {
        name: value[:stored] if _is_ring_array(buffer, name, value) else value
        for name, value in vars(buffer).items()
        if isinstance(value, np.ndarray)
    }
    return {**arrays, **{name: np.asarray(getattr(buffer, name)) for name in BUFFER_COUNTERS}}


def _restore_buffer(model: ChunkedOffPolicyAlgorithm, path: Path) -> None:
    """Put the saved arrays into the model's buffer, each checked against the array it replaces."""
    buffer = model.replay_buffer
    with np.load(path, allow_pickle=False) as saved:
        arrays = {name: saved[name] for name in saved.files}
    expected = {name for name, value in vars(buffer).items() if isinstance(value, np.ndarray)} | set(BUFFER_COUNTERS)
    if set(arrays) != expected:
        raise CheckpointError(f"{path} holds the arrays {sorted(arrays)}, expected {sorted(expected)}")
    position, full = int(arrays["pos"]), bool(arrays["full"])
    if not 0 <= position < buffer.buffer_size:
        raise CheckpointError(f"{path}: pos must be in [0, {buffer.buffer_size}), got {position}")
    stored = buffer.buffer_size if full else position
    for name in expected - set(BUFFER_COUNTERS):
        current, array = getattr(buffer, name), arrays[name]
        ring = _is_ring_array(buffer, name, current)
        # The offline segment's length is the data's, the ring's the rows stored; other dimensions are the config's.
        expected_shape = (stored, *current.shape[1:]) if ring else current.shape
        same_shape = array.shape[1:] == current.shape[1:] if name.startswith("offline_") else array.shape == expected_shape
        if array.dtype != current.dtype or not same_shape:
            raise CheckpointError(
                f"{path}: {name} is {array.dtype} {array.shape}, the run's buffer needs {current.dtype} {expected_shape}"
            )
        if ring:
            current[:stored] = array
        else:
            setattr(buffer, name, array)
    buffer.pos, buffer.full = position, full


def save_checkpoint(run_dir: str | Path, model: ChunkedOffPolicyAlgorithm, state: CheckpointState) -> Path:
    """
    Write a checkpoint and make it the latest; delete the older ones. A failed write (a full disk) removes what it
    wrote and raises an OSError naming the checkpoint; the earlier checkpoints stay.

    :param run_dir: The run's folder
    :param model: The model (its replay buffer holds the offline segment too)
    :param state: Where the run stands
    :return: The checkpoint's folder
    """
    root = Path(run_dir) / CHECKPOINTS_DIR
    name = f"ckpt-{state.evaluations_done:05d}"
    staging = root / f".{name}.{os.getpid()}-{secrets.token_hex(4)}.tmp"
    final = root / name
    try:
        staging.mkdir(parents=True)
        rng_json, rng_tensors = rng_states(model)
        th.save({"parameters": model.get_parameters(), "rng": rng_tensors}, staging / TENSORS_FILE)
        np.savez(staging / BUFFER_FILE, **_buffer_arrays(model))
        write_json(staging / MODEL_STATE_FILE, _model_state(model))
        write_json(staging / RNG_FILE, rng_json)
        write_json(staging / STATE_FILE, asdict(state))
    except BaseException as error:
        shutil.rmtree(staging, ignore_errors=True)
        if not isinstance(error, OSError | RuntimeError):
            raise
        # A full disk: torch says "unexpected pos 576 vs 534", numpy "[Errno 28]" with no path.
        raise OSError(
            f"writing checkpoint {str(final)!r} failed ({type(error).__name__}: {error}; "
            f"{shutil.disk_usage(root).free:,} bytes free there); the latest complete checkpoint is kept"
        ) from error
    shutil.rmtree(final, ignore_errors=True)
    staging.rename(final)
    write_json(root / LATEST_FILE, {"checkpoint": name})
    for other in root.iterdir():
        if other.is_dir() and other.name != name:
            shutil.rmtree(other, ignore_errors=True)
    return final


def latest_checkpoint(run_dir: str | Path) -> tuple[Path, CheckpointState] | None:
    """
    The run's latest complete checkpoint.

    :param run_dir: The run's folder
    :return: Its folder and state, or None if the run has none
    :raises CheckpointError: If ``latest.json`` or the checkpoint it names is damaged or incomplete, or of the
        earlier pickle format
    """
    root = Path(run_dir) / CHECKPOINTS_DIR
    latest = root / LATEST_FILE
    if not latest.exists():
        return None
    remedy = f"delete {root} to run it again from the start"
    try:
        name = read_json(latest)["checkpoint"]
        if not isinstance(name, str) or Path(name).name != name or not name.startswith("ckpt-"):
            raise ValueError(f"'checkpoint' must name a ckpt-* folder, got {name!r}")
    except (ValueError, KeyError, TypeError) as error:
        raise CheckpointError(f"{latest} is damaged ({type(error).__name__}: {error}); {remedy}") from error
    folder = root / name
    pickled = [file for file in PICKLED_FILES if (folder / file).exists()]
    if pickled:
        raise CheckpointError(
            f"{folder} is a checkpoint of the earlier format ({', '.join(pickled)}: pickles, which can run code when "
            f"loaded); it is not loaded. Finish the run with the qc_sb3 version that wrote it, or {remedy}"
        )
    missing = [file for file in CHECKPOINT_FILES if not (folder / file).is_file()]
    if missing:
        raise CheckpointError(f"{folder} (named by {latest}) lacks {', '.join(missing)}; {remedy}")
    try:
        state = CheckpointState(**read_json(folder / STATE_FILE))
    except (ValueError, TypeError) as error:
        raise CheckpointError(f"{folder / STATE_FILE} is damaged ({type(error).__name__}: {error}); {remedy}") from error
    return folder, state


def restore_checkpoint(model: ChunkedOffPolicyAlgorithm, folder: Path) -> None:
    """
    Put a checkpoint's parameters, optimizer states, buffer, counters and random generator states into a model built
    from the run's config.

    :param model: The model
    :param folder: The checkpoint's folder
    :raises CheckpointError: If a file is damaged or does not fit the model
    """
    try:
        tensors = th.load(folder / TENSORS_FILE, map_location="cpu", weights_only=True)
        model.set_parameters(tensors["parameters"], exact_match=True, device=model.device)
        _restore_buffer(model, folder / BUFFER_FILE)
        _restore_model_state(model, read_json(folder / MODEL_STATE_FILE))
        restore_rng_states(model, read_json(folder / RNG_FILE), tensors["rng"])
    except CheckpointError:
        raise
    except Exception as error:
        raise CheckpointError(
            f"{folder} cannot be resumed ({type(error).__name__}: {error}); delete {folder.parent} to run it again "
            "from the start"
        ) from error
