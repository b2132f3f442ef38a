"""qc_sb3.envs.ogbench.convert against OGBench's own single-task loader (``ogbench.make_env_and_datasets``) on tiny generated
datasets, read back through Minari and ``qc_sb3.common.datasets``; bad inputs leave existing data untouched."""

from __future__ import annotations

import shutil
import subprocess
import sys

import gymnasium as gym
import minari
import numpy as np
import ogbench
import pytest

from qc_sb3.common.datasets import load_offline_transitions
from qc_sb3.envs.minari_root import this_host_staging_prefix
from qc_sb3.envs.ogbench import convert as convert_module
from qc_sb3.envs.ogbench import convert_shards, convert_to_minari, generate_dataset
from qc_sb3.envs.ogbench.__main__ import main

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

EPISODE_LENGTH = 30


@pytest.fixture(autouse=True)
def minari_root(tmp_path, monkeypatch):
    root = tmp_path / "minari"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    return root


@pytest.fixture(scope="module")
def npz_files(tmp_path_factory):
    """Tiny generated play datasets (with their -val files) per family."""
    out_dir = tmp_path_factory.mktemp("npz")
    return {
        family: generate_dataset(
            f"{family}-play-v0", episodes=3, val_episodes=1, out_dir=out_dir, episode_length=EPISODE_LENGTH
        )
        for family in ("cube-double", "puzzle-3x3")
    }


def ogbench_train_split(task: str, npz_path) -> dict[str, np.ndarray]:
    """OGBench's single-task loader on the file: the oracle for the conversion."""
    env, train, _ = ogbench.make_env_and_datasets(task, dataset_path=str(npz_path))
    env.close()
    return train


def minari_steps(dataset_id: str) -> dict[str, np.ndarray]:
    """Every step of a Minari dataset, read with Minari's own API."""
    episodes = list(minari.load_dataset(dataset_id).iterate_episodes())
    return {
        "observations": np.concatenate([episode.observations[:-1] for episode in episodes]),
        "next_observations": np.concatenate([episode.observations[1:] for episode in episodes]),
        "actions": np.concatenate([episode.actions for episode in episodes]),
        "rewards": np.concatenate([episode.rewards for episode in episodes]),
        "terminations": np.concatenate([episode.terminations for episode in episodes]),
        "truncations": np.concatenate([episode.truncations for episode in episodes]),
        "episode_end": np.concatenate([np.arange(len(episode.rewards)) == len(episode.rewards) - 1 for episode in episodes]),
    }


def test_matches_ogbench_single_task_loader_element_for_element(npz_files):
    task = "cube-double-play-singletask-task2-v0"
    dataset_id = convert_to_minari(npz_files["cube-double"], task)
    assert dataset_id == f"ogbench/{task}"
    expected = ogbench_train_split(task, npz_files["cube-double"])
    data = load_offline_transitions(dataset_id)
    for name in ("observations", "next_observations", "actions", "rewards"):
        np.testing.assert_array_equal(getattr(data, name), expected[name], err_msg=name)
    assert data.observations.dtype == np.float32
    np.testing.assert_array_equal(1.0 - data.terminated, expected["masks"])
    np.testing.assert_array_equal(data.episode_end, expected["terminals"].astype(bool))

    dataset = minari.load_dataset(dataset_id)
    assert dataset.total_episodes == 3
    assert dataset.observation_space == gym.spaces.Box(-np.inf, np.inf, (37,), np.float32)
    assert dataset.action_space == gym.spaces.Box(-1.0, 1.0, (5,), np.float32)
    assert dataset.env_spec.id == "cube-double-singletask-task2-v0"
    env = dataset.recover_environment(eval_env=True)
    assert env.spec.id == "cube-double-singletask-task2-v0"
    assert env.spec.max_episode_steps == 500
    assert env.unwrapped._reward_task_id == 2
    env.close()


