"""Local robomimic demonstrations: scripted episodes written in the layout of robomimic's low-dim hdf5 files."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np
from tqdm.auto import tqdm

from qc_sb3.envs.disk_space import check_free_space, estimated_bytes
from qc_sb3.envs.output_folder import check_writable_folder
from qc_sb3.envs.robomimic.env import import_robosuite, reseed, reset_robosuite, robosuite_kwargs
from qc_sb3.envs.robomimic.scripted import OPERATOR_STYLES, make_controller
from qc_sb3.envs.robomimic.tasks import default_env_args, resolve_task
from qc_sb3.envs.worker_processes import map_in_workers

# The observation keys written under obs/ and next_obs/: those of the official low-dim files that robosuite
# observes directly ("object" is robosuite's "object-state").
RECORDED_KEYS: tuple[str, ...] = (
    "object",
    "robot0_eef_pos",
    "robot0_eef_quat",
    "robot0_eef_quat_site",
    "robot0_gripper_qpos",
    "robot0_gripper_qvel",
    "robot0_joint_pos",
    "robot0_joint_pos_cos",
    "robot0_joint_pos_sin",
    "robot0_joint_vel",
)

# Fraction of the demos listed under mask/valid (robomimic's split_train_val default).
VALID_RATIO = 0.1


@dataclass
class Episode:
    """
    One scripted episode, as robomimic stores a demo.

    :param attempt: Index of the attempt that produced it (its seed is derived from it)
    :param style: Name of the operator style
    :param retries: Times the controller started over after an empty grasp
    :param success: Whether the last state reached is a success
    :param actions: ``(n, 7)``
    :param states: ``(n, D)`` flattened simulator states before each action
    :param rewards: ``(n,)`` robosuite's sparse reward after each action (0 or 1)
    :param dones: ``(n,)`` 1 where the state reached is a success or the episode's last, as robomimic's
        ``--done_mode 2`` writes them in the official files; the converter reads them as the reference does, as
        episode ends and terminations
    :param obs: ``RECORDED_KEYS`` observed in each state of ``states``, ``(n, d)`` each
    :param next_obs: The same in the state after each action
    :param model_file: The simulator's MJCF model
    """

    attempt: int
    style: str
    retries: int
    success: bool
    actions: np.ndarray
    states: np.ndarray
    rewards: np.ndarray
    dones: np.ndarray
    obs: dict[str, np.ndarray]
    next_obs: dict[str, np.ndarray]
    model_file: str

    def __len__(self) -> int:
        return len(self.actions)


def _recorded(raw: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The recorded keys of a robosuite observation dict."""
    return {key: np.array(raw["object-state" if key == "object" else key], dtype=np.float64) for key in RECORDED_KEYS}


def rollout(robosuite_env: Any, task: str, seed: int, attempt: int, max_episode_steps: int) -> Episode:
    """
    Run one scripted episode: reseed the env and the controller from ``(seed, attempt)``, draw an operator style,
    step until success or ``max_episode_steps``.

    :param robosuite_env: The task's robosuite env
    :param task: The task name (full or short)
    :param seed: The generation's seed
    :param attempt: The attempt's index
    :param max_episode_steps: Episode limit
    :return: The episode
    """
    env_seed, controller_seed = np.random.SeedSequence([seed, attempt]).generate_state(2)
    rng = np.random.default_rng(controller_seed)
    style = OPERATOR_STYLES[rng.integers(len(OPERATOR_STYLES))]
    reseed(robosuite_env, int(env_seed))
    observation = _recorded(reset_robosuite(robosuite_env))
    model_file = robosuite_env.sim.model.get_xml()
    controller = make_controller(task, robosuite_env, style, rng)
    actions, states, rewards, dones, observations = [], [], [], [], [observation]
    for step in range(max_episode_steps):
        states.append(np.array(robosuite_env.sim.get_state().flatten()))
        actions.append(controller())
        robosuite_env.step(actions[-1])
        # Observe and score the state reached as robomimic extracts demos from states: after a forward pass (step()
        # returns kinematics of one physics substep earlier; the next step() starts with the same forward pass).
        robosuite_env.sim.forward()
        observations.append(_recorded(robosuite_env._get_observations(force_update=True)))
        success = bool(robosuite_env._check_success())
        rewards.append(float(robosuite_env.reward()))
        dones.append(int(success or step == max_episode_steps - 1))
        if success:
            break
    stacked = {key: np.stack([observation[key] for observation in observations]) for key in RECORDED_KEYS}
    return Episode(
        attempt=attempt,
        style=style.name,
        retries=controller.retries,
        success=success,
        actions=np.array(actions),
        states=np.array(states),
        rewards=np.array(rewards),
        dones=np.array(dones, dtype=np.int64),
        obs={key: values[:-1] for key, values in stacked.items()},
        next_obs={key: values[1:] for key, values in stacked.items()},
        model_file=model_file,
    )


