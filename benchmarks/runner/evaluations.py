"""The evaluations of a run: their schedule, their env, and their rows in the run's ``eval.csv``.

``step`` is the paper's x-axis: offline gradient steps, then the offline budget plus online env steps. A resumed run's
rows are checked against its checkpoint (:func:`check_rows`): evaluations lost cannot be taken again.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv

from qc_sb3.benchmarks.runner.atomic import write_text
from qc_sb3.benchmarks.runner.checkpoints import CheckpointState
from qc_sb3.benchmarks.runner.specs import RunSpec
from qc_sb3.common.chunked import ChunkedOffPolicyAlgorithm

EVAL_FILE = "eval.csv"
EVAL_COLUMNS = ("step", "phase", "success", "return", "length", "offline_steps", "env_steps", "gradient_steps", "wall_time")


class DamagedRunError(RuntimeError):
    """A run folder whose records cannot be trusted (unreadable config, evaluation rows lost)."""


@dataclass(frozen=True)
class EvaluationPoint:
    """
    One scheduled evaluation.

    :param phase: ``offline`` or ``online``
    :param phase_step: Steps of the phase done when it is taken
    """

    phase: str
    phase_step: int


def evaluation_points(run: RunSpec) -> list[EvaluationPoint]:
    """
    The evaluations of a run, in order: every ``eval_interval`` steps of each phase (whose last is the phase's
    end), plus one before training with ``eval_at_start``.

    :param run: The run
    :return: The points
    """
    protocol = run.protocol
    points = []
    if protocol.eval_at_start:
        points.append(EvaluationPoint("offline" if run.offline_steps else "online", 0))
    points += [
        EvaluationPoint("offline", step)
        for step in range(protocol.eval_interval, run.offline_steps + 1, protocol.eval_interval)
    ]
    points += [
        EvaluationPoint("online", step)
        for step in range(protocol.eval_interval, protocol.online_steps + 1, protocol.eval_interval)
    ]
    return points


def evaluation_seed(run: RunSpec, index: int) -> int:
    """The seed of an evaluation's first episode: a function of the run's seed and the evaluation's index only."""
    return int(np.random.SeedSequence([run.seed, index]).generate_state(1)[0])


class EvaluationEnv:
    """
    The evaluation env of a run: built once, at its first evaluation, and seeded again before each, so that each
    evaluation's episodes depend only on the run's seed and the evaluation's index (the first episode's reset takes
    :func:`evaluation_seed`, which makes the env's random state anew; the others follow from it), as on a fresh env.
    Rebuilding a MuJoCo env at each evaluation grew the runner's memory with every evaluation.

    :param run: The run
    """

    def __init__(self, run: RunSpec):
        self.run = run
        self.env: DummyVecEnv | None = None

    def seeded(self, index: int) -> DummyVecEnv:
        """
        :param index: The evaluation's index in the run's schedule
        :return: The env, seeded for that evaluation (its next reset takes the seed)
        """
        if self.env is None:
            run = self.run
            self.env = DummyVecEnv([lambda: Monitor(run.make_env(seed=None, **run.env_kwargs))])
        self.env.seed(evaluation_seed(self.run, index))
        return self.env

    def close(self) -> None:
        """Close the env, if it was built."""
        if self.env is not None:
            self.env.close()
            self.env = None


def plot_step(run: RunSpec, point: EvaluationPoint) -> int:
    """The paper's x-axis: offline gradient steps, then the offline budget plus online env steps."""
    return point.phase_step if point.phase == "offline" else run.protocol.offline_steps + point.phase_step


def check_rows(run: RunSpec, points: list[EvaluationPoint], rows: list[dict[str, Any]], state: CheckpointState) -> None:
    """
    Refuse to resume when the evaluation CSV lacks rows the checkpoint has done, or its rows are not the run's
    scheduled evaluations: those evaluations cannot be taken again (only the latest checkpoint is kept).
    """
    done = state.evaluations_done
    complete = 0
    for row, point in zip(rows[:done], points, strict=False):
        if any(row.get(column) in (None, "") for column in EVAL_COLUMNS) or (row["step"], row["phase"]) != (
            str(plot_step(run, point)),
            point.phase,
        ):
            break
        complete += 1
    last = rows[done - 1] if complete == done and done > 0 else None
    counters_match = last is None or (last["offline_steps"], last["env_steps"]) == (
        str(state.offline_steps_done),
        str(state.num_timesteps),
    )
    if complete < done or not counters_match:
        found = f"{complete} complete row(s) matching its schedule" if counters_match else "a last row of other counters"
        raise DamagedRunError(
            f"{Path(run.run_dir) / EVAL_FILE} has {found}, but the checkpoint records {done} evaluation(s) (up to "
            f"{state.offline_steps_done} offline steps, {state.num_timesteps} env steps): rows were lost or changed, "
            f"and only the latest checkpoint is kept to evaluate again; delete {run.run_dir} to run it again"
        )


def evaluation_row(
    run: RunSpec, point: EvaluationPoint, model: ChunkedOffPolicyAlgorithm, results: dict[str, float], wall_time: float
) -> dict[str, Any]:
    return {
        "step": plot_step(run, point),
        "phase": point.phase,
        "success": results["success"],
        "return": results["return"],
        "length": results["length"],
        "offline_steps": model.offline_steps_done,
        "env_steps": model.num_timesteps,
        "gradient_steps": model._n_updates,
        "wall_time": round(wall_time, 3),
    }


def log_evaluation(
    logger: Logger, results: dict[str, float], model: ChunkedOffPolicyAlgorithm, point: EvaluationPoint
) -> None:
    for name, value in results.items():
        logger.record(f"eval/{name}", value)
    logger.dump(step=model.offline_steps_done if point.phase == "offline" else model.num_timesteps)


def read_rows(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    with path.open(newline="", encoding="utf-8") as file:
        return list(csv.DictReader(file))


def write_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=EVAL_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_text(path, buffer.getvalue())


def final_successes(run_dir: Path) -> dict[str, float | None]:
    """Success at the end of each phase, from the evaluation CSV."""
    rows = read_rows(run_dir / EVAL_FILE)
    last = {row["phase"]: float(row["success"]) for row in rows}
    return {"offline_success": last.get("offline"), "online_success": last.get("online")}
