"""What an SB3 user passes beyond the algorithm's own arguments: policy_kwargs and replay_buffer_kwargs in SB3's
idioms (activation_fn, net_arch dicts, unknown keys, action_noise), refused by name or honored; an env already
chunked, and observations that change shape mid-episode."""

from __future__ import annotations

import re

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from stable_baselines3.common.logger import configure
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.noise import ActionNoise
from stable_baselines3.common.vec_env import DummyVecEnv
from torch import nn

from qc_sb3 import QC, QCFQL, RLPD, ChunkedActionWrapper
from qc_sb3.common.env_checks import check_observation_batch
from qc_sb3.common.networks import TanhGELU

from reference_math import dense_layers, mlp_layers, numpy_of, relu
from test_qc import OBS_DIM, TINY, make_env, offline_arrays

ALGORITHMS = [QC, QCFQL, RLPD]


def build_kwargs(cls) -> dict:
    defaults = {"offline_dataset": offline_arrays(), "learning_starts": 4, "batch_size": 8, "chunk_size": 3, "seed": 0}
    defaults["policy_kwargs"] = TINY
    if cls is not RLPD:
        defaults.update(offline_gradient_steps=0, flow_steps=2)
    return defaults


def build(cls, **kwargs):
    return cls("MlpPolicy", make_env(), **{**build_kwargs(cls), **kwargs})


@pytest.mark.parametrize("cls", [QC, QCFQL])
@pytest.mark.parametrize("fast_paths", [True, False])
def test_activation_fn_is_every_flow_networks_hidden_activation(cls, fast_paths):
    th.manual_seed(0)
    model = build(cls, policy_kwargs={**TINY, "activation_fn": nn.ReLU, "fast_paths": fast_paths})
    policy = model.policy
    mlps = [policy.flow.mlp, *([policy.actor.mlp] if cls is QCFQL else [])]
    for mlp in mlps:
        x = th.randn(5, mlp.linears[0].in_features)
        with th.no_grad():  # the no-grad path is the fast one where fast_paths is on
            got = numpy_of(mlp(x))
        np.testing.assert_allclose(got, dense_layers(numpy_of(x), *mlp_layers(mlp), relu), rtol=1e-5, atol=1e-6)
    assert isinstance(policy.critic.net.activation, nn.ReLU) and isinstance(policy.critic_target.net.activation, nn.ReLU)
    model.learn(6)  # acts and updates through the same networks
    assert type(build(cls).policy.flow.mlp.activation) is TanhGELU, "the default stays the reference's GELU(tanh)"


@pytest.mark.parametrize("cls", ALGORITHMS)
def test_a_net_arch_dict_without_pi_or_qf_is_refused_as_sb3_does(cls):
    with pytest.raises(ValueError, match=r"net_arch=.*no 'pi' key"):
        build(cls, policy_kwargs={"net_arch": {"qf": [32]}})
    with pytest.raises(ValueError, match=r"net_arch=.*no 'qf' key"):
        build(cls, policy_kwargs={"net_arch": {"pi": [32]}})


@pytest.mark.parametrize("cls", ALGORITHMS)
def test_an_unknown_policy_kwargs_key_is_named_with_the_accepted_ones(cls):
    with pytest.raises(TypeError, match=r"unknown key 'use_sde'.*accepted keys: .*net_arch"):
        build(cls, policy_kwargs={**TINY, "use_sde": True})


@pytest.mark.parametrize("cls", ALGORITHMS)
def test_a_policy_kwargs_key_the_algorithm_sets_is_refused_naming_its_argument(cls):
    with pytest.raises(ValueError, match=rf"policy_kwargs\['n_critics'\] is set by {cls.__name__}.*n_critics=\.\.\."):
        build(cls, policy_kwargs={**TINY, "n_critics": 7})


@pytest.mark.parametrize("cls", ALGORITHMS)
def test_replay_buffer_kwargs_optimize_memory_usage_and_unknown_keys_are_refused_by_name(cls):
    with pytest.raises(ValueError, match="optimize_memory_usage is not supported"):
        build(cls, replay_buffer_kwargs={"optimize_memory_usage": True})
    with pytest.raises(ValueError, match=r"replay_buffer_kwargs\['chunk_size'\].*algorithm's chunk_size"):
        build(cls, replay_buffer_kwargs={"chunk_size": 2})
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['offline_share'\].*offline_fraction"):
        build(cls, replay_buffer_kwargs={"offline_share": 0.5})


@pytest.mark.parametrize("cls", ALGORITHMS)
@pytest.mark.parametrize("where", ["gym env", "DummyVecEnv, Monitor outside", "set_env"])
def test_an_env_already_in_chunked_action_wrapper_is_refused_as_chunks_of_chunks(cls, where):
    wrapped = ChunkedActionWrapper(make_env(), 4)
    expected = r"ChunkedActionWrapper\(chunk_size=4\), but .* chunks actions itself \(chunk_size=3\).*3 x 4 = 12 primitive"
    if where == "set_env":
        model = build(cls)
        with pytest.raises(ValueError, match=expected):
            model.set_env(DummyVecEnv([make_env, lambda: wrapped]))
        return
    env = wrapped if where == "gym env" else DummyVecEnv([lambda: Monitor(wrapped)])
    kwargs = {"learning_starts": 4, "batch_size": 8, "chunk_size": 3, "policy_kwargs": TINY}
    with pytest.raises(ValueError, match=expected):
        cls("MlpPolicy", env, **kwargs)


