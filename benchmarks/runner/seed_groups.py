"""Seeds in one process: the runs of one task and method with different seeds, executed together as one job.

With ``execution.seeds_per_process: S`` (:mod:`qc_sb3.benchmarks.runner.execution_settings`), the runs of each task
and method are taken S at a time, in seed order, and each such job runs in one process: every run is the ordinary
:func:`~qc_sb3.benchmarks.runner.runs.execute_run` in a thread of its own, the threads taking turns
(:class:`~qc_sb3.seeds.turns.SeedTurns`: one at a time, each with its own global random generators), and each run's
model, once built or restored, joins a :class:`~qc_sb3.seeds.group.SeedGroup`, which runs the runs' gradient steps as
one stacked update. Every run writes its own folder exactly as it would alone (config, evaluations, checkpoints,
training statistics, progress, ``DONE``); its results are those of the run alone to float32 rounding. That is on a
GPU; on a CPU, where the stacked update is slower per seed (:func:`~qc_sb3.seeds.group.stacks_updates`), a job's runs
execute one after another in its process, each as it would alone.

Which runs of a job train together is decided when the job starts, from where each run stands:

* a finished run is skipped as always, and a run that another process is working on is reported ``busy``;
* the others train together when they stand at the same point: none has a checkpoint, or their latest checkpoints
  record the same phase, evaluations and step counts. Runs that stand at different points (a kill between two
  runs' checkpoint writes) are never mixed: those at one point train together, and each run that stands alone
  trains alone (its results are the same, it only misses the speed-up).
* A run whose folder cannot be read (a damaged checkpoint, another configuration's results) runs alone, and fails
  there with its own message.

A run of a group that fails stops the group: the others fail with an error naming it and its error (and each keeps
its latest checkpoint, from which the next session resumes it).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

from stable_baselines3.common.utils import get_device

from qc_sb3.benchmarks.runner.checkpoints import latest_checkpoint
from qc_sb3.benchmarks.runner.group_membership import group_member
from qc_sb3.benchmarks.runner.locks import FolderBusyError, folder_lock
from qc_sb3.benchmarks.runner.paths import check_run_paths
from qc_sb3.benchmarks.runner.runs import RunHook, check_run_folder, execute_run, execute_run_safely, is_done
from qc_sb3.benchmarks.runner.specs import RunSpec
from qc_sb3.seeds.group import SeedGroup, stacks_updates
from qc_sb3.seeds.turns import SeedTurns

# Where a run stands before any checkpoint.
AT_START = ("start",)


def plan_jobs(runs: Sequence[RunSpec]) -> list[list[RunSpec]]:
    """
    The executor's jobs: the runs of each task and method, ``seeds_per_process`` at a time, in their order.

    :param runs: The runs
    :return: The jobs, each a list of runs of one task and method (one run where ``seeds_per_process`` is 1)
    """
    by_method: dict[tuple[str, str], list[RunSpec]] = {}
    for run in runs:
        by_method.setdefault((run.task, run.method), []).append(run)
    jobs = []
    for method_runs in by_method.values():
        size = method_runs[0].seeds_per_process
        jobs += [method_runs[start : start + size] for start in range(0, len(method_runs), size)]
    return jobs


def execute_job_safely(job: Sequence[RunSpec]) -> list[dict[str, Any]]:
    """
    One job of :func:`plan_jobs`: its runs together (:func:`execute_together`) where they stack their updates (on
    a GPU), else each alone (:func:`~qc_sb3.benchmarks.runner.runs.execute_run_safely`), one after another; failures
    are reported in the summaries, never raised.

    :param job: The runs
    :return: Their summaries, in order
    """
    if len(job) > 1 and stacks_updates(get_device(job[0].device)):
        return execute_together(job)
    return [execute_run_safely(run) for run in job]


def execute_together(runs: Sequence[RunSpec], hook: RunHook | None = None) -> list[dict[str, Any]]:
    """
    Runs of one task and method (different seeds) in this process, those that stand at the same point trained as one
    group (see the module's description); a failure is reported in the run's summary, never raised.

    :param runs: The runs
    :param hook: Called by each run after each evaluation and each checkpoint (:data:`~.runs.RunHook`)
    :return: Their summaries, in order, as :func:`~qc_sb3.benchmarks.runner.runs.execute_run_safely` gives them
    """
    by_point: dict[tuple[Any, ...], list[RunSpec]] = {}
    for run in runs:
        point = standing_point(run)
        by_point.setdefault(("alone", run.name) if point is None else point, []).append(run)
    summaries: dict[str, dict[str, Any]] = {}
    for batch in by_point.values():
        if len(batch) == 1:
            summaries[batch[0].name] = _summary(batch[0], lambda run=batch[0]: execute_run(run, hook))
        else:
            summaries.update(_train_together(batch, hook))
    return [summaries[run.name] for run in runs]


def standing_point(run: RunSpec) -> tuple[Any, ...] | None:
    """
    Where a run stands, for grouping: :data:`AT_START`, or its latest checkpoint's phase, evaluations and step counts.

    :param run: The run
    :return: The point, or None for a run that does not train with others (finished, busy, or whose folder is
        refused or damaged: it runs alone, and says why there)
    """
    try:
        check_run_paths(run.run_dir, len(Path(run.name).parts))
        check_run_folder(run)
        if is_done(run) or _is_busy(run):
            return None
        checkpoint = latest_checkpoint(run.run_dir)
    except Exception:
        return None
    if checkpoint is None:
        return AT_START
    state = checkpoint[1]
    return state.phase, state.evaluations_done, state.offline_steps_done, state.num_timesteps


def _is_busy(run: RunSpec) -> bool:
    try:
        with folder_lock(run.run_dir):
            return False
    except FolderBusyError:
        return True


def _summary(run: RunSpec, execute: Any) -> dict[str, Any]:
    """The run's summary from ``execute()``, or its failure."""
    try:
        return execute()
    except Exception as error:
        return {"run": run.name, "status": "failed", "error": f"{type(error).__name__}: {error}"}


def _train_together(runs: Sequence[RunSpec], hook: RunHook | None) -> dict[str, dict[str, Any]]:
    """Each run in a thread of one :class:`SeedTurns`, its model a member of one :class:`SeedGroup`."""
    turns = SeedTurns([None] * len(runs))  # each run's model seeds the generators, as in a process of its own
    group = SeedGroup(turns)
    summaries: dict[str, dict[str, Any]] = {}

    def train(index: int, run: RunSpec) -> None:
        with group_member(group, index):
            summaries[run.name] = _summary(run, lambda: execute_run(run, hook))
        if summaries[run.name]["status"] == "failed":  # stops the group: the others fail at their next gradient step
            raise GroupMemberFailed(f"{run.name} failed: {summaries[run.name]['error']}")

    try:
        turns.run([partial(train, index, run) for index, run in enumerate(runs)])
    except GroupMemberFailed:
        pass  # every run's summary holds its own error (and its folder its error.txt)
    finally:
        group.leave()
    for run in runs:  # a run whose thread was stopped before it started
        summaries.setdefault(
            run.name, {"run": run.name, "status": "failed", "error": "not started: another run of its group failed"}
        )
    return summaries


class GroupMemberFailed(Exception):
    """A run of a group of seeds failed: the group stops (the message names the run and its error)."""
