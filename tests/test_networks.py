"""Networks and flow samplers (docs/algorithms.md §2, §3) against hand-written forward passes, integrals and brute-force
argmaxes."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from contextlib import AbstractContextManager

import numpy as np
import pytest
import torch as th
from torch import nn

from qc_sb3.accel.fast_inference import fused_euler, unfused_layers
from qc_sb3.accel.fast_networks import accelerate
from qc_sb3.accel.onednn_matmul import MIN_ROWS, onednn_matmuls, plain_matmuls
from qc_sb3.common.networks import (
    MLP,
    CriticEnsemble,
    EnsembleMLP,
    FlowVectorField,
    OneStepActor,
    best_of_n_actions,
    reference_init_,
)
from qc_sb3.rlpd.networks import LayerNormReLUCriticEnsemble

from reference_math import Layers, critic_values, dense_layers, gelu_tanh, member_layers, mlp_layers, numpy_of

# Forward passes run with autograd on, under no_grad and under inference_mode (the latter two share a fast path).
GRAD_MODES = {"grad": th.enable_grad, "no_grad": th.no_grad, "inference_mode": th.inference_mode}
# Batches of a few rows take the BLAS, of MIN_ROWS and more oneDNN's matmul (qc_sb3.accel.onednn_matmul).
ROWS = [5, MIN_ROWS + 3]


# Every test runs on the plain modules and on their fast versions (qc_sb3.accel.fast_networks).
NETWORK_NAMES = ["MLP", "EnsembleMLP", "CriticEnsemble", "FlowVectorField", "OneStepActor", "LayerNormReLUCriticEnsemble"]


@pytest.fixture(autouse=True, params=["plain", "fast"])
def implementation(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """With "fast", the networks this module builds by name are accelerated as a policy's are."""
    if request.param == "fast":
        for name in NETWORK_NAMES:
            plain = globals()[name]
            monkeypatch.setitem(globals(), name, lambda *args, _plain=plain, **kwargs: accelerate(_plain(*args, **kwargs)))
    return request.param


def grad_mode(name: str) -> AbstractContextManager:
    return GRAD_MODES[name]()


def mlp_by_hand(x: th.Tensor, layers: Layers, norms: Layers | None) -> th.Tensor:
    """The float64 oracle's dense stack, Linear -> GELU(tanh) [-> LayerNorm] per hidden layer, on a torch batch."""
    return th.from_numpy(dense_layers(numpy_of(x), layers, norms))


def randomize_(module: nn.Module, generator: th.Generator, std: float = 0.3) -> None:
    """Overwrite every parameter (biases and LayerNorm scales/offsets included) with non-trivial random values."""
    with th.no_grad():
        for parameter in module.parameters():
            parameter.add_(std * th.randn(parameter.shape, generator=generator))


def assert_close(actual: th.Tensor, expected: th.Tensor, tol: float = 2e-5) -> None:
    th.testing.assert_close(actual.double(), expected.double(), atol=tol, rtol=tol)


# ---------------------------------------------------------------------------------------------------- forward passes


@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("mode", GRAD_MODES)
@pytest.mark.parametrize("layer_norm", [False, True])
def test_mlp_matches_hand_forward(layer_norm: bool, mode: str, rows: int) -> None:
    generator = th.Generator().manual_seed(0)
    th.manual_seed(0)
    mlp = MLP(6, (16, 24, 8), 3, layer_norm=layer_norm)
    randomize_(mlp, generator)
    # Leading batch dimensions, and inputs large enough to reach GELU's saturated tails.
    x = 4.0 * th.randn(2, rows, 6, generator=generator)
    with grad_mode(mode):
        out = mlp(x)
    assert out.shape == (2, rows, 3)
    assert_close(out, mlp_by_hand(x, *mlp_layers(mlp)))