def _make_robosuite_env(env_args: dict[str, Any]) -> Any:
    """A headless robosuite env from robomimic env metadata."""
    return import_robosuite().make(env_args["env_name"], **robosuite_kwargs(env_args))


# One env per worker process, built by _init_worker.
_WORKER: dict[str, Any] = {}


def _init_worker(task: str, seed: int, max_episode_steps: int) -> None:
    """Build the worker's env."""
    _WORKER.update(env=_make_robosuite_env(default_env_args(task)), task=task, seed=seed, max_episode_steps=max_episode_steps)


def _worker_rollout(attempt: int) -> Episode:
    """Run attempt ``attempt`` in a worker process."""
    return rollout(_WORKER["env"], _WORKER["task"], _WORKER["seed"], attempt, _WORKER["max_episode_steps"])


def _episodes(task: str, seed: int, workers: int, max_attempts: int, max_episode_steps: int) -> Iterator[Episode]:
    """Episodes of attempts 0, 1, ... in order, run in ``workers`` processes (in this one when 1)."""
    if workers == 1:
        env = _make_robosuite_env(default_env_args(task))
        try:
            for attempt in range(max_attempts):
                yield rollout(env, task, seed, attempt, max_episode_steps)
        finally:
            env.close()
        return
    yield from map_in_workers(_worker_rollout, range(max_attempts), workers, _init_worker, (task, seed, max_episode_steps))


