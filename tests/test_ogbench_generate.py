"""qc_sb3.envs.ogbench.generate on tiny play datasets: upstream npz layout (read back by OGBench's own loader),
reproducibility across seeds and worker counts, the scene health check, atomic writes and the CLI."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import ogbench
import pytest

from qc_sb3.envs.ogbench import generate as generate_module
from qc_sb3.envs.ogbench import generate_dataset
from qc_sb3.envs.ogbench import play as play_module
from qc_sb3.envs.ogbench.__main__ import main
from qc_sb3.envs.ogbench.play import scene_episode_is_healthy

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

EPISODE_LENGTH = 40
UPSTREAM_KEYS = {"observations": np.float32, "actions": np.float32, "terminals": np.bool_, "qpos": np.float32}


def read_npz(path) -> dict[str, np.ndarray]:
    with np.load(path) as file:
        return {key: file[key] for key in file.files}


def assert_identical(first: dict[str, np.ndarray], second: dict[str, np.ndarray]) -> None:
    assert first.keys() == second.keys()
    for key in first:
        assert first[key].dtype == second[key].dtype, key
        assert first[key].tobytes() == second[key].tobytes(), key


@pytest.fixture(scope="module")
def cube_double(tmp_path_factory):
    """3 train + 1 val cube-double episodes of 40 rows, seed 0, one worker."""
    out_dir = tmp_path_factory.mktemp("cube-double")
    path = generate_dataset("cube-double-play-v0", episodes=3, val_episodes=1, out_dir=out_dir, episode_length=EPISODE_LENGTH)
    return path


def test_upstream_layout_and_dtypes(cube_double):
    assert cube_double.name == "cube-double-play-v0.npz"
    for path, n_episodes in ((cube_double, 3), (cube_double.with_name("cube-double-play-v0-val.npz"), 1)):
        arrays = read_npz(path)
        assert set(arrays) == {"observations", "actions", "terminals", "qpos", "qvel"}
        rows = n_episodes * EPISODE_LENGTH
        for key, dtype in UPSTREAM_KEYS.items():
            assert arrays[key].dtype == dtype, key
            assert len(arrays[key]) == rows, key
        assert arrays["qvel"].dtype == np.float32
        assert arrays["observations"].shape == (rows, 37)
        assert arrays["actions"].shape == (rows, 5)
        assert np.abs(arrays["actions"]).max() <= 1.0
        assert np.flatnonzero(arrays["terminals"]).tolist() == list(range(EPISODE_LENGTH - 1, rows, EPISODE_LENGTH))


def test_rows_hold_the_state_before_the_action(cube_double):
    arrays = read_npz(cube_double)
    observations, qpos = arrays["observations"], arrays["qpos"]
    # Observation layout of OGBench's CubeEnv: arm joint positions first; cube 0 xyz at 19:22, (xyz - center) * 10.
    np.testing.assert_array_equal(observations[:, :6], qpos[:, :6])
    cube_xyz = (qpos[:, 14:17].astype(np.float64) - [0.425, 0.0, 0.0]) * 10.0
    np.testing.assert_allclose(observations[:, 19:22], cube_xyz, atol=1e-5)
    # The arm moves every step: the next row's qpos is not this row's.
    assert not np.array_equal(qpos[1:, :6], qpos[:-1, :6])


def test_ogbench_loader_reads_it(cube_double):
    env, train, val = ogbench.make_env_and_datasets("cube-double-play-singletask-task2-v0", dataset_path=str(cube_double))
    env.close()
    assert len(train["observations"]) == 3 * (EPISODE_LENGTH - 1)
    assert len(val["observations"]) == EPISODE_LENGTH - 1
    arrays = read_npz(cube_double)
    # OGBench's own shift: next_observations are the following rows of the same trajectory.
    np.testing.assert_array_equal(train["next_observations"][: EPISODE_LENGTH - 1], arrays["observations"][1:EPISODE_LENGTH])


def test_same_seed_identical_any_worker_count_other_seed_differs(cube_double, tmp_path):
    again = generate_dataset(
        "cube-double-play", episodes=3, val_episodes=1, out_dir=tmp_path / "again", episode_length=EPISODE_LENGTH, workers=2
    )
    for name in ("cube-double-play-v0.npz", "cube-double-play-v0-val.npz"):
        assert_identical(read_npz(cube_double.with_name(name)), read_npz(again.with_name(name)))
    other = generate_dataset(
        "cube-double-play-v0", episodes=1, val_episodes=1, out_dir=tmp_path / "other", episode_length=EPISODE_LENGTH, seed=1
    )
    assert not np.array_equal(read_npz(other)["observations"], read_npz(cube_double)["observations"][:EPISODE_LENGTH])


def test_leaves_numpy_global_generator_alone(tmp_path):
    np.random.seed(123)
    expected = np.random.random()
    np.random.seed(123)
    generate_dataset("cube-single-play-v0", episodes=1, val_episodes=1, out_dir=tmp_path, episode_length=5)
    assert np.random.random() == expected


@pytest.mark.parametrize(("dataset", "buttons", "obs_dim"), [("scene-play-v0", 2, 40), ("puzzle-3x3-play-v0", 9, 55)])
def test_button_states_for_scene_and_puzzle(tmp_path, dataset, buttons, obs_dim):
    path = generate_dataset(dataset, episodes=2, val_episodes=1, out_dir=tmp_path, episode_length=25)
    arrays = read_npz(path)
    assert arrays["button_states"].dtype == np.int64
    assert arrays["button_states"].shape == (50, buttons)
    assert set(np.unique(arrays["button_states"])) <= {0, 1}
    assert arrays["observations"].shape == (50, obs_dim)
    task = dataset.replace("-play-v0", "-play-singletask-task1-v0")
    env, train, _ = ogbench.make_env_and_datasets(task, dataset_path=str(path))
    env.close()
    assert train["rewards"].shape == (48,)


@pytest.mark.parametrize(
    ("cube_xyz", "healthy"),
    [
        ([0.4, 0.0, 0.02], True),
        ([0.4, 0.29, 0.02], False),  # too far right
        ([0.4, 0.289, 0.02], True),
        ([0.4, -0.3, 0.02], False),  # too far left, below the drawer
        ([0.4, -0.3, 0.07], True),  # in the drawer
        ([0.4, -0.31, 0.09], False),  # too far left, above the drawer
        ([0.4, -0.299, 0.02], True),
    ],
)
def test_scene_health_check_is_upstreams(cube_xyz, healthy):
    qpos = np.zeros((3, 25))
    qpos[:, 14:17] = [0.4, 0.0, 0.02]
    qpos[1, 14:17] = cube_xyz
    assert scene_episode_is_healthy(qpos) is healthy


def test_unhealthy_scene_episodes_are_redone_until_the_count_is_met(tmp_path, monkeypatch):
    verdicts = iter([False, True, False, False, True, True])
    monkeypatch.setattr(play_module, "scene_episode_is_healthy", lambda qpos: next(verdicts))
    path = generate_dataset("scene-play-v0", episodes=2, val_episodes=1, out_dir=tmp_path, episode_length=10)
    assert len(read_npz(path)["observations"]) == 20
    assert len(read_npz(path.with_name("scene-play-v0-val.npz"))["observations"]) == 10
    assert next(verdicts, None) is None


def test_failed_write_leaves_existing_files_and_no_temporaries(tmp_path, monkeypatch):
    train, val = tmp_path / "cube-single-play-v0.npz", tmp_path / "cube-single-play-v0-val.npz"
    train.write_bytes(b"old train")
    val.write_bytes(b"old val")
    calls = []
    savez_compressed = np.savez_compressed

    def failing_savez(file, **arrays):
        calls.append(sorted(arrays))
        if len(calls) == 2:
            file.write(b"half an npz")
            raise OSError("disk full")
        savez_compressed(file, **arrays)

    monkeypatch.setattr(np, "savez_compressed", failing_savez)
    with pytest.raises(OSError, match="disk full"):
        generate_dataset("cube-single-play-v0", episodes=1, val_episodes=1, out_dir=tmp_path, episode_length=5, overwrite=True)
    assert len(calls) == 2
    assert sorted(path.name for path in tmp_path.iterdir()) == [val.name, train.name]
    assert train.read_bytes() == b"old train"
    assert val.read_bytes() == b"old val"


def test_interrupted_generation_writes_nothing(tmp_path, monkeypatch):
    original = play_module.PlayCollector.collect

    def interrupted(self, seed, episode):
        if episode == 1:
            raise KeyboardInterrupt
        return original(self, seed, episode)

    monkeypatch.setattr(play_module.PlayCollector, "collect", interrupted)
    with pytest.raises(KeyboardInterrupt):
        generate_dataset("cube-single-play-v0", episodes=2, val_episodes=1, out_dir=tmp_path, episode_length=5)
    assert list(tmp_path.iterdir()) == []


def test_refuses_existing_files_before_any_work(tmp_path, monkeypatch):
    (tmp_path / "cube-single-play-v0-val.npz").write_bytes(b"official")
    monkeypatch.setattr(generate_module, "PlayCollector", None)  # any work would fail differently
    with pytest.raises(FileExistsError, match=r"cube-single-play-v0-val\.npz.*overwrite=True"):
        generate_dataset("cube-single-play-v0", episodes=1, out_dir=tmp_path)
    assert (tmp_path / "cube-single-play-v0-val.npz").read_bytes() == b"official"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dataset": "cube-double-v0"}, "unknown OGBench play dataset 'cube-double-v0'.*cube-double-play-v0"),
        ({"dataset": "puzzle-4x4-play-v0"}, "puzzle-3x3-play-v0"),
        ({"episodes": 0}, "episodes must be an int >= 1, got 0"),
        ({"val_episodes": 0}, "val_episodes must be an int >= 1, got 0"),
        ({"workers": 0}, "workers must be an int >= 1, got 0"),
        ({"seed": -1}, "seed must be an int >= 0, got -1"),
        ({"episode_length": 1}, "episode_length must be an int >= 2, got 1"),
    ],
)
def test_bad_arguments(tmp_path, kwargs, message):
    arguments = {"dataset": "cube-single-play-v0", "episodes": 1, "out_dir": tmp_path, **kwargs}
    with pytest.raises(ValueError, match=message):
        generate_dataset(**arguments)
    assert list(tmp_path.iterdir()) == []


def test_cli_generate_with_progress(tmp_path, capsys):
    status = main(
        ["generate", "cube-single-play", "--episodes", "2", "--episode-length", "5", "--seed", "3", "--out", str(tmp_path)]
    )
    assert status == 0
    captured = capsys.readouterr()
    assert "cube-single-play-v0" in captured.err  # the progress bar and the summary
    # val_episodes defaults to max(1, episodes // 10)
    assert len(read_npz(tmp_path / "cube-single-play-v0.npz")["terminals"]) == 10
    assert len(read_npz(tmp_path / "cube-single-play-v0-val.npz")["terminals"]) == 5
    assert main(["generate", "cube-single-play", "--episodes", "1", "--out", str(tmp_path)]) == 2
    assert "already exist" in capsys.readouterr().err


# An existing folder in which no one, root included, can create a file (created files would fail the same way late).
UNWRITABLE_FOLDER = Path("/proc/self")


@pytest.mark.skipif(not UNWRITABLE_FOLDER.is_dir(), reason="needs Linux's /proc/self as an unwritable folder")
def test_unwritable_output_folder_is_refused_before_generating(monkeypatch):
    monkeypatch.setattr(generate_module, "PlayCollector", None)  # any generation would fail differently
    with pytest.raises(PermissionError, match=r"output folder '/proc/self' is not writable.*before generating"):
        generate_dataset("cube-single-play-v0", episodes=1, out_dir=UNWRITABLE_FOLDER)
    assert main(["generate", "cube-single-play-v0", "--episodes", "1", "--out", str(UNWRITABLE_FOLDER)]) == 2