def test_mlp_layer_recipe() -> None:
    th.manual_seed(0)
    mlp = MLP(5, (7, 9), 2, layer_norm=True)
    assert [(linear.in_features, linear.out_features) for linear in mlp.linears] == [(5, 7), (7, 9), (9, 2)]
    assert mlp.norms is not None
    assert [norm.normalized_shape for norm in mlp.norms] == [(7,), (9,)]
    assert all(norm.eps == 1e-6 for norm in mlp.norms)
    assert MLP(5, (7, 9), 2).norms is None


@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("mode", GRAD_MODES)
@pytest.mark.parametrize("layer_norm", [False, True])
def test_ensemble_mlp_matches_per_member_hand_forward(layer_norm: bool, mode: str, rows: int) -> None:
    generator = th.Generator().manual_seed(1)
    th.manual_seed(1)
    net = EnsembleMLP(3, 6, (16, 24, 8), 2, layer_norm=layer_norm)
    randomize_(net, generator)
    x = 3.0 * th.randn(rows, 6, generator=generator)
    with grad_mode(mode):
        out = net(x)
    assert out.shape == (3, rows, 2)
    for k in range(3):
        assert_close(out[k], mlp_by_hand(x, *member_layers(net, k)))


@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("mode", GRAD_MODES)
def test_rlpd_critic_is_the_ensemble_with_layer_norm_before_relu(mode: str, rows: int) -> None:
    generator = th.Generator().manual_seed(3)
    th.manual_seed(3)
    critic = LayerNormReLUCriticEnsemble(4, 3, hidden_dims=(16, 8), n_critics=3)
    randomize_(critic, generator)
    observations, actions = 3.0 * th.randn(rows, 4, generator=generator), th.randn(rows, 3, generator=generator)
    with grad_mode(mode):
        q = critic(observations, actions)
    expected = [critic_values(critic, numpy_of(o), numpy_of(a)) for o, a in zip(observations, actions, strict=True)]
    assert_close(q.T, th.from_numpy(np.array(expected)))


def test_ensemble_mlp_parameter_layout() -> None:
    th.manual_seed(0)
    net = EnsembleMLP(4, 5, (7, 9), 2, layer_norm=True)
    assert [tuple(w.shape) for w in net.weights] == [(4, 5, 7), (4, 7, 9), (4, 9, 2)]
    assert [tuple(b.shape) for b in net.biases] == [(4, 7), (4, 9), (4, 2)]
    assert net.norm_weights is not None and net.norm_biases is not None
    assert [tuple(s.shape) for s in net.norm_weights] == [(4, 7), (4, 9)]
    assert all(bool((s == 1).all()) for s in net.norm_weights) and all(bool((o == 0).all()) for o in net.norm_biases)
    assert EnsembleMLP(4, 5, (7, 9), 2).norm_weights is None


@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("mode", GRAD_MODES)
def test_critic_ensemble_is_q_of_concatenated_state_action(mode: str, rows: int) -> None:
    generator = th.Generator().manual_seed(2)
    th.manual_seed(2)
    critic = CriticEnsemble(5, 4, hidden_dims=(16, 16), n_critics=3)
    randomize_(critic, generator)
    observations, actions = th.randn(rows, 5, generator=generator), th.randn(rows, 4, generator=generator)
    with grad_mode(mode):
        q = critic(observations, actions)
    assert q.shape == (3, rows)
    assert critic.n_critics == 3
    for k in range(3):
        expected = mlp_by_hand(th.cat((observations, actions), dim=1), *member_layers(critic.net, k))
        assert_close(q[k], expected[:, 0])


