"""One run of the protocol (docs/algorithms.md §5), resumable: offline phase, then online phase, evaluated and checkpointed.

A run's folder (``<out>/<task>/<method>/seed<k>/``) holds:

* ``config.json``: the resolved run (task, method, seed, every hyperparameter, env keyword arguments, protocol,
  dataset source); a run whose folder holds a different one is refused;
* ``versions.json``: of each session that worked on the run, the package versions, the source revision (git commit,
  uncommitted changes or not) and the machine (CPU, cores, PyTorch's CPU capability; docs/evidence.md §1);
* ``eval.csv``: one row per evaluation (:mod:`qc_sb3.benchmarks.runner.evaluations`); ``step`` is the paper's x-axis: offline
  gradient steps, then the offline budget plus online env steps;
* ``tensorboard/offline`` and ``tensorboard/online``: the model's logs (``offline/*`` at x = offline gradient steps,
  ``train/*`` and ``rollout/*`` at x = env steps) and ``eval/*``;
* ``train_stats.csv``: those logs' scalars, written at the end (:mod:`qc_sb3.benchmarks.runner.training_stats`);
* ``checkpoints/``: the latest checkpoint (:mod:`qc_sb3.benchmarks.runner.checkpoints`);
* ``progress.json``: the run's progress, for the parent's display;
* ``error.txt``: the traceback of a session that failed (removed when the next session starts);
* ``.lock``: the lock file of :mod:`qc_sb3.benchmarks.runner.locks`: one process at a time works on a run; a runner
  that finds the lock held skips the run (status ``busy``, naming the holder) rather than waiting for it;
* ``DONE``: written last; a run with it is skipped (once its ``config.json`` is checked against the config asked for).

The offline phase runs ``model.pretrain`` in blocks of ``eval_interval`` gradient steps, the online phase
``model.learn(block, reset_num_timesteps=False)``; after each block the run is evaluated (``eval_episodes`` episodes
with the stochastic policy on the run's evaluation env, seeded anew from the run's seed and the evaluation's index),
the row appended to the CSV, and a checkpoint written. A killed run resumes from its latest checkpoint: model,
optimizers, replay buffer, counters and random generators. Resumed in the offline phase, a run is bit-for-bit the run
that was not interrupted. Resumed in the online phase, it continues from the same state, but its training env starts a
new episode (an env's simulator state is not saved): the interrupted episode is closed in the buffer as a truncation.
The model is rebuilt from the run's config and the checkpoint's states put into it; nothing a checkpoint holds is
unpickled (:mod:`qc_sb3.benchmarks.runner.checkpoints`). A resumed run's ``eval.csv`` must hold the rows its
checkpoint has done; a run whose rows were lost is refused (those evaluations cannot be taken again), as is a damaged
checkpoint: the run fails with a message saying so, and the other runs go on.
"""

from __future__ import annotations

import importlib
import json
import time
import warnings
from collections.abc import Callable
from contextlib import ExitStack
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch as th
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import Logger, configure

from qc_sb3.benchmarks.runner.atomic import read_json, write_json
from qc_sb3.benchmarks.runner.checkpoints import (
    CHECKPOINTS_DIR,
    LATEST_FILE,
    CheckpointState,
    latest_checkpoint,
    restore_checkpoint,
    save_checkpoint,
)
from qc_sb3.benchmarks.runner.evaluations import (
    EVAL_FILE,
    DamagedRunError,
    EvaluationEnv,
    EvaluationPoint,
    check_rows,
    evaluation_points,
    evaluation_row,
    final_successes,
    log_evaluation,
    read_rows,
    write_rows,
)
from qc_sb3.benchmarks.runner.failures import record_failure
from qc_sb3.benchmarks.runner.group_membership import join_seed_group
from qc_sb3.benchmarks.runner.locks import FolderBusyError, folder_lock
from qc_sb3.benchmarks.runner.methods import constructor_arguments
from qc_sb3.benchmarks.runner.paths import UnsafePathError, check_run_paths
from qc_sb3.benchmarks.runner.progress import ProgressWriter
from qc_sb3.benchmarks.runner.provenance import machine, package_versions, source_revision
from qc_sb3.benchmarks.runner.specs import RunSpec
from qc_sb3.benchmarks.runner.training_stats import export_run
from qc_sb3.common.chunked import ChunkedOffPolicyAlgorithm
from qc_sb3.common.evaluation import evaluate_success
from qc_sb3.common.offline_source import OfflineShards