def test_terminations_inside_trajectories_follow_ogbench_masks(npz_files, tmp_path):
    # Play data passes through solved states without stopping (docs/algorithms.md §6): put rows 5..8 of the first
    # trajectory and the last transition of the second in the task's solved state, so OGBench's relabelling sets their masks to
    # 0.
    task = "puzzle-3x3-play-singletask-task1-v0"
    target = np.array([1, 1, 0, 1, 0, 1, 0, 1, 1])  # OGBench's puzzle-3x3 task1 goal (PuzzleEnv.set_tasks)
    with np.load(npz_files["puzzle-3x3"]) as file:
        arrays = {key: file[key] for key in file.files}
    arrays["button_states"][5:9] = target
    arrays["button_states"][2 * EPISODE_LENGTH - 2] = target
    npz_path = tmp_path / "puzzle-3x3-play-v0.npz"
    np.savez_compressed(npz_path, **arrays)
    shutil.copy(npz_files["puzzle-3x3"].with_name("puzzle-3x3-play-v0-val.npz"), tmp_path)

    expected = ogbench_train_split(task, npz_path)
    assert np.flatnonzero(expected["masks"] == 0).tolist() == [5, 6, 7, 8, 2 * (EPISODE_LENGTH - 1) - 1]
    dataset_id = convert_to_minari(npz_path, task)
    steps = minari_steps(dataset_id)
    for name in ("observations", "next_observations", "actions", "rewards"):
        np.testing.assert_array_equal(steps[name], expected[name], err_msg=name)
    np.testing.assert_array_equal(steps["terminations"], expected["masks"] == 0)
    # Episodes still end at OGBench's trajectory ends, truncated unless terminated there.
    np.testing.assert_array_equal(steps["episode_end"], expected["terminals"].astype(bool))
    np.testing.assert_array_equal(steps["truncations"], steps["episode_end"] & ~steps["terminations"])
    # The library reads them as the reference does: masks from OGBench's masks, episode ends from its terminals.
    data = load_offline_transitions(dataset_id)
    np.testing.assert_array_equal(1.0 - data.terminated, expected["masks"])
    np.testing.assert_array_equal(data.episode_end, expected["terminals"].astype(bool))


def write_npz(path, arrays: dict[str, np.ndarray]):
    np.savez(path, **arrays)
    return path


def npz_arrays(path) -> dict[str, np.ndarray]:
    with np.load(path) as file:
        return {key: file[key] for key in file.files}


@pytest.fixture()
def existing_dataset(npz_files):
    """A converted dataset that failed conversions must leave loadable and unchanged."""
    dataset_id = convert_to_minari(npz_files["cube-double"], "cube-double-play-singletask-task2-v0")
    return dataset_id, load_offline_transitions(dataset_id)


def bad_inputs(npz_files, tmp_path) -> dict[str, tuple[object, str, type, str]]:
    """name -> (npz path, task, error type, message pattern)."""
    cube = npz_arrays(npz_files["cube-double"])
    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(npz_files["cube-double"].read_bytes()[:5000])
    no_qpos = {key: value for key, value in cube.items() if key != "qpos"}
    puzzle = npz_arrays(npz_files["puzzle-3x3"])
    no_buttons = {key: value for key, value in puzzle.items() if key != "button_states"}
    open_end = {**cube, "terminals": np.concatenate([cube["terminals"][:-1], [False]])}
    one_row = {**cube, "terminals": cube["terminals"].copy()}
    one_row["terminals"][EPISODE_LENGTH] = True
    wild_actions = {**cube, "actions": cube["actions"].copy()}
    wild_actions["actions"][7, 1] = 40.0
    complex_observations = {**cube, "observations": cube["observations"] * (1 + 0.5j)}
    task = "cube-double-play-singletask-task2-v0"
    return {
        "actions out of bounds": (
            write_npz(tmp_path / "e.npz", wild_actions),
            task,
            ValueError,
            r"actions leave the env's bounds \[-1.0, 1.0\] \(tolerance 1e-06\): first at row 7",
        ),
        "complex observations": (
            write_npz(tmp_path / "f.npz", complex_observations),
            task,
            ValueError,
            r"observations have dtype complex64; expected real numbers",
        ),
        "a directory": (tmp_path, task, IsADirectoryError, r"is a directory; expected an npz file"),
        "missing": (tmp_path / "nothing.npz", task, FileNotFoundError, r"nothing\.npz' does not exist"),
        "truncated": (truncated, task, ValueError, r"truncated\.npz' is not a readable npz"),
        "no qpos": (write_npz(tmp_path / "a.npz", no_qpos), task, ValueError, r"misses the keys \['qpos'\]"),
        "no buttons": (
            write_npz(tmp_path / "b.npz", no_buttons),
            "puzzle-3x3-play-singletask-task1-v0",
            ValueError,
            r"misses the keys \['button_states'\]",
        ),
        "other family": (
            npz_files["cube-double"],
            "cube-triple-play-singletask-task1-v0",
            ValueError,
            r"observations have shape \(37,\) per row but cube-triple-singletask-task1-v0 needs \(46,\)",
        ),
        "open end": (write_npz(tmp_path / "c.npz", open_end), task, ValueError, "last row is not a terminal"),
        "one-row trajectory": (write_npz(tmp_path / "d.npz", one_row), task, ValueError, "one-row trajectory"),
    }


