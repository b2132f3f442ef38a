"""SB3 conventions of the chunked algorithms: the offline phase under callbacks, logs, save/load of the offline data,
VecNormalize, and the small ones (dict spaces, a missing dataset). set_env is in test_contract.py."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import gymnasium as gym
import minari
import numpy as np
import pytest
from gymnasium import spaces
from minari.data_collector import EpisodeBuffer
from stable_baselines3.common.callbacks import BaseCallback, CheckpointCallback, EvalCallback
from stable_baselines3.common.logger import configure
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from qc_sb3 import QC, QCFQL, RLPD
from qc_sb3.common.offline_source import OfflineShards, offline_source_record, open_offline_source_record

from test_qc import EPISODE_LENGTH, OBS_DIM, TINY, make_env, make_model, offline_arrays


class StepRecorder(BaseCallback):
    """Records (n_calls, offline_steps_done, num_timesteps) at every on_step; returns False at call ``stop_at``."""

    def __init__(self, stop_at: int | None = None):
        super().__init__()
        self.stop_at = stop_at
        self.seen: list[tuple[int, int, int]] = []

    def _on_step(self) -> bool:
        self.seen.append((self.n_calls, self.model.offline_steps_done, self.model.num_timesteps))
        return self.n_calls != self.stop_at


def count_chunk_requests(model) -> list[int]:
    calls: list[int] = []
    predict_chunk = model.policy._predict_chunk
    model.policy._predict_chunk = lambda observation, **kwargs: (
        calls.append(len(observation)) or predict_chunk(observation, **kwargs)
    )
    return calls


def test_a_callback_stops_the_offline_phase_and_the_next_learn_continues_it():
    model = make_model(QC, offline_gradient_steps=100)
    chunk_requests = count_chunk_requests(model)
    stopper = StepRecorder(stop_at=30)
    model.learn(total_timesteps=10, callback=stopper)
    assert stopper.seen == [(step, step, 0) for step in range(1, 31)], "one on_step per gradient step, env steps 0"
    assert (model.offline_steps_done, model.num_timesteps, model._n_updates) == (30, 0, 30)
    assert chunk_requests == [], "a stopped offline phase takes no env step"

    recorder = StepRecorder()
    model.learn(total_timesteps=10, callback=recorder, reset_num_timesteps=False)
    offline_calls = [(step - 30, step, 0) for step in range(31, 101)]
    online_calls = [(70 + step, 100, step) for step in range(1, 11)]
    assert recorder.seen == offline_calls + online_calls, "the remaining 70 offline steps, then 10 env steps"
    assert (model.offline_steps_done, model.num_timesteps) == (100, 10)


def test_checkpoint_and_eval_callbacks_count_offline_gradient_steps(tmp_path):
    model = make_model(QC, offline_gradient_steps=20)
    checkpoint = CheckpointCallback(save_freq=10, save_path=str(tmp_path / "checkpoints"))
    eval_env = DummyVecEnv([lambda: Monitor(make_env())])
    evaluation = EvalCallback(eval_env, eval_freq=5, n_eval_episodes=1, log_path=str(tmp_path / "eval"))
    model.learn(total_timesteps=0, callback=[checkpoint, evaluation])
    # Evaluations after gradient steps 5, 10, 15, 20, each at num_timesteps 0.
    assert np.load(tmp_path / "eval" / "evaluations.npz")["timesteps"].tolist() == [0, 0, 0, 0]
    # num_timesteps names the file: the checkpoint of step 20 replaced that of step 10.
    assert [path.name for path in (tmp_path / "checkpoints").iterdir()] == ["rl_model_0_steps.zip"]
    saved = QC.load(tmp_path / "checkpoints" / "rl_model_0_steps.zip", offline_dataset=offline_arrays())
    assert saved.offline_steps_done == 20


def test_progress_bar_over_both_phases_and_pretrain_with_a_callback():
    model = make_model(QC, offline_gradient_steps=10)
    model.learn(total_timesteps=6, progress_bar=True)
    assert (model.offline_steps_done, model.num_timesteps) == (10, 6)
    model = make_model(QC, offline_gradient_steps=10)
    stopper = StepRecorder(stop_at=4)
    model.pretrain(callback=stopper)
    assert model.offline_steps_done == 4 and len(stopper.seen) == 4


def scalar_steps(log_dir: Path) -> dict[str, list[int]]:
    (event_file,) = log_dir.glob("run_1/events.out.tfevents.*")
    accumulator = EventAccumulator(str(event_file))
    accumulator.Reload()
    return {tag: [event.step for event in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}


def test_each_tensorboard_tag_has_one_monotone_x_axis(tmp_path):
    # 40 offline steps logged every 10; 36 env steps (3 episodes of 12) logged after every episode.
    model = make_model(QC, offline_gradient_steps=40, offline_log_interval=10, tensorboard_log=str(tmp_path))
    del model._logger
    model._custom_logger = False
    model.learn(total_timesteps=36, log_interval=1)
    steps = scalar_steps(tmp_path)
    for tag, tag_steps in steps.items():
        assert tag_steps == sorted(tag_steps), f"{tag} goes back in x: {tag_steps}"
    assert steps["offline/critic_loss"] == [10, 20, 30, 40]
    assert steps["train/critic_loss"] == [12, 24, 36]


def write_minari_dataset(dataset_id: str, arrays: dict[str, np.ndarray]) -> None:
    """Write DriftEnv-shaped arrays of fixed-length episodes as a Minari dataset in the local root."""
    buffers = []
    for index, start in enumerate(range(0, len(arrays["rewards"]), EPISODE_LENGTH)):
        steps = slice(start, start + EPISODE_LENGTH)
        observations = np.concatenate([arrays["observations"][steps], arrays["next_observations"][steps][-1:]])
        terminations = arrays["terminated"][steps]
        buffers.append(
            EpisodeBuffer(
                id=index,
                observations=observations,
                actions=arrays["actions"][steps],
                rewards=arrays["rewards"][steps],
                terminations=terminations,
                truncations=~terminations & arrays["episode_end"][steps],
            )
        )
    env = make_env()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # Minari warns about every metadata field left unset
        minari.create_dataset_from_buffers(
            dataset_id, buffers, observation_space=env.observation_space, action_space=env.action_space
        )


@pytest.fixture
def minari_root(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "minari"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    return root


@pytest.mark.parametrize("algorithm", [QC, RLPD])
def test_load_reads_the_recorded_minari_dataset_again(algorithm, minari_root, tmp_path):
    arrays = offline_arrays()
    write_minari_dataset("drift/expert-v0", arrays)
    kwargs = {"actor_num_samples": 4, "flow_steps": 3} if algorithm is QC else {}
    model = algorithm("MlpPolicy", make_env(), offline_dataset="drift/expert-v0", policy_kwargs=TINY, **kwargs)
    model.save(tmp_path / "model.zip")
    loaded = algorithm.load(tmp_path / "model.zip", env=make_env())
    buffer = loaded.replay_buffer
    assert buffer.offline_size == len(arrays["rewards"])
    np.testing.assert_allclose(buffer.offline_rewards, arrays["rewards"])
    np.testing.assert_allclose(buffer.offline_observations, arrays["observations"])

    # offline_dataset=... overrides the record.
    other = offline_arrays(n_episodes=2, seed=1)
    overridden = algorithm.load(tmp_path / "model.zip", env=make_env(), offline_dataset=other)
    np.testing.assert_allclose(overridden.replay_buffer.offline_rewards, other["rewards"])

    # A record whose dataset is gone: a warning naming it, and an empty offline segment.
    shutil.rmtree(minari_root / "drift")
    with pytest.warns(UserWarning, match=r"cannot read this model's offline data, Minari dataset id 'drift/expert-v0'"):
        missing = algorithm.load(tmp_path / "model.zip", env=make_env())
    assert missing.replay_buffer.offline_size == 0


def test_load_reads_recorded_shards_at_the_shard_in_use(minari_root, tmp_path):
    shards = [offline_arrays(n_episodes=2, seed=seed) for seed in range(3)]
    for index, shard in enumerate(shards):
        write_minari_dataset(f"drift/shard{index}-v0", shard)
    ids = [f"drift/shard{index}-v0" for index in range(3)]
    model = make_model(QC, offline_dataset=OfflineShards(ids, swap_interval=4), offline_gradient_steps=10)
    model.pretrain(gradient_steps=5)  # steps 4 and 5 train on shard 1
    model.save(tmp_path / "model.zip")
    loaded = QC.load(tmp_path / "model.zip", env=make_env())
    assert loaded.offline_dataset == OfflineShards(ids, swap_interval=4)
    np.testing.assert_allclose(loaded.replay_buffer.offline_rewards, shards[1]["rewards"])


def test_load_warns_that_in_memory_offline_data_is_not_saved(tmp_path):
    model = make_model(QC)
    model.save(tmp_path / "model.zip")
    with pytest.warns(UserWarning, match="offline data passed in memory, which is not saved with it"):
        loaded = QC.load(tmp_path / "model.zip", env=make_env())
    assert loaded.replay_buffer.offline_size == 0


def hand_discounted_returns(rewards: np.ndarray, gamma: float) -> np.ndarray:
    """VecNormalize's running return G_t = gamma G_{t-1} + r_t, per fixed-length episode."""
    episodes = rewards.reshape(-1, EPISODE_LENGTH).astype(np.float64)
    returns = np.zeros_like(episodes)
    for t in range(EPISODE_LENGTH):
        returns[:, t] = episodes[:, t] + (gamma * returns[:, t - 1] if t > 0 else 0.0)
    return returns.ravel()


