"""The update captured as a CUDA graph (compile_step=True on a GPU): the eager updates over 100 steps, a new capture
for a loaded optimizer state, eager updates after a learning-rate change or for another batch size; where no graph
can be used, the reason. The tests that capture need a CUDA GPU and are skipped without one, saying so."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch as th

from qc_sb3 import QC, QCFQL
from qc_sb3.accel.compiled_step import compile_unavailable_reason
from qc_sb3.accel.graphed_update import WARMUP_STEPS, GraphedUpdate, graph_unavailable_reason, set_capturable
from tests.test_compiled_step import BATCH_SIZE, ShapesEnv, make_model, run_steps

needs_cuda = pytest.mark.skipif(not th.cuda.is_available(), reason="needs a CUDA GPU: CUDA graphs are captured there")
STEPS = 100


def graphed_eager_model(algorithm: type):
    """An eager model on CUDA whose update is captured as a CUDA graph (no torch.compile: the graph alone)."""
    model = make_model(algorithm, False, device="cuda")
    model._update_graph = GraphedUpdate(model._update, model.policy.optimizers, model.device)
    return model


def assert_same_losses(expected: list[dict[str, float]], got: list[dict[str, float]]) -> None:
    for step, (expected_step, got_step) in enumerate(zip(expected, got, strict=True)):
        assert got_step.keys() == expected_step.keys()
        for name in expected_step:
            assert got_step[name] == pytest.approx(expected_step[name], rel=1e-4, abs=1e-5), f"{name} at step {step}"


def assert_same_parameters(expected_model, got_model) -> None:
    expected = expected_model.policy.state_dict()
    for name, value in got_model.policy.state_dict().items():
        th.testing.assert_close(value, expected[name], rtol=1e-4, atol=1e-5, msg=f"{name}")


def test_no_graph_on_cpu_and_its_reason():
    assert graph_unavailable_reason(th.device("cpu"), []) == "CUDA graphs need a CUDA device, got 'cpu'"
    assert make_model(QCFQL, False)._update_graph is None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = make_model(QCFQL, True)
    assert compiled._update_graph is None
    assert not [warning for warning in caught if "CUDA graph" in str(warning.message)]  # CPU is not told about them


def test_an_optimizer_without_capturable_mode_is_named():
    parameter = th.nn.Parameter(th.zeros(2))
    reason = graph_unavailable_reason(th.device("cuda"), [th.optim.Adam([parameter]), th.optim.SGD([parameter], lr=0.1)])
    assert reason == "SGD has no capturable mode, which a CUDA graph capture needs"
    assert graph_unavailable_reason(th.device("cuda"), [th.optim.Adam([parameter], fused=True)]) is None


def test_a_loaded_model_that_does_not_capture_turns_capturable_off(tmp_path):
    # A model saved while its update was a graph has its optimizers capturable; an eager model loading it does not.
    model = make_model(QCFQL, False)
    set_capturable(model.policy.optimizers, True)
    model.save(tmp_path / "model.zip")
    loaded = QCFQL.load(tmp_path / "model.zip", env=ShapesEnv(), device="cpu")
    groups = [group for optimizer in loaded.policy.optimizers for group in optimizer.param_groups]
    assert groups and all(group["capturable"] is False for group in groups)


@needs_cuda
@pytest.mark.parametrize("algorithm", [QC, QCFQL], ids=["QC", "QCFQL"])
def test_graphed_update_equals_eager_update_over_100_steps(algorithm):
    eager, graphed = make_model(algorithm, False, device="cuda"), graphed_eager_model(algorithm)
    assert_same_losses(run_steps(eager, STEPS), run_steps(graphed, STEPS))
    assert graphed._update_graph.captured and graphed._update_graph.capture_seconds > 0
    assert_same_parameters(eager, graphed)


@needs_cuda
@pytest.mark.skipif(
    compile_unavailable_reason(th.device("cuda")) is not None, reason="needs triton to compile on CUDA (not installed)"
)
def test_compiled_and_graphed_update_equals_eager_update_over_100_steps():
    eager, compiled = make_model(QCFQL, False, device="cuda"), make_model(QCFQL, True, device="cuda")
    assert_same_losses(run_steps(eager, STEPS), run_steps(compiled, STEPS))
    assert compiled._step_losses.compiled and compiled._update_graph.captured
    assert_same_parameters(eager, compiled)


@needs_cuda
def test_loaded_parameters_are_captured_again(tmp_path):
    source = make_model(QCFQL, False, device="cuda")
    run_steps(source, 10)
    source.save(tmp_path / "model.zip")
    graphed = graphed_eager_model(QCFQL)
    run_steps(graphed, WARMUP_STEPS + 2)
    assert graphed._update_graph.captured
    eager = make_model(QCFQL, False, device="cuda")
    for model in (eager, graphed):
        model.set_parameters(str(tmp_path / "model.zip"), device="cuda")
    assert_same_losses(run_steps(eager, 20), run_steps(graphed, 20))
    assert graphed._update_graph.captured
    assert_same_parameters(eager, graphed)


@needs_cuda
def test_a_learning_rate_change_goes_back_to_eager_updates_with_a_warning():
    eager, graphed = make_model(QCFQL, False, device="cuda"), graphed_eager_model(QCFQL)
    run_steps(eager, WARMUP_STEPS + 2)
    run_steps(graphed, WARMUP_STEPS + 2)
    for model in (eager, graphed):
        for optimizer in model.policy.optimizers:
            for group in optimizer.param_groups:
                group["lr"] = 1e-3
    with pytest.warns(UserWarning, match="the learning rate changed after the capture"):
        got = run_steps(graphed, 10)
    assert_same_losses(run_steps(eager, 10), got)
    assert not graphed._update_graph.captured
    assert all(group["capturable"] is False for optimizer in graphed.policy.optimizers for group in optimizer.param_groups)


@needs_cuda
def test_another_batch_size_is_updated_eagerly_and_the_graph_kept():
    eager, graphed = make_model(QCFQL, False, device="cuda"), graphed_eager_model(QCFQL)
    assert_same_losses(run_steps(eager, WARMUP_STEPS + 2), run_steps(graphed, WARMUP_STEPS + 2))
    for model in (eager, graphed):
        np.random.seed(2)
        th.manual_seed(2)
        model._gradient_step(BATCH_SIZE // 2)
    assert graphed._update_graph.captured
    assert_same_losses(run_steps(eager, 5), run_steps(graphed, 5))
    assert_same_parameters(eager, graphed)
