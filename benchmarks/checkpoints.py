"""A run's latest checkpoint: model, optimizers, replay buffer, step counters, random generators and phase.

A checkpoint is a folder ``checkpoints/ckpt-<evaluations>`` written in full under a temporary name, renamed into
place, then made current by rewriting ``checkpoints/latest.json`` (atomically); older checkpoints are deleted only
after that. A kill at any moment leaves ``latest.json`` naming a complete checkpoint (or none).
"""

from __future__ import annotations

import pickle
import random
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch as th

from benchmarks.atomic import read_json, write_json
from qc_sb3.common.chunked import ChunkedOffPolicyAlgorithm

CHECKPOINTS_DIR = "checkpoints"
LATEST_FILE = "latest.json"
MODEL_FILE = "model.zip"
BUFFER_FILE = "replay_buffer.pkl"
RNG_FILE = "rng.pkl"
STATE_FILE = "state.json"


@dataclass(frozen=True)
class CheckpointState:
    """
    Where a run stands at a checkpoint (the model's own counters, ``offline_steps_done`` and ``num_timesteps``, are
    saved with the model as well).

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


def rng_states(model: ChunkedOffPolicyAlgorithm) -> dict[str, Any]:
    """
    Every random generator a run draws from: Python's, NumPy's global one (the buffers sample from it), torch's (CPU
    and CUDA), and those of the model's spaces (RLPD's random warm-up samples the action space).

    :param model: The model
    :return: Their states
    """
    states: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": th.get_rng_state(),
        "cuda": th.cuda.get_rng_state_all() if th.cuda.is_available() else None,
    }
    for name in ("action_space", "observation_space"):
        space = getattr(model, name)
        states[name] = space.np_random.bit_generator.state
    return states


def restore_rng_states(model: ChunkedOffPolicyAlgorithm, states: dict[str, Any]) -> None:
    """
    Put back the states of :func:`rng_states`.

    :param model: The model
    :param states: The states
    """
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    th.set_rng_state(states["torch"])
    if states["cuda"] is not None and th.cuda.is_available():
        th.cuda.set_rng_state_all(states["cuda"])
    for name in ("action_space", "observation_space"):
        getattr(model, name).np_random.bit_generator.state = states[name]


def save_checkpoint(run_dir: str | Path, model: ChunkedOffPolicyAlgorithm, state: CheckpointState) -> Path:
    """
    Write a checkpoint and make it the latest; delete the older ones.

    :param run_dir: The run's folder
    :param model: The model (its replay buffer holds the offline segment too)
    :param state: Where the run stands
    :return: The checkpoint's folder
    """
    root = Path(run_dir) / CHECKPOINTS_DIR
    name = f"ckpt-{state.evaluations_done:05d}"
    staging = root / f".{name}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    model.save(staging / MODEL_FILE)
    model.save_replay_buffer(staging / BUFFER_FILE)
    with (staging / RNG_FILE).open("wb") as file:
        pickle.dump(rng_states(model), file)
    write_json(staging / STATE_FILE, asdict(state))
    final = root / name
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
    """
    root = Path(run_dir) / CHECKPOINTS_DIR
    if not (root / LATEST_FILE).exists():
        return None
    folder = root / read_json(root / LATEST_FILE)["checkpoint"]
    return folder, CheckpointState(**read_json(folder / STATE_FILE))


def load_rng_states(folder: Path) -> dict[str, Any]:
    """
    The random generator states saved in a checkpoint.

    :param folder: The checkpoint's folder
    :return: The states, for :func:`restore_rng_states`
    """
    with (folder / RNG_FILE).open("rb") as file:
        return pickle.load(file)
