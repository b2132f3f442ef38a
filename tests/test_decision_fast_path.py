"""
The decision's fast paths against the plain eager decision: with ``compile_step=True`` the policy decides through
one compiled graph (qc_sb3.accel.compiled_decision), which must give the eager chunks from the same generator
state, follow the weights as they train, and fall back to eager with a reason where compiling is impossible; the
cheaper ``set_training_mode`` keeps SB3's semantics. One compiled model per method (the compile is the cost).
"""

from __future__ import annotations

import copy
import time
import warnings

import numpy as np
import pytest
import torch as th
from test_compiled_step import OBS_DIM, failing_compiler, make_model, needs_compiler  # noqa: F401 (failing_compiler: a fixture used by name)
from torch._inductor import config as inductor_config

from qc_sb3 import QC, QCFQL
from qc_sb3.accel import compiled_step

N_CALLS = 40


def decisions(model, observations: np.ndarray, deterministic: bool, seed: int = 3) -> tuple[np.ndarray, th.Tensor]:
    """
    ``predict`` over a sequence of observations from one generator state, passing the queues back (a new chunk every
    ``chunk_size`` calls, and at each episode start); then the generator's state, to compare the draws.

    :param observations: Shape (n_calls, n_envs, obs_dim)
    :return: The actions, shape (n_calls, n_envs, action_dim), and the generator state after the calls
    """
    th.manual_seed(seed)
    state, actions = None, []
    for step, observation in enumerate(observations):
        # Env 0 restarts every 7 calls: the envs' queues run empty at different calls, so the batch size varies.
        episode_start = np.array([step % 7 == 0] + [step == 0] * (len(observation) - 1))
        action, state = model.predict(observation, state=state, episode_start=episode_start, deterministic=deterministic)
        actions.append(action)
    return np.array(actions), th.get_rng_state()


def random_observations(n_envs: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(N_CALLS, n_envs, OBS_DIM)).astype(np.float32)


@pytest.fixture(scope="module", params=[QC, QCFQL], ids=["QC", "QCFQL"])
def model_pair(request):
    """An eager model and a compile_step=True model with the same weights (each model seeds the same init)."""
    eager, compiled = make_model(request.param, False), make_model(request.param, True)
    compiled.policy.load_state_dict(eager.policy.state_dict())
    compiled.policy.compile_decision(measure=False)  # the compiled graph, whichever is faster on this host
    return eager, compiled


@needs_compiler
@pytest.mark.parametrize("deterministic", [False, True])
def test_compiled_decision_gives_the_eager_chunks_from_the_same_state(model_pair, deterministic):
    eager, compiled = model_pair
    observations = random_observations(n_envs=3)
    expected, expected_rng = decisions(eager, observations, deterministic)
    got, got_rng = decisions(compiled, observations, deterministic)
    assert compiled.policy.compiled_decision.compiled and compiled.policy.compiled_decision.compile_seconds > 0
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    assert th.equal(got_rng, expected_rng)  # the same random draws, in the same order
    if not deterministic:
        assert len(np.unique(got[:, 0], axis=0)) > N_CALLS // 2  # fresh noise: the chunks differ from call to call
    else:
        again, _ = decisions(compiled, observations, deterministic, seed=4)
        np.testing.assert_array_equal(again, got)  # deterministic: another generator state, the same actions


@needs_compiler
def test_compiled_decision_follows_the_weights_as_they_change(model_pair):
    eager, compiled = model_pair
    observation = random_observations(n_envs=1)[0]
    compiled.policy.predict_chunk(observation)  # compiled with the current weights
    # Changed in place, as an optimizer step does: the compiled graph must read them, not a copy made at compile.
    changed = {name: value * 1.1 + 0.01 for name, value in compiled.policy.state_dict().items()}
    for model in (eager, compiled):
        model.policy.load_state_dict(changed)
    th.manual_seed(5)
    expected = eager.policy.predict_chunk(observation)
    th.manual_seed(5)
    np.testing.assert_allclose(compiled.policy.predict_chunk(observation), expected, rtol=1e-5, atol=1e-5)


def slowed(decide):
    def slow_decision(*args):
        time.sleep(0.02)
        return decide(*args)

    return slow_decision


