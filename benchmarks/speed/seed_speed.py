"""Seeds in one process: the machine's seed-steps per second of S seeds, against the reference's best single-seed figure.

Run: ``python -m qc_sb3.benchmarks.speed --seeds 1 2 4 8 [--configs small default] [--methods QC QCFQL] [--rounds 5]
[--repeats 10] [--cost-csv FILE]`` with the reference options of :mod:`qc_sb3.benchmarks.speed.step_speed`. For each
configuration, method and S, every way of training S seeds on the machine is timed: one process at the machine's
threads holding them (:class:`~qc_sb3.seeds.SeedParallel` of S, its updates stacked, and for S > 1 also its seeds
one after another; for S = 1 also an ordinary model), and, for an even S on a CPU with two cores or more, two
processes at one thread each, each pinned to a core of its own and holding S / 2 (an ordinary model where that is
one, else a SeedParallel of its seeds one after another). A timed block is one ``pretrain(--repeats)`` call (offline gradient
steps, the group's stacking and release included) after one untimed step; the rounds take turns as the step-time
benchmark's do, a plain matmul timed in them. A process's seed-steps per second are its seeds times its gradient
steps per second (the median block's); two processes' are the sum of theirs, timed at the same time.

Printed: every arrangement's figure, then one line per configuration, method and S for scripts,
``seed-steps/s <config> <method> S=<S> <value> reference <value> ratio <r>x``, the value being the best arrangement
(named below the lines), the reference's figure its best single-seed one on the same machine in the same command
(one process at the machine's threads, or two processes at one thread each, pinned, run at the same time and summed:
whichever is higher); then the share of the matmul roof, and the cost per 1000 offline gradient steps per seed at
S = 1 and at the best S (``--cost-csv`` writes it as CSV). ``--methods`` also takes the paper's BFN, BFN-n, FQL and
FQL-n here (the runner's flags, :mod:`qc_sb3.benchmarks.runner.methods`), for their costs: the reference is timed
for QC and QC-FQL only.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch as th
from stable_baselines3.common.logger import configure

from qc_sb3.benchmarks.runner.methods import METHODS as PAPER_METHODS
from qc_sb3.benchmarks.speed.seed_report import (
    ONE_PROCESS,
    ONE_PROCESS_SEQUENTIAL,
    ONE_PROCESS_STACKED,
    TWO_PROCESSES,
    Reference,
    arrangement_text,
    best_arrangements,
    cost_lines,
    cost_rows,
    ratio_lines,
    roof_lines,
    seed_steps_per_second,
    write_cost_csv,
)
from qc_sb3.benchmarks.speed.step_flops import step_matmul_flops
from qc_sb3.benchmarks.speed.step_speed import (
    ACTION_DIM,
    CHUNK_SIZE,
    CONFIGS,
    METHODS,
    OBS_DIM,
    ConstantEnv,
    build_parser,
    checked_reference_options,
    machine_name,
    matmul_call,
    random_dataset,
    reference_agent_options,
)
from qc_sb3.benchmarks.speed.step_speed import main as step_speed_main
from qc_sb3.common.flow_q import FlowQAlgorithm
from qc_sb3.seeds import SeedParallel

# The paper's methods by the names --methods uses (QC-FQL is spelled QCFQL there).
RUNNER_NAMES = {"QC": "QC", "QCFQL": "QC-FQL", "BFN": "BFN", "BFN-n": "BFN-n", "FQL": "FQL", "FQL-n": "FQL-n"}
PAPER_VARIANTS = ("BFN", "BFN-n", "FQL", "FQL-n")
REFERENCE_METHODS = ("QC", "QCFQL")
# The online ring of each model: offline steps never read it, and the default million rows of every seed's ring
# would not fit in memory at S = 8.
ONLINE_BUFFER_SIZE = 1000
# (config name, method, seeds in the process, arrangement)
Key = tuple[str, str, int, str]


@dataclass
class Trainer:
    """Seeds of one process: ``advance(n)`` runs n offline gradient steps of each; ``model`` is the first seed's."""

    advance: Callable[[int], object]
    model: FlowQAlgorithm


