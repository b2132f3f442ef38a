"""Speed of QC and QC-FQL: gradient steps per second and the latency of one chunk decision.

Run: ``python -m benchmarks.speed [--device cpu] [--repeats 20]``. Two configurations: the paper's default
(obs 40, A 5, h 5, 4 x 512, N 32, T 10, B 256, K 2) and a small one (2 x 256, N 8). Each figure is the median (and
the best) of ``--repeats`` timed calls after warm-up, from one run: gradient steps/s (one ``train(1)`` call: batch
sampling, every loss, backward, optimizer and target updates) and one decision (one observation -> one best-of-N
or one-step chunk, ``policy.predict_chunk``). A plain matmul's GFLOP/s before and after tells how fast the host
was running: on the shared development machine it varies by up to 40% from one minute to the next.

For comparison, the reference JAX code on the 2-core development machine: QC 0.67 and QC-FQL 6.1 steps/s at the
default, 18 and 45 at the small config; a best-of-32 decision takes 20 ms.
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


def timed_seconds(call: Callable[[], object], repeats: int, warmup: int = 2) -> tuple[float, float]:
    """Median and minimum wall time of ``repeats`` calls after ``warmup`` untimed ones."""
    for _ in range(warmup):
        call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times)


def matmul_gflops(repeats: int) -> float:
    """Throughput of a plain float32 8192x512 @ 512x512 matmul now: the machine's pace, to read the other figures by."""
    x, w = th.randn(8192, 512), th.randn(512, 512)
    return 2 * 8192 * 512 * 512 / timed_seconds(lambda: x @ w, repeats)[0] / 1e9


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
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--methods", nargs="+", default=["QC", "QCFQL"], choices=["QC", "QCFQL"])
    args = parser.parse_args()

    dataset = random_dataset()
    observation = np.zeros(OBS_DIM, np.float32)
    print(f"torch {th.__version__}, {th.get_num_threads()} threads, device {args.device}; medians of {args.repeats} calls")
    print(f"plain matmul before: {matmul_gflops(args.repeats):.0f} GFLOP/s")
    for config_name in args.configs:
        for method in args.methods:
            model = build(method, CONFIGS[config_name], args.device, dataset)
            step, fastest_step = timed_seconds(lambda model=model: model.train(gradient_steps=1, batch_size=256), args.repeats)
            decision, _ = timed_seconds(lambda model=model: model.policy.predict_chunk(observation), args.repeats)
            print(
                f"{config_name:8s} {method:6s} {1 / step:8.2f} gradient steps/s median ({1 / fastest_step:8.2f} best)   "
                f"decision {1000 * decision:7.2f} ms median"
            )
    print(f"plain matmul after: {matmul_gflops(args.repeats):.0f} GFLOP/s")


if __name__ == "__main__":
    main()
