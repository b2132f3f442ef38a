"""A run's model rebuilt read-only from its folder at a checkpoint, for probes that must not disturb the run
(:mod:`qc_sb3.benchmarks.parity.policy_probe`): the run spec from ``config.json``, the checkpoint copied into a
temporary folder
(a runner may replace it meanwhile), the run's lock never taken, its offline data not needed (a resumed model's
buffer holds it).
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

from qc_sb3.benchmarks.runner.atomic import read_json, write_json
from qc_sb3.benchmarks.runner.checkpoints import (
    CHECKPOINT_FILES,
    CHECKPOINTS_DIR,
    LATEST_FILE,
    CheckpointState,
    latest_checkpoint,
)
from qc_sb3.benchmarks.runner.runs import CONFIG_FILE, resumed_model
from qc_sb3.benchmarks.runner.specs import Protocol, RunSpec
from qc_sb3.benchmarks.runner.tasks import get_task
from qc_sb3.common.chunked import ChunkedOffPolicyAlgorithm
from qc_sb3.common.flow_q import FlowQPolicy

# Attempts at copying the latest checkpoint while a runner may replace it.
COPY_ATTEMPTS = 3


class ProbeError(RuntimeError):
    """A run folder that cannot be probed (no config, no checkpoint, a policy without a flow and critic)."""



def run_from_folder(run_dir: str | Path, device: str = "cpu", torch_threads: int = 1) -> RunSpec:
    """
    The run of a runner's folder, rebuilt from its ``config.json`` and the task registry (its offline data not
    prepared: a model resumed from a checkpoint does not need it).

    :param run_dir: The run's folder
    :param device: Torch device of the model
    :param torch_threads: Torch threads
    :return: The run; its :meth:`~qc_sb3.benchmarks.runner.specs.RunSpec.record` is the folder's ``config.json``
    :raises ProbeError: If the folder holds no readable ``config.json``
    """
    path = Path(run_dir) / CONFIG_FILE
    try:
        record = read_json(path)
    except (OSError, ValueError) as error:
        raise ProbeError(f"{run_dir} is not a run folder: its {CONFIG_FILE} cannot be read ({error})") from error
    task = get_task(record["task"])
    return RunSpec(
        task=record["task"],
        suite=record["suite"],
        domain=record["domain"],
        method=record["method"],
        seed=int(record["seed"]),
        algorithm=record["algorithm"],
        offline_phase=bool(record["offline_phase"]),
        hyperparameters=record["hyperparameters"],
        make_env=task.make_env,
        env_kwargs=record["env_kwargs"],
        protocol=Protocol(**record["protocol"]),
        dataset=record["dataset"],
        run_dir=str(run_dir),
        torch_threads=torch_threads,
        device=device,
    )


def copy_checkpoint(run_dir: str | Path, copy_dir: str | Path, name: str | None = None) -> tuple[Path, CheckpointState]:
    """
    Copy a run's checkpoint into ``<copy_dir>/checkpoints/`` (with a ``latest.json`` naming it), reading the run
    folder only; the latest one is copied again if a runner replaced it during the copy.

    :param run_dir: The run's folder
    :param copy_dir: An empty folder to copy into
    :param name: The checkpoint (``ckpt-00003``), or None for the latest
    :return: The copy's folder and state, checked as :func:`~qc_sb3.benchmarks.runner.checkpoints.latest_checkpoint`
        checks them
    :raises ProbeError: If the run has no checkpoint, or none of that name
    :raises CheckpointError: If the checkpoint is damaged or incomplete
    """
    source_root = Path(run_dir) / CHECKPOINTS_DIR
    target_root = Path(copy_dir) / CHECKPOINTS_DIR
    for attempt in range(COPY_ATTEMPTS):
        if name is None:
            latest = latest_checkpoint(run_dir)
            if latest is None:
                raise ProbeError(
                    f"{run_dir} has no checkpoint ({source_root / LATEST_FILE} does not exist): nothing to probe before "
                    "the run's first evaluation"
                )
            source = latest[0]
        else:
            source = source_root / name
            if Path(name).name != name or not source.is_dir():
                found = sorted(path.name for path in source_root.glob("ckpt-*")) if source_root.is_dir() else []
                raise ProbeError(f"{run_dir} has no checkpoint {name!r}; it has {found or 'none'}")
        shutil.rmtree(target_root, ignore_errors=True)
        (target_root / source.name).mkdir(parents=True)
        try:
            for file in CHECKPOINT_FILES:
                if (source / file).is_file():  # a missing one is named by the check below
                    shutil.copy2(source / file, target_root / source.name / file)
        except FileNotFoundError:
            if name is None and attempt + 1 < COPY_ATTEMPTS:
                continue  # replaced by a newer checkpoint meanwhile: copy that one
            raise
        write_json(target_root / LATEST_FILE, {"checkpoint": source.name})
        copied = latest_checkpoint(copy_dir)
        assert copied is not None  # its latest.json was just written
        return copied
    raise AssertionError("unreachable")


def load_model(run: RunSpec, copy_dir: str | Path, checkpoint: str | None = None) -> tuple[ChunkedOffPolicyAlgorithm, str]:
    """
    The run's model at a checkpoint, built from a copy of it (:func:`copy_checkpoint`); the model's tensorboard path
    is ``copy_dir``'s, so that nothing can be written into the run folder.

    :param run: The run (:func:`run_from_folder`)
    :param copy_dir: An empty folder for the checkpoint's copy
    :param checkpoint: The checkpoint's name, or None for the latest
    :return: The model and the checkpoint's name
    """
    folder, _ = copy_checkpoint(run.run_dir, copy_dir, checkpoint)
    env = run.make_env(seed=run.seed, **run.env_kwargs)
    model = resumed_model(replace(run, run_dir=str(copy_dir)), env, folder)
    if not isinstance(model.policy, FlowQPolicy):
        raise ProbeError(f"{run.run_dir}: {type(model.policy).__name__} has no flow policy and critic to probe")
    return model, folder.name