@pytest.mark.parametrize("mode", GRAD_MODES)
def test_layer_norm_eps_is_one_in_a_million(mode: str) -> None:
    # Tiny first-layer weights and zero biases make the hidden variance smaller than 1e-5, so the eps matters.
    generator = th.Generator().manual_seed(13)
    th.manual_seed(13)
    mlp, net = MLP(4, (16,), 3, layer_norm=True), EnsembleMLP(2, 4, (16,), 3, layer_norm=True)
    randomize_(mlp, generator)
    randomize_(net, generator)
    with th.no_grad():
        mlp.linears[0].weight.mul_(1e-3)
        mlp.linears[0].bias.zero_()
        net.weights[0].mul_(1e-3)
        net.biases[0].zero_()
    x = th.randn(5, 4, generator=generator)
    with grad_mode(mode):
        out_mlp, out_net = mlp(x), net(x)
    layers, norms = mlp_layers(mlp)
    assert gelu_tanh(numpy_of(x) @ layers[0][0]).var(axis=-1).max() < 1e-5
    assert_close(out_mlp, mlp_by_hand(x, layers, norms), tol=1e-4)
    for k in range(2):
        assert_close(out_net[k], mlp_by_hand(x, *member_layers(net, k)), tol=1e-4)


def test_default_architectures() -> None:
    th.manual_seed(0)
    critic = CriticEnsemble(10, 15)
    assert critic.n_critics == 2
    assert [tuple(w.shape) for w in critic.net.weights] == [
        (2, 25, 512),
        (2, 512, 512),
        (2, 512, 512),
        (2, 512, 512),
        (2, 512, 1),
    ]
    assert critic.net.norm_weights is not None  # the critic has LayerNorm by default (docs/algorithms.md §2)
    flow = FlowVectorField(10, 15)
    assert flow.action_dim == 15
    assert [(lin.in_features, lin.out_features) for lin in flow.mlp.linears] == [
        (26, 512),
        (512, 512),
        (512, 512),
        (512, 512),
        (512, 15),
    ]
    assert flow.mlp.norms is None
    actor = OneStepActor(10, 15)
    assert [(lin.in_features, lin.out_features) for lin in actor.mlp.linears] == [
        (25, 512),
        (512, 512),
        (512, 512),
        (512, 512),
        (512, 15),
    ]
    assert actor.mlp.norms is None


@pytest.mark.parametrize("mode", GRAD_MODES)
def test_flow_vector_field_and_actor_inputs(mode: str) -> None:
    generator = th.Generator().manual_seed(3)
    th.manual_seed(3)
    flow, actor = FlowVectorField(5, 4, hidden_dims=(16, 16)), OneStepActor(5, 4, hidden_dims=(16, 16))
    randomize_(flow, generator, std=0.7)
    randomize_(actor, generator, std=0.7)
    observations, x = th.randn(6, 5, generator=generator), th.randn(6, 4, generator=generator)
    t = th.rand(6, 1, generator=generator)
    with grad_mode(mode):
        velocity, action = flow(observations, x, t), actor(observations, x)
    assert_close(velocity, mlp_by_hand(th.cat((observations, x, t), dim=1), *mlp_layers(flow.mlp)))
    expected_action = mlp_by_hand(th.cat((observations, x), dim=1), *mlp_layers(actor.mlp))
    assert_close(action, expected_action)
    assert expected_action.abs().max() > 1.5  # the actor's output is neither squashed nor clipped


def test_no_grad_outputs_survive_later_calls_and_dtype_changes() -> None:
    """The no-grad path reuses scratch memory: earlier outputs must stay intact, other sizes/dtypes must work."""
    generator = th.Generator().manual_seed(4)
    th.manual_seed(4)
    critic = CriticEnsemble(3, 2, hidden_dims=(8, 8), n_critics=2)
    randomize_(critic, generator)
    obs_a, act_a = th.randn(9, 3, generator=generator), th.randn(9, 2, generator=generator)
    obs_b, act_b = th.randn(4, 3, generator=generator), th.randn(4, 2, generator=generator)
    expected_a = [mlp_by_hand(th.cat((obs_a, act_a), 1), *member_layers(critic.net, k))[:, 0] for k in range(2)]
    with th.inference_mode():
        q_a = critic(obs_a, act_a)
    with th.no_grad():
        critic(obs_b, act_b)
        critic(th.randn(20, 3, generator=generator), th.randn(20, 2, generator=generator))
        q_b = copy.deepcopy(critic).double()(obs_b.double(), act_b.double())
    for k in range(2):
        assert_close(q_a[k], expected_a[k])
        assert_close(q_b[k], mlp_by_hand(th.cat((obs_b, act_b), 1), *member_layers(critic.net, k))[:, 0], tol=1e-9)


