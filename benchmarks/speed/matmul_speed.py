"""
The networks' matmuls by PyTorch's BLAS (``addmm`` / ``baddbmm``: MKL in the CPU wheels) and by oneDNN
(:mod:`qc_sb3.accel.onednn_matmul`), for the products of a Linear layer's forward and backward passes.

Run: ``python -m qc_sb3.benchmarks.speed.matmul_speed [--rows 256] [--width 256] [--members 2] [--rounds 15]``. The products:
forward ``x W^T``, backward ``dy W`` (to the input) and ``dy^T x`` (to the weight), of a single layer and of an
ensemble's (one batched matmul against one oneDNN call per member), ``rows x width @ width x width``. Each round
times a block of calls of every product on both paths in turn; the figures are medians over the rounds, from one
run, in GFLOP/s, and the ratio oneDNN / BLAS.

``--steps [small default]``: whole gradient steps instead, ``train(1)`` of :mod:`qc_sb3.benchmarks.speed.step_speed`'s
QC and QC-FQL models, eager and with ``compile_step=True``, and the eager models' decisions, each under
:func:`~qc_sb3.accel.onednn_matmul.onednn_matmuls` and a copy (same weights) under
:func:`~qc_sb3.accel.onednn_matmul.plain_matmuls`, all in the same rounds (``qc_sb3.benchmarks.speed.step_speed``'s
interleaving); medians in ms per call, and the ratio BLAS / oneDNN.

``--flow-rows 8 64 2048 [--flow-configs small default]``: the flow's integration (no autograd) at those batch sizes,
on the fused path (:mod:`qc_sb3.accel.fast_inference`, oneDNN forced) and in place
(:func:`~qc_sb3.accel.fast_inference.unfused_layers`), in the same rounds; the ratio in-place / fused.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from functools import partial

import torch as th

from qc_sb3.accel.fast_inference import unfused_layers
from qc_sb3.accel.onednn_matmul import _matmul_t, onednn_matmuls, plain_matmuls
from qc_sb3.benchmarks.speed.step_speed import CONFIGS, build, interleaved_seconds, machine_name, random_dataset


def products(rows: int, width: int, members: int) -> dict[str, tuple[Callable[[], object], Callable[[], object]]]:
    """Each product as (BLAS call, oneDNN call), on random float32 inputs."""
    x, grad, weight = th.randn(rows, width), th.randn(rows, width), th.randn(width, width)
    xs, grads, weights = th.randn(members, rows, width), th.randn(members, rows, width), th.randn(members, width, width)
    each = range(members)
    return {
        "forward x W^T": (lambda: x @ weight.T, lambda: _matmul_t(x, weight)),
        "input grad dy W": (lambda: grad @ weight, lambda: _matmul_t(grad, weight, transpose_b=True)),
        "weight grad dy^T x": (
            lambda: grad.T @ x,
            lambda: _matmul_t(grad, x, transpose_a=True, transpose_b=True),
        ),
        "ensemble forward": (
            lambda: th.bmm(xs, weights),
            lambda: [_matmul_t(xs[k], weights[k], transpose_b=True) for k in each],
        ),
        "ensemble weight grad": (
            lambda: th.bmm(xs.transpose(1, 2), grads),
            lambda: [_matmul_t(xs[k], grads[k], transpose_a=True, transpose_b=True) for k in each],
        ),
    }


def step_calls(configs: list[str]) -> dict[tuple[str, bool], Callable[[], object]]:
    """
    One ``train(1)`` call per model, configuration and compile option, and one decision (``policy.predict_chunk`` on
    one observation) per eager model, as (name, plain) -> call: oneDNN's matmuls forced on one side, the BLAS on the
    other, whatever the CPU's default.
    """
    dataset = random_dataset()
    observation = dataset["observations"][0]
    calls: dict[tuple[str, bool], Callable[[], object]] = {}
    for config_name in configs:
        for method in ("QC", "QCFQL"):
            for compiled in (False, True):
                name = f"{config_name} {method} {'compiled' if compiled else 'eager'}"
                onednn = build(method, CONFIGS[config_name], "cpu", dataset, compile_step=compiled)
                plain = build(method, CONFIGS[config_name], "cpu", dataset, compile_step=compiled)
                plain.policy.load_state_dict(onednn.policy.state_dict())
                calls[name, False] = within(onednn_matmuls, lambda model=onednn: model.train(1, batch_size=256))
                calls[name, True] = within(plain_matmuls, lambda model=plain: model.train(1, batch_size=256))
                if not compiled:
                    decision = f"{config_name} {method} decision"
                    calls[decision, False] = within(
                        onednn_matmuls, lambda model=onednn: model.policy.predict_chunk(observation)
                    )
                    calls[decision, True] = within(plain_matmuls, lambda model=plain: model.policy.predict_chunk(observation))
    return calls


def within(matmuls: Callable[[], AbstractContextManager[None]], call: Callable[[], object]) -> Callable[[], object]:
    """``call`` run inside the ``matmuls`` context (:func:`plain_matmuls` or :func:`onednn_matmuls`)."""

    def run() -> object:
        with matmuls():
            return call()

    return run


def print_steps(configs: list[str], rounds: int) -> None:
    calls = step_calls(configs)
    times = interleaved_seconds({f"{name} {plain}": call for (name, plain), call in calls.items()}, rounds, 5)
    print(f"{machine_name()}; torch {th.__version__}, {th.get_num_threads()} threads; {rounds} rounds of 5 calls")
    print(f"{'model':24s} {'BLAS ms':>8s} {'oneDNN ms':>10s} {'ratio':>7s}")
    for name in dict.fromkeys(name for name, _ in calls):
        blas, onednn = (1000 * statistics.median(times[f"{name} {plain}"]) for plain in (True, False))
        print(f"{name:24s} {blas:8.2f} {onednn:10.2f} {blas / onednn:6.2f}x")


def print_flow_rows(configs: list[str], rows: list[int], rounds: int) -> None:
    """
    The flow's integration (T Euler steps without autograd: a decision's N rows, a TD target's B x N) of each config's
    QC model at each batch size, on the fused oneDNN path and on the in-place one with the BLAS's matmuls.
    """
    dataset = random_dataset()
    calls: dict[str, Callable[[], object]] = {}
    for config_name in configs:
        model = build("QC", CONFIGS[config_name], "cpu", dataset)
        flow, steps = model.policy.flow, model.flow_steps
        for count in rows:
            observations, noise = th.randn(count, flow.observation_dim), th.randn(count, flow.action_dim)
            integrate = th.no_grad()(partial(flow.integrate, observations, noise, steps))
            calls[f"{config_name} {count} fused"] = within(onednn_matmuls, integrate)
            calls[f"{config_name} {count} in-place"] = within(unfused_layers, integrate)
    times = interleaved_seconds(calls, rounds, 5)
    print(f"{machine_name()}; torch {th.__version__}, {th.get_num_threads()} threads; {rounds} rounds of 5 calls")
    print(f"{'flow integration':24s} {'in-place ms':>11s} {'fused ms':>9s} {'ratio':>7s}")
    for name in dict.fromkeys(name.rsplit(" ", 1)[0] for name in calls):
        in_place, fused = (1000 * statistics.median(times[f"{name} {path}"]) for path in ("in-place", "fused"))
        config_name, count = name.split(" ")
        print(f"{config_name + ', ' + count + ' rows':24s} {in_place:11.3f} {fused:9.3f} {in_place / fused:6.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=256, help="rows of a batch (the batch size)")
    parser.add_argument("--width", type=int, default=256, help="width of the layer, in and out")
    parser.add_argument("--members", type=int, default=2, help="ensemble members")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--repeats", type=int, default=20, help="timed calls per product, path and round")
    parser.add_argument("--steps", nargs="+", choices=list(CONFIGS), help="time whole gradient steps of these configs")
    parser.add_argument(
        "--flow-rows",
        nargs="+",
        type=int,
        metavar="ROWS",
        help="time the flow's integration at these batch sizes instead, fused and in place (--flow-configs)",
    )
    parser.add_argument("--flow-configs", nargs="+", choices=list(CONFIGS), default=["small"])
    args = parser.parse_args()
    if args.flow_rows:
        print_flow_rows(args.flow_configs, args.flow_rows, args.rounds)
        return
    if args.steps:
        print_steps(args.steps, args.rounds)
        return
    calls = products(args.rows, args.width, args.members)
    seconds: dict[tuple[str, int], list[float]] = {(name, path): [] for name in calls for path in (0, 1)}
    for _ in range(args.rounds):
        for name, pair in calls.items():
            for path, call in enumerate(pair):
                call()
                start = time.perf_counter()
                for _ in range(args.repeats):
                    call()
                seconds[name, path].append((time.perf_counter() - start) / args.repeats)
    print(f"{machine_name()}; torch {th.__version__}, {th.get_num_threads()} threads")
    print(f"{args.rows} x {args.width} @ {args.width} x {args.width}, {args.members} members; median GFLOP/s")
    print(f"{'product':22s} {'BLAS':>8s} {'oneDNN':>8s} {'ratio':>7s}")
    for name in calls:
        flops = 2 * args.rows * args.width * args.width * (args.members if name.startswith("ensemble") else 1)
        blas, onednn = (flops / statistics.median(seconds[name, path]) / 1e9 for path in (0, 1))
        print(f"{name:22s} {blas:8.1f} {onednn:8.1f} {onednn / blas:6.2f}x")


if __name__ == "__main__":
    main()
