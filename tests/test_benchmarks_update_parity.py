"""qc_sb3.benchmarks.parity.update_parity's pieces that need no reference environment: the weight mapping and the draw replay.

The comparison itself runs the reference's JAX code, so it is a benchmark (``python -m
qc_sb3.benchmarks.parity.update_parity``),
not a test. What is tested here: reference-layout weights (flax paths, ``(in, out)`` kernels, ensembles stacked on
a first axis) loaded into a qc_sb3 policy give the networks the reference's formulas compute from those arrays
(tests/reference_math.py's NumPy layers), and the draws are replayed in order or refused.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch as th

from qc_sb3 import QC, QCFQL
from qc_sb3.benchmarks.parity.update_parity import BoxEnv, load_reference_weights, network_rows, replayed_draws
from tests.reference_math import dense_layers

OBS_DIM, ACTION_DIM, HORIZON, HIDDEN, N_CRITICS = 7, 2, 3, [16, 16], 2
FLAT_ACTION = ACTION_DIM * HORIZON


def flax_mlp(rng: np.random.Generator, prefix: str, sizes: list[int], members: int | None, layer_norm: bool) -> dict:
    """Reference-layout parameters of one MLP (utils/networks.py's MLP, vmapped over members for the critic)."""
    lead = () if members is None else (members,)
    params = {}
    for i, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes)):
        params[f"{prefix}/Dense_{i}/kernel"] = rng.normal(0.0, 0.4, (*lead, fan_in, fan_out)).astype(np.float32)
        params[f"{prefix}/Dense_{i}/bias"] = rng.normal(0.0, 0.1, (*lead, fan_out)).astype(np.float32)
        if layer_norm and i < len(sizes) - 2:
            params[f"{prefix}/LayerNorm_{i}/scale"] = rng.normal(1.0, 0.1, (*lead, fan_out)).astype(np.float32)
            params[f"{prefix}/LayerNorm_{i}/bias"] = rng.normal(0.0, 0.1, (*lead, fan_out)).astype(np.float32)
    return params


def reference_params(rng: np.random.Generator) -> dict:
    """Every parameter of the reference's ACFQL agent at these sizes (agents/acfql.py, ``create``)."""
    flow = [OBS_DIM + FLAT_ACTION + 1, *HIDDEN, FLAT_ACTION]
    actor = [OBS_DIM + FLAT_ACTION, *HIDDEN, FLAT_ACTION]
    critic = [OBS_DIM + FLAT_ACTION, *HIDDEN, 1]
    return {
        **flax_mlp(rng, "modules_actor_bc_flow/mlp", flow, None, False),
        **flax_mlp(rng, "modules_actor_onestep_flow/mlp", actor, None, False),
        **flax_mlp(rng, "modules_critic/value_net", critic, N_CRITICS, True),
        **flax_mlp(rng, "modules_target_critic/value_net", critic, N_CRITICS, True),
    }


def layers(params: dict, prefix: str, member: int | None = None):
    """The (kernel, bias) and (scale, offset) pairs of one MLP (one member) from reference-layout parameters."""

    def pick(name: str) -> np.ndarray:
        value = params[f"{prefix}/{name}"].astype(np.float64)
        return value if member is None else value[member]

    n_dense = sum(1 for key in params if key.startswith(prefix + "/Dense_") and key.endswith("/kernel"))
    dense = [(pick(f"Dense_{i}/kernel"), pick(f"Dense_{i}/bias")) for i in range(n_dense)]
    if f"{prefix}/LayerNorm_0/scale" not in params:
        return dense, None
    return dense, [(pick(f"LayerNorm_{i}/scale"), pick(f"LayerNorm_{i}/bias")) for i in range(n_dense - 1)]


def make_model(algorithm):
    return algorithm(
        "MlpPolicy",
        BoxEnv(OBS_DIM, ACTION_DIM),
        policy_kwargs={"net_arch": HIDDEN},
        chunk_size=HORIZON,
        n_critics=N_CRITICS,
        offline_gradient_steps=0,
        device="cpu",
    )