# ---------------------------------------------------------------------------------------------------- initialisation


def test_reference_init_bounds_variance_and_zero_bias() -> None:
    th.manual_seed(5)
    fan_in, fan_out = 300, 700
    weight, bias = th.full((fan_out, fan_in), 9.0), th.full((fan_out,), 9.0)
    reference_init_(weight, bias)
    bound = math.sqrt(6.0 / (fan_in + fan_out))
    assert bool((bias == 0).all())
    assert weight.abs().max() <= bound
    assert weight.abs().max() > 0.999 * bound
    assert weight.mean().abs() < 0.01 * bound
    assert weight.var().item() == pytest.approx(2.0 / (fan_in + fan_out), rel=0.02)


def test_reference_init_ensemble_uses_one_members_fans_and_independent_draws() -> None:
    th.manual_seed(6)
    n_members, fan_in, fan_out = 3, 256, 384
    weight, bias = th.empty(n_members, fan_in, fan_out), th.ones(n_members, fan_out)
    reference_init_(weight, bias)
    bound = math.sqrt(6.0 / (fan_in + fan_out))
    assert bool((bias == 0).all())
    for k in range(n_members):
        assert weight[k].abs().max() <= bound
        assert weight[k].abs().max() > 0.999 * bound
        assert weight[k].var().item() == pytest.approx(2.0 / (fan_in + fan_out), rel=0.03)
    assert not th.equal(weight[0], weight[1]) and not th.equal(weight[1], weight[2])
    with pytest.raises(ValueError):
        reference_init_(th.empty(5), th.empty(5))


def test_modules_are_initialised_like_the_reference() -> None:
    th.manual_seed(7)
    mlp = MLP(6, (10, 12), 4, layer_norm=True)
    for linear in mlp.linears:
        assert bool((linear.bias == 0).all())
        assert linear.weight.abs().max() <= math.sqrt(6.0 / (linear.in_features + linear.out_features))
    net = EnsembleMLP(3, 6, (10, 12), 4)
    for weight, bias in zip(net.weights, net.biases, strict=True):
        assert bool((bias == 0).all())
        assert weight.abs().max() <= math.sqrt(6.0 / (weight.shape[1] + weight.shape[2]))
        assert not th.equal(weight[0], weight[1]) and not th.equal(weight[0], weight[2])


# ---------------------------------------------------------------------------------------------------- Euler sampler


class ScriptedField(FlowVectorField):
    """A velocity field given by a Python function of (s, x, t); it records the times it is called with."""

    def __init__(
        self, velocity: Callable[[th.Tensor, th.Tensor, float], th.Tensor], observation_dim: int = 1, action_dim: int = 1
    ):
        super().__init__(observation_dim, action_dim, hidden_dims=())
        self.scripted_velocity = velocity
        self.times: list[float] = []

    def state_term(self, observations: th.Tensor) -> th.Tensor:
        return observations

    def velocity(self, state_term: th.Tensor, x: th.Tensor, t: float) -> th.Tensor:
        self.times.append(t)
        return self.scripted_velocity(state_term, x, t)


def test_euler_integrates_a_time_dependent_field_by_hand() -> None:
    # f = s (3 - 8 t), T = 2: a1 = z + 3 s / 2, a2 = a1 + (3 - 4) s / 2 = z + s.
    field = ScriptedField(lambda s, x, t: s * (3.0 - 8.0 * t))
    observations, noise = th.tensor([[0.8], [-0.2], [0.5]]), th.tensor([[0.0], [0.1], [0.9]])
    actions = field.integrate(observations, noise, flow_steps=2)
    # Row 0 passes 1.2 after the first step and comes back to 0.8: no clip on the way (clipping there gives 0.6).
    # Row 2 ends at 1.4 and is clipped once, at the end.
    assert th.allclose(actions, th.tensor([[0.8], [-0.1], [1.0]]), atol=1e-6)
    assert field.times == [0.0, 0.5]


