"""Visual OGBench: the visual single-task envs, play data recorded as frames, and its lossless conversion to Minari.

The frames of a generated dataset are compared with what the visual single-task env shows online from the same
state, and the converted dataset with the recorded frames. Rendering is headless (tests/conftest.py).
"""

from __future__ import annotations

import warnings

import gymnasium as gym
import minari
import mujoco
import numpy as np
import pytest

from qc_sb3.common.datasets import load_offline_transitions
from qc_sb3.envs.ogbench import VISUAL_OGBENCH_TASKS, convert_to_minari, generate_dataset, make_env, parse_task
from qc_sb3.envs.ogbench.play import PlayCollector, episode_seeds, parse_play_dataset
from qc_sb3.envs.ogbench.tasks import singletask_env_id

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

EPISODE_LENGTH = 6
TASK = "visual-cube-single-play-singletask-task1-v0"


@pytest.fixture(autouse=True)
def minari_root(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))


@pytest.fixture(scope="module")
def visual_npz(tmp_path_factory):
    """One train and one validation visual cube-single episode of 6 rows, seed 0."""
    out_dir = tmp_path_factory.mktemp("visual")
    return generate_dataset(
        "visual-cube-single-play", episodes=1, val_episodes=1, out_dir=out_dir, episode_length=EPISODE_LENGTH
    )


def read_npz(path) -> dict[str, np.ndarray]:
    with np.load(path) as file:
        return {key: file[key] for key in file.files}


def test_visual_task_names_map_to_ogbenchs_visual_single_task_envs():
    assert len(VISUAL_OGBENCH_TASKS) == 30
    assert TASK in VISUAL_OGBENCH_TASKS
    assert parse_task(TASK) == ("cube-single", 1)
    assert singletask_env_id("visual-puzzle-3x3-play-singletask-task4-v0") == "visual-puzzle-3x3-singletask-task4-v0"
    assert parse_play_dataset("visual-scene-play-v0") == ("scene", True)
    assert parse_play_dataset("scene-play") == ("scene", False)
    for task in VISUAL_OGBENCH_TASKS:
        gym.spec(singletask_env_id(task))  # registered by OGBench
    with pytest.raises(ValueError, match="prefixed with 'visual-'"):
        parse_task("visual-puzzle-4x4-play-singletask-task1-v0")


def test_generated_rows_hold_uint8_frames_and_the_state_layout(visual_npz):
    assert visual_npz.name == "visual-cube-single-play-v0.npz"
    arrays = read_npz(visual_npz)
    assert set(arrays) == {"observations", "actions", "terminals", "qpos", "qvel"}
    assert arrays["observations"].shape == (EPISODE_LENGTH, 64, 64, 3)
    assert arrays["observations"].dtype == np.uint8
    assert arrays["qpos"].dtype == np.float32
    assert np.flatnonzero(arrays["terminals"]).tolist() == [EPISODE_LENGTH - 1]
    # The arm moves: the frames change from row to row.
    assert all((arrays["observations"][t] != arrays["observations"][t + 1]).any() for t in range(EPISODE_LENGTH - 1))


def test_dataset_frames_are_what_the_visual_single_task_env_shows_online(visual_npz):
    arrays = read_npz(visual_npz)
    # The recording env at the episode's start, seeded as the collector seeds episode 0 of seed 0.
    env_seed, oracle_seed = episode_seeds(0, 0)
    np.random.seed(oracle_seed)
    recording = gym.make("visual-cube-single-v0", terminate_at_goal=False, mode="data_collection")
    first_frame, _ = recording.reset(seed=env_seed)
    np.testing.assert_array_equal(first_frame, arrays["observations"][0])
    # The online single-task env put in that physics state; it keeps its own task's target (an invisible marker).
    online = make_env(TASK, seed=0)
    model, data = online.unwrapped._model, online.unwrapped._data
    own_target = data.mocap_pos.copy(), data.mocap_quat.copy()
    mujoco.mj_copyData(data, model, recording.unwrapped._data)
    data.mocap_pos[:], data.mocap_quat[:] = own_target
    np.testing.assert_array_equal(online.unwrapped.render(), arrays["observations"][0])
    # Each next row's frame is the online env's observation after that row's action.
    for t in range(EPISODE_LENGTH - 1):
        observation, *_ = online.step(arrays["actions"][t])
        np.testing.assert_array_equal(observation, arrays["observations"][t + 1], err_msg=f"row {t + 1}")
    online.close()
    recording.close()


def test_conversion_is_pixel_exact(visual_npz):
    dataset_id = convert_to_minari(visual_npz, TASK)
    assert dataset_id == f"ogbench/{TASK}"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no lossy-images warning
        transitions = load_offline_transitions(dataset_id, env_id=singletask_env_id(TASK))
    frames = read_npz(visual_npz)["observations"]
    # One trajectory of 6 rows: 5 transitions, row t to row t + 1, every pixel as recorded.
    assert transitions.observations.dtype == np.uint8
    np.testing.assert_array_equal(transitions.observations, frames[:-1])
    np.testing.assert_array_equal(transitions.next_observations, frames[1:])
    dataset = minari.load_dataset(dataset_id)
    assert dataset.observation_space == gym.spaces.Box(0, 255, (64, 64, 3), np.uint8)
    assert not dataset.storage.jpeg_encoding


def test_a_visual_npz_is_refused_for_a_state_task_and_a_state_npz_for_a_visual_task(visual_npz, tmp_path):
    with pytest.raises(ValueError, match=r"observations have shape \(6, 64, 64, 3\); expected 2 dimension"):
        convert_to_minari(visual_npz, "cube-single-play-singletask-task1-v0")
    arrays = read_npz(visual_npz)
    state_like = tmp_path / "state.npz"
    np.savez(state_like, **{**arrays, "observations": arrays["observations"].astype(np.float32)})
    with pytest.raises(ValueError, match="a visual dataset's frames must be uint8"):
        convert_to_minari(state_like, TASK)


def test_a_visual_env_without_a_display_or_a_headless_backend_is_refused_naming_the_fix(monkeypatch):
    monkeypatch.delenv("MUJOCO_GL", raising=False)
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.setattr("sys.platform", "linux")
    for build in (lambda: make_env(TASK), lambda: PlayCollector("cube-single", 5, visual=True)):
        with pytest.raises(RuntimeError, match=r"MUJOCO_GL=osmesa \(Debian package libosmesa6\) or MUJOCO_GL=egl"):
            build()