@needs_compiler
@pytest.mark.parametrize("slower", ["eager", "compiled"])
def test_first_decision_keeps_the_faster_path_and_draws_as_eager(slower):
    eager, measured = make_model(QCFQL, False), make_model(QCFQL, True)
    decision = measured.policy.compiled_decision
    if slower == "eager":
        decision.eager_decision = slowed(decision.eager_decision)
    else:
        decision._compiled = slowed(decision._compiled)
    observations = random_observations(n_envs=2)[:8]
    expected, expected_rng = decisions(eager, observations, False)
    got, got_rng = decisions(measured, observations, False)
    assert decision.compiled_faster is (slower == "eager") and decision.compiled is (slower == "eager")
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)  # the trials drew from a fork of the generator
    assert th.equal(got_rng, expected_rng)


def test_no_cpp_compiler_decides_eagerly_with_the_reason():
    with inductor_config.patch({"cpp.cxx": ("no-such-c++-compiler",)}), pytest.warns(UserWarning) as caught:
        model = make_model(QC, True)
    message = "compile_step=True: the policy decides eagerly, because torch.compile on CPU needs a C++ compiler"
    assert any(message in str(warning.message) for warning in caught), [str(w.message) for w in caught]
    assert not model.policy.compiled_decision.compiled
    observations = random_observations(n_envs=2)[:10]
    expected, _ = decisions(make_model(QC, False), observations, False)
    np.testing.assert_array_equal(decisions(model, observations, False)[0], expected)


@pytest.mark.usefixtures("failing_compiler")
def test_failed_compile_decides_eagerly_with_the_error():
    model = make_model(QCFQL, True)
    observations = random_observations(n_envs=2)[:10]
    with pytest.warns(UserWarning, match="decides eagerly, because compiling it failed with RuntimeError: inductor could"):
        actions, _ = decisions(model, observations, False)
    assert not model.policy.compiled_decision.compiled
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once, not at every decision
        model.policy.predict_chunk(observations[0])
    np.testing.assert_array_equal(actions, decisions(make_model(QCFQL, False), observations, False)[0])


@pytest.mark.usefixtures("failing_compiler")
def test_an_error_of_the_decision_itself_is_raised_and_keeps_the_compiled_decision():
    model = make_model(QCFQL, True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning: compiling is not what failed
        with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):  # a wrong width reaches the networks
            model.policy.compiled_decision(th.zeros(1, OBS_DIM + 1), False)
    assert model.policy.compiled_decision._compiled is not None and model.policy.compiled_decision.fallback_reason is None


@needs_compiler
def test_a_copied_policy_decides_with_its_own_networks(model_pair):
    eager, compiled = model_pair
    observation = random_observations(n_envs=1)[0]
    compiled.policy.predict_chunk(observation)  # the original's graph is compiled
    copied = copy.deepcopy(compiled.policy)
    changed = {name: value * 0.9 - 0.02 for name, value in copied.state_dict().items()}
    copied.load_state_dict(changed)
    eager.policy.load_state_dict(changed)
    th.manual_seed(7)
    expected = eager.policy.predict_chunk(observation)
    th.manual_seed(7)
    np.testing.assert_allclose(copied.predict_chunk(observation), expected, rtol=1e-5, atol=1e-5)
    assert copied.compiled_decision is not compiled.policy.compiled_decision


def test_eager_models_decide_without_a_compiled_graph():
    assert make_model(QCFQL, False).policy.compiled_decision is None


def test_predict_puts_every_network_in_eval_mode_even_if_one_was_switched_back():
    policy = make_model(QC, False).policy
    policy.predict_chunk(random_observations(n_envs=1)[0, 0])
    policy.flow.mlp.linears[1].train(True)  # one submodule flipped by hand after a decision
    policy.predict_chunk(random_observations(n_envs=1)[0, 0])
    assert not any(module.training for module in policy.modules() if module is not policy.critic_target)
    policy.set_training_mode(True)
    assert all(module.training for name in policy.optimized_modules for module in getattr(policy, name).modules())


@pytest.mark.parametrize("algorithm", [QC, QCFQL], ids=["QC", "QCFQL"])
def test_the_decision_is_one_graph_and_the_step_keeps_its_samplers_eager(algorithm):
    policy = make_model(algorithm, False).policy
    observation = th.as_tensor(random_observations(n_envs=2)[0])
    with th.no_grad():
        with compiled_step.samplers_traced():
            decision = th._dynamo.explain(policy._predict_chunk)(observation, False)
        step_samplers = th._dynamo.explain(policy._predict_chunk)(observation, False)
    assert decision.graph_count == 1 and not decision.break_reasons, decision.break_reasons
    if algorithm is QC:  # best-of-N's flow integration is a marked sampler: the gradient step leaves it to eager code
        assert any("integrate" in reason.reason for reason in step_samplers.break_reasons)