def test_vec_normalize_statistics_are_fitted_on_the_offline_data_before_training():
    arrays = offline_arrays(n_episodes=20)
    arrays["observations"] = 5.0 + 2.0 * arrays["observations"]
    env = VecNormalize(DummyVecEnv([make_env]), gamma=0.9)
    model = QC("MlpPolicy", env, offline_dataset=arrays, batch_size=64, policy_kwargs=TINY, actor_num_samples=4, seed=0)
    model.set_logger(configure(None, []))
    batches = []
    losses = model._losses
    model._losses = lambda batch: batches.append(batch) or losses(batch)
    model.pretrain(gradient_steps=1)
    # The first batch was already normalised with the fitted statistics (count 1e-4 of the prior is negligible).
    np.testing.assert_allclose(env.obs_rms.mean, arrays["observations"].mean(axis=0), atol=1e-3)
    np.testing.assert_allclose(env.obs_rms.var, arrays["observations"].var(axis=0), rtol=1e-3)
    np.testing.assert_allclose(env.ret_rms.var, hand_discounted_returns(arrays["rewards"], 0.9).var(), rtol=1e-3)
    assert abs(float(batches[0].observations.mean())) < 1.0, "observations near mean 5 normalised to near 0"
    count = env.obs_rms.count
    model.pretrain(gradient_steps=1)
    assert env.obs_rms.count == count, "fitted once per model"