def test_euler_feeds_back_the_current_point() -> None:
    # f = -x, T = 4: a_T = z (1 - 1/4)^4.
    field = ScriptedField(lambda s, x, t: -x, action_dim=2)
    noise = th.tensor([[0.5, -0.8]])
    actions = field.integrate(th.zeros(1, 1), noise, flow_steps=4)
    assert th.allclose(actions, th.tensor([[0.5 * 0.75**4, -0.8 * 0.75**4]]), atol=1e-7)
    assert field.times == [0.0, 0.25, 0.5, 0.75]


@pytest.mark.parametrize("mode", GRAD_MODES)
@pytest.mark.parametrize("t", [0.0, 0.3, 1.0])
def test_velocity_from_state_term_equals_forward_on_the_concatenation(mode: str, t: float) -> None:
    generator = th.Generator().manual_seed(9)
    field = FlowVectorField(3, 4, hidden_dims=(8, 8))
    randomize_(field, generator, std=1.0)
    observations, x = th.randn(6, 3, generator=generator), th.randn(6, 4, generator=generator)
    with grad_mode(mode):
        split = field.velocity(field.state_term(observations), x, t)
        whole = field(observations, x, th.full((6, 1), t))
    assert_close(split, whole, tol=1e-5)


@pytest.mark.parametrize("mode", GRAD_MODES)
@pytest.mark.parametrize(
    ("rows", "matmuls"), [(5, onednn_matmuls), (MIN_ROWS + 3, onednn_matmuls), (MIN_ROWS + 3, plain_matmuls)]
)
def test_euler_with_a_real_vector_field_matches_a_hand_loop(mode: str, rows: int, matmuls: Callable) -> None:
    # Without autograd the fast field is fused below MIN_ROWS rows, and from them where the layers take oneDNN's
    # matmul; with the BLAS's it integrates in place.
    generator = th.Generator().manual_seed(8)
    th.manual_seed(8)
    field = FlowVectorField(3, 2, hidden_dims=(16, 16))
    randomize_(field, generator, std=1.0)
    observations, noise = th.randn(rows, 3, generator=generator), th.randn(rows, 2, generator=generator)
    with grad_mode(mode), matmuls():
        actions = field.integrate(observations, noise, flow_steps=5)
    layers, norms = mlp_layers(field.mlp)
    expected = noise.double()
    for i in range(5):
        t = th.full((rows, 1), i / 5)
        expected = expected + mlp_by_hand(th.cat((observations.double(), expected, t.double()), 1), layers, norms) / 5
    assert_close(actions, expected.clamp(-1, 1), tol=1e-4)
    assert expected.abs().max() > 1  # the clip is exercised


@pytest.mark.parametrize("flow_steps", [1, 3, 10])
@pytest.mark.parametrize("hidden_dims", [(16,), (16, 24, 8)])
def test_fused_euler_path_matches_a_hand_loop(flow_steps: int, hidden_dims: tuple[int, ...]) -> None:
    # Without autograd, on CPU float32, a flow without LayerNorm takes fused_euler (the bias of the last layer carried
    # outside the loop); the hand loop is the reference's a <- a + f(s, a, t) / T in float64.
    generator = th.Generator().manual_seed(21)
    th.manual_seed(21)
    field = accelerate(FlowVectorField(4, 3, hidden_dims=hidden_dims))
    randomize_(field, generator, std=0.4)
    observations, noise = th.randn(9, 4, generator=generator), th.randn(9, 3, generator=generator)
    noise_before = noise.clone()
    with th.no_grad():
        assert field.mlp._path(observations) == "fused"
        actions = field.integrate(observations, noise, flow_steps)
    layers, _ = mlp_layers(field.mlp)
    expected = noise.double()
    for i in range(flow_steps):
        t = th.full((9, 1), i / flow_steps, dtype=th.float64)
        expected = expected + mlp_by_hand(th.cat((observations.double(), expected, t), 1), layers, None) / flow_steps
    assert_close(actions, expected.clamp(-1, 1), tol=1e-4)
    assert expected.abs().max() > 1 and (expected.abs() < 1).any()  # both sides of the clip
    assert th.equal(noise, noise_before)  # the starting points are not overwritten


