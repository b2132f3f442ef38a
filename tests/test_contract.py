"""What every algorithm must do as an SB3 algorithm, checked the same way for each one and each flag variant: save/load,
VecEnv, deterministic predict, evaluate_policy with the action queue, predict shapes, callbacks, set_env and actions in
the env's own scale. A new algorithm or variant gets these checks by adding one entry to VARIANTS (CONTRIBUTING.md).

Algorithm-specific behavior (losses, targets, warm-up, batch composition) is tested in the algorithm's own file."""

from __future__ import annotations

import json
import math
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.logger import configure
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.save_util import recursive_getattr
from stable_baselines3.common.vec_env import DummyVecEnv

from qc_sb3 import QC, QCFQL, RLPD
from qc_sb3.common.chunked import ChunkedOffPolicyAlgorithm

from image_tasks import IMAGE_OBSERVATIONS, image_offline_arrays, make_image_env
from test_qc import ACTION_DIM, EPISODE_LENGTH, OBS_DIM, TINY, DriftEnv, make_env, offline_arrays


@dataclass(frozen=True)
class Task:
    """
    What a variant trains on: the policy alias, the env, its offline data, observations to predict on (as the env
    gives them) and the tiny networks' ``policy_kwargs``.
    """

    policy: str
    make_env: Callable[[], gym.Env]
    offline_arrays: Callable[[], dict[str, np.ndarray]]
    observations: np.ndarray
    policy_kwargs: dict[str, Any]


STATE_OBSERVATIONS = np.random.default_rng(5).normal(size=(4, OBS_DIM)).astype(np.float32)
STATE = Task("MlpPolicy", make_env, offline_arrays, STATE_OBSERVATIONS, TINY)
# uint8 images channels last: SB3 reads them channels first through VecTransposeImage, the offline data included.
IMAGE = Task(
    "CnnPolicy",
    make_image_env,
    image_offline_arrays,
    IMAGE_OBSERVATIONS,
    {**TINY, "features_extractor_kwargs": {"features_dim": 16}},
)


@dataclass(frozen=True)
class Variant:
    """
    An algorithm and the constructor arguments that make one of the paper's methods of it (tiny sizes), on a task
    (:data:`STATE` unless said). ``kwargs`` may hold ``policy_kwargs`` (e.g. a ``features_extractor_class``) to
    replace the task's.
    """

    algorithm: type[ChunkedOffPolicyAlgorithm]
    kwargs: dict[str, Any]
    task: Task = field(default=STATE)

    @property
    def decision_length(self) -> int:
        """Primitive actions executed per policy decision: h with action chunking, 1 for h = 1 and the -n variants."""
        return self.kwargs["chunk_size"] if self.kwargs.get("action_chunking", True) else 1

    @property
    def offline_gradient_steps(self) -> int:
        return self.kwargs.get("offline_gradient_steps", 0)


FLOW = {"flow_steps": 2, "offline_gradient_steps": 3}
QC_KWARGS = {**FLOW, "actor_num_samples": 3}
FQL_KWARGS = {**FLOW, "alpha": 3.0}
RLPD_KWARGS = {"n_critics": 2}
# The paper's methods (README: "Baselines by flags").
VARIANTS = {
    "QC": Variant(QC, {**QC_KWARGS, "chunk_size": 3}),
    "BFN": Variant(QC, {**QC_KWARGS, "chunk_size": 1}),
    "BFN-n": Variant(QC, {**QC_KWARGS, "chunk_size": 3, "action_chunking": False}),
    "QC-FQL": Variant(QCFQL, {**FQL_KWARGS, "chunk_size": 3}),
    "FQL": Variant(QCFQL, {**FQL_KWARGS, "chunk_size": 1}),
    "FQL-n": Variant(QCFQL, {**FQL_KWARGS, "chunk_size": 3, "action_chunking": False}),
    "RLPD": Variant(RLPD, {**RLPD_KWARGS, "chunk_size": 1}),
    "RLPD-AC": Variant(RLPD, {**RLPD_KWARGS, "chunk_size": 3}),
    "QC-RLPD": Variant(RLPD, {**RLPD_KWARGS, "chunk_size": 3, "bc_alpha": 0.01}),
    # CnnPolicy on images (a small buffer: the default's million image steps would not fit in memory).
    "QC-CnnPolicy": Variant(QC, {**QC_KWARGS, "chunk_size": 3, "buffer_size": 100}, IMAGE),
    "QC-FQL-CnnPolicy": Variant(QCFQL, {**FQL_KWARGS, "chunk_size": 3, "buffer_size": 100}, IMAGE),
    "RLPD-AC-CnnPolicy": Variant(RLPD, {**RLPD_KWARGS, "chunk_size": 3, "buffer_size": 100}, IMAGE),
}
CHUNKED_VARIANTS = [name for name, variant in VARIANTS.items() if variant.decision_length > 1]
# Hyperparameters away from every algorithm's default, so that a load that fell back to a default would show.
COMMON_KWARGS = {"learning_starts": 6, "batch_size": 8, "gamma": 0.9, "tau": 0.02, "learning_rate": 1e-3}
N_ENVS, ONLINE_STEPS = 2, 24


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """Train on one thread: with networks this small, more threads only contend for the cores (10x slower on 2)."""
    n_threads = th.get_num_threads()
    th.set_num_threads(1)
    yield
    th.set_num_threads(n_threads)


