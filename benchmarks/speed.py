"""Speed of QC and QC-FQL: gradient steps per second and the latency of one chunk decision.

Run: ``python -m benchmarks.speed [--device cpu] [--rounds 5] [--repeats 10]``. Two configurations: the paper's
default (obs 40, A 5, h 5, 4 x 512, N 32, T 10, B 256, K 2) and a small one (2 x 256, N 8). A gradient step is one
``train(1)`` call (batch sampling, every loss, backward, optimizer and target updates); a decision is one observation
-> one best-of-N or one-step chunk (``policy.predict_chunk``). Every figure is the median (and the best) of all timed
calls, from one run.

The shared development machine changes pace by up to 40% from one minute to the next, so the models take turns:
each round times a block of ``--repeats`` consecutive calls of every model (after two untimed ones), and a slow
minute slows every figure alike. A plain matmul's GFLOP/s, timed in the same rounds, tells how fast the host was.

The reference JAX code on the 2-core development machine (issue 3): QC 0.67 and QC-FQL 6.1 steps/s at the default,
18 and 45 at the small config; a best-of-32 decision takes 20 ms. The "vs reference" columns compare with these
(above 1: faster here).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.logger import configure

from qc_sb3 import QC, QCFQL

CONFIGS = {
    "default": {"net_arch": [512, 512, 512, 512], "actor_num_samples": 32},
    "small": {"net_arch": [256, 256], "actor_num_samples": 8},
}
OBS_DIM, ACTION_DIM, CHUNK_SIZE = 40, 5, 5


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


REFERENCE_STEPS_PER_SECOND = {
    ("default", "QC"): 0.67,
    ("default", "QCFQL"): 6.1,
    ("small", "QC"): 18.0,
    ("small", "QCFQL"): 45.0,
}
REFERENCE_DECISION_MS = {("default", "QC"): 20.0}


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


def matmul_call() -> tuple[Callable[[], object], float]:
    """A plain float32 8192x512 @ 512x512 matmul and its FLOP count: the machine's pace, to read the other figures by."""
    x, w = th.randn(8192, 512), th.randn(512, 512)
    return lambda: x @ w, 2 * 8192 * 512 * 512


def build(method: str, config: dict, device: str, dataset: dict[str, np.ndarray]):
    kwargs = {"policy_kwargs": {"net_arch": config["net_arch"]}, "chunk_size": CHUNK_SIZE, "device": device, "seed": 0}
    if method == "QC":
        model = QC(
            "MlpPolicy", ConstantEnv(), offline_dataset=dataset, actor_num_samples=config["actor_num_samples"], **kwargs
        )
    else:
        model = QCFQL("MlpPolicy", ConstantEnv(), offline_dataset=dataset, **kwargs)
    model.set_logger(configure(None, []))
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=5, help="rounds over all models")
    parser.add_argument("--repeats", type=int, default=10, help="timed calls per model and round")
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--methods", nargs="+", default=["QC", "QCFQL"], choices=["QC", "QCFQL"])
    args = parser.parse_args()

    dataset = random_dataset()
    observation = np.zeros(OBS_DIM, np.float32)
    models = {(c, m): build(m, CONFIGS[c], args.device, dataset) for c in args.configs for m in args.methods}
    matmul, matmul_flops = matmul_call()
    calls: dict[str, Callable[[], object]] = {"matmul": matmul}
    for (config_name, method), model in models.items():
        calls[f"{config_name} {method} step"] = lambda model=model: model.train(gradient_steps=1, batch_size=256)
        calls[f"{config_name} {method} decision"] = lambda model=model: model.policy.predict_chunk(observation)
    times = interleaved_seconds(calls, args.rounds, args.repeats)

    print(
        f"torch {th.__version__}, {th.get_num_threads()} threads, device {args.device}; "
        f"{args.rounds} rounds of {args.repeats} timed calls per model"
    )
    print(f"plain matmul: {matmul_flops / statistics.median(times['matmul']) / 1e9:.0f} GFLOP/s median")
    header = ("config", "method", "steps/s median (best)", "vs reference", "decision ms", "vs reference")
    print(f"{header[0]:8s} {header[1]:6s} {header[2]:>22s} {header[3]:>12s} {header[4]:>12s} {header[5]:>12s}")
    for config_name, method in models:
        step_times, decision_times = times[f"{config_name} {method} step"], times[f"{config_name} {method} decision"]
        steps_per_second, decision_ms = 1 / statistics.median(step_times), 1000 * statistics.median(decision_times)
        reference_steps = REFERENCE_STEPS_PER_SECOND.get((config_name, method))
        reference_ms = REFERENCE_DECISION_MS.get((config_name, method))
        step_ratio = f"{steps_per_second / reference_steps:.2f}x" if reference_steps else "-"
        # A shorter decision is better: the ratio is reference time / ours, so above 1 means faster here too.
        decision_ratio = f"{reference_ms / decision_ms:.2f}x" if reference_ms else "-"
        print(
            f"{config_name:8s} {method:6s} {steps_per_second:10.2f} ({1 / min(step_times):8.2f}) {step_ratio:>12s} "
            f"{decision_ms:12.2f} {decision_ratio:>12s}"
        )


if __name__ == "__main__":
    main()