class ConstantNoise(ActionNoise):
    """A noise whose every draw is the same vector, so the expected noisy action can be computed by hand."""

    def __init__(self, value: np.ndarray):
        super().__init__()
        self.value = value

    def __call__(self) -> np.ndarray:
        return self.value.copy()


class ActionRecorder(gym.Wrapper):
    """Records every action the env executes."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.executed: list[np.ndarray] = []

    def step(self, action):
        self.executed.append(np.array(action))
        return self.env.step(action)


@pytest.mark.parametrize("cls", ALGORITHMS)
@pytest.mark.parametrize("given", ["constructor", "attribute"])
def test_action_noise_is_added_to_each_executed_action_clipped_and_stored(cls, given):
    noise = ConstantNoise(np.array([0.5, -0.7]))
    env = ActionRecorder(make_env())
    kwargs = {"action_noise": noise} if given == "constructor" else {}
    model = cls("MlpPolicy", env, **{**build_kwargs(cls), "learning_starts": 0, **kwargs})
    model.set_logger(configure(None, []))
    if given == "attribute":
        model.action_noise = noise  # as SB3 users set it
    policy_actions: list[np.ndarray] = []
    predict = model.policy.predict

    def recording_predict(*args, **kw):
        actions, state = predict(*args, **kw)
        policy_actions.append(actions[0].copy())
        return actions, state

    model.policy.predict = recording_predict
    model.learn(8)
    low, high = env.action_space.low, env.action_space.high
    # By hand: the policy's action to [-1, 1], plus the noise, clipped, back to the env's scale.
    scaled = np.clip(2.0 * (np.array(policy_actions) - low) / (high - low) - 1.0 + noise.value, -1.0, 1.0)
    expected = low + 0.5 * (scaled + 1.0) * (high - low)
    np.testing.assert_allclose(np.array(env.executed), expected, rtol=1e-5, atol=1e-5)
    assert (np.abs(scaled) == 1.0).any(), "some noisy actions are clipped at the bounds"
    np.testing.assert_allclose(model.replay_buffer.actions[:8, 0], scaled, rtol=1e-5, atol=1e-5)


class ShapeShiftingEnv(gym.Env):
    """A (3,) observation space whose env returns ``shape`` observations from its step ``at`` (1-based) on."""

    observation_space = spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
    action_space = make_env().action_space

    def __init__(self, shape: tuple[int, ...], at: int = 4):
        self.shape, self.at, self.t = shape, at, 0

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return np.zeros(OBS_DIM, np.float32), {}

    def step(self, action):
        self.t += 1
        observation = np.ones(self.shape if self.t >= self.at else OBS_DIM, np.float32)
        return observation, 0.0, False, self.t >= 12, {}


@pytest.mark.parametrize("shape", [(1,), (4,), ()])
@pytest.mark.parametrize("vectorized", [False, True])
def test_an_observation_changing_shape_mid_episode_is_refused_naming_the_step_and_the_env(shape, vectorized):
    env = DummyVecEnv([make_env, lambda: ShapeShiftingEnv(shape)]) if vectorized else ShapeShiftingEnv(shape)
    model = QC("MlpPolicy", env, **{**build_kwargs(QC), "learning_starts": 100})
    model.set_logger(configure(None, []))
    env_index = 1 if vectorized else 0
    expected = rf"env {env_index} returned an observation of shape {re.escape(str(shape))} at step 4 of its episode"
    with pytest.raises(ValueError, match=expected + r".*expected \(3,\)"):
        model.learn(10)
    # Nothing of the bad step was stored: the 3 good steps of each env only.
    assert model.replay_buffer.pos == 3


def test_a_vec_env_step_or_terminal_observation_of_another_shape_is_refused_before_it_is_stored():
    good, dones = np.zeros((2, OBS_DIM)), np.array([False, True])
    with pytest.raises(ValueError, match=r"observations of shape \(2, 1\) at env step 7 .*expected \(2, 3\)"):
        check_observation_batch(np.zeros((2, 1)), [{}, {}], dones, (OBS_DIM,), 7)
    infos = [{}, {"terminal_observation": np.zeros(4)}]
    with pytest.raises(ValueError, match=r"env 1 returned a terminal observation of shape \(4,\) at env step 7"):
        check_observation_batch(good, infos, dones, (OBS_DIM,), 7)
    check_observation_batch(good, [{}, {"terminal_observation": np.zeros(OBS_DIM)}], dones, (OBS_DIM,), 7)
