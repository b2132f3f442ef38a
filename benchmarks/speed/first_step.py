"""
Time from a fresh process's start to its first finished gradient step, qc_sb3's and the reference's.

Run: ``python -m qc_sb3.benchmarks.speed.first_step [--configs small default] [--methods QC QCFQL RLPDAC] [--runs 3]
[--reference-python PY --reference-harness bench_ref.py --reference-root REF]``. For each model of
:mod:`qc_sb3.benchmarks.speed.step_speed` (its configurations and methods), the wall time from starting a process to
    its first finished
``train(1)``: interpreter start, imports, building the model with its offline data, and the first step, which
compiles where it does. qc_sb3 eager, and compiled (``compile_step=True``; not RLPD-AC, which has none) with
inductor's on-disk cache empty (a fresh cache folder) and then warm (the same folder again). The reference, where it
is given (the options of :mod:`qc_sb3.benchmarks.speed.step_speed`), from its interpreter's start through importing its agent,
``create`` and the first ``update`` (its JIT compile; JAX keeps no compile cache between processes by default), on a
batch of the timing harness's ``make_batch``, the agent configured as the harness configures it. Each is timed
``--runs`` times, in turn, and the median printed with every time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch as th

from qc_sb3.benchmarks.speed.step_speed import (
    ACTION_DIM,
    CHUNK_SIZE,
    CONFIGS,
    METHODS,
    OBS_DIM,
    add_reference_options,
    checked_reference_options,
    machine_name,
)

# A fresh process's first gradient step: qc_sb3's, and the reference's (through the timing harness's make_batch).
OURS_FIRST_STEP = """
from qc_sb3.benchmarks.speed.step_speed import CONFIGS, build, random_dataset
model = build({method!r}, CONFIGS[{config!r}], "cpu", random_dataset(), compile_step={compile_step!r})
model.train(gradient_steps=1, batch_size=256)
print("FIRST_STEP_DONE", flush=True)
"""
REFERENCE_FIRST_STEP = """
import sys
sys.path[:0] = [{harness_folder!r}, {root!r}]
import jax
import numpy as np
from bench_ref import make_batch
if {agent!r} == "acrlpd":
    from agents.acrlpd import ACRLPDAgent as Agent, get_config
else:
    from agents.acfql import ACFQLAgent as Agent, get_config
config = get_config()
config.update({settings!r})
agent = Agent.create(0, np.zeros({obs_dim}, np.float32), np.zeros({action_dim}, np.float32), config)
agent, info = agent.update(make_batch(np.random.default_rng(0), 256, {chunk_size}, {obs_dim}, {action_dim}))
jax.block_until_ready((agent, info))
print("FIRST_STEP_DONE", flush=True)
"""


def seconds_to_first_step(command: list[str], cwd: str, env: dict[str, str] | None = None) -> float:
    """
    Wall time from starting ``command`` to the line ``FIRST_STEP_DONE`` on its output.

    :param command: A python interpreter and its program
    :param cwd: Its working folder
    :param env: Its environment (default: this process's)
    :return: Seconds
    """
    with tempfile.TemporaryFile("w+") as errors:
        start = time.perf_counter()
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=errors, text=True)
        assert process.stdout is not None
        elapsed = next((time.perf_counter() - start for line in process.stdout if line.startswith("FIRST_STEP_DONE")), None)
        process.wait()
        if elapsed is None:
            errors.seek(0)
            message = f"{command[0]} exited with {process.returncode} before its first step"
            raise RuntimeError(f"{message}:\n{errors.read()[-2000:]}")
    return elapsed


def reference_first_step_program(harness: str, root: str, config: dict, method: str) -> str:
    """The reference's first update in a program of its own, the agent configured as the timing harness does."""
    settings = {
        "horizon_length": CHUNK_SIZE,
        "actor_hidden_dims": tuple(config["net_arch"]),
        "value_hidden_dims": tuple(config["net_arch"]),
        "batch_size": 256,
    }
    if method != "RLPDAC":
        actor_type = "best-of-n" if method == "QC" else "distill-ddpg"
        settings.update(actor_type=actor_type, actor_num_samples=config["actor_num_samples"])
    return REFERENCE_FIRST_STEP.format(
        harness_folder=str(Path(harness).resolve().parent),
        root=str(Path(root).resolve()),
        agent="acrlpd" if method == "RLPDAC" else "acfql",
        settings=settings,
        obs_dim=OBS_DIM,
        action_dim=ACTION_DIM,
        chunk_size=CHUNK_SIZE,
    )


def print_first_steps(configs: list[str], methods: list[str], runs: int, reference_options: tuple) -> None:
    """
    Print the median seconds from a fresh process's start to its first finished gradient step, per model and way of
    running it (see the module's docstring), each timed ``runs`` times in turn.

    :param configs: Names of :data:`~qc_sb3.benchmarks.speed.step_speed.CONFIGS`
    :param methods: Methods of :data:`~qc_sb3.benchmarks.speed.step_speed.METHODS`
    :param runs: Processes per model and way of running it
    :param reference_options: The reference's python, timing harness and code, or three None
    """
    repository = str(Path(__file__).resolve().parents[2])
    seconds: dict[tuple[str, str, str], list[float]] = {}
    for _ in range(runs):
        for config_name in configs:
            for method in methods:
                ours = [("eager", False)] if method == "RLPDAC" else [("eager", False), ("compiled", True)]
                for label, compile_step in ours:
                    program = OURS_FIRST_STEP.format(method=method, config=config_name, compile_step=compile_step)
                    command = [sys.executable, "-c", program]
                    if not compile_step:
                        seconds.setdefault((config_name, method, label), []).append(seconds_to_first_step(command, repository))
                        continue
                    with tempfile.TemporaryDirectory() as cache:  # inductor's cache: empty, then as the first left it
                        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
                        for state in ("cold cache", "warm cache"):
                            seconds.setdefault((config_name, method, f"{label}, {state}"), []).append(
                                seconds_to_first_step(command, repository, env)
                            )
                if all(reference_options):
                    python, harness, root = reference_options
                    program = reference_first_step_program(harness, root, CONFIGS[config_name], method)
                    seconds.setdefault((config_name, method, "reference"), []).append(
                        seconds_to_first_step([python, "-c", program], root)
                    )
    print(f"{machine_name()}; torch {th.__version__}; seconds from a process's start to its first gradient step")
    print(f"{'config':8s} {'method':6s} {'run':28s} {'median s':>9s}  all")
    for (config_name, method, label), values in seconds.items():
        every = ", ".join(f"{value:.1f}" for value in values)
        print(f"{config_name:8s} {method:6s} {label:28s} {statistics.median(values):9.1f}  {every}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--runs", type=int, default=3, help="processes per model and way of running it")
    add_reference_options(parser, "the reference's timing script (its make_batch)")
    args = parser.parse_args()
    print_first_steps(args.configs, args.methods, args.runs, checked_reference_options(parser, args))


if __name__ == "__main__":
    main()
