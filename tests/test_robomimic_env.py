"""qc_sb3.envs.robomimic's env factory against robosuite's simulator state: observation layout, sparse reward, success."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip(
    "robosuite", reason="robosuite is not installed (the 'robomimic' extra, then pip install --no-deps robosuite==1.5.2)"
)

from qc_sb3.envs.robomimic import EPISODE_LIMITS, make_env

ROOT = Path(__file__).resolve().parents[1]
# robosuite 1.5.2's warnings on import, as its source words them (robosuite/macros.py, robosuite/__init__.py).
STARTUP_MESSAGES = (
    "No private macro file found!",
    "It is recommended to use a private macro file",
    "setup_macros.py",
    "Could not import robosuite_models",
    "Could not load the mink-based whole-body IK",
)
OBS_DIMS = {"lift-mh-low_dim": 19, "can-mh-low_dim": 23, "square-mh-low_dim": 23}


@pytest.fixture(scope="module", params=sorted(OBS_DIMS))
def env(request: pytest.FixtureRequest) -> gym.Env:
    env = make_env(request.param, seed=0)
    yield env
    env.close()


def place(env: gym.Env, joint: str, position: list[float]) -> None:
    """Put a free-jointed object at ``position``, upright, and recompute the simulator's derived quantities."""
    sim = env.unwrapped.robosuite_env.sim
    start, _ = sim.model.get_joint_qpos_addr(joint)
    sim.data.qpos[start : start + 7] = [*position, 1.0, 0.0, 0.0, 0.0]
    sim.forward()


def test_spaces_and_observation_layout(env: gym.Env) -> None:
    task = env.unwrapped.task.name
    assert env.observation_space.shape == (OBS_DIMS[task],)
    assert env.observation_space.dtype == np.float32
    assert env.action_space == gym.spaces.Box(-1.0, 1.0, (7,), np.float32)
    assert env.spec.max_episode_steps == EPISODE_LIMITS[task]
    observation, info = env.reset(seed=0)
    assert observation.shape == (OBS_DIMS[task],) and observation.dtype == np.float32
    assert info == {"success": False}
    robosuite_env = env.unwrapped.robosuite_env
    sim = robosuite_env.sim
    raw = robosuite_env._get_observations(force_update=True)
    grip_site = sim.data.site_xpos[sim.model.site_name2id("gripper0_right_grip_site")]
    fingers = [sim.data.qpos[sim.model.get_joint_qpos_addr(f"gripper0_right_finger_joint{i}")] for i in (1, 2)]
    np.testing.assert_allclose(observation[:3], grip_site, atol=1e-6)
    np.testing.assert_allclose(observation[3:7], raw["robot0_eef_quat"], atol=1e-6)
    np.testing.assert_allclose(observation[7:9], fingers, atol=1e-6)
    np.testing.assert_allclose(observation[9:], raw["object-state"], atol=1e-6)
    if task == "lift-mh-low_dim":
        np.testing.assert_allclose(observation[9:12], sim.data.body_xpos[sim.model.body_name2id("cube_main")], atol=1e-6)


def test_reward_is_minus_one_until_success_which_terminates(env: gym.Env) -> None:
    env.reset(seed=1)
    for _ in range(3):
        _, reward, terminated, truncated, info = env.step(np.zeros(7, dtype=np.float32))
        assert (reward, terminated, truncated, info) == (-1.0, False, False, {"success": False})
    robosuite_env = env.unwrapped.robosuite_env
    task = env.unwrapped.task.short_name
    if task == "lift":
        # 25 cm above the table: still above the 4 cm success height after one 50 ms control step of free fall.
        place(env, robosuite_env.cube.joints[0], [0.0, 0.0, robosuite_env.model.mujoco_arena.table_offset[2] + 0.25])
    elif task == "can":
        # Resting in the can's quadrant of the target bin.
        can = robosuite_env.objects[robosuite_env.object_id]
        place(env, can.joints[0], [robosuite_env.bin2_pos[0] + 0.1, robosuite_env.bin2_pos[1] + 0.12, 0.86])
    else:
        # Around the square peg, lying on the table.
        peg = robosuite_env.sim.data.body_xpos[robosuite_env.peg1_body_id]
        place(env, robosuite_env.nuts[robosuite_env.nut_id].joints[0], [peg[0], peg[1], 0.83])
    _, reward, terminated, truncated, info = env.step(np.zeros(7, dtype=np.float32))
    assert (reward, terminated, truncated, info) == (0.0, True, False, {"success": True})


def test_seeded_resets_repeat_and_differ_across_seeds(env: gym.Env) -> None:
    first, _ = env.reset(seed=7)
    again, _ = env.reset(seed=7)
    other, _ = env.reset(seed=8)
    np.testing.assert_array_equal(first, again)
    assert not np.allclose(first[9:12], other[9:12])


def test_time_limit_and_unknown_task() -> None:
    env = make_env("lift", max_episode_steps=2, seed=0)
    env.reset()
    assert env.step(np.zeros(7, dtype=np.float32))[3] is False
    _, _, terminated, truncated, info = env.step(np.zeros(7, dtype=np.float32))
    assert (terminated, truncated, info["success"]) == (False, True, False)
    env.close()
    with pytest.raises(ValueError, match=r"unknown robomimic task 'transport'.*'can-mh-low_dim' \('can'\)"):
        make_env("transport")


def run_python(code: str) -> str:
    """Run ``code`` in a fresh interpreter (robosuite logs its start-up warnings once, on first import); its output."""
    env = {key: value for key, value in os.environ.items() if key != "FORCE_COLOR"} | {"NO_COLOR": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=True
    )
    return done.stdout + done.stderr


def test_env_creation_hides_robosuite_startup_warnings_and_passes_others() -> None:
    plain = run_python("import robosuite")
    printed = [message for message in STARTUP_MESSAGES if message in plain]
    assert printed, f"a plain robosuite import printed none of the start-up warnings: {plain!r}"
    quiet = run_python(
        "import logging\n"
        "from qc_sb3.envs.robomimic import make_env\n"
        "from qc_sb3.envs.robomimic.env import quiet_robosuite_startup\n"
        "make_env('lift', seed=0).reset(seed=0)\n"
        "logger = logging.getLogger('robosuite_logs')\n"
        "with quiet_robosuite_startup():\n"
        "    logger.warning('Could not find a controller config')\n"
        "logger.warning('No private macro file found! (after the block)')\n"
        "print('built')\n"
    )
    assert "built" in quiet
    # Building the env (robosuite's first import) prints none of them; within the block another robosuite warning
    # passes, and after it the filter is gone.
    lines = [line for line in quiet.splitlines() if any(message in line for message in printed)]
    assert lines == ["[robosuite WARNING] No private macro file found! (after the block) (<string>:8)"]
    assert "[robosuite WARNING] Could not find a controller config (<string>:7)" in quiet
