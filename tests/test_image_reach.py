"""The image-reach task and suite: a point mass reaching a goal seen as a 36 x 36 RGB image, its scripted data, and
the runner's entry that trains ``CnnPolicy`` on it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from qc_sb3.benchmarks.runner.config import load_config
from qc_sb3.benchmarks.runner.datasets import prepare_datasets
from qc_sb3.benchmarks.runner.planning import plan_runs
from qc_sb3.benchmarks.runner.runs import build_model
from qc_sb3.benchmarks.runner.tasks import get_task
from qc_sb3.common.datasets import load_offline_transitions
from qc_sb3.envs.image_reach import (
    IMAGE_SIZE,
    generate_episodes,
    make_env,
    render,
    scripted_action,
    success_rate,
    write_minari_dataset,
)
from qc_sb3.envs.minari_root import minari_root


def test_reset_and_step_give_uint8_images_channels_last_and_success():
    env = make_env(seed=0)
    observation, info = env.reset(seed=3)
    assert observation.shape == (IMAGE_SIZE, IMAGE_SIZE, 3) and observation.dtype == np.uint8
    assert env.observation_space.contains(observation) and info == {"success": False}
    observation, reward, terminated, truncated, info = env.step(np.zeros(2, np.float32))
    assert observation.dtype == np.uint8 and (reward, terminated, truncated, info) == (-1.0, False, False, {"success": False})


def test_success_within_the_radius_terminates_with_reward_zero():
    env = make_env()
    env.reset(seed=0)
    task = env.unwrapped
    task.position, task.goal = np.zeros(2), np.array([0.2, 0.2])
    # (0, 0) + 0.1 * (1, 0) = (0.1, 0): 0.224 from the goal, outside the radius 0.15.
    _, reward, terminated, _, info = env.step(np.array([1.0, 0.0]))
    assert (reward, terminated, info["success"]) == (-1.0, False, False)
    # (0.1, 0) + 0.1 * (0, 1) = (0.1, 0.1): 0.141 from the goal, inside.
    _, reward, terminated, _, info = env.step(np.array([0.0, 1.0]))
    assert (reward, terminated, info["success"]) == (0.0, True, True)
    np.testing.assert_allclose(task.position, [0.1, 0.1])


def test_render_draws_the_point_red_and_the_goal_green_at_their_pixels():
    image = render(np.array([-1.0, 1.0]), np.array([0.0, 0.0]))
    expected = np.zeros((IMAGE_SIZE, IMAGE_SIZE, 3), np.uint8)
    expected[0:4, 32:36, 0] = 255  # row -1 -> 0, column 1 -> 36 - 4
    expected[16:20, 16:20, 1] = 255  # 0 -> (36 - 4) / 2
    np.testing.assert_array_equal(image, expected)


def test_the_scripted_action_heads_for_the_goal_clipped():
    action = scripted_action(np.zeros(2), np.array([0.05, -0.5]), 0.0, np.random.default_rng(0))
    np.testing.assert_allclose(action, [0.5, -1.0])
    assert action.dtype == np.float32


def test_generated_episodes_are_the_same_for_a_seed_and_differ_across_seeds():
    first, again, other = generate_episodes(3, seed=1), generate_episodes(3, seed=1), generate_episodes(3, seed=2)
    for episode, same in zip(first, again, strict=True):
        assert episode.keys() == same.keys()
        for key in episode:
            np.testing.assert_array_equal(episode[key], same[key])
    assert not np.array_equal(first[0]["actions"][:2], other[0]["actions"][:2])
    episode = first[0]
    assert len(episode["observations"]) == len(episode["actions"]) + 1
    assert episode["terminations"][-1] == episode["success"][-1] and not episode["terminations"][:-1].any()
    assert 0.0 <= success_rate(first) <= 1.0
    with pytest.raises(ValueError, match="episodes must be >= 1, got 0"):
        generate_episodes(0)


def test_the_minari_dataset_keeps_every_pixel(tmp_path):
    episodes = generate_episodes(2, seed=0)
    with minari_root(tmp_path) as root:
        write_minari_dataset("test/image-reach-v0", episodes)
        with pytest.raises(FileExistsError, match="already exists"):
            write_minari_dataset("test/image-reach-v0", episodes)
        transitions = load_offline_transitions(str(root / "test/image-reach-v0"))
    expected = np.concatenate([episode["observations"][:-1] for episode in episodes])
    assert transitions.observations.dtype == np.uint8
    np.testing.assert_array_equal(transitions.observations, expected)


def image_reach_config(tmp_path: Path) -> dict:
    return {
        "name": "image-test",
        "tasks": ["image-reach-v0"],
        "methods": ["QC"],
        "seeds": [0],
        "protocol": {"offline_steps": 2, "online_steps": 2, "eval_interval": 2, "eval_episodes": 1},
        "datasets": {"image-reach": {"source": "generate", "episodes": 2}},
        "dataset_cache": str(tmp_path / "cache"),
        "hyperparameters": {
            "policy_kwargs": {"net_arch": [8], "features_extractor_kwargs": {"features_dim": 8}},
            "batch_size": 4,
            "actor_num_samples": 2,
            "flow_steps": 2,
        },
    }


def test_the_suite_runs_cnn_policy_on_its_generated_images(tmp_path):
    task = get_task("image-reach-v0")
    assert (task.suite, task.domain, task.policy) == ("image-reach", "image-reach", "CnnPolicy")
    (run,) = plan_runs(load_config(image_reach_config(tmp_path)), tmp_path / "out")
    assert run.policy == "CnnPolicy"
    (run,) = prepare_datasets([run], tmp_path / "cache")
    env = run.make_env(seed=0, **run.env_kwargs)
    model = build_model(run, env)
    assert type(model.policy).__name__ == "CnnPolicy"
    assert model.replay_buffer.observations.dtype == np.uint8
    model.pretrain(gradient_steps=1)
    env.close()
