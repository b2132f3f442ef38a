"""Chunk execution (docs/algorithms.md §5): which chunk and which index each executed action comes from, with
re-planning every k steps and with temporal ensembling, in ``predict``, in ``learn()``'s collection and in
``evaluate_success``; checked against hand tables, with a stub decision whose chunks encode where they come from."""

from __future__ import annotations

import copy
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from stable_baselines3.common.vec_env import DummyVecEnv

from qc_sb3 import QC, QCFQL, RLPD
from qc_sb3.benchmarks.runner.config import ConfigError, load_config
from qc_sb3.benchmarks.runner.planning import plan_runs
from qc_sb3.benchmarks.runner.runs import build_model
from qc_sb3.benchmarks.speed.chunk_execution_speed import OPTIONS, STEPS_PER_CALL, acting_call
from qc_sb3.benchmarks.speed.step_speed import ConstantEnv
from qc_sb3.common.chunk_execution import ChunkExecution, ensemble_weights
from qc_sb3.common.evaluation import evaluate_success

from test_benchmarks_toys import TOY_TASK, register_toy_suite, toy_config

H = 5
BOUND = 1000.0  # the actions' bounds: the stub's scaled value v is the env action 1000 v
# Episode lengths of CountingEnv and how each ends: terminated after 7 steps, truncated after 6, then open.
EPISODES = ((7, "terminated"), (6, "truncated"))
TOTAL_STEPS = 16

# Hand tables for h = 5: per global step t (0..15), the (decision step, index) of the executed action. Episodes cover
# steps 0-6 (terminated at step 6), 7-12 (truncated at step 12) and 13-15; each starts a fresh chunk, and a decision
# made at step d is the chunk of the observation d.
HAND_TABLES = {
    5: [
        *[(0, 0), (0, 1), (0, 2), (0, 3), (0, 4), (5, 0), (5, 1)],
        *[(7, 0), (7, 1), (7, 2), (7, 3), (7, 4), (12, 0)],
        *[(13, 0), (13, 1), (13, 2)],
    ],
    2: [
        *[(0, 0), (0, 1), (2, 0), (2, 1), (4, 0), (4, 1), (6, 0)],
        *[(7, 0), (7, 1), (9, 0), (9, 1), (11, 0), (11, 1)],
        *[(13, 0), (13, 1), (15, 0)],
    ],
    1: [(t, 0) for t in range(TOTAL_STEPS)],
}


class CountingEnv(gym.Env):
    """Observation: the number of steps taken since the env was made (across episodes); episodes as in EPISODES."""

    observation_space = spaces.Box(-np.inf, np.inf, (1,), np.float32)
    action_space = spaces.Box(-BOUND, BOUND, (2,), np.float32)

    def __init__(self) -> None:
        self.count, self.episode, self.in_episode = 0, -1, 0
        self.executed: list[np.ndarray] = []

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.episode, self.in_episode = self.episode + 1, 0
        return np.array([self.count], np.float32), {}

    def step(self, action):
        self.executed.append(np.asarray(action, np.float64).copy())
        self.count, self.in_episode = self.count + 1, self.in_episode + 1
        length, ending = EPISODES[self.episode] if self.episode < len(EPISODES) else (None, None)
        ended = self.in_episode == length
        observation = np.array([self.count], np.float32)
        return observation, -1.0, ended and ending == "terminated", ended and ending == "truncated", {"success": 0.0}


def coded_chunks(observation: th.Tensor, deterministic: bool = False) -> th.Tensor:
    """The stub decision: at observation d, the chunk whose action i is (d, i) in the env's scale."""
    decision = observation[:, :1].expand(-1, H)
    index = th.arange(H, dtype=observation.dtype).expand(len(observation), -1)
    return th.stack([decision, index], dim=-1).reshape(len(observation), -1) / BOUND


