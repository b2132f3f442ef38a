"""Speed of QC, QC-FQL and RLPD-AC: gradient steps per second and the latency of one chunk decision.

Run: ``python -m qc_sb3.benchmarks.speed.step_speed [--device cpu] [--rounds 5] [--repeats 10] [--methods QC QCFQL
RLPDAC]``. Two
configurations: the paper's default (obs 40, A 5, h 5, 4 x 512, N 32, T 10, B 256, K 2) and a small one (2 x 256,
N 8); RLPD-AC (``--methods RLPDAC``, not timed by default) is RLPD over chunks of h 5 with the paper's K 10 critics at
the configuration's widths, its buffer's online half filled by random actions first. A gradient step is one
``train(1)`` call (batch sampling, every loss, backward, optimizer and target updates); a decision is one observation
-> one chunk (``policy.predict_chunk``: best-of-N, one-step, or the SAC actor's). Every figure is the median (and the
best) of all timed calls, from one run.

The shared development machine changes pace by up to 40% from one minute to the next, so the models take turns:
each round times a block of ``--repeats`` consecutive calls of every model (after two untimed ones), and a slow
minute slows every figure alike. A plain matmul's GFLOP/s, timed in the same rounds, tells how fast the host was.

Ratios to the reference JAX code are printed only when it is timed in the same command, on the same machine:
``--reference-python`` names the python of a virtual environment that holds the reference's pinned requirements,
``--reference-harness`` a script that times its agents on random data of the same shapes and prints one
``RESULT {json}`` line per measurement (``steps_per_s.headline``, ``latency_ms.median``), ``--reference-root`` the
reference's code. The reference is never a dependency of qc_sb3; without these options no ratio is printed, since a
figure from another machine or another hour is no baseline.

``--compile-step`` also times a copy of every model built with ``compile_step=True`` (the same weights), in the same
rounds, and prints its steps/s and decision latency and their ratios to the eager ones; each copy's compiles (its
first ``train()``, of four steps, and its first decision, with inductor's on-disk cache as this process finds it)
are timed once, before the rounds. RLPD has no ``compile_step``: compiled, its step was slower than eager (0.65x at
2 x 256, 0.77x at 4 x 512, interleaved: results/speed/rlpd-compiled-step.txt; inductor's fused LayerNorm
kernels over the stacked members of its 10-critic ensemble took most of the step).

On a CUDA device (``--device cuda``) QC's and QC-FQL's replay buffer is ``DeviceChunkReplayBuffer`` (batches
gathered on the GPU), and every timed call ends with a synchronisation, so that a step's time is that of its work
on the GPU and not of its launch; there ``compile_step=True`` also captures the update as a CUDA graph
(:mod:`qc_sb3.accel.graphed_update`, after its warm-up steps in the first ``train()``) and the decision as one
(:mod:`qc_sb3.accel.compiled_decision`).

The time from a fresh process's start to its first gradient step is :mod:`qc_sb3.benchmarks.speed.first_step`'s; that
of a whole offline phase, :mod:`qc_sb3.benchmarks.speed.offline_speed`'s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.logger import configure

from qc_sb3 import QC, QCFQL, RLPD
from qc_sb3.accel.graphed_update import WARMUP_STEPS
from qc_sb3.accel.onednn_matmul import linear
from qc_sb3.benchmarks.runner.provenance import machine
from qc_sb3.benchmarks.speed.step_flops import step_matmul_flops
from qc_sb3.common.device_buffer import DeviceChunkReplayBuffer

CONFIGS = {
    "default": {"net_arch": [512, 512, 512, 512], "actor_num_samples": 32},
    "small": {"net_arch": [256, 256], "actor_num_samples": 8},
}
OBS_DIM, ACTION_DIM, CHUNK_SIZE = 40, 5, 5
METHODS = ("QC", "QCFQL", "RLPDAC")
# Online env steps of random actions that fill an RLPD-AC model's buffer before it is timed (its batches are half
# online windows).
RLPD_ONLINE_STEPS = 1000


class ConstantEnv(gym.Env):
    """Shapes only: the benchmark never steps it."""

    observation_space = spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
    action_space = spaces.Box(-1.0, 1.0, (ACTION_DIM,), np.float32)

    def reset(self, *, seed=None, options=None):
        return np.zeros(OBS_DIM, np.float32), {}

    def step(self, action):
        return np.zeros(OBS_DIM, np.float32), 0.0, False, False, {}


def random_dataset(n_steps: int = 20_000, episode_length: int = 500) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    observations = rng.normal(size=(n_steps, OBS_DIM)).astype(np.float32)
    return {
        "observations": observations,
        "actions": rng.uniform(-1, 1, size=(n_steps, ACTION_DIM)).astype(np.float32),
        "rewards": -rng.integers(0, 3, size=n_steps).astype(np.float32),
        "next_observations": np.roll(observations, -1, axis=0),
        "terminated": np.zeros(n_steps, bool),
        "episode_end": np.arange(n_steps) % episode_length == episode_length - 1,
    }


def reference_figures(python: str, harness: str, root: str, config: dict, method: str) -> tuple[float, float, float, float]:
    """
    Time the reference agent of one configuration in a subprocess of its own environment.

    :param python: The python of the reference's virtual environment
    :param harness: The timing script (prints ``RESULT {json}`` lines)
    :param root: The reference's code
    :param config: One of :data:`CONFIGS`
    :param method: "QC" (best-of-N), "QCFQL" (distill-DDPG) or "RLPDAC" (the reference's ``acrlpd``)
    :return: Gradient steps per second (median), the decision latency in ms (median), the harness's analytic
        matmul GFLOP per update, and the seconds of its first update (the JIT compile)
    """
    command = [
        python, harness, "--qc_root", root, "--modes", "update,sample",
        "--hidden", ",".join(map(str, config["net_arch"])), "--horizon", str(CHUNK_SIZE),
        "--obs_dim", str(OBS_DIM), "--act_dim", str(ACTION_DIM), *reference_agent_options(config, method),
    ]  # fmt: skip
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    records = [json.loads(line.split(" ", 1)[1]) for line in output.splitlines() if line.startswith("RESULT ")]
    update = next(r for r in records if r["kind"] == "update")
    sample = next(r for r in records if r["kind"] == "sample_actions")
    figures = update["steps_per_s"]["headline"], sample["latency_ms"]["median"], update["analytic_gflop_per_update"]
    return (*figures, update["first_call_s"])


def reference_agent_options(config: dict, method: str) -> list[str]:
    """The harness's options that choose the reference agent of ``method`` (K is the agent's default: 2, or 10)."""
    if method == "RLPDAC":
        return ["--agent", "acrlpd"]
    if method == "QC":
        return ["--agent", "acfql", "--actor_type", "best-of-n", "--num_samples", str(config["actor_num_samples"])]
    return ["--agent", "acfql", "--actor_type", "distill-ddpg"]


def machine_name() -> str:
    """The CPU's model name, core count and PyTorch's CPU capability (from :func:`.provenance.machine`)."""
    host = machine()
    return f"{host['cpu']}, {host['cores']} cores, {host['cpu_capability']}"


def interleaved_seconds(
    calls: dict[str, Callable[[], object]], rounds: int, block: int, warmup: int = 2
) -> dict[str, list[float]]:
    """
    Wall times of every call, measured in ``rounds`` rounds; a round times a block of ``block`` consecutive calls of
    each call in turn, after ``warmup`` untimed calls of it (a training loop repeats the same call: its own weights
    and buffers are in the caches and the allocator's free lists, not the previous model's).

    :param calls: Named calls
    :param rounds: Number of rounds
    :param block: Timed calls per call and round
    :param warmup: Untimed calls before each block
    :return: The ``rounds * block`` times of each call, in seconds
    """
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            for _ in range(warmup):
                call()
            for _ in range(block):
                start = time.perf_counter()
                call()
                times[name].append(time.perf_counter() - start)
    return times


def synchronized(call: Callable[[], object], device: str) -> Callable[[], object]:
    """
    ``call``, followed on a CUDA device by a synchronisation: the time of a call is then that of its work on the
    device, not of its launch (a step's kernels run asynchronously); elsewhere ``call`` itself.
    """
    if th.device(device).type != "cuda":
        return call
    return lambda: (call(), th.cuda.synchronize())


def matmul_call(device: str) -> tuple[Callable[[], object], float]:
    """
    A float32 8192x512 @ 512x512 product by the networks' own Linear layer (:func:`qc_sb3.accel.onednn_matmul.linear`:
    oneDNN on CPU) and its FLOP count: the machine's pace, to read the other figures by.
    """
    x, w, b = th.randn(8192, 512, device=device), th.randn(512, 512, device=device), th.zeros(512, device=device)
    return lambda: linear(x, w, b), 2 * 8192 * 512 * 512


def build(method: str, config: dict, device: str, dataset: dict[str, np.ndarray], compile_step: bool = False):
    """
    A model of one method and configuration on random offline data, its logger silent, ready for ``train(1)``.

    :param method: "QC", "QCFQL" or "RLPDAC"
    :param config: One of :data:`CONFIGS`
    :param device: Its device
    :param dataset: Offline data (:func:`random_dataset`)
    :param compile_step: Build it with ``compile_step=True`` (QC and QC-FQL)
    :return: The model
    """
    kwargs = {
        "policy_kwargs": {"net_arch": config["net_arch"]},
        "chunk_size": CHUNK_SIZE,
        "device": device,
        "seed": 0,
    }
    if method == "RLPDAC":
        if compile_step:
            raise ValueError("RLPD-AC has no compile_step")
        model = RLPD("MlpPolicy", ConstantEnv(), offline_dataset=dataset, learning_starts=RLPD_ONLINE_STEPS, **kwargs)
        model.set_logger(configure(None, []))
        model.learn(RLPD_ONLINE_STEPS)  # random actions only (learning_starts): the buffer's online half, no update
        return model
    if th.device(device).type == "cuda":  # batches gathered on the GPU: none crosses from the host
        kwargs["replay_buffer_class"] = DeviceChunkReplayBuffer
    if method == "QC":
        model = QC(
            "MlpPolicy",
            ConstantEnv(),
            offline_dataset=dataset,
            actor_num_samples=config["actor_num_samples"],
            compile_step=compile_step,
            **kwargs,
        )
    else:
        model = QCFQL("MlpPolicy", ConstantEnv(), offline_dataset=dataset, compile_step=compile_step, **kwargs)
    model.set_logger(configure(None, []))
    return model


def print_roof(
    models: dict[tuple[str, str], object],
    times: dict[str, list[float]],
    matmul_flops: float,
    reference: dict[tuple[str, str], tuple[float, float, float]],
) -> None:
    """
    Each eager step's achieved matmul GFLOP/s (:func:`qc_sb3.benchmarks.speed.step_flops.step_matmul_flops` times its steps/s)
    against the plain matmul's in the same rounds, and the reference's (its harness's analytic count times its
    steps/s) where it was timed: how far each is from the machine's matmul roof.
    """
    matmul_rate = matmul_flops / statistics.median(times["matmul"]) / 1e9
    print(f"matmul work per step (counted; reference: its harness's analytic count), of the plain matmul's {matmul_rate:.0f}:")
    header = f"{'config':8s} {'method':6s} {'GFLOP/step':>11s} {'GFLOP/s':>8s} {'of matmul':>10s}"
    print(f"{header} {'reference':>10s} {'of matmul':>10s}")
    for (config_name, method), model in models.items():
        gflop = step_matmul_flops(model) / 1e9  # type: ignore[arg-type]
        achieved = gflop / statistics.median(times[f"{config_name} {method} step"])
        figures = f"{config_name:8s} {method:6s} {gflop:11.2f} {achieved:8.1f} {achieved / matmul_rate:9.0%}"
        if (config_name, method) in reference:
            reference_steps, _, reference_gflop, _ = reference[config_name, method]
            reference_achieved = reference_gflop * reference_steps
            figures += f" {reference_achieved:10.1f} {reference_achieved / matmul_rate:9.0%}"
        print(figures)


def add_reference_options(parser: argparse.ArgumentParser, harness_help: str) -> None:
    """The options that name the reference's python, timing harness and code (see the module's docstring)."""
    parser.add_argument("--reference-python", help="python of the reference's own virtual environment")
    parser.add_argument("--reference-harness", help=harness_help)
    parser.add_argument("--reference-root", help="the reference's code (github ColinQiyangLi/qc)")


def checked_reference_options(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> tuple[str | None, str | None, str | None]:
    """The reference's python, harness and code from ``args``: all three, or none (a parser error otherwise)."""
    options = (args.reference_python, args.reference_harness, args.reference_root)
    if any(options) and not all(options):
        parser.error("--reference-python, --reference-harness and --reference-root go together")
    return options