def make_trainer(
    method: str, config: dict, n_seeds: int, stacked: bool | None, dataset: dict, device: str, first_seed: int = 0
) -> Trainer:
    """
    An ordinary model (``stacked=None``, one seed) or a :class:`~qc_sb3.seeds.SeedParallel` of ``n_seeds``, built
    as :func:`~qc_sb3.benchmarks.speed.step_speed.build` builds its models (obs 40, A 5, B 256, random offline
    data; an online ring of 1000 rows), with the method's flags, their loggers silent.

    :param method: A name of :data:`RUNNER_NAMES`
    :param config: One of :data:`~qc_sb3.benchmarks.speed.step_speed.CONFIGS` (or one like it)
    :param n_seeds: Seeds: ``first_seed``, ``first_seed + 1``, ...
    :param stacked: A SeedParallel, its updates stacked (True) or its seeds one after another (False); None: an
        ordinary model
    :param dataset: The offline data
    :param device: The device
    :param first_seed: The first seed
    :return: The trainer
    """
    spec = PAPER_METHODS[RUNNER_NAMES[method]]
    kwargs: dict[str, Any] = {
        "policy_kwargs": {"net_arch": config["net_arch"]}, "chunk_size": CHUNK_SIZE, "device": device,
        "offline_dataset": dataset, "buffer_size": ONLINE_BUFFER_SIZE, **spec.flags,
    }  # fmt: skip
    if "actor_num_samples" in spec.per_domain:
        kwargs["actor_num_samples"] = config["actor_num_samples"]
    if stacked is None:
        if n_seeds != 1:
            raise ValueError(f"an ordinary model trains one seed, got n_seeds={n_seeds}")
        model = spec.algorithm("MlpPolicy", ConstantEnv(), seed=first_seed, **kwargs)
        model.set_logger(configure(None, []))
        return Trainer(model.pretrain, model)  # type: ignore[arg-type]
    seeds = range(first_seed, first_seed + n_seeds)
    group = SeedParallel(spec.algorithm, lambda seed: ConstantEnv(), seeds, stacked=stacked, **kwargs)  # type: ignore[arg-type]
    for member in group.models:
        member.set_logger(configure(None, []))
    return Trainer(group.pretrain, group.models[0])


def timed_block(trainer: Trainer, steps: int, device: str) -> float:
    """The wall time of ``steps`` offline gradient steps of ``trainer``, after one untimed step."""
    trainer.advance(1)
    if th.device(device).type == "cuda":
        th.cuda.synchronize()
    start = time.perf_counter()
    trainer.advance(steps)
    if th.device(device).type == "cuda":
        th.cuda.synchronize()
    return time.perf_counter() - start


def _worker(connection: Any, cpu: int, specs: Sequence[tuple[str, dict, str, int]], device: str) -> None:
    """
    One of two processes at one thread, pinned to ``cpu``: builds a trainer per spec (config name, config, method,
    seeds), answers ``"ready"``, then each request ``(spec index, steps)`` with :func:`timed_block`'s seconds,
    until a None.
    """
    try:
        os.sched_setaffinity(0, {cpu})
        th.set_num_threads(1)
        dataset = random_dataset()
        trainers = [
            make_trainer(method, config, n_seeds, False if n_seeds > 1 else None, dataset, device, first_seed=cpu * n_seeds)
            for _, config, method, n_seeds in specs
        ]
        for trainer in trainers:
            trainer.advance(1)
        connection.send("ready")
        while (request := connection.recv()) is not None:
            index, steps = request
            connection.send(timed_block(trainers[index], steps, device))
    except Exception as error:  # handed to the parent, which raises it
        connection.send(RuntimeError(f"seed-speed worker on CPU {cpu} failed: {error!r}"))


class TwoProcesses:
    """Two :func:`_worker` processes, pinned to the first two CPUs of this one, that time the same spec at once."""

    def __init__(self, specs: Sequence[tuple[str, dict, str, int]], device: str):
        context = multiprocessing.get_context("spawn")
        self.connections, self.processes = [], []
        for cpu in sorted(os.sched_getaffinity(0))[:2]:
            parent, child = context.Pipe()
            process = context.Process(target=_worker, args=(child, cpu, list(specs), device), daemon=True)
            process.start()
            self.connections.append(parent)
            self.processes.append(process)
        self._answers()

    def time(self, index: int, steps: int) -> list[float]:
        """Both processes' seconds of ``steps`` steps of spec ``index``, started together."""
        for connection in self.connections:
            connection.send((index, steps))
        return self._answers()

    def close(self) -> None:
        for connection in self.connections:
            connection.send(None)
        for process in self.processes:
            process.join()

    def _answers(self) -> list:
        answers = [connection.recv() for connection in self.connections]
        for answer in answers:
            if isinstance(answer, Exception):
                raise answer
        return answers


def arrangements(seeds: Sequence[int], two_processes: bool) -> list[tuple[int, str]]:
    """(S, arrangement) of every way to train each S of ``seeds`` that is timed."""
    keys = []
    for n_seeds in seeds:
        if n_seeds == 1:
            keys.append((1, ONE_PROCESS))
        keys.append((n_seeds, ONE_PROCESS_STACKED))
        if n_seeds > 1:
            keys.append((n_seeds, ONE_PROCESS_SEQUENTIAL))
        if two_processes and n_seeds % 2 == 0:
            keys.append((n_seeds, TWO_PROCESSES))
    return keys