def coded_model(algorithm: type, env: gym.Env, **kwargs) -> QC | QCFQL | RLPD:
    """An algorithm acting with the stub decision, without updates during the test's steps."""
    options = {"offline_gradient_steps": 0} if algorithm is not RLPD else {}
    model = algorithm(
        "MlpPolicy",
        env,
        chunk_size=H,
        learning_starts=0 if algorithm is RLPD else 1000,  # RLPD: no random warm-up, QC: no update
        batch_size=4,
        policy_kwargs={"net_arch": [8]},
        seed=0,
        device="cpu",
        **options,
        **kwargs,
    )
    if algorithm is RLPD:
        model.learning_starts = 0
        model.train = lambda *args, **kwargs: None  # acts only
    model.policy._predict_chunk = coded_chunks
    return model


def as_table(actions: list[np.ndarray] | np.ndarray) -> list[tuple[int, int]]:
    return [(round(float(a[0])), round(float(a[1]))) for a in np.asarray(actions).reshape(-1, 2)]


def predict_loop(model, env: CountingEnv, steps: int, deterministic: bool = False) -> list[np.ndarray]:
    """The recurrent-state loop of SB3's docs: pass the state back, episode_start True at each episode's start."""
    observation, _ = env.reset()
    state, episode_start = None, np.array([True])
    actions = []
    for _ in range(steps):
        action, state = model.predict(observation, state=state, episode_start=episode_start, deterministic=deterministic)
        actions.append(action)
        observation, _, terminated, truncated, _ = env.step(action)
        episode_start = np.array([terminated or truncated])
        if terminated or truncated:
            observation, _ = env.reset()
    return actions


@pytest.mark.parametrize("k", [5, 2, 1])
@pytest.mark.parametrize("algorithm", [QC, QCFQL, RLPD])
def test_predict_executes_the_hand_table(algorithm, k):
    env = CountingEnv()
    model = coded_model(algorithm, env, replan_interval=None if k == H else k)
    assert as_table(predict_loop(model, env, TOTAL_STEPS)) == HAND_TABLES[k]


@pytest.mark.parametrize("k", [5, 2, 1])
@pytest.mark.filterwarnings("ignore:learning_starts")  # no update: the test checks acting only
def test_learn_collects_the_hand_table_and_stores_the_executed_actions(k):
    env = CountingEnv()
    model = coded_model(QC, env, replan_interval=k)
    model.learn(TOTAL_STEPS)
    assert as_table(env.executed) == HAND_TABLES[k]
    buffer = model.replay_buffer
    stored = buffer.actions[:TOTAL_STEPS, 0] * BOUND  # the buffer's [-1, 1] scale
    assert as_table(stored) == HAND_TABLES[k]
    # Windows are the buffer's usual ones over the executed steps: t .. t+4, the newest step repeated past the end,
    # valid until the first episode end (steps 6 and 12 end episodes, step 15 is the stream's newest).
    windows = buffer._chunk_samples(buffer._online_windows(np.arange(TOTAL_STEPS)), None)
    for start in range(TOTAL_STEPS):
        steps = [min(start + i, TOTAL_STEPS - 1) for i in range(H)]
        assert as_table(windows.actions[start].numpy() * BOUND) == [HAND_TABLES[k][t] for t in steps]
        first_end = min(t for t in (6, 12, 15) if t >= start)
        expected_valid = [1.0 if start + i <= first_end else 0.0 for i in range(H)]
        np.testing.assert_array_equal(windows.valid[start].numpy(), expected_valid)


@pytest.mark.parametrize("k", [5, 2, 1])
def test_evaluate_success_executes_the_hand_table(k):
    env = CountingEnv()
    model = coded_model(QCFQL, CountingEnv(), replan_interval=k)
    evaluate_success(model, DummyVecEnv([lambda: env]), n_eval_episodes=2, warn=False)
    assert as_table(env.executed) == HAND_TABLES[k][:13]  # the two episodes: steps 0-12


