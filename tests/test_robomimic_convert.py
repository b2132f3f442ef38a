"""qc_sb3.envs.robomimic's converter against a direct h5py read of synthetic robomimic files (no robosuite needed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import h5py
import minari
import numpy as np
import pytest

from qc_sb3.common.datasets import load_offline_transitions
from qc_sb3.envs.minari_root import this_host_staging_prefix
from qc_sb3.envs.robomimic import convert_to_minari
from qc_sb3.envs.robomimic.__main__ import main

# The paper's observation: these keys of obs/, in this order, with these sizes for lift.
KEYS = ("robot0_eef_pos", "robot0_eef_quat", "robot0_gripper_qpos", "object")
LIFT_SIZES = {"robot0_eef_pos": 3, "robot0_eef_quat": 4, "robot0_gripper_qpos": 2, "object": 10}
LIFT_ENV_ARGS = {
    "env_name": "Lift",
    "env_version": "1.5.1",
    "type": 1,
    "env_kwargs": {
        "has_renderer": False,
        "has_offscreen_renderer": True,
        "ignore_done": True,
        "use_object_obs": True,
        "use_camera_obs": False,
        "control_freq": 20,
        "controller_configs": {"type": "BASIC", "body_parts": {"right": {"type": "OSC_POSE", "kp": 150}}},
        "robots": ["Panda"],
        "camera_names": ["agentview"],
        "reward_shaping": False,
    },
}
# Demo name -> length; written out of order on purpose.
DEMOS = {"demo_10": 7, "demo_2": 5, "demo_0": 6}
# The Minari episodes (first step, last step) each demo of write_file splits into: one after every dones = 1.
DEMO_PIECES = {"demo_0": [(0, 3), (4, 4), (5, 5)], "demo_2": [(0, 2), (3, 4)], "demo_10": [(0, 3), (4, 5), (6, 6)]}


def sparse_rewards_and_dones(steps: int, success_at_end: bool) -> tuple[np.ndarray, np.ndarray]:
    """Rewards with a success state mid-demo (e.g. an operator lifting the cube twice), dones as done_mode 2."""
    rewards = np.zeros(steps)
    rewards[steps // 2] = 1.0
    if success_at_end:
        rewards[-2:] = 1.0
    dones = rewards.copy()
    dones[-1] = 1.0
    return rewards, dones


def write_demo(group: h5py.Group, rewards: np.ndarray, dones: np.ndarray, rng: np.random.Generator, sizes: dict) -> None:
    """A demo in the robomimic layout: next_obs[t] == obs[t + 1], the given rewards and dones."""
    steps = len(rewards)
    for key, size in {**sizes, "robot0_joint_pos": 7}.items():
        values = rng.normal(size=(steps + 1, size))
        group.create_dataset(f"obs/{key}", data=values[:-1])
        group.create_dataset(f"next_obs/{key}", data=values[1:])
    group.create_dataset("actions", data=rng.uniform(-1, 1, size=(steps, 7)))
    group.create_dataset("states", data=rng.normal(size=(steps, 32)))
    group.create_dataset("rewards", data=rewards)
    group.create_dataset("dones", data=dones)
    group.attrs["num_samples"] = steps
    group.attrs["model_file"] = "<mujoco/>"


def write_file(path: Path, env_args: dict | None = LIFT_ENV_ARGS, sizes: dict = LIFT_SIZES) -> Path:
    """A small robomimic low-dim file: three demos, the middle one (demo_2) failing, train/valid masks."""
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as file:
        data = file.create_group("data")
        for name, steps in DEMOS.items():
            write_demo(data.create_group(name), *sparse_rewards_and_dones(steps, name != "demo_2"), rng, sizes)
        data.attrs["total"] = sum(DEMOS.values())
        if env_args is not None:
            data.attrs["env_args"] = json.dumps(env_args)
        file.create_dataset("mask/train", data=np.array([b"demo_10", b"demo_0"]))
        file.create_dataset("mask/valid", data=np.array([b"demo_2"]))
    return path


@pytest.fixture(autouse=True)
def minari_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "minari"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    return root


@pytest.fixture
def lift_file(tmp_path: Path) -> Path:
    return write_file(tmp_path / "low_dim.hdf5")


def read_demo(path: Path, name: str) -> dict[str, np.ndarray]:
    """The arrays a converted episode must hold, read straight from the file."""
    with h5py.File(path, "r") as file:
        demo = file[f"data/{name}"]
        observations = np.concatenate([demo[f"obs/{key}"][()] for key in KEYS], axis=1)
        last = np.concatenate([demo[f"next_obs/{key}"][-1] for key in KEYS])
        rewards = demo["rewards"][()]
        return {
            "observations": np.vstack([observations, last]),
            "actions": demo["actions"][()],
            "rewards": rewards - 1.0,
            "success": rewards == 1.0,
            "dones": demo["dones"][()],
        }


def test_episodes_equal_a_direct_read_in_integer_order(lift_file: Path) -> None:
    dataset_id = convert_to_minari(lift_file, "lift-mh-low_dim")
    assert dataset_id == "robomimic/lift-mh-low_dim-v0"
    dataset = minari.load_dataset(dataset_id)
    episodes = list(dataset.iterate_episodes())
    assert dataset.observation_space.shape == (19,)
    pieces = [(name, piece) for name in ("demo_0", "demo_2", "demo_10") for piece in DEMO_PIECES[name]]
    assert len(episodes) == len(pieces)
    for episode, (name, (first, last)) in zip(episodes, pieces, strict=True):
        expected = read_demo(lift_file, name)
        steps = last - first + 1
        assert episode.observations.shape == (steps + 1, 19)
        assert episode.observations.dtype == np.float32
        np.testing.assert_allclose(episode.observations, expected["observations"][first : last + 2], rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(episode.actions, expected["actions"][first : last + 1], rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(episode.rewards, expected["rewards"][first : last + 1])
        # Every piece ends at a dones = 1 step (done_mode 2 writes one on each demo's last step): terminated there.
        np.testing.assert_array_equal(episode.terminations, np.arange(steps) == steps - 1)
        np.testing.assert_array_equal(episode.truncations, False)
        success = np.concatenate([[False], expected["success"]])
        np.testing.assert_array_equal(episode.infos["success"], success[first : last + 2])


def test_filter_key_selects_its_demos(lift_file: Path) -> None:
    dataset = minari.load_dataset(convert_to_minari(lift_file, "lift", filter_key="train"))
    episodes = list(dataset.iterate_episodes())
    pieces = DEMO_PIECES["demo_0"] + DEMO_PIECES["demo_10"]
    assert [len(episode.rewards) for episode in episodes] == [last - first + 1 for first, last in pieces]
    actions = np.concatenate([episode.actions for episode in episodes[len(DEMO_PIECES["demo_0"]) :]])
    np.testing.assert_allclose(actions, read_demo(lift_file, "demo_10")["actions"], rtol=1e-6)


def test_env_spec_rebuilds_the_task_env_from_the_file_env_args(lift_file: Path) -> None:
    dataset = minari.load_dataset(convert_to_minari(lift_file, "lift-mh-low_dim", dataset_id="mine/lift-v3"))
    spec = dataset.spec.env_spec
    assert spec.entry_point == "qc_sb3.envs.robomimic.env:RobomimicEnv"
    assert spec.max_episode_steps == 300
    assert spec.kwargs == {"task": "lift-mh-low_dim", "env_args": LIFT_ENV_ARGS}
    assert dataset.storage.metadata["eval_env_spec"] == dataset.storage.metadata["env_spec"]


def test_the_library_loader_reads_the_dataset(lift_file: Path) -> None:
    data = load_offline_transitions(convert_to_minari(lift_file, "lift"))
    expected = [read_demo(lift_file, name) for name in ("demo_0", "demo_2", "demo_10")]
    np.testing.assert_allclose(
        data.observations, np.concatenate([demo["observations"][:-1] for demo in expected]), rtol=1e-6, atol=1e-6
    )
    np.testing.assert_allclose(
        data.next_observations, np.concatenate([demo["observations"][1:] for demo in expected]), rtol=1e-6, atol=1e-6
    )
    dones = np.concatenate([demo["dones"] for demo in expected]) == 1
    np.testing.assert_array_equal(data.terminated, dones)
    np.testing.assert_array_equal(data.episode_end, dones)


def write_dones_file(path: Path) -> Path:
    """Three demos: dones on the last (rewarded) step only; a reward-1 step before the last; a demo cut short."""
    rng = np.random.default_rng(1)
    with h5py.File(path, "w") as file:
        data = file.create_group("data")
        data.attrs["env_args"] = json.dumps(LIFT_ENV_ARGS)
        write_demo(data.create_group("demo_0"), np.array([0, 0, 0, 1.0]), np.array([0, 0, 0, 1]), rng, LIFT_SIZES)
        write_demo(data.create_group("demo_1"), np.array([0, 1, 0, 0, 1.0]), np.array([0, 1, 0, 0, 1]), rng, LIFT_SIZES)
        write_demo(data.create_group("demo_2"), np.array([0, 0, 0.0]), np.array([0, 0, 0]), rng, LIFT_SIZES)
    return path


def test_dones_are_episode_ends_and_termination_masks_as_the_reference_reads_them(tmp_path: Path) -> None:
    data = load_offline_transitions(convert_to_minari(write_dones_file(tmp_path / "dones.hdf5"), "lift"))
    # The reference: terminals = dones (episode ends of its windows), masks = 1 - dones (no bootstrap past them).
    # Here a demo's last step always ends its episode, also when cut short (demo_2: dones 0, truncated).
    #             demo_0      demo_1         demo_2
    terminated = [0, 0, 0, 1, 0, 1, 0, 0, 1, 0, 0, 0]
    episode_end = [0, 0, 0, 1, 0, 1, 0, 0, 1, 0, 0, 1]
    np.testing.assert_array_equal(data.terminated, np.array(terminated, dtype=bool))
    np.testing.assert_array_equal(data.episode_end, np.array(episode_end, dtype=bool))
    np.testing.assert_array_equal(data.rewards, [-1, -1, -1, 0, -1, 0, -1, -1, 0, -1, -1, -1])


def test_existing_ids_are_refused_unless_overwrite(lift_file: Path, minari_root: Path) -> None:
    dataset_id = convert_to_minari(lift_file, "lift", filter_key="valid")
    with pytest.raises(FileExistsError, match=r"already exists.*overwrite"):
        convert_to_minari(lift_file, "lift")
    assert minari.load_dataset(dataset_id).total_episodes == len(DEMO_PIECES["demo_2"])
    convert_to_minari(lift_file, "lift", overwrite=True)
    assert minari.load_dataset(dataset_id).total_episodes == sum(len(pieces) for pieces in DEMO_PIECES.values())
    # Nothing but the dataset's namespace is left in the Minari root: staging folders are gone.
    assert sorted(path.name for path in minari_root.iterdir()) == ["robomimic"]


def test_bad_input_fails_before_any_dataset_is_written(tmp_path: Path, lift_file: Path, minari_root: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"missing\.hdf5"):
        convert_to_minari(tmp_path / "missing.hdf5", "lift")
    with pytest.raises(ValueError, match=r"filter key 'best'.*\['train', 'valid'\]"):
        convert_to_minari(lift_file, "lift", filter_key="best")
    with pytest.raises(ValueError, match=r"unknown robomimic task 'stack'.*'lift-mh-low_dim'.*'square-mh-low_dim'"):
        convert_to_minari(lift_file, "stack")
    with pytest.raises(ValueError, match="'Lift' but task 'can-mh-low_dim' runs 'PickPlaceCan'"):
        convert_to_minari(lift_file, "can")
    no_env_args = write_file(tmp_path / "no_env_args.hdf5", env_args=None)
    with pytest.raises(ValueError, match=r"19-D in all.*'can-mh-low_dim' expects.*23-D"):
        convert_to_minari(no_env_args, "can")
    no_object = write_file(tmp_path / "no_object.hdf5", sizes={k: v for k, v in LIFT_SIZES.items() if k != "object"})
    with pytest.raises(ValueError, match=r"demo_0 lacks \['obs/object', 'next_obs/object'\]"):
        convert_to_minari(no_object, "lift")
    no_dones = write_file(tmp_path / "no_dones.hdf5")
    with h5py.File(no_dones, "a") as file:
        del file["data/demo_10/dones"]
    with pytest.raises(ValueError, match=r"demo_10 lacks \['dones'\]"):
        convert_to_minari(no_dones, "lift")
    dense = write_file(tmp_path / "dense.hdf5")
    with h5py.File(dense, "a") as file:
        file["data/demo_2/rewards"][0] = 0.5
    with pytest.raises(ValueError, match=r"demo_2 has rewards.*sparse rewards 0/1"):
        convert_to_minari(dense, "lift")
    assert not minari_root.exists() or list(minari_root.iterdir()) == []


def test_relative_minari_root(lift_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Minari joins a relative root with itself when it writes: the converter must hand it an absolute one.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MINARI_DATASETS_PATH", "relative/minari")
    dataset_id = convert_to_minari(lift_file, "lift")
    assert (tmp_path / "relative" / "minari" / dataset_id / "data" / "main_data.hdf5").is_file()
    assert len(load_offline_transitions(dataset_id).rewards) == sum(DEMOS.values())


def edited_file(path: Path, edit) -> Path:
    """The small lift file with ``edit(file)`` applied."""
    write_file(path)
    with h5py.File(path, "a") as file:
        edit(file)
    return path


def set_value(name: str, index: tuple, value) -> object:
    def edit(file: h5py.File) -> None:
        file[name][index] = value

    return edit


def replace_dataset(name: str, make) -> object:
    def edit(file: h5py.File) -> None:
        values = file[name][()]
        del file[name]
        file.create_dataset(name, data=make(values))

    return edit


@pytest.mark.parametrize(
    "edit, message",
    [
        (set_value("data/demo_10/obs/object", (3, 1), np.nan), r"demo_10 has observations holding NaN or inf.*row 3"),
        (set_value("data/demo_0/next_obs/object", (5, 0), np.inf), r"demo_0 has next observations holding NaN or inf.*row 5"),
        # Finite in float64, inf in the float32 dataset.
        (set_value("data/demo_10/obs/robot0_eef_pos", (2, 0), 1e39), r"demo_10 has observations holding NaN or inf.*row 2"),
        (set_value("data/demo_0/actions", (4, 6), np.nan), r"demo_0 has actions holding NaN or inf.*row 4"),
        (set_value("data/demo_0/actions", (1, 0), 7.5), r"demo_0 has actions up to 7.5"),
        (
            replace_dataset("data/demo_0/obs/object", lambda values: values * (1 + 1j)),
            r"demo_0 has obs/object of dtype complex128; expected real numbers",
        ),
        (
            replace_dataset("mask/train", lambda names: np.array([b"demo_0", b"demo_10", b"demo_0", b"demo_0"])),
            r"filter key 'train' of .* lists demos more than once \(demo_0 3 times\)",
        ),
    ],
)
def test_every_array_and_mask_is_checked_before_anything_is_written(
    tmp_path: Path, minari_root: Path, edit, message: str
) -> None:
    path = edited_file(tmp_path / "bad.hdf5", edit)
    with pytest.raises(ValueError, match=message):
        convert_to_minari(path, "lift", filter_key="train")
    assert not minari_root.exists() or list(minari_root.iterdir()) == []


def test_a_directory_is_said_to_be_one(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(IsADirectoryError, match=r"is a directory; expected a robomimic low-dim hdf5 file"):
        convert_to_minari(tmp_path, "lift")
    assert main(["convert", str(tmp_path), "--task", "lift"]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_staging_folders_of_killed_converts_are_removed(lift_file: Path, minari_root: Path) -> None:
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True)
    dead_pid = int(finished.stdout)
    abandoned = minari_root / f"{this_host_staging_prefix()}{dead_pid}-abc123"
    (abandoned / "robomimic").mkdir(parents=True)
    (abandoned / "robomimic" / "half-made.hdf5").write_bytes(b"partial")
    # A staging folder of a process that runs (this one) belongs to a convert in progress: it is kept.
    running = minari_root / f"{this_host_staging_prefix()}{os.getpid()}-def456"
    running.mkdir()
    # Another machine's, on a shared folder: its pid means nothing here, so it is kept too.
    other_host = minari_root / f".qc_sb3-staging-otherhost.{dead_pid}-ghi789"
    other_host.mkdir()
    convert_to_minari(lift_file, "lift")
    assert sorted(path.name for path in minari_root.iterdir()) == sorted([running.name, other_host.name, "robomimic"])
