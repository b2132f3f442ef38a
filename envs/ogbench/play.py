"""
One OGBench "play" episode from the scripted plan oracles shipped in ogbench.

This rewrites the recipe of upstream ``data_gen_scripts/generate_manipspace.py`` (dataset type "play", the defaults
OGBench's datasets were made with; docs/design.md): a data-collection env that never terminates at the goal, plan oracles
with noise 0.1 and smoothing 0.5, a new random target (and that target's oracle) whenever a plan finishes, and the
scene health check. Upstream never seeds; here each episode is seeded from ``(seed, episode index, attempt)``, so an
episode does not depend on which process made it or what it made before.

A visual episode is recorded the same way in OGBench's visual data-collection env (``visual-<family>-v0``): the
oracles act on the privileged state in ``info``, and each row's observation is the frame that env rendered, the
same code path, model and camera as the visual single-task env online. Frames rendered afterwards from the stored
qpos/qvel would differ: after a step MuJoCo's body poses are those computed before the last physics substep's
integration, while setting the state poses the bodies at the stored qpos exactly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
from ogbench.manipspace.oracles.plan.button_plan import ButtonPlanOracle
from ogbench.manipspace.oracles.plan.cube_plan import CubePlanOracle
from ogbench.manipspace.oracles.plan.drawer_plan import DrawerPlanOracle
from ogbench.manipspace.oracles.plan.plan_oracle import PlanOracle
from ogbench.manipspace.oracles.plan.window_plan import WindowPlanOracle

from qc_sb3.envs.ogbench.tasks import OGBENCH_FAMILIES, check_headless_rendering

# Upstream flag defaults for "play" data.
PLAN_NOISE = 0.1
PLAN_NOISE_SMOOTHING = 0.5
# Rows per episode in OGBench's datasets (upstream max_episode_steps=1001; the last row has no successor).
UPSTREAM_EPISODE_LENGTH = 1001
# Upstream retries an unhealthy scene episode forever; this many failed attempts in a row is taken as a bug.
MAX_SCENE_ATTEMPTS = 100

_PLAY_DATASET_PATTERN = re.compile(r"^(?P<visual>visual-)?(?P<family>.+)-play(-v0)?$")


def parse_play_dataset(dataset: str) -> tuple[str, bool]:
    """
    The family of a play dataset name, and whether it is visual.

    :param dataset: ``"[visual-]<family>-play-v0"`` (or without ``-v0``), e.g. ``"cube-double-play-v0"``
    :return: The family and whether the dataset is visual, e.g. ``("cube-double", False)``
    """
    match = _PLAY_DATASET_PATTERN.match(dataset) if isinstance(dataset, str) else None
    if match is None or match["family"] not in OGBENCH_FAMILIES:
        valid = ", ".join(f"{family}-play-v0" for family in OGBENCH_FAMILIES)
        raise ValueError(
            f"unknown OGBench play dataset {dataset!r}; expected one of: {valid}, or one of them prefixed with "
            "'visual-' (image observations); the '-v0' is optional"
        )
    return match["family"], match["visual"] is not None


def draw_p_stack(family: str) -> float:
    """
    The episode's probability of stacking a cube on another when setting a new target (upstream, per family;
    drawn from numpy's global generator as upstream does).

    :param family: The OGBench family
    :return: 0 for cube-single, U(0, .25) double, U(.05, .35) triple, U(.1, .5) quadruple, 0.5 otherwise
    """
    ranges = {"cube-double": (0.0, 0.25), "cube-triple": (0.05, 0.35), "cube-quadruple": (0.1, 0.5)}
    if family == "cube-single":
        return 0.0
    if family in ranges:
        return float(np.random.uniform(*ranges[family]))
    return 0.5


def scene_episode_is_healthy(qpos: np.ndarray) -> bool:
    """
    Upstream's scene health check: the cube stays visible unless it is in the drawer.

    :param qpos: ``(rows, nq)`` the episode's qpos; the cube's xyz is ``qpos[:, 14:17]``
    :return: False if the cube ever goes too far right (y >= 0.29), or too far left (y <= -0.3) outside the
        drawer's height band 0.06 <= z <= 0.08
    """
    cube_xyz = np.asarray(qpos)[:, 14:17]
    too_far_right = cube_xyz[:, 1] >= 0.29
    too_far_left = (cube_xyz[:, 1] <= -0.3) & ((cube_xyz[:, 2] < 0.06) | (cube_xyz[:, 2] > 0.08))
    return not (too_far_right.any() or too_far_left.any())


def episode_seeds(seed: int, episode: int, attempt: int = 0) -> tuple[int, int]:
    """
    The seeds of one episode attempt, independent of every other episode.

    :param seed: The dataset's seed
    :param episode: The episode's index in the dataset (train episodes first, then validation)
    :param attempt: The attempt (scene episodes failing the health check are redone with the next attempt)
    :return: The env's reset seed and the seed of numpy's global generator (which the oracles draw from)
    """
    env_seed, oracle_seed = np.random.SeedSequence(seed, spawn_key=(episode, attempt)).generate_state(2)
    return int(env_seed), int(oracle_seed)


@dataclass(frozen=True)
class PlayEpisode:
    """
    One recorded play episode, one row per env step, in the dtypes of OGBench's npz files.

    :param arrays: ``observations`` (float32 s_t, or uint8 frames of a visual episode), ``actions`` (float32),
        ``terminals`` (bool, True on the last row), ``qpos`` and ``qvel`` (float32, the state before the action) and,
        for scene and puzzle, ``button_states`` (int64, before the action)
    :param plans: Number of oracle plans that finished during the episode
    :param plans_succeeded: How many of them ended with their target reached (``info["success"]``)
    :param unhealthy_attempts: Scene attempts dropped by the health check before this one
    """

    arrays: dict[str, np.ndarray]
    plans: int
    plans_succeeded: int
    unhealthy_attempts: int


class PlayCollector:
    """
    Record play episodes of one family with OGBench's plan oracles.

    :param family: The OGBench family, e.g. ``"cube-double"``
    :param episode_length: Rows per episode (upstream: 1001)
    :param visual: Whether to record in the visual env: 64 x 64 x 3 uint8 frames as observations (rendered
        headless: ``MUJOCO_GL=osmesa`` or ``egl``)
    """

    def __init__(self, family: str, episode_length: int = UPSTREAM_EPISODE_LENGTH, visual: bool = False) -> None:
        if family not in OGBENCH_FAMILIES:
            raise ValueError(f"unknown OGBench family {family!r}; expected one of: {', '.join(OGBENCH_FAMILIES)}")
        if isinstance(episode_length, bool) or not isinstance(episode_length, int) or episode_length < 2:
            raise ValueError(f"episode_length must be an int >= 2 (a row and its successor), got {episode_length!r}")
        if not isinstance(visual, bool):
            raise TypeError(f"visual must be a bool, got {visual!r}")
        self.family = family
        self.episode_length = episode_length
        self.visual = visual
        if visual:
            check_headless_rendering()
        env_id = f"visual-{family}-v0" if visual else f"{family}-v0"
        self.env = gym.make(env_id, terminate_at_goal=False, mode="data_collection", max_episode_steps=episode_length)
        self.has_button_states = family in ("scene", "puzzle-3x3")
        self.oracles = self._make_oracles()

    def _make_oracles(self) -> dict[str, PlanOracle]:
        """The plan oracles by target task (the env's ``info["privileged/target_task"]``), as upstream."""
        noise = {"noise": PLAN_NOISE, "noise_smoothing": PLAN_NOISE_SMOOTHING}
        if self.family == "scene":
            return {
                "cube": CubePlanOracle(env=self.env, **noise),
                "button": ButtonPlanOracle(env=self.env, **noise),
                "drawer": DrawerPlanOracle(env=self.env, **noise),
                "window": WindowPlanOracle(env=self.env, **noise),
            }
        if self.family == "puzzle-3x3":
            return {"button": ButtonPlanOracle(env=self.env, gripper_always_closed=True, **noise)}
        return {"cube": CubePlanOracle(env=self.env, **noise)}

    def collect(self, seed: int, episode: int) -> PlayEpisode:
        """
        Record one episode; scene attempts that fail the health check are dropped and redone (upstream).

        Numpy's global generator is reseeded (the oracles draw from it); save its state around this if it matters.

        :param seed: The dataset's seed
        :param episode: The episode's index in the dataset
        :return: The episode
        """
        for attempt in range(MAX_SCENE_ATTEMPTS):
            recorded = self._record(*episode_seeds(seed, episode, attempt))
            if self.family != "scene" or scene_episode_is_healthy(recorded.arrays["qpos"]):
                return PlayEpisode(recorded.arrays, recorded.plans, recorded.plans_succeeded, unhealthy_attempts=attempt)
        raise RuntimeError(
            f"scene episode {episode} (seed {seed}) failed the health check {MAX_SCENE_ATTEMPTS} times in a row; "
            "expected a healthy attempt long before that"
        )

    def _record(self, env_seed: int, oracle_seed: int) -> PlayEpisode:
        """One attempt: the upstream rollout loop, row by row."""
        np.random.seed(oracle_seed)
        observation, info = self.env.reset(seed=env_seed)
        p_stack = draw_p_stack(self.family)
        oracle = self.oracles[info["privileged/target_task"]]
        oracle.reset(observation, info)
        rows: dict[str, list[np.ndarray]] = {key: [] for key in self._keys()}
        plans = plans_succeeded = 0
        done = False
        while not done:
            action = np.clip(np.asarray(oracle.select_action(observation, info)), -1, 1)
            if self.visual:
                # The stored float32 action is the one applied: replaying a row's action from its state gives the
                # next row's frame exactly. (State episodes apply the oracle's float64 action, as upstream.)
                action = action.astype(np.float32)
            next_observation, _, terminated, truncated, info = self.env.step(action)
            done = terminated or truncated
            if oracle.done:
                # Upstream: a finished plan gets a new random target and that target's oracle; the loop keeps
                # the step's observation and info.
                plans += 1
                plans_succeeded += bool(info["success"])
                target_observation, target_info = self.env.unwrapped.set_new_target(p_stack=p_stack)
                oracle = self.oracles[target_info["privileged/target_task"]]
                oracle.reset(target_observation, target_info)
            rows["observations"].append(observation)
            rows["actions"].append(action)
            rows["terminals"].append(done)
            rows["qpos"].append(info["prev_qpos"])
            rows["qvel"].append(info["prev_qvel"])
            if self.has_button_states:
                rows["button_states"].append(info["prev_button_states"])
            observation = next_observation
        if len(rows["terminals"]) != self.episode_length:
            raise RuntimeError(
                f"{self.family} play episode ended after {len(rows['terminals'])} rows; expected exactly "
                f"{self.episode_length} (the data-collection env must only stop at its time limit)"
            )
        arrays = {key: np.asarray(values, dtype=self._keys()[key]) for key, values in rows.items()}
        return PlayEpisode(arrays, plans, plans_succeeded, unhealthy_attempts=0)

    def _keys(self) -> dict[str, type]:
        """The recorded keys and their dtypes (upstream: terminals bool, button_states int64, frames uint8, the rest
        float32)."""
        keys: dict[str, type] = {
            "observations": np.uint8 if self.visual else np.float32,
            "actions": np.float32,
            "terminals": np.bool_,
            "qpos": np.float32,
            "qvel": np.float32,
        }
        if self.has_button_states:
            keys["button_states"] = np.int64
        return keys

    def close(self) -> None:
        """Close the env."""
        self.env.close()