CONFIG_FILE = "config.json"
VERSIONS_FILE = "versions.json"
DONE_FILE = "DONE"
ERROR_FILE = "error.txt"
# Offline gradient steps between two progress updates.
OFFLINE_PIECE = 1000
PHASES = ("offline", "online")

# Called with an event name ("evaluated": the CSV has the new row; "checkpointed": the checkpoint is current) and the
# run; a hook that raises stops the run there, as a kill would.
RunHook = Callable[[str, RunSpec], None]


class RunConflictError(RuntimeError):
    """A run folder holds the results of a different configuration."""


def check_run_folder(run: RunSpec) -> None:
    """
    Refuse a run folder that holds another configuration's results (a folder without results, e.g. of a run that
    failed before its first checkpoint, is taken over).

    :param run: The run
    :raises RunConflictError: If the folder holds results of another configuration
    :raises DamagedRunError: If it holds results but its ``config.json`` cannot be read
    """
    run_dir = Path(run.run_dir)
    path = run_dir / CONFIG_FILE
    has_results = (run_dir / CHECKPOINTS_DIR / LATEST_FILE).exists() or is_done(run)
    if not has_results:
        return
    try:
        saved = read_json(path)
    except (OSError, ValueError) as error:
        raise DamagedRunError(
            f"{run_dir} holds results but its {CONFIG_FILE} cannot be read ({type(error).__name__}: {error}), so "
            "which configuration they belong to is unknown; delete that folder to run it again"
        ) from error
    wanted = _as_json(run.record())
    if saved != wanted and not _recorded_before_settings_added(saved, wanted):
        differing = sorted(key for key in {*saved, *wanted} if saved.get(key) != wanted.get(key))
        raise RunConflictError(
            f"{run_dir} holds a run of a different configuration (differs in {differing}); use another --out or "
            "delete that folder"
        )


# Settings added after runs were recorded, with the value that reproduces what those runs did: a record without the
# setting is the configuration that asks for this value (part A's runs predate these: whole chunks, eager).
SETTINGS_ADDED_LATER: dict[str, Any] = {"compile_step": False, "replan_interval": None, "temporal_ensemble_rate": None}


