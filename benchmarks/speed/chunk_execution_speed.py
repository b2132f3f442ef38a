"""What each chunk-execution option costs per env step: QC's and QC-FQL's acting time with whole chunks (k = h = 5),
re-planning every k = 2 or 1 steps, and temporal ensembling (k = 1, ACT's rate 0.01).

Run: ``python -m qc_sb3.benchmarks.speed.chunk_execution_speed [--config small] [--rounds 5] [--repeats 20]``.
The models are :mod:`qc_sb3.benchmarks.speed.step_speed`'s (obs 40, A 5, h 5; ``small``: 2 x 256, N 8). A timed call
is one ``policy.predict`` per env step, the state passed back, over :data:`STEPS_PER_CALL` env steps (a multiple of
every k, so each call makes exactly ``STEPS_PER_CALL / k`` decisions), on the CPU; the figure per env step is that
call's time divided by the steps. The decision latency (one observation -> one chunk, ``policy.predict_chunk``) is
timed in the same rounds. Every figure is the median (and the best) of all timed calls, the options taking turns in
each round (:func:`~qc_sb3.benchmarks.speed.step_speed.interleaved_seconds`); on a shared machine the best is the
steadier figure, since a long call (ten decisions at k = 1) is more often interrupted than a short one.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from typing import Any

import numpy as np
import torch as th

from qc_sb3.benchmarks.speed.step_speed import CONFIGS, OBS_DIM, build, interleaved_seconds, machine_name, random_dataset

# Env steps per timed call: a multiple of every replan interval timed (1, 2, 5).
STEPS_PER_CALL = 10
# The options timed: name -> (the model's attributes, decisions per env step).
OPTIONS: dict[str, tuple[dict[str, Any], float]] = {
    "k=5 (whole chunks)": ({"replan_interval": None, "temporal_ensemble_rate": None}, 1 / 5),
    "k=2": ({"replan_interval": 2, "temporal_ensemble_rate": None}, 1 / 2),
    "k=1": ({"replan_interval": 1, "temporal_ensemble_rate": None}, 1.0),
    "ensembling (k=1, m=0.01)": ({"replan_interval": None, "temporal_ensemble_rate": 0.01}, 1.0),
}


def acting_call(model: Any, options: dict[str, Any], steps: int = STEPS_PER_CALL) -> Callable[[], None]:
    """
    A call that acts ``steps`` env steps with ``predict`` under the given options, on one fixed observation, the state
    carried from call to call (as an acting loop carries it).

    :param model: A QC, QC-FQL or RLPD model
    :param options: Its ``replan_interval`` and ``temporal_ensemble_rate`` for this call
    :param steps: Env steps per call
    :return: The call
    """
    observation = np.random.default_rng(0).normal(size=OBS_DIM).astype(np.float32)
    carried: dict[str, Any] = {"state": None}

    def act() -> None:
        for name, value in options.items():
            setattr(model, name, value)
        state = carried["state"]
        for _ in range(steps):
            _, state = model.predict(observation, state=state, episode_start=np.array([state is None]))
        carried["state"] = state

    return act


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", choices=sorted(CONFIGS), default="small")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=20, help="timed calls per option and round")
    args = parser.parse_args()
    config = CONFIGS[args.config]
    print(f"# {machine_name()}, torch {th.__version__}, {th.get_num_threads()} threads; config {args.config} {config}")
    print(f"# median of {args.rounds} rounds x {args.repeats} calls of {STEPS_PER_CALL} env steps each")
    dataset = random_dataset()
    observation = np.zeros(OBS_DIM, np.float32)
    for method in ("QC", "QCFQL"):
        model = build(method, config, "cpu", dataset)
        calls: dict[str, Callable[[], object]] = {"decision": lambda model=model: model.policy.predict_chunk(observation)}
        for name, (options, _) in OPTIONS.items():
            # One model; each option sets its attributes and carries its own queues from call to call.
            calls[name] = acting_call(model, options)
        times = interleaved_seconds(calls, args.rounds, args.repeats)
        decision = [1000 * statistics.median(times["decision"]), 1000 * min(times["decision"])]
        print(f"{method} {args.config}: decision latency {decision[0]:.3f} ms median ({decision[1]:.3f} best)")
        print(f"  {'option':26s} decisions/step  ms/env step median (best)  x whole chunks  decisions' share (best)")
        base = None
        for name, (_, decisions_per_step) in OPTIONS.items():
            per_step = [1000 * statistics.median(times[name]) / STEPS_PER_CALL, 1000 * min(times[name]) / STEPS_PER_CALL]
            base = per_step if base is None else base
            print(
                f"  {name:26s} {decisions_per_step:14.2f}  {per_step[0]:10.3f} ({per_step[1]:7.3f})"
                f"  {per_step[0] / base[0]:8.2f} ({per_step[1] / base[1]:4.2f})  {decisions_per_step * decision[1]:8.3f} ms"
            )


if __name__ == "__main__":
    main()
