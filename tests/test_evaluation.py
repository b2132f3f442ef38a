"""evaluate_success and SuccessEvalCallback against scripted episodes whose successes, returns and lengths are known."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from stable_baselines3.common.callbacks import EvalCallback, EveryNTimesteps
from stable_baselines3.common.logger import KVWriter, Logger
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv

from qc_sb3 import QC
from qc_sb3.common.evaluation import SuccessEvalCallback, evaluate_success

from test_qc import make_env as make_drift_env
from test_qc import make_model as make_qc_model
from toy_tasks import PointReachEnv


def episode_length(index: int) -> int:
    """Length of the scripted episode number ``index``: 2, 3, 4, 2, 3, 4, ..."""
    return 2 + index % 3


def episode_success(index: int) -> bool:
    """Whether the scripted episode number ``index`` ends in success: iff it is even."""
    return index % 2 == 0


def episode_return(index: int) -> float:
    """Return of the scripted episode number ``index``: -1 per step, 0 on a successful last step."""
    return -float(episode_length(index)) + float(episode_success(index))


class ScriptedEpisodeEnv(gym.Env):
    """
    Episodes whose outcome ignores the actions: episode ``i`` (counted over resets from ``first_episode``) lasts
    ``episode_length(i)`` steps and succeeds iff ``episode_success(i)``. Success is decided at the last step only:
    a failing episode reports ``info["success"] = True`` at its first step and False at its last one, a successful
    one False until its last step. Successful episodes terminate, failing ones are truncated.

    :param first_episode: Index of the first episode
    :param report_success: Whether the info holds ``"success"`` at all
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, first_episode: int = 0, report_success: bool = True):
        self.observation_space = spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.report_success = report_success
        self.episode = first_episode - 1
        self.t = 0

    def _obs(self) -> np.ndarray:
        return np.array([self.episode, self.t], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.episode += 1
        self.t = 0
        return self._obs(), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.t += 1
        last = self.t == episode_length(self.episode)
        success = episode_success(self.episode)
        info = {"success": success if last else (self.t == 1 and not success)} if self.report_success else {}
        reward = 0.0 if last and success else -1.0
        return self._obs(), reward, last and success, last and not success, info


class RecordingModel:
    """A stand-in model: zero actions; records each ``predict`` call and returns a new state object every time."""

    def __init__(self):
        self.calls: list[dict[str, Any]] = []

    def predict(
        self,
        observation: np.ndarray,
        state: Any = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
    ) -> tuple[np.ndarray, object]:
        new_state = object()
        self.calls.append(
            {
                "observation": observation.copy(),
                "state": state,
                "new_state": new_state,
                "episode_start": None if episode_start is None else episode_start.copy(),
                "deterministic": deterministic,
            }
        )
        return np.zeros((len(observation), 1), dtype=np.float32), new_state


def expected_results(episodes: list[int]) -> dict[str, float]:
    """The results evaluate_success must report for the given scripted episodes."""
    return {
        "success": float(np.mean([episode_success(i) for i in episodes])),
        "return": float(np.mean([episode_return(i) for i in episodes])),
        "length": float(np.mean([episode_length(i) for i in episodes])),
    }


@pytest.mark.parametrize("monitor", [False, True])
def test_success_is_the_mean_of_final_step_successes(monitor: bool):
    env = Monitor(ScriptedEpisodeEnv()) if monitor else ScriptedEpisodeEnv()
    results = evaluate_success(RecordingModel(), env, n_eval_episodes=5, warn=False)
    # Episodes 0..4: 0, 2 and 4 succeed; the transient success at the first step of 1 and 3 does not count.
    assert results == pytest.approx(expected_results([0, 1, 2, 3, 4]))
    assert results["success"] == pytest.approx(0.6)


def test_predict_gets_the_state_it_returned_and_the_episode_starts():
    model = RecordingModel()
    evaluate_success(model, ScriptedEpisodeEnv(), n_eval_episodes=3, warn=False)
    # Episodes of 2, 3 and 4 steps: 9 steps, an episode starting at steps 0, 2 and 5.
    assert len(model.calls) == 9
    assert model.calls[0]["state"] is None
    for previous, call in zip(model.calls[:-1], model.calls[1:], strict=True):
        assert call["state"] is previous["new_state"]
    starts = [bool(call["episode_start"][0]) for call in model.calls]
    assert starts == [True, False, True, False, False, True, False, False, False]
    assert not any(call["deterministic"] for call in model.calls)
    assert [tuple(call["observation"][0]) for call in model.calls][:3] == [(0.0, 0.0), (0.0, 1.0), (1.0, 0.0)]


def test_vec_env_counts_episodes_as_evaluate_policy_does():
    # The second env starts at episode 1: its successes are at its 2nd, 4th, ... episodes.
    env = DummyVecEnv([ScriptedEpisodeEnv, lambda: ScriptedEpisodeEnv(first_episode=1)])
    results = evaluate_success(RecordingModel(), env, n_eval_episodes=5, warn=False)
    # evaluate_policy gives (5 + i) // 2 episodes to env i: episodes 0, 1 of the first env, 1, 2, 3 of the second,
    # and ignores the episodes either env runs after its quota.
    assert results == pytest.approx(expected_results([0, 1, 1, 2, 3]))
    assert results["success"] == pytest.approx(0.4)


def test_missing_success_key_raises():
    with pytest.raises(ValueError, match=r'info\["success"\]'):
        evaluate_success(RecordingModel(), ScriptedEpisodeEnv(report_success=False), n_eval_episodes=2, warn=False)


class RecordingWriter(KVWriter):
    """Keeps every dump of the logger as (step, key-values)."""

    def __init__(self):
        self.dumps: list[tuple[int, dict[str, Any]]] = []

    def write(self, key_values: dict[str, Any], key_excluded: dict[str, tuple[str, ...]], step: int = 0) -> None:
        self.dumps.append((step, dict(key_values)))

    def close(self) -> None:
        pass


def test_callback_rejects_non_positive_frequency():
    with pytest.raises(ValueError, match="eval_freq"):
        SuccessEvalCallback(ScriptedEpisodeEnv(), eval_freq=0)


@pytest.mark.parametrize(
    ("n_envs", "eval_steps", "continued_eval_steps"), [(1, [10, 20, 30, 40], [50, 60]), (3, [12, 21, 30, 42], [51, 60])]
)
def test_callback_evaluates_and_logs_every_eval_freq_env_steps(
    n_envs: int, eval_steps: list[int], continued_eval_steps: list[int]
):
    train_env = DummyVecEnv([PointReachEnv] * n_envs)
    model = QC(
        "MlpPolicy",
        train_env,
        learning_starts=1000,
        actor_num_samples=2,
        flow_steps=2,
        policy_kwargs=dict(net_arch=[32, 32]),
        seed=0,
        device="cpu",
    )
    writer = RecordingWriter()
    model.set_logger(Logger(folder=None, output_formats=[writer]))
    callback = SuccessEvalCallback(Monitor(PointReachEnv(max_episode_steps=5)), eval_freq=10, n_eval_episodes=2)
    # With n_envs = 3, num_timesteps runs 3, 6, ..., 45: the first steps at or past 10, 20, 30, 40 are 12, 21, 30, 42.
    model.learn(total_timesteps=45, callback=callback)
    assert [entry["step"] for entry in callback.history] == eval_steps
    # The untrained policy never reaches the goal in 5 steps: every episode is a 5-step failure.
    for entry in callback.history:
        assert entry["success"] == 0.0
        assert entry["length"] == 5.0
        assert entry["return"] == -5.0
    logged = [(step, values) for step, values in writer.dumps if "eval/success" in values]
    assert [step for step, _ in logged] == eval_steps
    for (_, values), entry in zip(logged, callback.history, strict=True):
        assert values["eval/success"] == entry["success"]
        assert values["eval/return"] == entry["return"]
        assert values["eval/length"] == entry["length"]

    # A continued run (to step 65) resumes the schedule: the first steps at or past 50 and 60 (n_envs = 3: 48, 51, ...).
    model.learn(total_timesteps=20, callback=callback, reset_num_timesteps=False)
    assert [entry["step"] for entry in callback.history] == eval_steps + continued_eval_steps


def test_callback_evaluates_on_env_steps_online_and_on_offline_steps_offline_at_distinct_x():
    model = make_qc_model(QC, offline_gradient_steps=25)
    writer = RecordingWriter()
    model.set_logger(Logger(folder=None, output_formats=[writer]))
    callback = SuccessEvalCallback(Monitor(make_drift_env()), eval_freq=10, n_eval_episodes=1, offline_eval_freq=10)
    model.learn(total_timesteps=30, callback=callback)
    # Offline: at offline gradient steps 10 and 20 (env step 0); online: at env steps 10, 20, 30, offline steps not counted.
    assert [(entry["step"], entry.get("offline_step")) for entry in callback.history] == [
        (0, 10),
        (0, 20),
        (10, None),
        (20, None),
        (30, None),
    ]
    assert [step for step, values in writer.dumps if "offline_eval/success" in values] == [10, 20]
    assert [step for step, values in writer.dumps if "eval/success" in values] == [10, 20, 30]
    with pytest.raises(ValueError, match="offline_eval_freq"):
        SuccessEvalCallback(ScriptedEpisodeEnv(), eval_freq=1, offline_eval_freq=0)


def test_sb3_eval_callback_counts_offline_steps_and_every_n_timesteps_follows_env_steps(tmp_path):
    # The documented shift: EvalCallback's eval_freq counts on_step calls, offline gradient steps included.
    model = make_qc_model(QC, offline_gradient_steps=25)
    shifted = EvalCallback(Monitor(make_drift_env()), eval_freq=10, n_eval_episodes=1, log_path=str(tmp_path), verbose=0)
    model.learn(total_timesteps=30, callback=shifted)
    assert shifted.evaluations_timesteps == [0, 0, 5, 15, 25]  # calls 10, 20 offline; 30, 40, 50 = env steps 5, 15, 25
    # The documented remedy: SB3's EveryNTimesteps triggers on num_timesteps, which offline steps leave at 0.
    model = make_qc_model(QC, offline_gradient_steps=25)
    on_env_steps = EvalCallback(Monitor(make_drift_env()), eval_freq=1, n_eval_episodes=1, log_path=str(tmp_path), verbose=0)
    model.learn(total_timesteps=30, callback=EveryNTimesteps(n_steps=10, callback=on_env_steps))
    assert on_env_steps.evaluations_timesteps == [10, 20, 30]
