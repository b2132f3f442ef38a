"""qc_sb3.common.datasets against tiny Minari datasets built here, compared with the arrays recorded while building."""

from __future__ import annotations

import warnings
from pathlib import Path

import gymnasium as gym
import minari
import numpy as np
import pytest
from gymnasium import spaces
from minari.data_collector import EpisodeBuffer
from stable_baselines3.sac.policies import SACPolicy

from qc_sb3 import ChunkReplayBuffer
from qc_sb3.common.buffers import OFFLINE_ACTION_CLIP
from qc_sb3.common.datasets import load_offline_transitions
from qc_sb3.common.offline_transitions import (
    OfflineTransitions,
    add_transitions_to_buffer,
    check_transitions_match_spaces,
    scale_actions,
)

DATASET_ID = "qctest/tiny-v0"
ACTION_LOW = np.array([-2.0, 0.0], dtype=np.float32)
ACTION_HIGH = np.array([2.0, 4.0], dtype=np.float32)
MAX_EPISODE_STEPS = 5
OBS_SPACE = spaces.Box(-np.inf, np.inf, (3,), np.float32)
ACTION_SPACE = spaces.Box(ACTION_LOW, ACTION_HIGH, dtype=np.float32)


class TinyReachEnv(gym.Env):
    """x moves by action[0] / 2 and the episode terminates once |x| >= 1.5; y drifts by action[1] / 10."""

    observation_space = OBS_SPACE
    action_space = ACTION_SPACE

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.state = np.zeros(3, dtype=np.float32)
        return self.state.copy(), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.state = self.state + np.array([action[0] / 2, action[1] / 10, 1.0], dtype=np.float32)
        reward = -abs(float(self.state[0])) + 0.1 * float(action[1])
        return self.state.copy(), reward, bool(abs(self.state[0]) >= 1.5), False, {}


def record_episode(actions: np.ndarray) -> dict[str, np.ndarray]:
    """Run the env (5-step time limit) on the given actions until it ends or they run out; keep everything."""
    env = gym.wrappers.TimeLimit(TinyReachEnv(), max_episode_steps=MAX_EPISODE_STEPS)
    observation, _ = env.reset(seed=0)
    observations, rewards, terminations, truncations = [observation], [], [], []
    for action in actions:
        observation, reward, terminated, truncated, _ = env.step(action)
        observations.append(observation)
        rewards.append(reward)
        terminations.append(terminated)
        truncations.append(truncated)
        if terminated or truncated:
            break
    n_steps = len(rewards)
    return {
        "observations": np.array(observations, dtype=np.float32),
        "actions": np.array(actions[:n_steps], dtype=np.float32),
        "rewards": np.array(rewards),
        "terminations": np.array(terminations),
        "truncations": np.array(truncations),
    }


def random_actions(rng: np.random.Generator, n_steps: int, x_low: float, x_high: float) -> np.ndarray:
    return np.stack([rng.uniform(x_low, x_high, n_steps), rng.uniform(0.0, 4.0, n_steps)], axis=1).astype(np.float32)