def test_fused_euler_is_only_taken_where_it_applies() -> None:
    observations = th.zeros(2, 3)
    plain = accelerate(FlowVectorField(3, 2, hidden_dims=(8,)))
    normed = accelerate(FlowVectorField(3, 2, hidden_dims=(8,), layer_norm=True))
    with th.no_grad():
        assert plain.mlp._path(observations) == "fused"
        assert normed.mlp._path(observations) == "in_place"  # LayerNorm cannot be fused into the matmul
        no_hidden = accelerate(FlowVectorField(3, 2, hidden_dims=()))
        assert no_hidden.mlp._path(observations) == "plain"  # no hidden layer
        assert plain.mlp._path(observations.double()) == "in_place"
        many = th.zeros(MIN_ROWS, 3)
        with onednn_matmuls():
            assert plain.mlp._path(many) == "fused"
        with plain_matmuls():  # the BLAS's matmul, faster than oneDNN's without AVX-512, repays the unfused passes
            assert plain.mlp._path(many) == "in_place" and plain.mlp._path(many[:-1]) == "fused"
        with unfused_layers():
            assert plain.mlp._path(observations) == "in_place"
        with pytest.raises(ValueError, match="flow_steps"):
            fused_euler(plain, observations, th.zeros(2, 2), 0)
    assert plain.mlp._path(observations) == "plain"  # autograd on: the differentiable loop


# ---------------------------------------------------------------------------------------------------- best-of-N


def brute_force_best(
    field: FlowVectorField, critic: CriticEnsemble, observations: th.Tensor, noise: th.Tensor, flow_steps: int, q_agg: str
) -> tuple[th.Tensor, list[int]]:
    """Integrate and score each candidate on its own, then take the argmax by hand; returns (actions, indices)."""
    chosen, indices = [], []
    for b in range(observations.shape[0]):
        candidates, scores = [], []
        for j in range(noise.shape[1]):
            action = field.integrate(observations[b : b + 1], noise[b, j : j + 1], flow_steps)
            q = critic(observations[b : b + 1], action)[:, 0].tolist()
            candidates.append(action[0])
            scores.append(sum(q) / len(q) if q_agg == "mean" else min(q))
        best = max(range(len(scores)), key=lambda j: scores[j])
        chosen.append(candidates[best])
        indices.append(best)
    return th.stack(chosen), indices


def make_policy(seed: int, n_critics: int = 3) -> tuple[FlowVectorField, CriticEnsemble, th.Generator]:
    generator = th.Generator().manual_seed(seed)
    th.manual_seed(seed)
    field, critic = (
        FlowVectorField(3, 2, hidden_dims=(16, 16)),
        CriticEnsemble(3, 2, hidden_dims=(16, 16), n_critics=n_critics),
    )
    randomize_(field, generator, std=0.5)
    randomize_(critic, generator, std=0.5)
    return field, critic, generator


def test_best_of_n_picks_the_brute_force_argmax_for_mean_and_min() -> None:
    disagreements = 0
    for seed in range(3):
        field, critic, generator = make_policy(seed)
        observations, noise = th.randn(6, 3, generator=generator), th.randn(6, 8, 2, generator=generator)
        picked = {}
        with th.no_grad():
            for q_agg in ("mean", "min"):
                actions = best_of_n_actions(field, critic, observations, 8, 3, q_agg=q_agg, noise=noise)
                expected, picked[q_agg] = brute_force_best(field, critic, observations, noise, 3, q_agg)
                assert actions.shape == (6, 2)
                assert_close(actions, expected, tol=1e-5)
        disagreements += sum(m != n for m, n in zip(picked["mean"], picked["min"], strict=True))
    assert disagreements > 0  # the test does tell "mean" from "min"