def build_parser(methods: tuple[str, ...] = METHODS) -> argparse.ArgumentParser:
    """
    The command line of the step-time benchmark.

    :param methods: The names ``--methods`` accepts
    :return: The parser
    """
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=5, help="rounds over all models")
    parser.add_argument("--repeats", type=int, default=10, help="timed calls per model and round")
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--methods", nargs="+", default=["QC", "QCFQL"], choices=methods)
    parser.add_argument("--compile-step", action="store_true", help="also time the step with compile_step=True")
    add_reference_options(parser, "script that times the reference agents (RESULT lines)")
    return parser


def main(parser: argparse.ArgumentParser | None = None, args: argparse.Namespace | None = None) -> None:
    """
    Time every model and print the tables.

    :param parser: The command line (:func:`build_parser`'s by default)
    :param args: Its parsed arguments (parsed from ``sys.argv`` by default)
    """
    parser = build_parser() if parser is None else parser
    args = parser.parse_args() if args is None else args
    reference_options = checked_reference_options(parser, args)

    dataset = random_dataset()
    observation = np.zeros(OBS_DIM, np.float32)
    models = {(c, m): build(m, CONFIGS[c], args.device, dataset) for c in args.configs for m in args.methods}
    compiled_models, compile_seconds = {}, {}
    if args.compile_step:
        for (config_name, method), model in models.items():
            if method == "RLPDAC":
                continue
            compiled = build(method, CONFIGS[config_name], args.device, dataset, compile_step=True)
            compiled.policy.load_state_dict(model.policy.state_dict())
            start = time.perf_counter()
            # The compile, and on CUDA the warm-up steps and the capture of the update as a CUDA graph.
            compiled.train(gradient_steps=WARMUP_STEPS + 1, batch_size=256)
            compiled.policy.predict_chunk(observation)
            compiled_models[config_name, method] = compiled
            compile_seconds[config_name, method] = time.perf_counter() - start
    matmul, matmul_flops = matmul_call(args.device)
    calls: dict[str, Callable[[], object]] = {"matmul": matmul}
    for (config_name, method), model in models.items():
        calls[f"{config_name} {method} step"] = lambda model=model: model.train(gradient_steps=1, batch_size=256)
        if (config_name, method) in compiled_models:
            compiled = compiled_models[config_name, method]
            calls[f"{config_name} {method} compiled"] = lambda model=compiled: model.train(gradient_steps=1, batch_size=256)
            calls[f"{config_name} {method} compiled decision"] = lambda model=compiled: model.policy.predict_chunk(observation)
        calls[f"{config_name} {method} decision"] = lambda model=model: model.policy.predict_chunk(observation)
    timed_calls = {name: synchronized(call, args.device) for name, call in calls.items()}
    times = interleaved_seconds(timed_calls, args.rounds, args.repeats)
    # The reference right after, in the same window: its figures are the only baseline a ratio may use.
    reference = {}
    if all(reference_options):
        for key in models:
            reference[key] = reference_figures(*reference_options, CONFIGS[key[0]], key[1])  # type: ignore[arg-type]

    print(
        f"{machine_name()}; torch {th.__version__}, {th.get_num_threads()} threads, device {args.device}"
        f"{f' ({th.cuda.get_device_name(args.device)})' if th.device(args.device).type == 'cuda' else ''}; "
        f"{args.rounds} rounds of {args.repeats} timed calls per model"
    )
    print(f"plain matmul: {matmul_flops / statistics.median(times['matmul']) / 1e9:.0f} GFLOP/s median")
    header = ("config", "method", "steps/s median (best)", "reference", "ratio", "decision ms", "reference", "ratio")
    print(
        f"{header[0]:8s} {header[1]:6s} {header[2]:>22s} {header[3]:>10s} {header[4]:>7s} "
        f"{header[5]:>12s} {header[6]:>10s} {header[7]:>7s}"
    )
    for config_name, method in models:
        step_times, decision_times = times[f"{config_name} {method} step"], times[f"{config_name} {method} decision"]
        steps_per_second, decision_ms = 1 / statistics.median(step_times), 1000 * statistics.median(decision_times)
        reference_steps, reference_ms, _, _ = reference.get((config_name, method), (None, None, None, None))
        step_figures = (
            f"{reference_steps:10.2f} {steps_per_second / reference_steps:6.2f}x"
            if reference_steps
            else f"{'-':>10s} {'-':>7s}"
        )
        # A shorter decision is better: the ratio is reference time / ours, so above 1 means faster here too.
        decision_figures = (
            f"{reference_ms:10.2f} {reference_ms / decision_ms:6.2f}x" if reference_ms else f"{'-':>10s} {'-':>7s}"
        )
        print(
            f"{config_name:8s} {method:6s} {steps_per_second:10.2f} ({1 / min(step_times):8.2f}) {step_figures} "
            f"{decision_ms:12.2f} {decision_figures}"
        )

    print_roof(models, times, matmul_flops, reference)

    if compiled_models:
        print("compile_step=True, in the same rounds (ratios: compiled over eager steps/s, eager over compiled ms):")
        print(
            f"{'config':8s} {'method':6s} {'eager steps/s':>14s} {'compiled steps/s':>17s} {'ratio':>7s} "
            f"{'eager ms':>9s} {'compiled ms':>12s} {'ratio':>7s} {'compile s':>10s}"
        )
        for key, compiled in compiled_models.items():
            name = f"{key[0]} {key[1]}"
            eager_rate = 1 / statistics.median(times[f"{name} step"])
            compiled_rate = 1 / statistics.median(times[f"{name} compiled"])
            eager_ms = 1000 * statistics.median(times[f"{name} decision"])
            compiled_ms = 1000 * statistics.median(times[f"{name} compiled decision"])
            decision = compiled.policy.compiled_decision
            fallbacks = [
                f"eager {what}: {part.fallback_reason}"
                for what, part in (("step", compiled._step_losses), ("decision", decision))
                if part.fallback_reason is not None
            ]
            if decision.compiled_faster is False:
                fallbacks.append("eager decision kept: it was the faster at the first decision")
            print(
                f"{key[0]:8s} {key[1]:6s} {eager_rate:14.2f} {compiled_rate:17.2f} {compiled_rate / eager_rate:6.2f}x "
                f"{eager_ms:9.2f} {compiled_ms:12.2f} {eager_ms / compiled_ms:6.2f}x "
                f"{compile_seconds[key]:10.1f}{' (' + '; '.join(fallbacks) + ')' if fallbacks else ''}"
            )


if __name__ == "__main__":
    main()