class ActionRecorder(gym.Wrapper):
    """Keeps every action the env receives, as the env receives it."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.actions: list[np.ndarray] = []

    def step(self, action):
        self.actions.append(np.array(action, copy=True))
        return super().step(action)


class CallCounter(BaseCallback):
    """Counts on_step, on_training_start and on_training_end calls."""

    def __init__(self):
        super().__init__()
        self.steps = self.starts = self.ends = 0

    def _on_training_start(self) -> None:
        self.starts += 1

    def _on_step(self) -> bool:
        self.steps += 1
        return True

    def _on_training_end(self) -> None:
        self.ends += 1


def make_model(variant: Variant, env: Any = None, **overrides: Any) -> ChunkedOffPolicyAlgorithm:
    task = variant.task
    kwargs = {"policy_kwargs": task.policy_kwargs, **COMMON_KWARGS, **variant.kwargs, **overrides}
    model = variant.algorithm(task.policy, env or task.make_env(), offline_dataset=task.offline_arrays(), seed=0, **kwargs)
    model.set_logger(configure(None, []))
    return model


def two_env_recorders(task: Task) -> tuple[DummyVecEnv, list[ActionRecorder]]:
    recorders = [ActionRecorder(Monitor(task.make_env())) for _ in range(N_ENVS)]
    return DummyVecEnv([lambda recorder=recorder: recorder for recorder in recorders]), recorders


@dataclass
class TrainedRun:
    """A model trained on N_ENVS recorded envs with a counting callback: offline steps, then ONLINE_STEPS env steps."""

    variant: Variant
    model: ChunkedOffPolicyAlgorithm
    recorders: list[ActionRecorder]
    callback: CallCounter


@pytest.fixture(scope="module", params=list(VARIANTS))
def run(request) -> TrainedRun:
    """One trained model per variant, shared by the checks that only read it (predict, save, evaluate)."""
    variant = VARIANTS[request.param]
    env, recorders = two_env_recorders(variant.task)
    model = make_model(variant, env)
    callback = CallCounter()
    model.learn(total_timesteps=ONLINE_STEPS, callback=callback)
    return TrainedRun(variant, model, recorders, callback)


def count_chunk_requests(model, monkeypatch) -> list[int]:
    """Patch the policy so that each chunk it samples is recorded: the list of batch sizes of its chunk requests."""
    requests: list[int] = []
    predict_chunk = model.policy._predict_chunk

    def recording(observation, deterministic=False):
        requests.append(len(observation))
        return predict_chunk(observation, deterministic=deterministic)

    monkeypatch.setattr(model.policy, "_predict_chunk", recording)
    return requests


def test_learn_calls_the_callback_after_every_offline_gradient_step_and_every_vec_env_step(run):
    # SB3: one on_step per VecEnv step (N_ENVS env steps each); qc_sb3 adds one per offline gradient step (README).
    assert run.callback.steps == run.variant.offline_gradient_steps + ONLINE_STEPS // N_ENVS
    assert (run.callback.starts, run.callback.ends) == (1, 1)
    assert (run.model.num_timesteps, run.model.offline_steps_done) == (ONLINE_STEPS, run.variant.offline_gradient_steps)


def test_vec_env_stores_one_transition_per_env_and_step(run):
    buffer = run.model.replay_buffer
    assert (buffer.n_envs, buffer.pos) == (N_ENVS, ONLINE_STEPS // N_ENVS)
    assert [len(recorder.actions) for recorder in run.recorders] == [ONLINE_STEPS // N_ENVS] * N_ENVS
    assert not np.allclose(run.recorders[0].actions, run.recorders[1].actions), "each env acts on its own observations"


def test_env_gets_actions_in_its_own_scale_and_the_buffer_stores_them_in_minus_one_one(run):
    # DriftEnv's Box is [-2, 2] x [0, 4]: the buffer holds 2 (a - low) / (high - low) - 1 of what the env received.
    low, high = DriftEnv.action_space.low, DriftEnv.action_space.high
    for index, recorder in enumerate(run.recorders):
        received = np.array(recorder.actions)
        assert ((received >= low) & (received <= high)).all()
        stored = run.model.replay_buffer.actions[: len(received), index]
        np.testing.assert_allclose(stored, 2 * (received - low) / (high - low) - 1, atol=1e-6)
    actions = np.array(run.recorders[0].actions + run.recorders[1].actions)
    assert (actions[:, 1] > 1).any(), "the second dimension spans [0, 4], not [-1, 1]"


def test_predict_shapes_for_one_observation_and_a_batch(run):
    low, high = DriftEnv.action_space.low, DriftEnv.action_space.high
    observations = run.variant.task.observations
    for deterministic in (False, True):
        action, state = run.model.predict(observations[0], deterministic=deterministic)
        assert action.shape == (ACTION_DIM,) and state is not None
        action, _ = run.model.predict(observations[0], state=state, deterministic=deterministic)
        assert action.shape == (ACTION_DIM,)
        actions, state = run.model.predict(observations, deterministic=deterministic)
        assert actions.shape == (len(observations), ACTION_DIM)
        assert ((actions >= low) & (actions <= high)).all()
        actions, _ = run.model.predict(observations, state=state, episode_start=np.zeros(4, bool))
        assert actions.shape == (len(observations), ACTION_DIM)


def first_action(model_or_policy, observations: np.ndarray) -> np.ndarray:
    """The deterministic action at an episode's first observation(s): a fresh chunk's first action."""
    batched = observations.ndim > len(model_or_policy.observation_space.shape)
    episode_start = np.ones(len(observations) if batched else 1, dtype=bool)
    return model_or_policy.predict(observations, episode_start=episode_start, deterministic=True)[0]


def test_deterministic_predict_is_a_function_of_the_observation(run):
    observations = run.variant.task.observations
    th.manual_seed(1)
    batch = first_action(run.model, observations)
    th.manual_seed(2)  # another generator state changes nothing
    np.testing.assert_array_equal(first_action(run.model, observations), batch)
    for index, observation in enumerate(observations):
        # An observation gets the same action alone as within a batch (float32 rounding of batched products apart).
        np.testing.assert_allclose(first_action(run.model, observation), batch[index], atol=1e-5)
    assert not np.allclose(batch[0], batch[1]), "different observations, different actions"


def hyperparameters(variant: Variant) -> dict[str, Any]:
    """The constructor arguments given to the variant, numbers and strings: each a same-named model attribute."""
    given = {**COMMON_KWARGS, **variant.kwargs}
    return {name: value for name, value in given.items() if isinstance(value, int | float | str | bool)}


def test_save_load_round_trip(run, tmp_path):
    model, task = run.model, run.variant.task
    observations = task.observations
    model.save(tmp_path / "model.zip")
    with zipfile.ZipFile(tmp_path / "model.zip") as archive:
        data = json.loads(archive.read("data"))
    assert "offline_dataset" not in data and "_action_queue" not in data, "no data and no queue in the zip"
    th.manual_seed(99)  # loading must not depend on, or redraw from, the generator
    loaded = type(model).load(
        tmp_path / "model.zip", env=DummyVecEnv([task.make_env] * N_ENVS), offline_dataset=task.offline_arrays()
    )

    for name, value in hyperparameters(run.variant).items():
        assert getattr(loaded, name) == value, name
    assert (loaded.num_timesteps, loaded.offline_steps_done, loaded._n_updates) == (
        model.num_timesteps,
        model.offline_steps_done,
        model._n_updates,
    )
    saved_parameters = model.policy.state_dict()
    assert loaded.policy.state_dict().keys() == saved_parameters.keys()
    for name, value in loaded.policy.state_dict().items():
        th.testing.assert_close(value, saved_parameters[name], rtol=0, atol=0, msg=name)
    # Every trainable parameter is held by an optimizer that SB3 saves, and each comes back with its state.
    optimizer_names = [name for name in loaded._get_torch_save_params()[0] if name != "policy"]
    held = {
        id(parameter)
        for name in optimizer_names
        for group in recursive_getattr(loaded, name).param_groups
        for parameter in group["params"]
    }
    trained = [(name, parameter) for name, parameter in loaded.policy.named_parameters() if parameter.requires_grad]
    not_saved = [name for name, parameter in trained if id(parameter) not in held]
    assert not not_saved, f"trained parameters without a saved optimizer: {not_saved}"
    for name in optimizer_names:
        saved, restored = (model.get_parameters()[name]["state"], loaded.get_parameters()[name]["state"])
        assert saved.keys() == restored.keys() and saved, name
        for index in saved:
            th.testing.assert_close(restored[index]["exp_avg"], saved[index]["exp_avg"], rtol=0, atol=0)

    # The same actions: deterministic, and stochastic from the same generator state.
    np.testing.assert_array_equal(first_action(loaded, observations), first_action(model, observations))
    starts = np.ones(len(observations), dtype=bool)
    th.manual_seed(3)
    expected, expected_state = model.predict(observations, episode_start=starts)
    th.manual_seed(3)
    actions, state = loaded.predict(observations, episode_start=starts)
    np.testing.assert_array_equal(actions, expected)
    np.testing.assert_array_equal(state[0], expected_state[0])

    # The policy alone, as SB3's BasePolicy.save / load.
    model.policy.save(tmp_path / "policy.pth")
    policy = type(model.policy).load(tmp_path / "policy.pth")
    np.testing.assert_array_equal(first_action(policy, observations), first_action(model, observations))
    th.manual_seed(4)
    expected_chunks = model.policy.predict_chunk(observations)
    th.manual_seed(4)
    np.testing.assert_array_equal(policy.predict_chunk(observations), expected_chunks)

    # Training goes on from the loaded counters.
    loaded.set_logger(configure(None, []))
    loaded.learn(total_timesteps=4, reset_num_timesteps=False)
    assert (loaded.num_timesteps, loaded.offline_steps_done) == (ONLINE_STEPS + 4, run.variant.offline_gradient_steps)


def test_training_leaves_the_target_networks_without_autograd_history(run):
    # SB3's polyak_update updates target networks under th.no_grad(): their parameters stay leaves with no history.
    with_history = [name for name, parameter in run.model.policy.named_parameters() if not parameter.is_leaf]
    assert not with_history, f"parameters with autograd history after training: {with_history}"


@pytest.mark.parametrize("deterministic", [True, False])
def test_evaluate_policy_carries_the_action_queue(run, deterministic, monkeypatch):
    requests = count_chunk_requests(run.model, monkeypatch)
    make_task_env = run.variant.task.make_env
    rewards, lengths = evaluate_policy(
        run.model, Monitor(make_task_env()), n_eval_episodes=3, deterministic=deterministic, return_episode_rewards=True
    )
    assert len(rewards) == 3 and np.isfinite(rewards).all()
    assert all(1 <= length <= EPISODE_LENGTH for length in lengths)
    # One chunk per decision_length steps of each episode, the last one possibly cut short by the episode's end.
    assert requests == [1] * sum(math.ceil(length / run.variant.decision_length) for length in lengths)
    mean, std = evaluate_policy(run.model, Monitor(make_task_env()), n_eval_episodes=2, deterministic=deterministic)
    assert np.isfinite([mean, std]).all()


@pytest.mark.parametrize("name", CHUNKED_VARIANTS)
def test_set_env_drops_the_action_queues(name, monkeypatch):
    variant = VARIANTS[name]
    model = make_model(variant, learning_starts=0)  # RLPD: no random warm-up, the policy acts from the first step
    model.learn(total_timesteps=variant.decision_length + 1)  # the second chunk has actions left in the queue
    requests = count_chunk_requests(model, monkeypatch)
    model.set_env(variant.task.make_env())
    model.learn(total_timesteps=1, reset_num_timesteps=False)
    assert requests == [1], "the new env's first step asks for a fresh chunk"


@pytest.mark.parametrize("name", ["QC", "QC-FQL", "RLPD-AC"])
def test_set_env_refuses_another_action_space(name):
    class WiderDriftEnv(DriftEnv):
        action_space = spaces.Box(-2.0, 2.0, (ACTION_DIM + 1,), np.float32)

    model = make_model(VARIANTS[name])
    with pytest.raises(ValueError, match="Action spaces do not match"):
        model.set_env(WiderDriftEnv())