def test_dict_observation_space_is_refused_with_the_flatten_hint():
    class DictEnv(gym.Env):
        observation_space = spaces.Dict({"position": spaces.Box(-1, 1, (OBS_DIM,), np.float32)})
        action_space = spaces.Box(-1, 1, (2,), np.float32)

    with pytest.raises(ValueError, match=r"dict observation spaces are not supported.*gymnasium.wrappers.FlattenObservation"):
        QC("MlpPolicy", DictEnv())


@pytest.mark.parametrize("algorithm", [QC, QCFQL, RLPD])
def test_multi_input_policy_is_refused_by_name_and_unknown_names_list_the_known_ones(algorithm):
    refusal = rf"{algorithm.__name__} does not support 'MultiInputPolicy'.*FlattenObservation.*'CnnPolicy'"
    with pytest.raises(ValueError, match=refusal):
        algorithm("MultiInputPolicy", make_env())
    with pytest.raises(ValueError, match=r"policy 'MLPPolicy' unknown .* expected one of \['CnnPolicy', 'MlpPolicy'\]"):
        algorithm("MLPPolicy", make_env())


def test_learn_without_offline_data_warns_that_the_offline_phase_is_skipped():
    model = QC("MlpPolicy", make_env(), offline_gradient_steps=5, learning_starts=3, policy_kwargs=TINY, batch_size=4)
    model.set_logger(configure(None, []))
    with pytest.warns(UserWarning, match=r"no offline data .* offline phase's 5 remaining gradient steps are skipped"):
        model.learn(total_timesteps=4)
    assert (model.offline_steps_done, model.num_timesteps) == (0, 4)