def test_best_of_one_is_the_flow_sample_without_scoring() -> None:
    # N = 1 leaves nothing to choose: the action is the flow's sample (brute force), and the critic is not evaluated.
    field, critic, generator = make_policy(4)
    observations, noise = th.randn(5, 3, generator=generator), th.randn(5, 1, 2, generator=generator)
    expected, _ = brute_force_best(field, critic, observations, noise, 3, "mean")
    calls = []
    critic.register_forward_hook(lambda module, inputs, output: calls.append(1))
    with th.no_grad():
        actions = best_of_n_actions(field, critic, observations, 1, 3, noise=noise)
    assert_close(actions, expected, tol=1e-5)
    assert calls == []


def test_best_of_n_draws_standard_normal_noise() -> None:
    field, critic, generator = make_policy(10)
    observations = th.randn(4, 3, generator=generator)
    th.manual_seed(123)
    noise = th.randn(4, 5, 2)
    with th.inference_mode():
        expected = best_of_n_actions(field, critic, observations, 5, 3, noise=noise)
        th.manual_seed(123)
        actions = best_of_n_actions(field, critic, observations, 5, 3)
    assert th.equal(actions, expected)
    assert actions.abs().max() <= 1


def test_best_of_n_rejects_bad_arguments() -> None:
    field, critic, generator = make_policy(11)
    observations = th.randn(4, 3, generator=generator)
    with pytest.raises(ValueError, match="'max'"):
        best_of_n_actions(field, critic, observations, 5, 3, q_agg="max")
    with pytest.raises(ValueError, match="noise"):
        best_of_n_actions(field, critic, observations, 5, 3, noise=th.zeros(4, 6, 2))


# ---------------------------------------------------------------------------------------------------- gradients


def test_frozen_critic_gives_the_same_values_and_gradients_only_to_its_inputs() -> None:
    generator = th.Generator().manual_seed(14)
    th.manual_seed(14)
    critic = CriticEnsemble(3, 2, hidden_dims=(8, 8), n_critics=2).double()
    randomize_(critic, generator)
    observations = th.randn(5, 3, generator=generator, dtype=th.float64)
    actions = th.randn(5, 2, generator=generator, dtype=th.float64, requires_grad=True)
    frozen_q = critic(observations, actions, frozen=True)
    for k in range(2):
        expected = mlp_by_hand(th.cat((observations, actions.detach()), dim=1), *member_layers(critic.net, k))
        assert_close(frozen_q[k], expected[:, 0], tol=1e-10)
    frozen_q.sum().backward()
    assert all(parameter.grad is None for parameter in critic.parameters())
    assert actions.grad is not None and actions.grad.abs().sum() > 0
    assert th.autograd.gradcheck(lambda a: critic(observations, a, frozen=True), (actions,))


def test_critic_gradients_wrt_actions_and_per_member_isolation() -> None:
    generator = th.Generator().manual_seed(12)
    th.manual_seed(12)
    critic = CriticEnsemble(3, 2, hidden_dims=(8, 8), n_critics=3).double()
    randomize_(critic, generator)
    observations = th.randn(4, 3, generator=generator, dtype=th.float64)
    actions = th.randn(4, 2, generator=generator, dtype=th.float64, requires_grad=True)
    assert th.autograd.gradcheck(lambda a: critic(observations, a), (actions,))
    for k in range(3):
        critic.zero_grad()
        critic(observations, actions)[k].sum().backward()
        for parameter in critic.parameters():
            assert parameter.grad is not None
            others = [j for j in range(3) if j != k]
            assert bool((parameter.grad[others] == 0).all())
            assert parameter.grad[k].abs().sum() > 0