def test_bad_inputs_are_refused_and_existing_data_untouched(npz_files, tmp_path, existing_dataset, minari_root):
    dataset_id, before = existing_dataset
    for case, (npz_path, task, error, message) in bad_inputs(npz_files, tmp_path).items():
        with pytest.raises(error, match=message):
            convert_to_minari(npz_path, task, dataset_id=dataset_id, overwrite=True)
        after = load_offline_transitions(dataset_id)
        for name in ("observations", "actions", "rewards", "terminated"):
            np.testing.assert_array_equal(getattr(after, name), getattr(before, name), err_msg=f"{case}: {name}")
        # No staging folder left behind.
        assert [path.name for path in minari_root.iterdir()] == ["ogbench"], case


def test_failure_while_writing_keeps_the_old_dataset(npz_files, existing_dataset, minari_root, monkeypatch):
    dataset_id, before = existing_dataset
    create_dataset_from_buffers = minari.create_dataset_from_buffers

    def failing_create(dataset_id, buffer, **kwargs):
        create_dataset_from_buffers(dataset_id, [next(iter(buffer))], **kwargs)  # a half-made dataset
        raise KeyboardInterrupt

    monkeypatch.setattr(convert_module.minari, "create_dataset_from_buffers", failing_create)
    with pytest.raises(KeyboardInterrupt):
        convert_to_minari(
            npz_files["puzzle-3x3"], "puzzle-3x3-play-singletask-task1-v0", dataset_id=dataset_id, overwrite=True
        )
    np.testing.assert_array_equal(load_offline_transitions(dataset_id).observations, before.observations)
    assert [path.name for path in minari_root.iterdir()] == ["ogbench"]


@pytest.mark.parametrize("bad_id", ["no-namespace-v0", "ogbench/no-version", "x/short-v0"])
def test_bad_dataset_id(npz_files, bad_id):
    with pytest.raises(ValueError, match="invalid Minari dataset id"):
        convert_to_minari(npz_files["cube-double"], "cube-double-play-singletask-task2-v0", dataset_id=bad_id)


def test_unknown_task(npz_files):
    with pytest.raises(ValueError, match="unknown OGBench task 'cube-double-singletask-task2-v0'"):
        convert_to_minari(npz_files["cube-double"], "cube-double-singletask-task2-v0")


def split_into_shards(npz_path, out_dir) -> list[dict[str, np.ndarray]]:
    """Write trajectory 0 as b.npz and trajectories 1-2 as a.npz (plus a-val.npz, which is skipped)."""
    arrays = npz_arrays(npz_path)
    first = {key: value[:EPISODE_LENGTH] for key, value in arrays.items()}
    rest = {key: value[EPISODE_LENGTH:] for key, value in arrays.items()}
    out_dir.mkdir()
    write_npz(out_dir / "b.npz", first)
    write_npz(out_dir / "a.npz", rest)
    write_npz(out_dir / "a-val.npz", first)
    return [rest, first]


def test_shards_in_name_order(npz_files, tmp_path):
    task = "cube-double-play-singletask-task2-v0"
    shards = split_into_shards(npz_files["cube-double"], tmp_path / "shards")
    dataset_ids = convert_shards(tmp_path / "shards", task)
    assert dataset_ids == [
        "ogbench/cube-double-play-singletask-task2-shard000-v0",
        "ogbench/cube-double-play-singletask-task2-shard001-v0",
    ]
    for dataset_id, shard in zip(dataset_ids, shards, strict=True):
        expected = ogbench.utils.load_dataset(write_npz(tmp_path / "shard.npz", shard))
        np.testing.assert_array_equal(load_offline_transitions(dataset_id).next_observations, expected["next_observations"])
    with pytest.raises(FileExistsError, match="shard000"):
        convert_shards(tmp_path / "shards", task)
    assert convert_shards(tmp_path / "shards", task, overwrite=True) == dataset_ids