def test_reference_weights_give_the_reference_networks() -> None:
    rng = np.random.default_rng(0)
    params = reference_params(rng)
    policy = make_model(QCFQL).policy
    load_reference_weights(policy, params)

    observations = rng.normal(size=(4, OBS_DIM))
    x = rng.normal(size=(4, FLAT_ACTION))
    t = rng.uniform(size=(4, 1))
    tensor = lambda array: th.as_tensor(array, dtype=th.float32)  # noqa: E731
    with th.no_grad():
        velocity = policy.flow(tensor(observations), tensor(x), tensor(t)).numpy()
        action = policy.actor(tensor(observations), tensor(x)).numpy()
        q = policy.critic(tensor(observations), tensor(x)).numpy()
        q_target = policy.critic_target(tensor(observations), tensor(x)).numpy()

    expected_velocity = dense_layers(
        np.concatenate([observations, x, t], axis=1), *layers(params, "modules_actor_bc_flow/mlp")
    )
    expected_action = dense_layers(
        np.concatenate([observations, x], axis=1), *layers(params, "modules_actor_onestep_flow/mlp")
    )
    np.testing.assert_allclose(velocity, expected_velocity, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(action, expected_action, rtol=1e-4, atol=1e-5)
    for prefix, values in (("modules_critic/value_net", q), ("modules_target_critic/value_net", q_target)):
        for member in range(N_CRITICS):
            expected = dense_layers(np.concatenate([observations, x], axis=1), *layers(params, prefix, member))
            np.testing.assert_allclose(values[member], expected[:, 0], rtol=1e-4, atol=1e-5)


def test_qc_takes_every_network_but_the_one_step_actor() -> None:
    policy = make_model(QC).policy
    load_reference_weights(policy, reference_params(np.random.default_rng(1)))  # modules_actor_onestep_flow unused
    assert not hasattr(policy, "actor")


def test_missing_or_misshapen_weights_are_refused() -> None:
    params = reference_params(np.random.default_rng(2))
    policy = make_model(QCFQL).policy
    incomplete = {key: value for key, value in params.items() if key != "modules_critic/value_net/LayerNorm_1/bias"}
    with pytest.raises(ValueError, match=r"critic\.net\.norm_biases\.1"):
        load_reference_weights(policy, incomplete)
    misshapen = params | {"modules_actor_bc_flow/mlp/Dense_0/kernel": np.zeros((3, 3), np.float32)}
    with pytest.raises(ValueError, match=r"flow\.mlp\.linears\.0\.weight: qc_sb3 has shape \(16, 14\)"):
        load_reference_weights(policy, misshapen)
    with pytest.raises(ValueError, match="no qc_sb3 counterpart"):
        load_reference_weights(policy, params | {"modules_value/value_net/Dense_0/kernel": np.zeros((1, 1))})


def test_draws_are_replayed_in_order() -> None:
    normal = np.arange(6, dtype=np.float32)
    uniform = np.array([0.25, 0.75], dtype=np.float32)
    with replayed_draws([("normal", normal), ("uniform", uniform), ("normal", -normal)]) as left:
        first = th.randn(2, 3)
        second = th.rand((2, 1))
        third = th.randn_like(th.zeros(3, 2, dtype=th.float64))
        assert left == []
    np.testing.assert_array_equal(first.numpy(), [[0, 1, 2], [3, 4, 5]])
    np.testing.assert_array_equal(second.numpy(), [[0.25], [0.75]])
    assert third.dtype == th.float64 and third.shape == (3, 2)
    np.testing.assert_array_equal(third.numpy().ravel(), -normal)
    assert th.randn(2).shape == (2,)  # the originals are back


def test_draws_out_of_order_or_left_over_are_reported() -> None:
    with pytest.raises(AssertionError, match="drew uniform"), replayed_draws([("normal", np.zeros(4))]):
        th.rand(4)
    with pytest.raises(AssertionError, match=r"drew normal \(5,\)"), replayed_draws([("normal", np.zeros(4))]):
        th.randn(5)
    with pytest.raises(AssertionError, match="drew more than the reference"), replayed_draws([]):
        th.randn(1)
    with replayed_draws([("normal", np.zeros(2)), ("uniform", np.zeros(2))]) as left:
        th.randn(2)
    assert [kind for kind, _ in left] == ["uniform"]


def test_network_rows_leave_out_undetermined_elements_and_count_them() -> None:
    weight = th.nn.Parameter(th.tensor([[1.0, 2.0], [3.0, 4.0]]))
    weight.grad = th.tensor([[0.5, 0.0], [0.0, 0.0]])
    target = th.nn.Parameter(th.tensor([[1.0, 2.0], [3.0, 4.5]]))
    parameters = {"critic.net.weights.0": weight, "critic_target.net.weights.0": target}
    reference = {"critic.net.weights.0": np.array([[1.0, 2.0], [3.0, 8.0]]), "critic_target.net.weights.0": np.ones((2, 2))}
    undetermined = {"critic.net.weights.0": np.array([[False, False], [False, True]])}
    rows = network_rows(3, "weights", parameters, reference, undetermined)
    # critic: the element 4 vs 8 is left out, the rest agree; the target shares the critic's mask: |3 - 1| / 1 = 2
    assert rows == [
        {"step": 3, "what": "weights critic (1 elements left out)", "relative": 0.0},
        {"step": 3, "what": "weights critic_target (1 elements left out)", "relative": 2.0},
    ]
    gradient_rows = network_rows(3, "gradients", parameters, {"critic.net.weights.0": np.array([[1.0, 0], [0, 0]])}, {})
    assert gradient_rows == [{"step": 3, "what": "gradients critic", "relative": 0.5}]
