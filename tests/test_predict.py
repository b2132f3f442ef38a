"""What ``predict`` means for chunk policies: ``deterministic=True`` (issue 15, item 2) and the warning of a loop
that drops the action queue (item 3)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch as th
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.monitor import Monitor
from test_rlpd import make_model as make_rlpd_model

from qc_sb3 import QC, QCFQL, RLPD
from qc_sb3.common.evaluation import evaluate_success
from qc_sb3.common.flow_q import FlowQPolicy
from qc_sb3.qc.policies import QCPolicy

from reference_math import actor_action, best_of_n, numpy_of, sac_actor_mean_log_std
from test_qc import OBS_DIM, make_env
from test_qc import make_model as make_flow_model

OBSERVATIONS = np.random.default_rng(5).normal(size=(4, OBS_DIM)).astype(np.float32)


def make_model(cls):
    return make_rlpd_model() if cls is RLPD else make_flow_model(cls)


def scaled_chunks(model, deterministic: bool) -> np.ndarray:
    """The policy's flat chunks for OBSERVATIONS in the [-1, 1] scale."""
    chunks = model.policy.predict_chunk(OBSERVATIONS, deterministic=deterministic)
    return model.policy.scale_action(chunks).reshape(len(OBSERVATIONS), -1)


def hand_deterministic_chunks(model) -> np.ndarray:
    """The spec's deterministic chunk, one observation at a time in float64 NumPy."""
    policy = model.policy
    chunks = []
    for observation in OBSERVATIONS.astype(np.float64):
        if isinstance(model, RLPD):
            mean, _ = sac_actor_mean_log_std(policy.actor, observation)
            chunks.append(np.tanh(mean))
        elif isinstance(model, QCFQL):
            chunks.append(np.clip(actor_action(policy.actor, observation, np.zeros(policy.flat_action_dim)), -1, 1))
        else:
            noises = numpy_of(policy.deterministic_noise)
            chunks.append(best_of_n(policy.flow, policy.critic, observation, noises, policy.flow_steps, policy.q_agg))
    return np.array(chunks)


@pytest.mark.parametrize("cls", [QC, QCFQL, RLPD])
def test_deterministic_chunk_is_the_spec_function_of_the_observation(cls):
    model = make_model(cls)
    chunks = scaled_chunks(model, deterministic=True)
    np.testing.assert_allclose(chunks, hand_deterministic_chunks(model), atol=1e-5)
    th.manual_seed(123)  # a different generator state changes nothing
    np.testing.assert_array_equal(scaled_chunks(model, deterministic=True), chunks)


@pytest.mark.parametrize("cls", [QC, QCFQL, RLPD])
def test_deterministic_differs_from_stochastic_draws(cls):
    model = make_model(cls)
    deterministic = scaled_chunks(model, deterministic=True)
    first, second = scaled_chunks(model, deterministic=False), scaled_chunks(model, deterministic=False)
    assert not np.allclose(first, second), "deterministic=False samples the stochastic policy"
    assert not np.allclose(first, deterministic) and not np.allclose(second, deterministic)


def test_qc_fixed_noise_comes_from_the_seed_and_leaves_the_generator_stream_alone():
    first, second, other_seed = make_flow_model(QC), make_flow_model(QC), make_flow_model(QC, seed=1)
    noise = first.policy.deterministic_noise
    assert noise.shape == (first.policy.actor_num_samples, first.policy.flat_action_dim)
    th.testing.assert_close(second.policy.deterministic_noise, noise, rtol=0, atol=0)
    assert not th.allclose(other_seed.policy.deterministic_noise, noise)

    # Drawn without advancing the generator: building the policy draws what its networks alone draw.
    class FlowQWithoutNoise(FlowQPolicy):
        def sample_actions(self, features, deterministic=False, noise=None):
            raise NotImplementedError

        def decision_noise(self, batch_size):
            raise NotImplementedError

    arguments = (first.observation_space, first.action_space, lambda _: 1e-3)
    th.manual_seed(0)
    QCPolicy(*arguments, net_arch=[4], chunk_size=2, actor_num_samples=3)
    after_qc = th.rand(3)
    th.manual_seed(0)
    FlowQWithoutNoise(*arguments, net_arch=[4], chunk_size=2)
    assert th.equal(after_qc, th.rand(3))


# Issue 15, item 3: a loop that drops the state re-plans at every step; the policy says so once.

REPLAN_MESSAGE = "called twice in a row with state=None"


def replanning_warnings(record: list[warnings.WarningMessage]) -> list[warnings.WarningMessage]:
    return [warning for warning in record if REPLAN_MESSAGE in str(warning.message)]


@pytest.mark.parametrize("cls", [QC, QCFQL, RLPD])
def test_predict_loop_that_drops_the_state_warns_once(cls):
    model = make_model(cls)
    observation = OBSERVATIONS[0]
    model.predict(observation)  # a single stateless call is fine: it may be a one-off query
    with pytest.warns(UserWarning, match=REPLAN_MESSAGE):
        model.predict(observation)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for _ in range(3):
            model.predict(observation)
    assert not replanning_warnings(record), "once per policy"


@pytest.mark.parametrize("kwargs", [{"chunk_size": 1}, {"action_chunking": False}])
def test_no_warning_when_every_decision_is_one_action(kwargs):
    model = make_flow_model(QC, **kwargs)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for _ in range(3):
            model.predict(OBSERVATIONS[0])
    assert not replanning_warnings(record)


@pytest.mark.parametrize("cls", [QC, RLPD])
def test_loops_that_pass_the_state_back_never_warn(cls, tmp_path):
    model = make_model(cls)
    env = Monitor(make_env())
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        model.learn(total_timesteps=15)
        model.predict(OBSERVATIONS[0])  # one-off queries, then loops that start with state=None
        model.learn(total_timesteps=15)
        model.learn(total_timesteps=15, reset_num_timesteps=False)
        model.predict(OBSERVATIONS[0])
        model.save(tmp_path / "model.zip")
        loaded = type(model).load(tmp_path / "model.zip", env=make_env())
        loaded.predict(OBSERVATIONS[0])
        loaded.learn(total_timesteps=5, reset_num_timesteps=False)  # the loaded model has no queue yet
        evaluate_policy(model, env, n_eval_episodes=2)  # after model's one-off query above
        evaluate_policy(model, env, n_eval_episodes=2, deterministic=False)
        evaluate_success(model, Monitor(make_env()), n_eval_episodes=2)
        observation, _ = env.reset(seed=0)
        state, episode_start = None, True
        for _ in range(20):
            action, state = model.predict(observation, state=state, episode_start=np.array([episode_start]))
            observation, _, terminated, truncated, _ = env.step(action)
            episode_start = terminated or truncated
            if episode_start:
                observation, _ = env.reset()
    assert not replanning_warnings(record)
