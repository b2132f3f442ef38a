"""Time of an offline phase: gradient steps through ``pretrain()``, per step and extrapolated to the paper's 1M.

Run: ``python -m qc_sb3.benchmarks.speed.offline_speed [--device cuda] [--methods QCFQL QC] [--configs default] [--steps 20000]
[--compile-step]``. Each model (:func:`qc_sb3.benchmarks.speed.step_speed.build`: its configurations and random offline
data; on CUDA
its replay buffer is :class:`~qc_sb3.common.device_buffer.DeviceChunkReplayBuffer`, so that batches never cross from
the host) first runs ``--warmup`` untimed offline steps (with ``compile_step=True``: the compile and, on CUDA, the
update's capture as a CUDA graph), then ``--steps`` timed ones in blocks of ``--block`` ``pretrain()`` steps, each
block ending with a synchronisation on CUDA. The phase's own logging is included (a host read of the losses every
``offline_log_interval`` = 1000 steps). Printed: the median and the best block's milliseconds per step, and the
median times 1M steps in minutes (the paper's offline phase; issue 14's GPU target for QC-FQL is 20 minutes).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch as th

from qc_sb3 import QC, QCFQL
from qc_sb3.benchmarks.speed.step_speed import CONFIGS, build, machine_name, random_dataset

PAPER_OFFLINE_STEPS = 1_000_000


def block_seconds(model: QC | QCFQL, steps: int, block: int) -> list[float]:
    """The wall time of each block of ``block`` offline steps, ``steps`` in all, synchronised on CUDA."""
    seconds = []
    for _ in range(steps // block):
        start = time.perf_counter()
        model.pretrain(block)
        if model.device.type == "cuda":
            th.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--methods", nargs="+", default=["QCFQL"], choices=["QC", "QCFQL"])
    parser.add_argument("--configs", nargs="+", default=["default"], choices=list(CONFIGS))
    parser.add_argument("--steps", type=int, default=20_000, help="timed offline steps per model")
    parser.add_argument("--block", type=int, default=1000, help="steps per timed block")
    parser.add_argument("--warmup", type=int, default=100, help="untimed offline steps first")
    parser.add_argument("--compile-step", action="store_true", help="build the models with compile_step=True")
    args = parser.parse_args()
    if args.steps < args.block:
        parser.error(f"--steps ({args.steps}) must be at least one --block ({args.block})")

    device_name = th.cuda.get_device_name(args.device) if th.device(args.device).type == "cuda" else machine_name()
    print(
        f"{device_name}; torch {th.__version__}, {th.get_num_threads()} threads, device {args.device}, "
        f"compile_step={args.compile_step}; {args.steps} offline steps per model in blocks of {args.block}"
    )
    dataset = random_dataset()
    print(f"{'config':8s} {'method':6s} {'ms/step median (best)':>22s} {'1M steps, min':>14s} {'warm-up s':>10s}")
    for config_name in args.configs:
        for method in args.methods:
            model = build(method, CONFIGS[config_name], args.device, dataset, compile_step=args.compile_step)
            start = time.perf_counter()
            model.pretrain(args.warmup)
            warmup_seconds = time.perf_counter() - start
            per_step = [seconds / args.block for seconds in block_seconds(model, args.steps, args.block)]
            median = statistics.median(per_step)
            print(
                f"{config_name:8s} {method:6s} {1000 * median:10.3f} ({1000 * min(per_step):8.3f}) "
                f"{median * PAPER_OFFLINE_STEPS / 60:14.1f} {warmup_seconds:10.1f}"
            )


if __name__ == "__main__":
    main()