def harness_update(command: Sequence[str], cpu: int | None = None) -> subprocess.Popen:
    """The reference harness started on ``command`` (``--modes update``), pinned to ``cpu`` if given."""
    pin = None if cpu is None else (lambda: os.sched_setaffinity(0, {cpu}))
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=pin)


def update_record(process: subprocess.Popen) -> dict:
    """The harness's ``RESULT`` record of kind ``update``, once it has finished."""
    output, errors = process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"the reference harness failed ({process.returncode}): {errors[-2000:]}")
    records = [json.loads(line.split(" ", 1)[1]) for line in output.splitlines() if line.startswith("RESULT ")]
    return next(record for record in records if record["kind"] == "update")


def reference_figures(python: str, harness: str, root: str, config: dict, method: str) -> Reference:
    """
    The reference's update at one configuration: one process at the machine's threads, then two processes at one
    thread each, pinned to the first two CPUs of this process, at the same time.

    :param python: The python of the reference's virtual environment
    :param harness: Its timing script
    :param root: Its code
    :param config: One of :data:`~qc_sb3.benchmarks.speed.step_speed.CONFIGS`
    :param method: "QC" or "QCFQL"
    :return: Its figures
    """
    command = [
        python, harness, "--qc_root", root, "--modes", "update", "--hidden", ",".join(map(str, config["net_arch"])),
        "--horizon", str(CHUNK_SIZE), "--obs_dim", str(OBS_DIM), "--act_dim", str(ACTION_DIM),
        *reference_agent_options(config, method),
    ]  # fmt: skip
    one = update_record(harness_update(command))
    two = [harness_update(command, cpu) for cpu in sorted(os.sched_getaffinity(0))[:2]]
    first, second = (update_record(process)["steps_per_s"]["headline"] for process in two)
    return Reference(one["steps_per_s"]["headline"], (first, second), one["analytic_gflop_per_update"])


