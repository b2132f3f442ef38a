"""Where runs execute: this process, a local pool of worker processes, or a Ray cluster.

Every executor runs :func:`qc_sb3.benchmarks.runner.seed_groups.execute_job_safely` once per job (a run, or the runs
of one task and method that ``execution.seeds_per_process`` puts in one process) and writes the same results layout;
the parent polls the runs' progress files meanwhile. Worker processes start with ``spawn`` (no state inherited from a
parent that may hold threads or CUDA); each run sets its own torch thread count. A worker whose parent dies (a
runner killed with SIGTERM or SIGKILL, which reach the parent only) exits within :data:`PARENT_CHECK_INTERVAL`
seconds rather than go on to the queued runs; the run it was on resumes from its checkpoint the next time. Ctrl-C
(SIGINT) reaches the runner, which stops its workers at once (a terminal's Ctrl-C, which reaches the workers too, is
ignored there) and the queued runs with them.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any

from qc_sb3.benchmarks.runner.seed_groups import execute_job_safely, plan_jobs
from qc_sb3.benchmarks.runner.specs import Execution, RunSpec

# Seconds between two progress refreshes of the parent.
POLL_INTERVAL = 1.0
# Seconds between two checks, in a worker, that its parent is alive.
PARENT_CHECK_INTERVAL = 5.0

Refresh = Callable[[], None]


def local_workers(requested: int | None) -> int:
    """
    The number of local worker processes: as requested, at most the number of cores.

    :param requested: Requested workers, or None for the number of cores
    :return: The number of workers
    """
    cores = os.cpu_count() or 1
    return cores if requested is None else max(1, min(requested, cores))


def run_in_process(runs: Sequence[RunSpec], refresh: Refresh | None = None) -> list[dict[str, Any]]:
    """
    Run one job after another in this process.

    :param runs: The runs
    :param refresh: Called after each job
    :return: The runs' summaries, in order
    """
    summaries = []
    for job in plan_jobs(runs):
        summaries += execute_job_safely(job)
        if refresh is not None:
            refresh()
    return _in_order(summaries, runs)


def run_local_pool(runs: Sequence[RunSpec], workers: int, refresh: Refresh | None = None) -> list[dict[str, Any]]:
    """
    Run on a pool of ``workers`` spawned processes.

    :param runs: The runs
    :param workers: Worker processes
    :param refresh: Called every :data:`POLL_INTERVAL` seconds while runs go on
    :return: The runs' summaries, in order
    """
    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=start_worker, initargs=(os.getpid(),))
    jobs = plan_jobs(runs)
    with pool:
        futures: list[Future] = [pool.submit(execute_job_safely, job) for job in jobs]
        pending = set(futures)
        try:
            while pending:
                _, pending = wait(pending, timeout=POLL_INTERVAL, return_when=FIRST_COMPLETED)
                if refresh is not None:
                    refresh()
        except BaseException:
            # Ctrl-C (or another error) in the runner: the queued runs are dropped and the running ones stopped at
            # once, as a kill would; each resumes from its latest checkpoint the next time.
            processes = list(pool._processes.values())  # the pool forgets them on shutdown
            pool.shutdown(wait=False, cancel_futures=True)
            for process in processes:
                process.terminate()
            raise
        summaries = [summary for future, job in zip(futures, jobs, strict=True) for summary in _result(future, job)]
        return _in_order(summaries, runs)


def start_worker(parent_pid: int) -> None:
    """
    Set up a worker process: Ctrl-C, which a terminal sends to the worker too, is left to the runner (it stops its
    workers), and the worker ends when its parent dies (:func:`exit_with_parent`).

    :param parent_pid: The runner's process id
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    exit_with_parent(parent_pid)


def exit_with_parent(parent_pid: int, interval: float = PARENT_CHECK_INTERVAL) -> threading.Thread:
    """
    Watch, from a daemon thread, that this process's parent is still ``parent_pid``, and end the process at once
    (``os._exit``) when it is not: the parent died and the process was adopted.

    :param parent_pid: The parent's process id
    :param interval: Seconds between two checks
    :return: The watching thread (started)
    """

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(interval)
        os._exit(1)

    thread = threading.Thread(target=watch, name="exit-with-parent", daemon=True)
    thread.start()
    return thread


def _result(future: Future, job: Sequence[RunSpec]) -> list[dict[str, Any]]:
    """A future's summaries, or failures if its worker died."""
    error = future.exception()
    return future.result() if error is None else _failed(job, error)


def _failed(job: Sequence[RunSpec], error: BaseException) -> list[dict[str, Any]]:
    return [{"run": run.name, "status": "failed", "error": f"{type(error).__name__}: {error}"} for run in job]


def _in_order(summaries: Sequence[dict[str, Any]], runs: Sequence[RunSpec]) -> list[dict[str, Any]]:
    """The summaries in the order of the runs."""
    by_name = {summary["run"]: summary for summary in summaries}
    return [by_name[run.name] for run in runs]


def run_on_ray(
    runs: Sequence[RunSpec],
    address: str,
    execution: Execution,
    local_cpus: int | None = None,
    refresh: Refresh | None = None,
) -> list[dict[str, Any]]:
    """
    Run each job (a run, or runs of one task and method together) as a Ray task on a cluster; results go to the runs'
    folders, which the cluster's nodes must share.

    :param runs: The runs
    :param address: The cluster's address (``auto``, ``ray://host:port``, ...), or ``local`` to start a Ray instance on
        this machine
    :param execution: ``num_cpus``, ``num_gpus`` of each task (a job of several runs too) and the ``runtime_env``
    :param local_cpus: CPUs of a local instance (default: the cores)
    :param refresh: Called every :data:`POLL_INTERVAL` seconds while runs go on
    :return: The runs' summaries, in order
    """
    import ray

    started_here = not ray.is_initialized()
    if started_here:
        options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
        if execution.runtime_env is not None:
            options["runtime_env"] = dict(execution.runtime_env)
        if address == "local":
            ray.init(num_cpus=local_cpus or local_workers(None), **options)
        else:
            ray.init(address=address, **options)
    try:
        task = ray.remote(execute_job_safely).options(num_cpus=execution.num_cpus, num_gpus=execution.num_gpus, max_retries=0)
        jobs = plan_jobs(runs)
        references = [task.remote(job) for job in jobs]
        pending = list(references)
        while pending:
            _, pending = ray.wait(pending, num_returns=len(pending), timeout=POLL_INTERVAL)
            if refresh is not None:
                refresh()
        summaries = []
        for reference, job in zip(references, jobs, strict=True):
            try:
                summaries += ray.get(reference)
            except Exception as error:
                summaries += _failed(job, error)
        return _in_order(summaries, runs)
    finally:
        if started_here:
            ray.shutdown()