def test_replan_interval_set_after_construction_holds_from_the_next_decision():
    env = CountingEnv()
    model = coded_model(QC, env)
    observation, _ = env.reset()
    state = None
    actions = []
    for step in range(7):
        if step == 3:
            model.replan_interval = 2  # at step 3 the queue of decision 0 is 3 actions in: due at once
        action, state = model.predict(observation, state=state, episode_start=np.array([step == 0]))
        actions.append(action)
        observation, *_ = env.step(action)
    assert as_table(actions) == [(0, 0), (0, 1), (0, 2), (3, 0), (3, 1), (5, 0), (5, 1)]
    assert model.policy.replan_interval == 2


def test_decisions_per_step_go_through_the_compiled_decision_where_there_is_one():
    # The compiled and fast decision paths compute the chunk; the queue decides when: every k steps.
    env = CountingEnv()
    model = coded_model(QC, env, replan_interval=2)
    calls = []

    def compiled(observation: th.Tensor, deterministic: bool) -> th.Tensor:
        calls.append(int(observation[0, 0]))
        return coded_chunks(observation)

    model.policy.compiled_decision = compiled
    assert as_table(predict_loop(model, env, TOTAL_STEPS)) == HAND_TABLES[2]
    assert calls == sorted({decision for decision, _ in HAND_TABLES[2]})


def ensembled_by_hand() -> list[float]:
    """
    h = 3, m = ln 2: the chunk decided at step d plans 10 d + i for step d + i. ACT's weights exp(-m i), i = 0 the
    oldest prediction, are 1, 1/2, 1/4 (normalized: 2/3, 1/3 of two predictions; 4/7, 2/7, 1/7 of three). An episode of
    4 steps (terminated), then a new one: its first steps see only its own chunks.
    """
    return [
        0.0,  # step 0: chunk 0's action 0 alone
        2 / 3 * 1 + 1 / 3 * 10,  # step 1: chunk 0 (oldest) plans 1, chunk 1 plans 10
        4 / 7 * 2 + 2 / 7 * 11 + 1 / 7 * 20,  # step 2
        4 / 7 * 12 + 2 / 7 * 21 + 1 / 7 * 30,  # step 3: chunk 0 no longer overlaps
        40.0,  # step 4, a new episode: chunk 4 alone
        2 / 3 * 41 + 1 / 3 * 50,  # step 5
    ]


class EnsembleEnv(CountingEnv):
    """CountingEnv with one-dimensional actions and a first episode of 4 steps that terminates."""

    action_space = spaces.Box(-BOUND, BOUND, (1,), np.float32)

    def step(self, action):
        observation, reward, _, _, info = super().step(action)
        return observation, reward, self.count == 4, False, info


@pytest.mark.filterwarnings("ignore:learning_starts")  # no update: the test checks acting only
def test_temporal_ensembling_averages_the_overlapping_chunks_as_by_hand():
    env = EnsembleEnv()
    model = QC(
        "MlpPolicy",
        env,
        chunk_size=3,
        temporal_ensemble_rate=float(np.log(2)),
        offline_gradient_steps=0,
        policy_kwargs={"net_arch": [8]},
    )
    model.policy._predict_chunk = lambda observation, deterministic=False: (
        10 * observation + th.arange(3, dtype=observation.dtype)
    ) / BOUND
    assert model.replan_interval is None and model.policy.chunk_execution.interval == 1
    actions = np.array(predict_loop(model, env, 6)).reshape(-1)
    np.testing.assert_allclose(actions, ensembled_by_hand(), atol=1e-3)
    # learn() collects the same averaged actions, and stores them.
    env = EnsembleEnv()
    model.set_env(env)
    model.learn(6)
    np.testing.assert_allclose(np.array(env.executed).reshape(-1), ensembled_by_hand(), atol=1e-3)
    np.testing.assert_allclose(model.replay_buffer.actions[:6, 0, 0] * BOUND, ensembled_by_hand(), atol=1e-3)


def test_ensemble_weights_are_acts_with_the_oldest_first():
    # Newest first: the newest prediction is i = count - 1 in ACT's numbering.
    np.testing.assert_allclose(ensemble_weights(3, np.log(2)), [1 / 7, 2 / 7, 4 / 7])
    np.testing.assert_allclose(ensemble_weights(4, 0.0), [0.25] * 4)
    np.testing.assert_allclose(ensemble_weights(1, 5.0), [1.0])


