"""Scripted lift demonstrations in robomimic's layout, and the whole path: generate -> convert -> QC offline then
online on the robosuite env."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import minari
import numpy as np
import pytest
import torch as th

pytest.importorskip(
    "robosuite", reason="robosuite is not installed (the 'robomimic' extra, then pip install --no-deps robosuite==1.5.2)"
)

from qc_sb3 import QC
from qc_sb3.envs.robomimic import RobomimicEnv, convert_to_minari, generate_demos, make_env
from qc_sb3.envs.robomimic import demos as demos_module

EPISODES = 3


@pytest.fixture(scope="module")
def lift_demos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate_demos("lift", episodes=EPISODES, out_path=tmp_path_factory.mktemp("demos") / "lift.hdf5", seed=0)


@pytest.fixture(autouse=True)
def minari_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "minari"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    return root


@pytest.fixture
def one_torch_thread():
    """Train on one thread: with networks this small, more threads only contend for the cores."""
    n_threads = th.get_num_threads()
    th.set_num_threads(1)
    yield
    th.set_num_threads(n_threads)


def test_scripted_lift_demos_succeed_in_robomimic_layout(lift_demos: Path) -> None:
    with h5py.File(lift_demos, "r") as file:
        data = file["data"]
        names = [f"demo_{index}" for index in range(EPISODES)]
        assert sorted(data) == names
        lengths = [len(data[f"{name}/actions"]) for name in names]
        assert data.attrs["total"] == sum(lengths)
        for name, length in zip(names, lengths, strict=True):
            demo = data[name]
            assert demo.attrs["num_samples"] == length
            assert demo["states"].shape[0] == length and demo["rewards"].shape == demo["dones"].shape == (length,)
            # A demo ends at its first success: rewards and dones are 0 before, 1 on the last step.
            np.testing.assert_array_equal(demo["rewards"][()], np.arange(length) == length - 1)
            np.testing.assert_array_equal(demo["dones"][()], np.arange(length) == length - 1)
            actions = demo["actions"][()]
            assert actions.shape == (length, 7) and np.abs(actions).max() <= 1.0
            assert set(np.unique(actions[:, 6])) <= {-1.0, 1.0}
            for key in demo["obs"]:
                np.testing.assert_array_equal(demo[f"obs/{key}"][1:], demo[f"next_obs/{key}"][:-1])
            assert demo["obs/object"].shape == (length, 10)
        masks = {key: {name.decode() for name in file[f"mask/{key}"][()]} for key in file["mask"]}
        assert masks["train"] | masks["valid"] == set(names) and not masks["train"] & masks["valid"]
        assert masks["successful"] == set(names)
        styles = [members for key, members in masks.items() if key.startswith("style_")]
        assert sorted(name for members in styles for name in members) == names


def test_states_reproduce_the_recorded_observations(lift_demos: Path) -> None:
    with h5py.File(lift_demos, "r") as file:
        env_args = json.loads(file["data"].attrs["env_args"])
        demo = file["data/demo_1"]
        states, eef = demo["states"][()], demo["obs/robot0_eef_pos"][()]
    env = make_env("lift", env_args=env_args)
    env.reset(seed=0)
    robosuite_env = env.unwrapped.robosuite_env
    for step in range(len(states)):
        robosuite_env.sim.set_state_from_flattened(states[step])
        robosuite_env.sim.forward()
        observed = robosuite_env._get_observations(force_update=True)["robot0_eef_pos"]
        np.testing.assert_allclose(observed, eef[step], atol=1e-9)
    env.close()


def test_generation_is_seeded_and_independent_of_workers(lift_demos: Path, tmp_path: Path) -> None:
    again = generate_demos("lift", episodes=1, out_path=tmp_path / "again.hdf5", seed=0, workers=2)
    with h5py.File(lift_demos, "r") as first, h5py.File(again, "r") as second:
        np.testing.assert_array_equal(first["data/demo_0/actions"][()], second["data/demo_0/actions"][()])
        np.testing.assert_array_equal(first["data/demo_0/states"][()], second["data/demo_0/states"][()])
    with pytest.raises(FileExistsError, match="already exists"):
        generate_demos("lift", episodes=1, out_path=again)
    with pytest.raises(ValueError, match="episodes must be an integer >= 1"):
        generate_demos("lift", episodes=0, out_path=tmp_path / "none.hdf5")


@pytest.mark.usefixtures("one_torch_thread")
def test_generate_convert_then_qc_offline_and_online(lift_demos: Path) -> None:
    dataset_id = convert_to_minari(lift_demos, "lift-mh-low_dim")
    dataset = minari.load_dataset(dataset_id)
    recovered = dataset.recover_environment()
    assert isinstance(recovered.unwrapped, RobomimicEnv) and recovered.spec.max_episode_steps == 300
    with h5py.File(lift_demos, "r") as file:
        assert recovered.unwrapped.env_args == json.loads(file["data"].attrs["env_args"])
        total = int(file["data"].attrs["total"])
    assert recovered.reset(seed=0)[0].shape == (19,)
    recovered.close()

    env = make_env("lift", seed=0)
    model = QC(
        "MlpPolicy",
        env,
        offline_dataset=dataset_id,
        offline_gradient_steps=20,
        learning_starts=20,
        batch_size=16,
        chunk_size=5,
        actor_num_samples=4,
        flow_steps=2,
        policy_kwargs={"net_arch": [32, 32]},
        seed=0,
    )
    model.learn(total_timesteps=40)
    assert model.offline_steps_done == 20 and model.num_timesteps == 40
    assert model.replay_buffer.offline_size == total
    env.close()


def no_generation(*args, **kwargs):
    raise AssertionError("demos were generated before the output path was checked")


def test_output_path_that_is_a_directory_is_refused_before_generating(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(demos_module, "_episodes", no_generation)
    with pytest.raises(IsADirectoryError, match="is a directory; expected the path of the hdf5 file"):
        generate_demos("lift", episodes=1, out_path=tmp_path, overwrite=True)


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc/self as an unwritable folder")
def test_unwritable_output_folder_is_refused_before_generating(monkeypatch) -> None:
    # /proc/self exists, yet no one (root included) can create a file in it.
    monkeypatch.setattr(demos_module, "_episodes", no_generation)
    with pytest.raises(PermissionError, match=r"output folder '/proc/self' is not writable"):
        generate_demos("lift", episodes=1, out_path=Path("/proc/self/demos.hdf5"))