def test_offline_source_records_name_what_can_be_read_again(minari_root, tmp_path):
    write_minari_dataset("drift/expert-v0", offline_arrays(n_episodes=2))
    folder = minari_root / "drift" / "expert-v0"
    dataset = minari.load_dataset("drift/expert-v0")
    assert offline_source_record("drift/expert-v0") == {"kind": "minari_id", "id": "drift/expert-v0"}
    assert offline_source_record(folder) == {"kind": "minari_folder", "path": str(folder.resolve())}
    assert offline_source_record(dataset) == {"kind": "minari_folder", "path": str((folder / "data").resolve())}
    assert offline_source_record(minari.MinariDataset(dataset.storage, episode_indices=np.array([1]))) == {"kind": "in_memory"}
    assert offline_source_record(offline_arrays()) == {"kind": "in_memory"}
    assert offline_source_record(OfflineShards(["drift/expert-v0", offline_arrays()])) == {"kind": "in_memory"}
    shards = OfflineShards(["drift/expert-v0", str(folder)], swap_interval=7)
    record = offline_source_record(shards)
    assert record == {
        "kind": "shards",
        "shards": [{"kind": "minari_id", "id": "drift/expert-v0"}, {"kind": "minari_folder", "path": str(folder.resolve())}],
        "swap_interval": 7,
    }
    assert open_offline_source_record(record) == OfflineShards(["drift/expert-v0", str(folder.resolve())], swap_interval=7)


@pytest.mark.parametrize("second_learn", ["new run", "loaded model"])
def test_a_new_learn_ends_the_episode_under_way_so_no_window_crosses_the_reset(second_learn, tmp_path):
    # SB3 resets the env at a learn() with reset_num_timesteps (and for a loaded model): the step stored last before
    # it must end its windows, as a truncation (bootstrap kept), or windows would join two episodes.
    model = make_model(QC, learning_starts=100)
    model.learn(total_timesteps=5)  # online steps 0..4 of one episode (EPISODE_LENGTH > 5)
    assert model.replay_buffer.dones[4, 0] == 0
    if second_learn == "loaded model":
        model.save(tmp_path / "model.zip")
        model.save_replay_buffer(tmp_path / "buffer.pkl")
        model = QC.load(tmp_path / "model.zip", env=make_env(), offline_dataset=offline_arrays())
        model.load_replay_buffer(tmp_path / "buffer.pkl")
        model.learn(total_timesteps=5, reset_num_timesteps=False)
    else:
        model.learn(total_timesteps=5)
    buffer = model.replay_buffer
    assert (buffer.dones[:10, 0].tolist(), buffer.timeouts[:10, 0].tolist()) == (
        [0] * 4 + [1] + [0] * 5,
        [0] * 4 + [1] + [0] * 5,
    )


@pytest.mark.parametrize(
    ("name", "value"), [("offline_gradient_steps", 1e1), ("offline_gradient_steps", -1), ("offline_log_interval", 0)]
)
def test_offline_step_counts_must_be_integers(name, value):
    with pytest.raises(ValueError, match=rf"{name} must be an integer >= \d, got {value!r}"):
        make_model(QC, **{name: value})