def make_episodes(seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Three episodes: terminated after 2 steps, truncated after 5, cut off after 3 (neither)."""
    rng = np.random.default_rng(seed)
    episodes = [
        record_episode(random_actions(rng, 10, 1.6, 2.0)),
        record_episode(random_actions(rng, 10, -0.5, 0.5)),
        record_episode(random_actions(rng, 3, -0.5, 0.5)),
    ]
    # The episodes must end as intended, or the expected flags below would be wrong.
    assert [len(episode["rewards"]) for episode in episodes] == [2, 5, 3]
    assert episodes[0]["terminations"][-1] and not episodes[0]["truncations"][-1]
    assert episodes[1]["truncations"][-1] and not episodes[1]["terminations"].any()
    assert not episodes[2]["terminations"].any() and not episodes[2]["truncations"].any()
    return episodes


# Per-step flags of make_episodes, written out by hand: steps 0-1, 2-6, 7-9.
EXPECTED_TERMINATED = np.array([0, 1, 0, 0, 0, 0, 0, 0, 0, 0], dtype=bool)
EXPECTED_EPISODE_END = np.array([0, 1, 0, 0, 0, 0, 1, 0, 0, 1], dtype=bool)


def create_minari_dataset(
    dataset_id: str, episodes: list[dict], observation_space: spaces.Space = OBS_SPACE
) -> minari.MinariDataset:
    buffers = [EpisodeBuffer(id=index, **episode) for index, episode in enumerate(episodes)]
    with warnings.catch_warnings():
        # Minari warns about every metadata field left unset (author, code permalink, env spec, ...).
        warnings.simplefilter("ignore", UserWarning)
        return minari.create_dataset_from_buffers(
            dataset_id, buffers, observation_space=observation_space, action_space=ACTION_SPACE
        )


@pytest.fixture
def minari_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "minari"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    return root


@pytest.fixture
def episodes(minari_root: Path) -> list[dict[str, np.ndarray]]:
    """The recorded episodes, also written as the Minari dataset DATASET_ID."""
    recorded = make_episodes()
    create_minari_dataset(DATASET_ID, recorded)
    return recorded


def assert_matches_episodes(data: OfflineTransitions, episodes: list[dict[str, np.ndarray]]) -> None:
    np.testing.assert_array_equal(data.observations, np.concatenate([episode["observations"][:-1] for episode in episodes]))
    np.testing.assert_array_equal(
        data.next_observations, np.concatenate([episode["observations"][1:] for episode in episodes])
    )
    np.testing.assert_array_equal(data.actions, np.concatenate([episode["actions"] for episode in episodes]))
    np.testing.assert_array_equal(data.rewards, np.concatenate([episode["rewards"] for episode in episodes]))
    np.testing.assert_array_equal(data.terminated, EXPECTED_TERMINATED)
    np.testing.assert_array_equal(data.episode_end, EXPECTED_EPISODE_END)
    assert data.terminated.dtype == np.bool_ and data.episode_end.dtype == np.bool_
    assert len(data) == 10


@pytest.mark.parametrize(
    "how", ["id", "dataset folder", "data folder", "pathlib folder", "MinariDataset", "OfflineTransitions"]
)
def test_load_minari_dataset(how: str, episodes: list[dict], minari_root: Path) -> None:
    folder = minari_root / DATASET_ID
    sources = {
        "id": lambda: DATASET_ID,
        "dataset folder": lambda: str(folder),
        "data folder": lambda: str(folder / "data"),
        "pathlib folder": lambda: folder,
        "MinariDataset": lambda: minari.load_dataset(DATASET_ID),
        "OfflineTransitions": lambda: load_offline_transitions(DATASET_ID),
    }
    assert_matches_episodes(load_offline_transitions(sources[how]()), episodes)


def test_unknown_id_names_id_and_root(minari_root: Path) -> None:
    with pytest.raises(ValueError, match="qctest/missing-v0") as error:
        load_offline_transitions("qctest/missing-v0")
    assert str(minari_root) in str(error.value)


def test_folder_without_dataset(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="not a readable Minari dataset folder"):
        load_offline_transitions(str(empty))


def test_dict_observation_space_refused(minari_root: Path) -> None:
    dict_space = spaces.Dict({"position": spaces.Box(-np.inf, np.inf, (2,), np.float32)})
    episode = make_episodes()[2]
    episode["observations"] = {"position": episode["observations"][:, :2]}
    create_minari_dataset("qctest/dict-v0", [episode], observation_space=dict_space)
    with pytest.raises(ValueError, match="Dict observation space"):
        load_offline_transitions("qctest/dict-v0")


def test_nan_in_minari_dataset_names_array_and_step(minari_root: Path) -> None:
    episodes = make_episodes()
    # Observation row 2 of the third episode is s_t of its step 2: global step 2 + 5 + 2 = 9.
    episodes[2]["observations"][2, 1] = np.nan
    create_minari_dataset("qctest/nan-v0", episodes)
    with pytest.raises(ValueError, match=r"observations hold NaN or inf \(first at step 9\)"):
        load_offline_transitions("qctest/nan-v0")


def make_mapping(rng: np.random.Generator, n_steps: int = 6) -> dict[str, np.ndarray]:
    return {
        "observations": rng.normal(size=(n_steps, 3)).astype(np.float32),
        "actions": rng.uniform(ACTION_LOW, ACTION_HIGH, size=(n_steps, 2)).astype(np.float32),
        "rewards": rng.normal(size=n_steps).astype(np.float32),
        "next_observations": rng.normal(size=(n_steps, 3)).astype(np.float32),
        "infos/qpos": rng.normal(size=(n_steps, 4)),  # extra keys are ignored
    }


@pytest.mark.parametrize(
    ("terminated_key", "end_key", "terminated", "end_flags", "expected_end"),
    [
        # D4RL style: float flags, the cut-off last step is not flagged but still ends its episode.
        ("terminals", "timeouts", [0.0, 0, 1, 0, 0, 0], [0.0, 0, 0, 0, 1, 0], [0, 0, 1, 0, 1, 1]),
        ("terminations", "truncations", [0, 1, 0, 0, 0, 1], [1, 0, 0, 1, 0, 0], [1, 1, 0, 1, 0, 1]),
        ("terminated", "episode_end", [0, 0, 0, 0, 0, 0], [0, 1, 0, 0, 0, 1], [0, 1, 0, 0, 0, 1]),
    ],
)
def test_mapping_with_alternative_keys(
    terminated_key: str, end_key: str, terminated: list, end_flags: list, expected_end: list
) -> None:
    source = make_mapping(np.random.default_rng(1))
    source[terminated_key] = np.array(terminated)
    source[end_key] = np.array(end_flags)
    data = load_offline_transitions(source)
    for name in ("observations", "actions", "rewards", "next_observations"):
        np.testing.assert_array_equal(getattr(data, name), source[name])
    np.testing.assert_array_equal(data.terminated, np.array(terminated, dtype=bool))
    np.testing.assert_array_equal(data.episode_end, np.array(expected_end, dtype=bool))


def test_mapping_missing_keys_lists_missing_and_accepted_names() -> None:
    source = make_mapping(np.random.default_rng(2))
    del source["rewards"]
    with pytest.raises(ValueError, match="misses") as error:
        load_offline_transitions(source)
    message = str(error.value)
    for name in ("rewards", "terminated", "terminals", "terminations", "episode_end", "timeouts", "truncations"):
        assert name in message
    assert "'observations'" not in message.split("got keys")[0]


def test_mapping_with_two_names_for_one_field() -> None:
    source = make_mapping(np.random.default_rng(3))
    source.update(terminals=np.zeros(6), terminated=np.zeros(6), timeouts=np.zeros(6))
    with pytest.raises(ValueError, match="several keys for terminated"):
        load_offline_transitions(source)


def test_mapping_flags_must_be_zero_or_one() -> None:
    source = make_mapping(np.random.default_rng(4))
    source.update(terminals=np.array([0, 0, 2, 0, 0, 0]), timeouts=np.zeros(6))
    with pytest.raises(ValueError, match="terminals must hold only 0/1"):
        load_offline_transitions(source)


@pytest.mark.parametrize("name", ["observations", "actions", "rewards", "next_observations", "terminals"])
@pytest.mark.parametrize("bad_value", [np.nan, np.inf])
def test_mapping_non_finite_names_array_and_step(name: str, bad_value: float) -> None:
    source = make_mapping(np.random.default_rng(5))
    source.update(terminals=np.zeros(6), timeouts=np.zeros(6))
    source[name] = source[name].astype(np.float64)
    source[name].reshape(6, -1)[3, -1] = bad_value
    with pytest.raises(ValueError, match=rf"{name} hold NaN or inf \(first at step 3\)"):
        load_offline_transitions(source)


@pytest.mark.parametrize("name", ["observations", "rewards", "next_observations"])
def test_mapping_values_beyond_float32_are_refused(name: str) -> None:
    # 1e39 is finite in float64 but inf in the float32 replay buffer (float32's largest value is about 3.4e38).
    source = make_mapping(np.random.default_rng(5))
    source.update(terminals=np.zeros(6), timeouts=np.zeros(6))
    source[name] = source[name].astype(np.float64)
    source[name].reshape(6, -1)[4, 0] = -1e39
    with pytest.raises(ValueError, match=rf"{name} hold NaN or inf \(first at step 4\) as float32"):
        load_offline_transitions(source)


def test_mapping_unequal_lengths() -> None:
    source = make_mapping(np.random.default_rng(6))
    source.update(terminals=np.zeros(6), timeouts=np.zeros(6))
    source["rewards"] = source["rewards"][:5]
    with pytest.raises(ValueError, match="same number of steps"):
        load_offline_transitions(source)


def test_mapping_without_steps() -> None:
    source = make_mapping(np.random.default_rng(7), n_steps=0)
    source.update(terminals=np.zeros(0), timeouts=np.zeros(0))
    with pytest.raises(ValueError, match="at least one step"):
        load_offline_transitions(source)


def test_unsupported_source_type() -> None:
    with pytest.raises(TypeError, match="got list"):
        load_offline_transitions([1, 2, 3])  # type: ignore[arg-type]


def transitions(n_steps: int = 4, **overrides: np.ndarray) -> OfflineTransitions:
    rng = np.random.default_rng(8)
    fields = {
        "observations": rng.normal(size=(n_steps, 3)).astype(np.float32),
        "actions": rng.uniform(ACTION_LOW, ACTION_HIGH, size=(n_steps, 2)).astype(np.float32),
        "rewards": rng.normal(size=n_steps),
        "next_observations": rng.normal(size=(n_steps, 3)).astype(np.float32),
        "terminated": np.zeros(n_steps, dtype=bool),
        "episode_end": np.eye(n_steps, dtype=bool)[-1],
    }
    return OfflineTransitions(**{**fields, **overrides})


def test_transitions_refuse_inconsistent_flags() -> None:
    with pytest.raises(ValueError, match="last step must be an episode end"):
        transitions(episode_end=np.array([0, 1, 0, 0], dtype=bool))
    with pytest.raises(TypeError, match="terminated must have dtype bool"):
        transitions(terminated=np.zeros(4))


@pytest.mark.parametrize(
    "change, message",
    [
        ({"rewards": np.array([0, 0, np.nan, 0, 0, 0])}, r"rewards hold NaN or inf \(first at step 2\)"),
        # Finite in float64, inf once stored as float32 (its largest value is about 3.4e38).
        ({"rewards": np.array([0, 0, 0, 1e39, 0, 0])}, r"rewards hold NaN or inf \(first at step 3\) as float32"),
        ({"observations": np.eye(6, 3, k=-4) * 1e39}, r"observations hold NaN or inf \(first at step 4\)"),
        ({"actions": np.full((6, 2), 4.5)}, r"actions range from min \[4.5, 4.5\]"),
        ({"episode_end": np.zeros(6, dtype=bool)}, "last step must be an episode end"),
        ({"episode_end": np.ones(6, dtype=bool)}, r"every episode is shorter than chunk_size=2 \(longest: 1 steps\)"),
    ],
)
def test_add_transitions_refuses_bad_data(change: dict[str, np.ndarray], message: str) -> None:
    # The value checks that ChunkReplayBuffer.add_offline made before they moved here, where offline data enters.
    buffer = ChunkReplayBuffer(100, OBS_SPACE, ACTION_SPACE, chunk_size=2)
    with pytest.raises(ValueError, match=message):
        add_transitions_to_buffer(buffer, transitions(6, **change), ACTION_SPACE)
    assert buffer.offline_size == 0


def test_check_spaces_accepts_matching_data() -> None:
    nearly_high = np.tile(ACTION_HIGH + 5e-7, (4, 1))
    check_transitions_match_spaces(transitions(actions=nearly_high), OBS_SPACE, ACTION_SPACE)


def test_check_spaces_observation_shape_message_holds_both_shapes() -> None:
    env_space = spaces.Box(-np.inf, np.inf, (4,), np.float32)
    with pytest.raises(ValueError, match=r"observations have shape \(3,\) per step .* has shape \(4,\)"):
        check_transitions_match_spaces(transitions(), env_space, ACTION_SPACE)


def test_check_spaces_action_shape_message_holds_both_shapes() -> None:
    env_space = spaces.Box(-1.0, 1.0, (2, 1), np.float32)
    with pytest.raises(ValueError, match=r"actions have shape \(2,\) per step .* has shape \(2, 1\)"):
        check_transitions_match_spaces(transitions(), OBS_SPACE, env_space)


def test_check_spaces_refuses_out_of_bounds_actions() -> None:
    actions = np.array([[0.0, 1.0], [1.0, 4.25], [-1.5, 2.0], [0.5, 3.0]], dtype=np.float32)
    with pytest.raises(ValueError) as error:
        check_transitions_match_spaces(transitions(actions=actions), OBS_SPACE, ACTION_SPACE)
    message = str(error.value)
    for expected in ("min [-1.5, 1.0]", "max [1.0, 4.25]", "low [-2.0, 0.0]", "high [2.0, 4.0]"):
        assert expected in message


def test_scale_actions_asymmetric_bounds_by_hand() -> None:
    actions = np.array([[-2.0, 0.0], [2.0, 4.0], [0.0, 2.0], [1.0, 1.0], [-1.0, 3.5]], dtype=np.float32)
    expected = np.array([[-1.0, -1.0], [1.0, 1.0], [0.0, 0.0], [0.5, -0.5], [-0.5, 0.75]], dtype=np.float32)
    scaled = scale_actions(actions, ACTION_SPACE)
    assert scaled.dtype == np.float32
    np.testing.assert_allclose(scaled, expected, atol=1e-7)


def test_scale_actions_equals_sb3_policy_scale_action() -> None:
    policy = SACPolicy(OBS_SPACE, ACTION_SPACE, lr_schedule=lambda _: 1e-3)
    actions = np.random.default_rng(9).uniform(ACTION_LOW, ACTION_HIGH, size=(50, 2)).astype(np.float32)
    np.testing.assert_array_equal(scale_actions(actions, ACTION_SPACE), policy.scale_action(actions))


def test_scale_actions_refuses_unbounded_space_and_wrong_shape() -> None:
    with pytest.raises(ValueError, match="finite action space bounds"):
        scale_actions(np.zeros((3, 2)), spaces.Box(-np.inf, np.inf, (2,), np.float32))
    with pytest.raises(ValueError, match=r"actions have shape \(3, 4\)"):
        scale_actions(np.zeros((3, 4)), ACTION_SPACE)


def test_add_transitions_to_buffer(episodes: list[dict]) -> None:
    data = load_offline_transitions(DATASET_ID)
    buffer = ChunkReplayBuffer(100, OBS_SPACE, ACTION_SPACE, chunk_size=2)
    add_transitions_to_buffer(buffer, data, ACTION_SPACE)
    raw_actions = np.concatenate([episode["actions"] for episode in episodes]).astype(np.float64)
    centre, half_range = (ACTION_LOW + ACTION_HIGH) / 2.0, (ACTION_HIGH - ACTION_LOW) / 2.0
    expected_actions = np.clip((raw_actions - centre) / half_range, -OFFLINE_ACTION_CLIP, OFFLINE_ACTION_CLIP)
    assert buffer.offline_size == 10
    np.testing.assert_allclose(buffer.offline_actions, expected_actions, atol=1e-6)
    np.testing.assert_array_equal(
        buffer.offline_observations, np.concatenate([episode["observations"][:-1] for episode in episodes])
    )
    np.testing.assert_array_equal(
        buffer.offline_next_observations, np.concatenate([episode["observations"][1:] for episode in episodes])
    )
    np.testing.assert_allclose(buffer.offline_rewards, np.concatenate([episode["rewards"] for episode in episodes]), rtol=1e-6)
    np.testing.assert_array_equal(buffer.offline_terminated, EXPECTED_TERMINATED.astype(np.float32))
    np.testing.assert_array_equal(buffer.offline_episode_end, EXPECTED_EPISODE_END.astype(np.float32))


def test_add_transitions_checks_before_adding() -> None:
    buffer = ChunkReplayBuffer(100, spaces.Box(-np.inf, np.inf, (4,), np.float32), ACTION_SPACE, chunk_size=2)
    with pytest.raises(ValueError, match=r"\(3,\) per step .* \(4,\)"):
        add_transitions_to_buffer(buffer, transitions(), ACTION_SPACE)
    assert buffer.offline_size == 0
    with pytest.raises(TypeError, match="ChunkReplayBuffer"):
        add_transitions_to_buffer(object(), transitions(), ACTION_SPACE)  # type: ignore[arg-type]
