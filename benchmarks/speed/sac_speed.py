"""Env steps per second of ``learn()``: the cheapest QC and RLPD against Stable-Baselines3's own SAC.

Run: ``python -m qc_sb3.benchmarks.speed.sac_speed [--rounds 5] [--steps 200] [--net-arch 256 256]``. Each model learns
on Pendulum-v1 (3-dim observations, 1-dim actions) with one gradient step of a batch of 256 after every env step,
networks of the same widths, one torch thread:

- ``SAC``: SB3's SAC (two critics, no LayerNorm, ReLU);
- ``RLPD K=2``: qc_sb3's RLPD with two critics and h = 1: SAC plus the reference's LayerNorm critics and mean target;
- ``QC h=1 N=1``: qc_sb3's QC without chunks and with one flow sample: a flow BC policy integrated in T = 10 Euler
  steps (in the TD target and for each decision) and its critic ensemble.

Both of qc_sb3's models pay for what their method adds to SAC (LayerNorm; the flow's T forward passes); the ratios
show what that costs per env step. The models take turns, ``--steps`` env steps each per round after a warm-up, and
every figure is the median over the rounds of one run; each line reads
``env-steps/s <model> <value> ratio-to-SAC <r>x``.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import gymnasium as gym
import torch as th
from stable_baselines3 import SAC
from stable_baselines3.common.base_class import BaseAlgorithm

from qc_sb3 import QC, RLPD

ENV_ID = "Pendulum-v1"
WARMUP_STEPS = 300
LEARNING_STARTS = 100


def build(name: str, net_arch: list[int], seed: int = 0) -> BaseAlgorithm:
    """
    One of the compared models, on a fresh Pendulum-v1.

    :param name: "SAC", "RLPD K=2" or "QC h=1 N=1"
    :param net_arch: Hidden widths of every network
    :param seed: The model's seed
    :return: The model, not yet trained
    """
    common = {"policy_kwargs": {"net_arch": list(net_arch)}, "learning_starts": LEARNING_STARTS, "seed": seed}
    env = gym.make(ENV_ID)
    if name == "SAC":
        return SAC("MlpPolicy", env, **common)
    if name == "RLPD K=2":
        return RLPD("MlpPolicy", env, n_critics=2, **common)
    if name == "QC h=1 N=1":
        return QC("MlpPolicy", env, chunk_size=1, actor_num_samples=1, offline_gradient_steps=0, **common)
    raise ValueError(f"unknown model {name!r}: expected 'SAC', 'RLPD K=2' or 'QC h=1 N=1'")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds over all models")
    parser.add_argument("--steps", type=int, default=200, help="timed env steps per model and round")
    parser.add_argument("--net-arch", type=int, nargs="+", default=[256, 256], help="hidden widths of every network")
    args = parser.parse_args()
    if args.rounds < 1 or args.steps < 1:
        parser.error(f"--rounds and --steps must be >= 1, got {args.rounds} and {args.steps}")
    th.set_num_threads(1)
    names = ("SAC", "RLPD K=2", "QC h=1 N=1")
    models = {name: build(name, args.net_arch) for name in names}
    for model in models.values():
        model.learn(WARMUP_STEPS)
    rates: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(args.rounds):
        for name, model in models.items():
            start = time.perf_counter()
            model.learn(args.steps, reset_num_timesteps=False)
            rates[name].append(args.steps / (time.perf_counter() - start))
    host = platform.processor() or platform.machine()
    print(f"{host}; torch {th.__version__}, 1 thread; {ENV_ID}, net_arch {args.net_arch}")
    print(f"{args.rounds} rounds of {args.steps} env steps per model, one gradient step (batch 256) per env step")
    sac = statistics.median(rates["SAC"])
    for name in names:
        median = statistics.median(rates[name])
        print(f"env-steps/s {name.replace(' ', '_')} {median:.1f} ratio-to-SAC {median / sac:.2f}x")


if __name__ == "__main__":
    main()
