"""Where one gradient step's time goes: a torch.profiler breakdown of ``train(1)`` by part, on one thread.

Run: ``python -m qc_sb3.benchmarks.speed.step_profile [--configs small] [--methods QC QCFQL] [--steps 30]``. Each model of
:mod:`qc_sb3.benchmarks.speed.step_speed` (obs 40, A 5, h 5, B 256), eager and with ``compile_step=True``, runs
    ``--steps`` profiled
``train(1)`` calls after a few untimed ones. The parts are the profiler's labels of the step's calls (the script
wraps each in a ``record_function`` of its own): batch sampling, the losses (in the compiled step, the compiled
graph's forward, the eager samplers inside it, and the rest of the call, dynamo's guards and graph breaks), backward
(the compiled graph's backward where compiled), zero_grad, Polyak, the optimizer steps, the per-call statistics
(``_record_checked_means``: the one host read and the logger). "Python, other" is the rest of the wall time of the
steps: SB3's ``train`` bookkeeping and the interpreter between the labelled calls. Shares are of the profiled wall
time, which the profiler itself lengthens by a few percent.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import time
from collections.abc import Callable, Iterator

import torch as th
from torch.autograd.profiler import record_function
from torch.profiler import ProfilerActivity, profile

import qc_sb3.qc.policies
from qc_sb3.accel.fast_networks import FastFlowVectorField
from qc_sb3.benchmarks.speed.step_speed import CONFIGS, build, random_dataset

SAMPLERS = "eager samplers"
COMPILED_FORWARD, COMPILED_BACKWARD = "compiled graph forward", "compiled graph backward"
ROWS = (
    "batch sampling",
    "losses (forward)",
    COMPILED_FORWARD,
    SAMPLERS,
    "backward",
    COMPILED_BACKWARD,
    "zero_grad",
    "Polyak",
    "optimizer steps",
    "statistics (.tolist, logger)",
)
# The profiler's own names of the parts that torch labels.
TORCH_LABELS = {
    "Optimizer.step#Adam.step": "optimizer steps",
    "Optimizer.zero_grad#Adam.zero_grad": "zero_grad",
    "aten::_foreach_lerp_": "Polyak",
    "CompiledFunction": COMPILED_FORWARD,
    "CompiledFunctionBackward": COMPILED_BACKWARD,
}


def labelled(label: str, function: Callable, disable_compile: bool = False) -> Callable:
    """``function`` inside ``record_function(label)``; outside dynamo's tracing where ``disable_compile``."""

    @functools.wraps(function)
    def call(*args, **kwargs):
        with record_function(label):
            return function(*args, **kwargs)

    return th.compiler.disable(call) if disable_compile else call


@contextlib.contextmanager
def labelled_samplers() -> Iterator[None]:
    """The flow samplers, where the algorithms call them, labelled (they run eagerly in a compiled step on CPU)."""
    patched = [(FastFlowVectorField, "integrate"), (qc_sb3.qc.policies, "best_of_n_actions")]
    originals = [getattr(module, name) for module, name in patched]
    for module, name in patched:
        setattr(module, name, labelled(SAMPLERS, getattr(module, name), disable_compile=True))
    backward = th.Tensor.backward
    th.Tensor.backward = labelled("backward", backward)  # type: ignore[method-assign]
    try:
        yield
    finally:
        th.Tensor.backward = backward  # type: ignore[method-assign]
        for (module, name), original in zip(patched, originals, strict=True):
            setattr(module, name, original)


def label_model(model) -> None:
    """Label the model's batch sampling, losses and statistics (instance attributes, so this model only)."""
    model.replay_buffer.sample = labelled("batch sampling", model.replay_buffer.sample)
    model._record_checked_means = labelled("statistics (.tolist, logger)", model._record_checked_means)
    if model._step_losses is None:
        model._losses = labelled("losses (forward)", model._losses)
    else:
        model._step_losses = labelled("losses (forward)", model._step_losses)


def outermost_seconds(events, rows: dict[str, str]) -> dict[str, float]:
    """Seconds per row: the events whose name maps to a row, each counted once (not inside one of the same row)."""
    seconds = dict.fromkeys(ROWS, 0.0)
    for event in events:
        row = rows.get(event.name)
        if row is None:
            continue
        parent = event.cpu_parent
        while parent is not None and rows.get(parent.name) != row:
            parent = parent.cpu_parent
        if parent is None:
            seconds[row] += event.time_range.elapsed_us() / 1e6
    return seconds


def profile_steps(model, n_steps: int) -> tuple[dict[str, float], float]:
    """Seconds per row over ``n_steps`` profiled ``train(1)`` calls, and their wall time."""
    for _ in range(5):
        model.train(gradient_steps=1, batch_size=256)
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        start = time.perf_counter()
        for _ in range(n_steps):
            model.train(gradient_steps=1, batch_size=256)
        wall = time.perf_counter() - start
    rows = {**TORCH_LABELS, **{row: row for row in ROWS}}
    return outermost_seconds(profiler.events(), rows), wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", nargs="+", default=["small"], choices=list(CONFIGS))
    parser.add_argument("--methods", nargs="+", default=["QCFQL", "QC"], choices=["QC", "QCFQL"])
    parser.add_argument("--steps", type=int, default=30, help="profiled train(1) calls per model")
    args = parser.parse_args()
    th.set_num_threads(1)
    dataset = random_dataset()
    columns = {}
    with labelled_samplers():
        for config in args.configs:
            for method in args.methods:
                for compile_step in (False, True):
                    model = build(method, CONFIGS[config], "cpu", dataset, compile_step=compile_step)
                    label_model(model)
                    seconds, wall = profile_steps(model, args.steps)
                    columns[f"{config} {method} {'compiled' if compile_step else 'eager'}"] = (seconds, wall)
    print(f"torch {th.__version__}, {th.get_num_threads()} thread; ms per step (share of the profiled wall time)")
    print(f"{'part':32s}" + "".join(f"{name:>24s}" for name in columns))
    for row in (*ROWS, "Python, other", "wall"):
        cells = []
        for seconds, wall in columns.values():
            if row == "wall":
                value = wall
            elif row == "Python, other":
                top_level = ("batch sampling", "losses (forward)", "backward", "zero_grad", "Polyak", "optimizer steps")
                value = wall - sum(seconds[name] for name in (*top_level, "statistics (.tolist, logger)"))
            else:
                value = seconds[row]
            cells.append(f"{1000 * value / args.steps:11.2f} ({100 * value / wall:5.1f}%)")
        indent = "  " if row in (COMPILED_FORWARD, SAMPLERS, COMPILED_BACKWARD) else ""
        print(f"{indent + row:32s}" + "".join(f"{cell:>24s}" for cell in cells))


if __name__ == "__main__":
    main()