@pytest.mark.parametrize("options", [{"replan_interval": 2}, {"temporal_ensemble_rate": 0.5}])
@pytest.mark.parametrize("algorithm", [QC, QCFQL, RLPD])
def test_deterministic_stays_deterministic(algorithm, options):
    env = gym.make("Pendulum-v1")
    model = algorithm("MlpPolicy", env, chunk_size=H, policy_kwargs={"net_arch": [8]}, seed=0, device="cpu", **options)
    observations = np.random.default_rng(0).normal(size=(8, 3)).astype(np.float32)

    def run(seed: int, deterministic: bool = True) -> np.ndarray:
        th.manual_seed(seed)
        state, actions = None, []
        for step, observation in enumerate(observations):
            action, state = model.predict(observation, state, np.array([step == 0]), deterministic=deterministic)
            actions.append(action)
        return np.array(actions)

    np.testing.assert_array_equal(run(1), run(2))
    assert not np.array_equal(run(1, deterministic=False), run(2, deterministic=False))


@pytest.mark.parametrize(
    ("algorithm", "options"),
    [(QC, {"replan_interval": 2}), (QCFQL, {"temporal_ensemble_rate": 0.25}), (RLPD, {"replan_interval": 3})],
)
def test_save_and_load_keep_the_options(algorithm, options, tmp_path):
    model = algorithm("MlpPolicy", gym.make("Pendulum-v1"), chunk_size=H, policy_kwargs={"net_arch": [8]}, device="cpu")
    for name, value in options.items():
        setattr(model, name, value)  # set after construction: saved all the same
    model.save(tmp_path / "model.zip")
    loaded = algorithm.load(tmp_path / "model.zip", device="cpu")
    expected = ChunkExecution(H, **options)
    assert loaded.policy.chunk_execution == expected
    assert loaded.replan_interval == expected.replan_interval
    assert loaded.temporal_ensemble_rate == expected.temporal_ensemble_rate
    model.policy.save(tmp_path / "policy.pth")
    assert type(model.policy).load(tmp_path / "policy.pth", device="cpu").chunk_execution == expected


def test_load_keyword_arguments_override_the_saved_options(tmp_path):
    # As SB3's load(path, **kwargs) overrides saved attributes, the options given to load() are the ones in force.
    QC("MlpPolicy", gym.make("Pendulum-v1"), chunk_size=H, policy_kwargs={"net_arch": [8]}, device="cpu").save(
        tmp_path / "model.zip"
    )
    loaded = QC.load(tmp_path / "model.zip", device="cpu", replan_interval=2)
    assert loaded.policy.chunk_execution == ChunkExecution(H, replan_interval=2)
    with pytest.raises(ValueError, match="got 9"):
        QC.load(tmp_path / "model.zip", device="cpu", replan_interval=9)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"replan_interval": 0}, "replan_interval must be None (execute whole chunks) or an integer in [1, 5]"),
        ({"replan_interval": 6}, "got 6"),
        ({"replan_interval": 2.0}, "got 2.0"),
        ({"replan_interval": 2, "action_chunking": False}, "integer in [1, 1]"),
        ({"temporal_ensemble_rate": -0.1}, "temporal_ensemble_rate must be None (off) or a number >= 0, got -0.1"),
        ({"temporal_ensemble_rate": float("nan")}, "got nan"),
        ({"temporal_ensemble_rate": 0.1, "replan_interval": 2}, "give replan_interval=1 or None with temporal"),
    ],
)
def test_bad_options_are_refused_with_the_value(kwargs, message):
    with pytest.raises(ValueError) as error:
        QC("MlpPolicy", gym.make("Pendulum-v1"), chunk_size=H, device="cpu", **kwargs)
    assert message in str(error.value)


def test_contradictory_settings_after_construction_are_refused_and_change_nothing():
    model = QC("MlpPolicy", gym.make("Pendulum-v1"), chunk_size=H, policy_kwargs={"net_arch": [8]}, replan_interval=3)
    with pytest.raises(ValueError, match="replan_interval is 3"):
        model.temporal_ensemble_rate = 0.01
    assert model.temporal_ensemble_rate is None and model.policy.chunk_execution == ChunkExecution(H, 3)


