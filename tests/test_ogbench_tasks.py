"""qc_sb3.envs.ogbench.tasks: task names, episode limits against OGBench's registry, the env factory, the sparse reward
(§6)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from qc_sb3.envs.ogbench import (
    EPISODE_LIMITS,
    OGBENCH_FAMILIES,
    OGBENCH_TASKS,
    SPARSE_BY_DEFAULT,
    SparseReward,
    make_env,
    parse_task,
    sparse_rewards,
)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def test_task_names_are_the_papers():
    assert OGBENCH_FAMILIES == ("cube-single", "cube-double", "cube-triple", "cube-quadruple", "scene", "puzzle-3x3")
    expected = [f"{family}-play-singletask-task{k}-v0" for family in OGBENCH_FAMILIES for k in range(1, 6)]
    assert list(OGBENCH_TASKS) == expected
    assert {"scene", "puzzle-3x3"} == set(SPARSE_BY_DEFAULT)


@pytest.mark.parametrize("task", OGBENCH_TASKS)
def test_parse_task_round_trip(task):
    family, task_id = parse_task(task)
    assert f"{family}-play-singletask-task{task_id}-v0" == task
    # The single-task env OGBench registers for it exists.
    gym.spec(f"{family}-singletask-task{task_id}-v0")


@pytest.mark.parametrize(
    "name",
    [
        "cube-double-singletask-task2-v0",  # the env id, not the task name
        "cube-double-play-singletask-task6-v0",
        "cube-double-play-singletask-task0-v0",
        "puzzle-4x4-play-singletask-task1-v0",
        "cube-double-play-v0",
        "",
        None,
    ],
)
def test_parse_task_rejects_unknown_names_and_lists_valid_ones(name):
    with pytest.raises(ValueError, match="unknown OGBench task") as error:
        parse_task(name)
    assert "cube-double-play-singletask-task2-v0" in str(error.value)
    assert "puzzle-3x3-play-singletask-task5-v0" in str(error.value)


@pytest.mark.parametrize("family", OGBENCH_FAMILIES)
def test_episode_limits_match_ogbench_registry(family):
    assert EPISODE_LIMITS[family] == gym.spec(f"{family}-singletask-task1-v0").max_episode_steps
    assert EPISODE_LIMITS[family] == gym.spec(f"{family}-v0").max_episode_steps


def test_make_env_is_the_single_task_env_with_its_limit():
    env = make_env("cube-double-play-singletask-task2-v0")
    assert env.spec.id == "cube-double-singletask-task2-v0"
    assert env.spec.max_episode_steps == 500
    assert env.unwrapped._reward_task_id == 2
    assert not isinstance(env, SparseReward)
    assert env.observation_space.shape == (37,)
    assert env.action_space.shape == (5,)
    env.close()


def test_make_env_time_limit_override_truncates():
    env = make_env("cube-single-play-singletask-task1-v0", max_episode_steps=3, seed=0)
    assert env.spec.max_episode_steps == 3
    # seed=0 reset the env with that seed: the same reset again gives the same state.
    seeded_observation = env.unwrapped.compute_observation()
    np.testing.assert_array_equal(env.reset(seed=0)[0], seeded_observation)
    assert not np.array_equal(env.reset(seed=1)[0], seeded_observation)
    env.reset(seed=0)
    flags = [env.step(np.zeros(5, dtype=np.float32))[2:4] for _ in range(3)]
    assert flags == [(False, False), (False, False), (False, True)]
    env.close()


@pytest.mark.parametrize("bad", [0, -1, True])
def test_make_env_rejects_bad_time_limit(bad):
    with pytest.raises(ValueError, match="max_episode_steps"):
        make_env("cube-single-play-singletask-task1-v0", max_episode_steps=bad)


def test_make_env_unknown_task():
    with pytest.raises(ValueError, match="expected one of"):
        make_env("cube-double-singletask-task2-v0")


@pytest.mark.parametrize(
    ("task", "sparse", "wrapped"),
    [
        ("scene-play-singletask-task1-v0", None, True),
        ("cube-single-play-singletask-task2-v0", None, False),
        ("cube-single-play-singletask-task2-v0", True, True),
    ],
)
def test_sparse_default_per_family(task, sparse, wrapped):
    env = make_env(task, sparse=sparse)
    assert isinstance(env, SparseReward) == wrapped
    env.close()


def test_sparse_rewards_formula():
    dense = np.array([-3.0, -1.0, 0.0, -2.0, 0.0], dtype=np.float32)
    expected = np.array([-1.0, -1.0, 0.0, -1.0, 0.0], dtype=np.float32)
    result = sparse_rewards(dense)
    np.testing.assert_array_equal(result, expected)
    np.testing.assert_array_equal(sparse_rewards(np.array([-2, 0])), [-1.0, 0.0])
    for reward in (-4.0, -1.0, 0.0):
        assert SparseReward.reward(None, reward) == -1.0 * (reward != 0)


def test_sparse_wrapper_matches_formula_on_the_dense_reward_in_the_env():
    # OGBench single-task envs compute the reward on the state before the action (success_timing="pre").
    env = make_env("scene-play-singletask-task2-v0", seed=0)
    rng = np.random.default_rng(0)
    for _ in range(5):
        dense = env.unwrapped.compute_reward()
        _, reward, _, _, _ = env.step(rng.uniform(-1, 1, 5).astype(np.float32))
        assert dense < 0
        assert reward == -1.0 * (dense != 0)
    env.close()


def set_buttons_and_step(env: gym.Env, button_states: np.ndarray) -> list[tuple[float, bool, bool]]:
    """Put the puzzle's buttons in a state, then step twice in place; (reward, terminated, success) per step."""
    puzzle = env.unwrapped
    puzzle._cur_button_states = button_states.copy()
    puzzle._apply_button_states()
    outcomes = []
    for _ in range(2):
        _, reward, terminated, _, info = env.step(np.zeros(5, dtype=np.float32))
        outcomes.append((reward, terminated, bool(info["success"])))
    return outcomes


@pytest.mark.parametrize(("sparse", "unsolved_reward"), [(None, -1.0), (False, -9.0)])
def test_terminates_on_success_with_success_info(sparse, unsolved_reward):
    env = make_env("puzzle-3x3-play-singletask-task1-v0", sparse=sparse, seed=0)
    target = env.unwrapped._target_button_states
    # Every button away from its target: 9 unsolved (puzzle-3x3 is sparse by default: -1).
    assert set_buttons_and_step(env, 1 - target)[1] == (unsolved_reward, False, False)
    outcomes = set_buttons_and_step(env, target)
    # The reward is computed on the state before the action, but success is evaluated after a step, so
    # termination and info["success"] show on the step after the buttons were solved (success_timing="pre").
    assert outcomes[0] == (0.0, False, False)
    assert outcomes[1] == (0.0, True, True)
    env.close()
