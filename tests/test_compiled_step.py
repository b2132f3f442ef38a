"""compile_step=True: the compiled gradient step gives the eager step's updates, saves and loads, and falls back to
eager with a reason where compiling is impossible. The compile is the cost: one compiled model per method."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from stable_baselines3.common.logger import configure
from torch._inductor import config as inductor_config

from qc_sb3 import QC, QCFQL
from qc_sb3.accel import compiled_step
from qc_sb3.accel.compiled_step import CompiledLosses, compile_unavailable_reason, traced_gelu_tanh
from qc_sb3.accel.fast_networks import accelerate
from qc_sb3.common.networks import MLP, CriticEnsemble

OBS_DIM, ACTION_DIM, N_STEPS, BATCH_SIZE = 4, 2, 100, 32


class ShapesEnv(gym.Env):
    """Shapes only: the offline phase never steps it."""

    observation_space = spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
    action_space = spaces.Box(-1.0, 1.0, (ACTION_DIM,), np.float32)

    def reset(self, *, seed=None, options=None):
        return np.zeros(OBS_DIM, np.float32), {}

    def step(self, action):
        return np.zeros(OBS_DIM, np.float32), 0.0, False, False, {}


def offline_data(n_steps: int = 200, episode_length: int = 20) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    observations = rng.normal(size=(n_steps, OBS_DIM)).astype(np.float32)
    return {
        "observations": observations,
        "actions": rng.uniform(-1, 1, size=(n_steps, ACTION_DIM)).astype(np.float32),
        "rewards": -rng.integers(0, 2, size=n_steps).astype(np.float32),
        "next_observations": np.roll(observations, -1, axis=0),
        "terminated": np.arange(n_steps) == 37,
        "episode_end": np.arange(n_steps) % episode_length == episode_length - 1,
    }


def make_model(algorithm: type, compile_step: bool, device: str = "cpu"):
    extra = {"actor_num_samples": 4} if algorithm is QC else {}
    model = algorithm(
        "MlpPolicy",
        ShapesEnv(),
        batch_size=BATCH_SIZE,
        chunk_size=3,
        flow_steps=3,
        offline_dataset=offline_data(),
        policy_kwargs={"net_arch": [16, 16]},
        seed=0,
        device=device,
        compile_step=compile_step,
        **extra,
    )
    model.set_logger(configure(None, []))
    return model


def run_steps(model, n_steps: int = N_STEPS) -> list[dict[str, float]]:
    """``n_steps`` gradient steps from one seeded generator state (numpy sampling and torch noise)."""
    np.random.seed(1)
    th.manual_seed(1)
    return [{name: value.item() for name, value in model._gradient_step(BATCH_SIZE).items()} for _ in range(n_steps)]


# The tests that compile need a C++ compiler (inductor's CPU backend); the fallback tests below run without one.
NO_COMPILER = compile_unavailable_reason(th.device("cpu"))
needs_compiler = pytest.mark.skipif(NO_COMPILER is not None, reason=f"needs a C++ compiler to compile: {NO_COMPILER}")


@pytest.fixture(scope="module", params=[QC, QCFQL], ids=["QC", "QCFQL"])
def trained_pair(request):
    """An eager and a compiled model from the same initial state, each after the same 100 gradient steps."""
    eager, compiled = make_model(request.param, False), make_model(request.param, True)
    return eager, run_steps(eager), compiled, run_steps(compiled)


@needs_compiler
def test_compiled_step_equals_eager_step_over_100_steps(trained_pair):
    eager, eager_losses, compiled, compiled_losses = trained_pair
    assert compiled._step_losses.compiled and compiled._step_losses.compile_seconds > 0
    assert eager._step_losses is None
    for step, (expected, got) in enumerate(zip(eager_losses, compiled_losses, strict=True)):
        assert expected.keys() == got.keys()
        for name in expected:
            assert got[name] == pytest.approx(expected[name], rel=1e-4, abs=1e-5), f"{name} at step {step}"
    for (name, expected), got in zip(eager.policy.state_dict().items(), compiled.policy.state_dict().values(), strict=True):
        th.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5, msg=f"{name} after {N_STEPS} steps")
    # 100 steps moved the parameters far more than the tolerance: the comparison is not between two unchanged models.
    initial = make_model(type(eager), False).policy.state_dict()
    moved = max((eager.policy.state_dict()[name] - value).abs().max().item() for name, value in initial.items())
    assert moved > 1e-2


@needs_compiler
def test_compiled_model_saves_and_loads_with_its_option(trained_pair, tmp_path):
    _, _, compiled, _ = trained_pair
    compiled.save(tmp_path / "model.zip")
    loaded = type(compiled).load(tmp_path / "model.zip", env=ShapesEnv(), device="cpu")
    assert loaded.compile_step is True
    assert isinstance(loaded._step_losses, CompiledLosses) and loaded._step_losses.eager_losses == loaded._losses
    for name, value in compiled.policy.state_dict().items():
        th.testing.assert_close(loaded.policy.state_dict()[name], value, rtol=0, atol=0, msg=name)


@needs_compiler
def test_a_second_compiled_model_trains_with_its_own_weights(trained_pair):
    # torch.compile shares one graph between models of the same shapes: it must read each model's own parameters.
    algorithm = type(trained_pair[0])
    compiled, eager = make_model(algorithm, True), make_model(algorithm, False)
    compiled.policy.load_state_dict({name: value + 0.01 for name, value in compiled.policy.state_dict().items()})
    eager.policy.load_state_dict(compiled.policy.state_dict())
    for expected, got in zip(run_steps(eager, 10), run_steps(compiled, 10), strict=True):
        assert got == pytest.approx(expected, rel=1e-4, abs=1e-5)
    assert compiled._step_losses.compiled


def test_no_cpp_compiler_falls_back_to_eager_with_the_reason():
    with inductor_config.patch({"cpp.cxx": ("no-such-c++-compiler",)}), pytest.warns(UserWarning) as caught:
        model = make_model(QCFQL, True)
    message = "compile_step=True: the gradient step runs eagerly, because torch.compile on CPU needs a C++ compiler"
    assert any(message in str(warning.message) for warning in caught), [str(w.message) for w in caught]
    assert not model._step_losses.compiled
    reference = make_model(QCFQL, False)
    assert run_steps(model, 3) == run_steps(reference, 3)


@pytest.fixture
def failing_compiler(monkeypatch):
    """torch.compile gives functions that fail as a compiler error would, at their first call."""

    def failing_compile(function, **kwargs):
        def compiled(*args):
            raise RuntimeError("inductor could not lower this graph")

        return compiled

    monkeypatch.setattr(compiled_step.th, "compile", failing_compile)


def test_failed_compile_falls_back_to_eager_with_the_error(failing_compiler):
    model = make_model(QCFQL, True)
    with pytest.warns(UserWarning, match="runs eagerly, because compiling it failed with RuntimeError: inductor could not"):
        losses = run_steps(model, 3)
    assert not model._step_losses.compiled
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once, not at every step
        model._gradient_step(BATCH_SIZE)
    assert losses == run_steps(make_model(QCFQL, False), 3)


def test_unsupported_device_is_named():
    assert compile_unavailable_reason(th.device("meta")) == (
        "torch.compile here supports the cpu and cuda devices, got 'meta'"
    )


@needs_compiler
def test_cpu_with_a_compiler_can_compile():
    assert compile_unavailable_reason(th.device("cpu")) is None


@pytest.mark.skipif(not th.cuda.is_available(), reason="needs a CUDA GPU: the compiled step on CUDA is compared there")
def test_compiled_step_equals_eager_step_on_cuda():
    models = [make_model(QCFQL, compile_step, device="cuda") for compile_step in (False, True)]
    eager_losses, compiled_losses = run_steps(models[0], 20), run_steps(models[1], 20)
    for expected, got in zip(eager_losses, compiled_losses, strict=True):
        assert got == pytest.approx(expected, rel=1e-3, abs=1e-4)


def test_traced_gelu_tanh_is_gelu_tanh_in_values_and_gradients():
    # The reference's GELU(tanh), 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), and its derivative in float64.
    x = th.cat([th.linspace(-12.0, 12.0, 2001), th.tensor([-40.0, -1e-4, 0.0, 1e-4, 40.0])]).double().requires_grad_()
    expected = 0.5 * x * (1 + th.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    (expected_gradient,) = th.autograd.grad(expected.sum(), x)
    x32 = x.detach().float().requires_grad_()
    got = traced_gelu_tanh(x32)
    (gradient,) = th.autograd.grad(got.sum(), x32)
    th.testing.assert_close(got.double(), expected.detach(), rtol=2e-6, atol=1e-6)
    th.testing.assert_close(gradient.double(), expected_gradient, rtol=2e-6, atol=1e-6)


def test_compiled_networks_trace_gelu_tanh_as_a_sigmoid_on_cpu():
    # What torch.compile traces: the sigmoid form (faster in inductor's CPU code), not F.gelu; eager keeps F.gelu.
    graphs = []

    def capture(graph_module, example_inputs):
        graphs.append(graph_module)
        return graph_module.forward

    th.manual_seed(0)
    mlp, critic, x = accelerate(MLP(4, [8, 8], 3)), accelerate(CriticEnsemble(4, 2, [8, 8], 2)), th.randn(5, 4)
    compiled_mlp, compiled_critic = th.compile(mlp, backend=capture), th.compile(critic, backend=capture)
    th.testing.assert_close(compiled_mlp(x), mlp(x), rtol=1e-5, atol=1e-6)
    th.testing.assert_close(compiled_critic(x, x[:, :2]), critic(x, x[:, :2]), rtol=1e-5, atol=1e-6)
    assert len(graphs) == 2
    for graph_module in graphs:
        targets = [str(node.target) for node in graph_module.graph.nodes if node.op == "call_function"]
        assert any("sigmoid" in target for target in targets), targets
        assert not any("gelu" in target for target in targets), targets