def run(
    configs: Mapping[str, dict],
    methods: Sequence[str],
    seeds: Sequence[int],
    rounds: int,
    steps: int,
    device: str = "cpu",
    reference: Callable[[dict, str], Reference] | None = None,
) -> tuple[list[str], list[dict[str, object]]]:
    """
    Time every arrangement of every configuration, method and S in turns, then the reference.

    :param configs: Configurations by name (as :data:`~qc_sb3.benchmarks.speed.step_speed.CONFIGS`)
    :param methods: Names of :data:`RUNNER_NAMES`
    :param seeds: The values of S
    :param rounds: Rounds over all arrangements
    :param steps: Gradient steps per timed block
    :param device: The device (two processes on a CPU only)
    :param reference: The reference's figures of (config, method), for QC and QCFQL; None: not timed
    :return: The printed lines, and the cost rows
    """
    started = time.perf_counter()
    threads = th.get_num_threads()
    two_processes = th.device(device).type == "cpu" and len(os.sched_getaffinity(0)) >= 2
    dataset = random_dataset()
    keys: list[Key] = [(c, m, s, a) for c in configs for m in methods for s, a in arrangements(seeds, two_processes)]
    group_kind = {ONE_PROCESS: None, ONE_PROCESS_STACKED: True, ONE_PROCESS_SEQUENTIAL: False}
    trainers = {
        key: make_trainer(key[1], configs[key[0]], key[2], group_kind[key[3]], dataset, device)
        for key in keys
        if key[3] != TWO_PROCESSES
    }
    specs = [(key[0], configs[key[0]], key[1], key[2] // 2) for key in keys if key[3] == TWO_PROCESSES]
    workers = TwoProcesses(specs, device) if specs else None
    spec_index = {key: index for index, key in enumerate(key for key in keys if key[3] == TWO_PROCESSES)}
    for trainer in trainers.values():
        trainer.advance(1)  # the first step's one-time work (a group's stacked update: functorch's first trace)
    matmul, matmul_flops = matmul_call(device)
    matmul_seconds: list[float] = []
    seconds: dict[Key, list[list[float]]] = {key: [] for key in keys}
    try:
        for round_index in range(rounds):
            print(f"round {round_index + 1} of {rounds} at {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
            matmul(), matmul()
            for _ in range(steps):
                start = time.perf_counter()
                matmul()
                matmul_seconds.append(time.perf_counter() - start)
            for key in keys:
                if key[3] == TWO_PROCESSES:
                    seconds[key].append(workers.time(spec_index[key], steps))  # type: ignore[union-attr]
                else:
                    seconds[key].append([timed_block(trainers[key], steps, device)])
    finally:
        if workers is not None:
            workers.close()
    references = {}
    if reference is not None:
        for config_name, method in dict.fromkeys((c, m) for c, m, _, _ in keys):
            if method in REFERENCE_METHODS:
                print(
                    f"reference {config_name} {method} at {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True
                )
                references[config_name, method] = reference(configs[config_name], method)

    rates: dict[Key, float] = {}
    for key, blocks in seconds.items():
        per_process = key[2] // 2 if key[3] == TWO_PROCESSES else key[2]
        rates[key] = sum(seed_steps_per_second(times, steps, per_process) for times in zip(*blocks, strict=True))
    best = best_arrangements(rates)
    matmul_gflops = matmul_flops / statistics.median(matmul_seconds) / 1e9
    lines = [
        f"{machine_name()}; torch {th.__version__}, {threads} threads, device {device}; {rounds} rounds of one block "
        f"of {steps} offline gradient steps per arrangement",
        f"plain matmul: {matmul_gflops:.0f} GFLOP/s median",
        f"{'config':8s} {'method':6s} {'S':>2s} {'seed-steps/s':>13s}  arrangement",
    ]
    lines += [f"{c:8s} {m:6s} {s:2d} {rate:13.2f}  {arrangement_text(a, s, threads)}" for (c, m, s, a), rate in rates.items()]
    for (config_name, method), figures in references.items():
        first, second = figures.two_processes
        lines.append(
            f"reference {config_name} {method} steps/s: 1 process at {threads} threads {figures.one_process:.2f}; "
            f"2 processes at 1 thread each {first:.2f} + {second:.2f} = {first + second:.2f}"
        )
    lines += ratio_lines(best, references)
    for (config_name, method, n_seeds), (arrangement, _) in best.items():
        text = f"arrangement {config_name} {method} S={n_seeds}: {arrangement_text(arrangement, n_seeds, threads)}"
        if (config_name, method) in references:
            one_process = references[config_name, method].best_arrangement == ONE_PROCESS
            text += f"; reference: {f'1 process at {threads} threads' if one_process else '2 processes at 1 thread each'}"
        lines.append(text)
    # Matmul FLOPs of one seed's step (a copy of an ordinary model's: a stacked step holds the same matmuls per seed).
    gflop = {
        (c, m): step_matmul_flops(next(t.model for key, t in trainers.items() if key[:2] == (c, m))) / 1e9
        for c, m in dict.fromkeys((c, m) for c, m, _, _ in keys)
    }
    lines += roof_lines(best, gflop, matmul_gflops, references)
    costs = cost_rows(best, len(os.sched_getaffinity(0)))
    lines += cost_lines(costs)
    return lines, costs


def main(argv: Sequence[str] | None = None) -> None:
    """The step-time benchmark's command line with ``--seeds``: this module's figures where it is given."""
    parser = build_parser((*METHODS, *PAPER_VARIANTS))
    parser.description = f"{parser.description}\n\nWith --seeds: {__doc__}"
    parser.add_argument("--seeds", nargs="+", type=int, help="time S seeds on the machine, for each S given (1 2 4 8)")
    parser.add_argument("--cost-csv", help="with --seeds: write the cost per 1000 steps per seed here (CSV)")
    args = parser.parse_args(argv)
    if not args.seeds:
        if set(args.methods) & set(PAPER_VARIANTS) or args.cost_csv:
            parser.error(f"{', '.join(PAPER_VARIANTS)} and --cost-csv go with --seeds")
        step_speed_main(parser, args)
        return
    if "RLPDAC" in args.methods or args.compile_step:
        parser.error("--seeds times QC and QC-FQL and their variants, eagerly: not RLPDAC, not --compile-step")
    if any(n_seeds < 1 for n_seeds in args.seeds) or len(set(args.seeds)) != len(args.seeds):
        parser.error(f"--seeds must be distinct positive integers, got {args.seeds}")
    reference_options = checked_reference_options(parser, args)
    reference = None
    if all(reference_options):
        python, harness, root = reference_options

        def reference(config: dict, method: str) -> Reference:
            return reference_figures(python, harness, root, config, method)  # type: ignore[arg-type]

    configs = {name: CONFIGS[name] for name in args.configs}
    lines, costs = run(configs, args.methods, args.seeds, args.rounds, args.repeats, args.device, reference)
    print("\n".join(lines))
    if args.cost_csv:
        write_cost_csv(costs, args.cost_csv)


if __name__ == "__main__":
    main()