def test_shards_are_all_checked_before_any_is_converted(npz_files, tmp_path, minari_root):
    split_into_shards(npz_files["cube-double"], tmp_path / "shards")
    arrays = npz_arrays(tmp_path / "shards" / "b.npz")
    del arrays["qpos"]
    write_npz(tmp_path / "shards" / "b.npz", arrays)
    with pytest.raises(ValueError, match=r"b\.npz' misses the keys \['qpos'\]"):
        convert_shards(tmp_path / "shards", "cube-double-play-singletask-task2-v0")
    assert not minari_root.exists() or not any(minari_root.iterdir())
    with pytest.raises(ValueError, match="holds no training npz"):
        convert_shards(tmp_path, "cube-double-play-singletask-task2-v0")


def test_a_failed_shard_convert_leaves_nothing_new_behind(npz_files, tmp_path, minari_root):
    # Three one-trajectory shards; the third holds a NaN, which only reading its values shows.
    arrays = npz_arrays(npz_files["cube-double"])
    (tmp_path / "shards").mkdir()
    for index, name in enumerate("abc"):
        write_npz(
            tmp_path / "shards" / f"{name}.npz",
            {key: value[index * EPISODE_LENGTH : (index + 1) * EPISODE_LENGTH] for key, value in arrays.items()},
        )
    bad = npz_arrays(tmp_path / "shards" / "c.npz")
    bad["observations"][4, 2] = np.nan
    write_npz(tmp_path / "shards" / "c.npz", bad)
    with pytest.raises(ValueError, match=r"c\.npz' observations hold NaN or inf"):
        convert_shards(tmp_path / "shards", "cube-double-play-singletask-task2-v0")
    assert not minari_root.exists() or [path.name for path in minari_root.iterdir()] == [], "no shard published"


def test_staging_folders_of_killed_converts_are_removed(npz_files, minari_root):
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True)
    abandoned = minari_root / f"{this_host_staging_prefix()}{int(finished.stdout)}-abc123"
    (abandoned / "ogbench").mkdir(parents=True)
    convert_to_minari(npz_files["cube-double"], "cube-double-play-singletask-task2-v0")
    assert [path.name for path in minari_root.iterdir()] == ["ogbench"]


def test_cli_convert_with_custom_id_and_overwrite(npz_files, tmp_path, capsys):
    task_1, task_2 = "cube-double-play-singletask-task1-v0", "cube-double-play-singletask-task2-v0"
    arguments = ["convert", str(npz_files["cube-double"]), "--id", "qctest/cli-v0", "--no-progress"]
    assert main([*arguments, "--task", task_1]) == 0
    assert "qctest/cli-v0" in capsys.readouterr().out
    assert main([*arguments, "--task", task_2]) == 2
    assert "'qctest/cli-v0' already exists" in capsys.readouterr().err
    assert minari.load_dataset("qctest/cli-v0").env_spec.id == "cube-double-singletask-task1-v0"
    assert main([*arguments, "--task", task_2, "--overwrite"]) == 0
    assert minari.load_dataset("qctest/cli-v0").env_spec.id == "cube-double-singletask-task2-v0"
    assert main(["convert", str(tmp_path), "--task", task_1, "--id", "qctest/x-v0"]) == 2
    assert "--id names one dataset" in capsys.readouterr().err


def test_relative_minari_root(npz_files, tmp_path, monkeypatch):
    # Minari joins a relative root with itself when it writes: the converter must hand it an absolute one.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MINARI_DATASETS_PATH", "relative/minari")
    task = "cube-double-play-singletask-task1-v0"
    dataset_id = convert_to_minari(npz_files["cube-double"], task)
    assert (tmp_path / "relative" / "minari" / dataset_id / "data" / "main_data.hdf5").is_file()
    np.testing.assert_array_equal(
        load_offline_transitions(dataset_id).observations, ogbench_train_split(task, npz_files["cube-double"])["observations"]
    )