def test_the_runner_key_reaches_the_model_and_variants_run_under_their_own_name(tmp_path):
    register_toy_suite()
    data = toy_config(
        methods={
            "QC": None,
            "QC@k2": {"replan_interval": 2},
            "QC-FQL@ensemble": {"temporal_ensemble_rate": 0.5},
        },
    )
    runs = {run.method: run for run in plan_runs(load_config(data), tmp_path)}
    assert runs["QC@k2"].run_dir == str(tmp_path / TOY_TASK / "QC@k2" / "seed0")
    assert runs["QC@k2"].algorithm == runs["QC"].algorithm
    executions = {}
    for name, run in runs.items():
        model = build_model(run, run.make_env(seed=run.seed, **run.env_kwargs))
        executions[name] = model.policy.chunk_execution
    assert executions == {
        "QC": ChunkExecution(H),
        "QC@k2": ChunkExecution(H, replan_interval=2),
        "QC-FQL@ensemble": ChunkExecution(H, temporal_ensemble_rate=0.5),
    }


@pytest.mark.parametrize(
    ("methods", "message"),
    [
        ({"QC": {"replan_interval": 6}}, "QC (domain toy) refuses its hyperparameters: ValueError: replan_interval must"),
        ({"QC": {"replan_interval": 0}}, "methods.QC.replan_interval must be >= 1, got 0"),
        ({"QC": {"replan_interval": 2.5}}, "methods.QC.replan_interval must be like its default None, got 2.5"),
        ({"QC": {"temporal_ensemble_rate": -1}}, "methods.QC.temporal_ensemble_rate must be >= 0.0, got -1"),
        ({"QC@": None}, "unknown method 'QC@'"),
        ({"DQN@k1": None}, "unknown method 'DQN@k1'"),
    ],
)
def test_the_runner_refuses_bad_options_before_any_run(methods, message, tmp_path):
    register_toy_suite()
    with pytest.raises(ConfigError) as error:
        plan_runs(load_config(toy_config(methods=methods)), tmp_path)
    assert message in str(error.value)


def test_the_campaign_config_is_part_as_protocol_with_only_the_execution_changed(tmp_path):
    pytest.importorskip("qc_sb3.envs.ogbench")
    configs = Path(__file__).parents[1] / "benchmarks" / "configs"
    part_a = {(run.method, run.seed): run.record() for run in plan_runs(load_config(configs / "evidence-parity.yaml"), "o")}
    campaign = plan_runs(load_config(configs / "chunk-execution.yaml"), "o")
    assert {run.method for run in campaign} == {f"{m}@{v}" for m in ("QC", "QC-FQL") for v in ("k1", "k2", "ensemble")}
    options = ("replan_interval", "temporal_ensemble_rate")
    for run in campaign:
        record, base = copy.deepcopy(run.record()), run.method.split("@")[0]
        expected = copy.deepcopy(part_a[(base, run.seed)])
        assert [expected["hyperparameters"].pop(key) for key in options] == [None, None]  # part A: whole chunks
        assert [record["hyperparameters"].pop(key) for key in options] != [None, None]
        assert {**record, "method": base} == expected


def test_the_speed_benchmark_makes_one_decision_every_k_steps_of_each_option():
    model = QC("MlpPolicy", ConstantEnv(), chunk_size=H, actor_num_samples=2, policy_kwargs={"net_arch": [8]}, device="cpu")
    decide, decisions = model.policy._predict_chunk, []
    model.policy._predict_chunk = lambda observation, deterministic=False: (
        decisions.append(1),
        decide(observation, deterministic),
    )[1]
    for options, per_step in OPTIONS.values():
        call = acting_call(model, options)
        call()
        decisions.clear()
        call(), call()  # the queues carried over from call to call
        assert len(decisions) == round(2 * STEPS_PER_CALL * per_step), options