def generate_demos(
    task: str,
    *,
    episodes: int,
    out_path: str | os.PathLike,
    seed: int = 0,
    workers: int = 1,
    progress: bool = False,
    max_episode_steps: int | None = None,
    keep_failed: bool = False,
    max_attempts: int | None = None,
    overwrite: bool = False,
) -> Path:
    """
    Generate scripted demonstrations of a robomimic task and write them as a robomimic low-dim hdf5 file.

    Each attempt ``i`` seeds the env and the controller from ``(seed, i)`` and draws one of the operator styles, so
    a file depends only on its arguments, not on ``workers``. Like the multi-human datasets, the file keeps only
    successful demos unless ``keep_failed``; a demo ends at its first success (or at the episode limit).

    Layout: ``data`` (attrs ``total``, ``env_args``, ``seed``, ``attempts``) / ``demo_<i>`` (attrs ``num_samples``,
    ``model_file``, ``operator_style``, ``retries``) with ``actions``, ``states``, ``rewards``, ``dones``, ``obs/<key>``,
    ``next_obs/<key>``; ``mask/train`` and ``mask/valid`` (90/10), ``mask/successful`` and ``mask/style_<name>``
    list demo names.

    :param task: The task name (full or short)
    :param episodes: Number of demos to write
    :param out_path: The hdf5 file to write (its folder checked writable before generating; written to a temporary
        file first, then moved into place)
    :param seed: The generation's seed
    :param workers: Number of processes running episodes
    :param progress: Whether to show a progress bar
    :param max_episode_steps: Episode limit; None: the task's (lift 300, can 300, square 400)
    :param keep_failed: Whether to write failed episodes too (then ``episodes`` attempts are written)
    :param max_attempts: Attempts allowed before giving up; None: ``4 * episodes + 10``
    :param overwrite: Whether to replace an existing file
    :return: The path written
    """
    info = resolve_task(task)
    for name, value in (("episodes", episodes), ("workers", workers)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    max_episode_steps = info.max_episode_steps if max_episode_steps is None else max_episode_steps
    if max_episode_steps < 1:
        raise ValueError(f"max_episode_steps must be >= 1, got {max_episode_steps}")
    max_attempts = episodes if keep_failed else (4 * episodes + 10 if max_attempts is None else max_attempts)
    if max_attempts < episodes:
        raise ValueError(f"max_attempts ({max_attempts}) must be at least episodes ({episodes})")
    out_path = Path(out_path)
    if out_path.is_dir():
        raise IsADirectoryError(f"{str(out_path)!r} is a directory; expected the path of the hdf5 file to write")
    if out_path.exists() and not overwrite:
        raise FileExistsError(f"{str(out_path)!r} already exists; pass overwrite=True (--overwrite) to replace it")
    check_writable_folder(out_path.parent)

    kept: list[Episode] = []
    attempts = 0
    runs = _episodes(info.name, seed, min(workers, max_attempts), max_attempts, max_episode_steps)
    bar = tqdm(total=episodes, desc=f"{info.short_name} demos", unit="demo", disable=not progress)
    with closing(runs), bar:
        for episode in runs:
            attempts += 1
            if episode.success or keep_failed:
                kept.append(episode)
                bar.update()
            bar.set_postfix(attempts=attempts)
            if len(kept) == episodes:
                break
    if len(kept) < episodes:
        raise RuntimeError(
            f"only {len(kept)} of {max_attempts} scripted {info.short_name} attempts succeeded; {episodes} demos were "
            "asked for (raise max_attempts or pass keep_failed=True)"
        )
    env_args = default_env_args(info.name)
    env_args["env_version"] = import_robosuite().__version__
    _write_atomically(out_path, kept, env_args, seed, attempts)
    return out_path


def _write_atomically(out_path: Path, episodes: list[Episode], env_args: dict[str, Any], seed: int, attempts: int) -> None:
    """Write the demos to a temporary file next to ``out_path`` (its free space checked first), then move it into place."""
    arrays = [
        array
        for episode in episodes
        for array in (
            episode.actions,
            episode.states,
            episode.rewards,
            episode.dones,
            *episode.obs.values(),
            *episode.next_obs.values(),
        )
    ]
    size = estimated_bytes(arrays + [episode.model_file for episode in episodes], len(episodes))
    check_free_space(out_path.parent, size, f"{len(episodes)} robomimic demos")
    temporary = out_path.with_name(f".{out_path.name}.{os.getpid()}.tmp")
    try:
        with h5py.File(temporary, "w") as file:
            _write(file, episodes, env_args, seed)
            file["data"].attrs["attempts"] = attempts
        os.replace(temporary, out_path)
    finally:
        temporary.unlink(missing_ok=True)


def _write(file: h5py.File, episodes: list[Episode], env_args: dict[str, Any], seed: int) -> None:
    """Write the demos in robomimic's layout."""
    data = file.create_group("data")
    names = [f"demo_{index}" for index in range(len(episodes))]
    for name, episode in zip(names, episodes, strict=True):
        group = data.create_group(name)
        group.attrs["num_samples"] = len(episode)
        group.attrs["model_file"] = episode.model_file
        group.attrs["operator_style"] = episode.style
        group.attrs["retries"] = episode.retries
        for field in ("actions", "states", "rewards", "dones"):
            group.create_dataset(field, data=getattr(episode, field))
        for key in RECORDED_KEYS:
            group.create_dataset(f"obs/{key}", data=episode.obs[key])
            group.create_dataset(f"next_obs/{key}", data=episode.next_obs[key])
    data.attrs["total"] = sum(len(episode) for episode in episodes)
    data.attrs["env_args"] = json.dumps(env_args, indent=4)
    data.attrs["seed"] = seed
    order = np.random.default_rng(seed).permutation(len(names))
    num_valid = int(VALID_RATIO * len(names))
    named = list(zip(names, episodes, strict=True))
    masks = {
        "valid": [names[index] for index in sorted(order[:num_valid])],
        "train": [names[index] for index in sorted(order[num_valid:])],
        "successful": [name for name, episode in named if episode.success],
    }
    for style in OPERATOR_STYLES:
        masks[f"style_{style.name}"] = [name for name, episode in named if episode.style == style.name]
    for key, members in masks.items():
        file.create_dataset(f"mask/{key}", data=np.array(members, dtype="S"))
