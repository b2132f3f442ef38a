"""What the runs of a config cost: CPU seconds per 1000 offline gradient steps, and per evaluation episode, per run.

Run: ``python -m qc_sb3.benchmarks.speed.step_cost CONFIG [--steps 300] [--episodes 2]``. For the first seed of each task and
method, the model is built as the runner builds it (the task's env, its prepared offline data, every resolved
hyperparameter), then ``--steps`` offline gradient steps and ``--episodes`` evaluation episodes are timed in the
process's own CPU time (``time.process_time``, one torch thread), which other processes on the machine change far
less than they change wall time. Used to size a campaign before it runs (benchmarks/configs/evidence.yaml's header).
Methods without an offline phase (the RLPD family) report their online step (env step and update) instead.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

import torch as th
from stable_baselines3.common.logger import configure

from qc_sb3.benchmarks.runner.config import load_config
from qc_sb3.benchmarks.runner.datasets import prepare_datasets
from qc_sb3.benchmarks.runner.evaluations import EvaluationEnv
from qc_sb3.benchmarks.runner.locks import folder_lock
from qc_sb3.benchmarks.runner.planning import default_dataset_cache, plan_runs
from qc_sb3.benchmarks.runner.runs import build_model
from qc_sb3.benchmarks.runner.specs import RunSpec
from qc_sb3.common.evaluation import evaluate_success


def measure(run: RunSpec, steps: int, episodes: int) -> dict[str, float]:
    """
    CPU seconds of one run's offline gradient steps (or online steps) and evaluation episodes.

    :param run: A run with its offline data prepared
    :param steps: Steps timed (after 20 untimed ones)
    :param episodes: Evaluation episodes timed
    :return: ``cpu_s_per_1k_steps``, ``cpu_s_per_episode``, ``episode_steps`` (mean env steps per episode)
    """
    th.set_num_threads(1)
    env = run.make_env(seed=run.seed, **run.env_kwargs)
    try:
        model = build_model(run, env)
        model.set_logger(configure(None, [""]))
        if run.offline_phase:

            def advance(n: int) -> None:
                model.pretrain(n)

        else:
            model.learning_starts = 0

            def advance(n: int) -> None:
                model.learn(n, reset_num_timesteps=False)

        advance(20)
        start = time.process_time()
        advance(steps)
        step_cost = (time.process_time() - start) / steps * 1000
        eval_env = EvaluationEnv(run)
        try:
            seeded = eval_env.seeded(0)  # built here, outside the timing
            start = time.process_time()
            results = evaluate_success(model, seeded, episodes, warn=False)
            episode_cost = (time.process_time() - start) / episodes
        finally:
            eval_env.close()
    finally:
        env.close()
    return {"cpu_s_per_1k_steps": step_cost, "cpu_s_per_episode": episode_cost, "episode_steps": results["length"]}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m qc_sb3.benchmarks.speed.step_cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("config", help="benchmark config (YAML)")
    parser.add_argument("--steps", type=int, default=300, help="gradient steps timed per run")
    parser.add_argument("--episodes", type=int, default=2, help="evaluation episodes timed per run")
    args = parser.parse_args(argv)
    config = load_config(args.config)
    runs = plan_runs(config, config.out or "results")
    firsts = list({(run.task, run.method): run for run in reversed(runs)}.values())[::-1]
    cache = default_dataset_cache(config, config.out or "results")
    with folder_lock(cache, wait=True):
        firsts = prepare_datasets(firsts, cache)
    print("| task | method | CPU s per 1k steps | CPU s per eval episode | env steps per episode |")
    print("|---|---|---|---|---|")
    for run in firsts:
        cost = measure(run, args.steps, args.episodes)
        print(
            f"| {run.task} | {run.method}{'' if run.offline_phase else ' (online)'} | {cost['cpu_s_per_1k_steps']:.1f} | "
            f"{cost['cpu_s_per_episode']:.2f} | {cost['episode_steps']:.0f} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