def _recorded_before_settings_added(saved: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """
    Whether a saved record differs from the wanted one only by hyperparameters of :data:`SETTINGS_ADDED_LATER` that it
    lacks and that the wanted one sets to the value listed there.

    :param saved: The run folder's record (its ``config.json``)
    :param wanted: The record of the run asked for
    :return: True if the saved record is the wanted configuration
    """
    saved_settings, wanted_settings = saved.get("hyperparameters", {}), wanted["hyperparameters"]
    if {**saved, "hyperparameters": None} != {**wanted, "hyperparameters": None}:
        return False
    if any(key not in wanted_settings or wanted_settings[key] != value for key, value in saved_settings.items()):
        return False
    return all(
        key in SETTINGS_ADDED_LATER and SETTINGS_ADDED_LATER[key] == value
        for key, value in wanted_settings.items()
        if key not in saved_settings
    )


def is_done(run: RunSpec) -> bool:
    """
    Whether a run has finished.

    :param run: The run
    :return: True if its folder has the ``DONE`` marker
    """
    return (Path(run.run_dir) / DONE_FILE).exists()


def execute_run(run: RunSpec, hook: RunHook | None = None) -> dict[str, Any]:
    """
    Run (or resume, or skip) one run in this process, holding its folder's lock (:mod:`.locks`) meanwhile.

    :param run: The run, its offline data prepared
    :param hook: Called after each evaluation and each checkpoint (tests use it to stop a run mid-way)
    :return: A summary: ``run``, ``status`` (``done``, ``skipped``, or ``busy`` when another process holds the run's
        folder, with an ``error`` naming it), ``offline_success``, ``online_success``, ``wall_time``
    :raises RunConflictError: If the folder holds results of another configuration (nothing is written to it)
    :raises UnsafePathError: If it is or holds a symbolic link, or lies outside its results folder (nothing is written)
    """
    run_dir = Path(run.run_dir)
    check_run_paths(run_dir, len(Path(run.name).parts))  # before anything is made or read in it
    if is_done(run):
        # Nothing is written: a finished run's folder stays as it is. Its results must be this config's, though.
        check_run_folder(run)
        return {"run": run.name, "status": "skipped", **final_successes(run_dir)}
    with ExitStack() as stack:
        try:
            stack.enter_context(folder_lock(run_dir))
        except FolderBusyError as error:
            return {"run": run.name, "status": "busy", "error": f"{error}: skipped (run the command again once it ends)"}
        try:
            return _execute_locked(run, hook)
        except (RunConflictError, UnsafePathError):  # nothing is written to a folder that is not this run's
            raise
        except Exception as error:
            # Recorded while the lock is held: the folder is this run's, and no other runner writes to it meanwhile.
            record_failure(run_dir, run.name, error, ERROR_FILE)  # a full disk: a warning, and this error still raised
            raise


def _execute_locked(run: RunSpec, hook: RunHook | None) -> dict[str, Any]:
    """:func:`execute_run` once the run's folder is locked."""
    run_dir = Path(run.run_dir)
    check_run_folder(run)
    if is_done(run):  # finished by another runner since this one looked
        return {"run": run.name, "status": "skipped", **final_successes(run_dir)}
    points = evaluation_points(run)
    progress = ProgressWriter(run_dir, run.name, run.offline_steps + run.protocol.online_steps)
    th.set_num_threads(run.torch_threads)
    write_json(run_dir / CONFIG_FILE, _as_json(run.record()))
    (run_dir / ERROR_FILE).unlink(missing_ok=True)  # an earlier session's failure
    session_start = time.monotonic()

    env = run.make_env(seed=run.seed, **run.env_kwargs)
    try:
        checkpoint = latest_checkpoint(run_dir)
        rows = read_rows(run_dir / EVAL_FILE)
        if checkpoint is None:
            model = build_model(run, env)
            state = CheckpointState("offline", 0, 0, 0, 0.0)
        else:
            folder, state = checkpoint
            check_rows(run, points, rows, state)
            model = resumed_model(run, env, folder)
    except BaseException:
        env.close()
        raise
    join_seed_group(model)  # a run of a group of seeds (seed_groups.py) trains with the others from here on
    _record_versions(run_dir, state)
    earlier_wall_time = state.wall_time
    # Rows written after the checkpoint (a kill between the two) are dropped: they are evaluated again.
    rows = rows[: state.evaluations_done]
    write_rows(run_dir / EVAL_FILE, rows)
    loggers: dict[str, Logger] = {phase: configure(str(run_dir / "tensorboard" / phase), ["tensorboard"]) for phase in PHASES}
    eval_env = EvaluationEnv(run)
    try:
        for index in range(state.evaluations_done, len(points)):
            point = points[index]
            model.set_logger(loggers[point.phase])
            _advance(model, run, point, progress)
            results = evaluate_success(model, eval_env.seeded(index), run.protocol.eval_episodes, warn=False)
            wall_time = earlier_wall_time + time.monotonic() - session_start
            rows.append(evaluation_row(run, point, model, results, wall_time))
            write_rows(run_dir / EVAL_FILE, rows)
            log_evaluation(model.logger, results, model, point)
            progress.update(
                point.phase,
                point.phase_step,
                _phase_steps(run, point.phase),
                _steps_done(model),
                results["success"],
                force=True,
            )
            if hook is not None:
                hook("evaluated", run)
            state = CheckpointState(point.phase, index + 1, model.offline_steps_done, model.num_timesteps, wall_time)
            save_checkpoint(run_dir, model, state)
            if hook is not None:
                hook("checkpointed", run)
    finally:
        for logger in loggers.values():
            logger.close()
        eval_env.close()
        env.close()
    try:
        export_run(run_dir)  # train_stats.csv: the training statistics, small enough to commit
    except Exception as error:  # not fatal: python -m qc_sb3.benchmarks.runner.training_stats rebuilds it
        warnings.warn(f"{run.name}: train_stats.csv not written ({type(error).__name__}: {error})", stacklevel=2)
    summary = {"run": run.name, "status": "done", **final_successes(run_dir), "wall_time": state.wall_time}
    write_json(run_dir / DONE_FILE, {"finished": _now(), **summary})
    progress.finish("done")
    return summary


def execute_run_safely(run: RunSpec) -> dict[str, Any]:
    """
    :func:`execute_run`, with a failure reported in the summary instead of raised, so that one failing run does not
    stop the others (a run that failed in its own folder has recorded its error there: ``error.txt`` and its
    progress; a run refused because its folder holds another configuration's results writes nothing).

    :param run: The run
    :return: The summary; a failed run has ``status`` ``failed`` and its ``error``
    """
    try:
        return execute_run(run)
    except Exception as error:
        return {"run": run.name, "status": "failed", "error": f"{type(error).__name__}: {error}"}


def _as_json(data: Any) -> Any:
    """Data as it reads back from JSON (tuples become lists)."""
    return json.loads(json.dumps(data))


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _algorithm(run: RunSpec) -> type[ChunkedOffPolicyAlgorithm]:
    module, name = run.algorithm.split(":")
    return getattr(importlib.import_module(module), name)


def _build_model(run: RunSpec, env: Any, offline_dataset: str | OfflineShards | None) -> ChunkedOffPolicyAlgorithm:
    """The run's algorithm, built from its config (never from a file)."""
    return _algorithm(run)(
        run.policy,
        env,
        offline_dataset=offline_dataset,
        seed=run.seed,
        device=run.device,
        tensorboard_log=str(Path(run.run_dir) / "tensorboard"),
        verbose=0,
        **constructor_arguments(run.hyperparameters, run.protocol.offline_steps if run.offline_phase else None),
    )


def build_model(run: RunSpec, env: Any) -> ChunkedOffPolicyAlgorithm:
    """
    A new run's algorithm on its prepared offline data, built from its config.

    :param run: The run (``offline_dataset`` set by :func:`qc_sb3.benchmarks.runner.datasets.prepare_datasets`)
    :param env: The run's env
    :return: The model, untrained
    """
    return _build_model(run, env, run.offline_dataset)


def resumed_model(run: RunSpec, env: Any, folder: Path) -> ChunkedOffPolicyAlgorithm:
    """
    A run's algorithm as it stood at a checkpoint: built from its config, without its offline data (the checkpoint's
    buffer holds the offline segment as it stood), the checkpoint's states put into it. Nothing is written.

    :param run: The run
    :param env: The run's env
    :param folder: The checkpoint's folder (:func:`~qc_sb3.benchmarks.runner.checkpoints.latest_checkpoint`)
    :return: The model
    :raises CheckpointError: If the checkpoint is damaged or does not fit the run's config
    """
    model = _build_model(run, env, None)
    restore_checkpoint(model, folder)
    if isinstance(run.offline_dataset, OfflineShards):
        # The buffer holds the current shard; the model needs the others for the swaps to come.
        model.offline_dataset = run.offline_dataset
    # The constructor seeded the env with the run's seed: a resumed online phase starts its new episode from another.
    model.env.seed(run.seed + model.num_timesteps)
    model.replay_buffer.truncate_open_episodes()
    return model


def _record_versions(run_dir: Path, state: CheckpointState) -> None:
    path = run_dir / VERSIONS_FILE
    sessions = read_json(path)["sessions"] if path.exists() else []
    sessions.append(
        {
            "started": _now(),
            "from_evaluation": state.evaluations_done,
            "versions": package_versions(),
            "source": source_revision(),
            "machine": machine(),
        }
    )
    write_json(path, {"sessions": sessions})


def _phase_steps(run: RunSpec, phase: str) -> int:
    return run.offline_steps if phase == "offline" else run.protocol.online_steps


def _steps_done(model: ChunkedOffPolicyAlgorithm) -> int:
    return model.offline_steps_done + model.num_timesteps


def _advance(model: ChunkedOffPolicyAlgorithm, run: RunSpec, point: EvaluationPoint, progress: ProgressWriter) -> None:
    """Train until the evaluation point: offline gradient steps, or online env steps."""
    phase_steps = _phase_steps(run, point.phase)
    if point.phase == "offline":
        while model.offline_steps_done < point.phase_step:
            model.pretrain(gradient_steps=min(OFFLINE_PIECE, point.phase_step - model.offline_steps_done))
            progress.update("offline", model.offline_steps_done, phase_steps, _steps_done(model))
    elif model.num_timesteps < point.phase_step:
        model.learn(
            total_timesteps=point.phase_step - model.num_timesteps,
            reset_num_timesteps=False,
            callback=_OnlineProgress(progress, phase_steps),
            tb_log_name="online",
        )


class _OnlineProgress(BaseCallback):
    """Reports the online phase's progress (the writer throttles itself)."""

    def __init__(self, progress: ProgressWriter, phase_steps: int):
        super().__init__()
        self.progress = progress
        self.phase_steps = phase_steps

    def _on_step(self) -> bool:
        model: Any = self.model
        self.progress.update("online", model.num_timesteps, self.phase_steps, _steps_done(model))
        return True
