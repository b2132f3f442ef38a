"""Progress of the runs: each run writes its ``progress.json``; the parent reads them all and shows one line per run.

Files rather than queues, so that the same display works for local worker processes and for Ray tasks on other
machines (the results folder is shared), and a run's last state survives its process.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from qc_sb3.benchmarks.runner.atomic import read_json, write_json

PROGRESS_FILE = "progress.json"
STATUSES = ("pending", "running", "done", "skipped", "failed")


@dataclass
class RunProgress:
    """
    One run's state, as its ``progress.json`` holds it.

    :param run: ``<task>/<method>/seed<k>``
    :param status: One of :data:`STATUSES`
    :param phase: ``offline`` or ``online`` (empty before the run starts)
    :param step: Steps done in the phase (offline gradient steps or online env steps)
    :param phase_steps: Steps of the phase
    :param done_fraction: Fraction of the run's work done (offline and online steps alike)
    :param success: The last evaluation's success rate, if any
    :param eta_s: Estimated seconds left, if known
    :param error: The error of a failed run
    :param updated: Wall-clock time of the last update
    """

    run: str
    status: str = "pending"
    phase: str = ""
    step: int = 0
    phase_steps: int = 0
    done_fraction: float = 0.0
    success: float | None = None
    eta_s: float | None = None
    error: str | None = None
    updated: float = 0.0


class ProgressWriter:
    """
    Writes a run's ``progress.json``, at most every ``interval`` seconds unless forced.

    :param run_dir: The run's folder
    :param run: The run's name
    :param total_steps: Offline plus online steps of the run
    :param interval: Seconds between two writes
    """

    def __init__(self, run_dir: str | Path, run: str, total_steps: int, interval: float = 2.0):
        self.path = Path(run_dir) / PROGRESS_FILE
        self.state = RunProgress(run=run, status="running")
        self.total_steps = max(total_steps, 1)
        self.interval = interval
        self._last_write = 0.0
        self._session_start = time.monotonic()
        self._steps_at_start: int | None = None

    def update(
        self,
        phase: str,
        step: int,
        phase_steps: int,
        steps_done: int,
        success: float | None = None,
        force: bool = False,
    ) -> None:
        """
        Record where the run is.

        :param phase: ``offline`` or ``online``
        :param step: Steps done in the phase
        :param phase_steps: Steps of the phase
        :param steps_done: Offline plus online steps done
        :param success: A new evaluation's success rate
        :param force: Write now, whatever the interval
        """
        now = time.monotonic()
        if self._steps_at_start is None:
            self._steps_at_start = steps_done
        self.state.phase, self.state.step, self.state.phase_steps = phase, step, phase_steps
        self.state.done_fraction = min(steps_done / self.total_steps, 1.0)
        if success is not None:
            self.state.success = success
        # The rate of this session: a resumed run's earlier sessions say nothing of this machine's speed.
        session_steps = steps_done - self._steps_at_start
        if session_steps > 0:
            self.state.eta_s = (now - self._session_start) / session_steps * (self.total_steps - steps_done)
        if force or now - self._last_write >= self.interval:
            self._write(now)

    def finish(self, status: str, error: str | None = None) -> None:
        """
        Record the run's end.

        :param status: ``done``, ``skipped`` or ``failed``
        :param error: The error of a failed run
        """
        self.state.status, self.state.error = status, error
        if status == "done":
            self.state.done_fraction, self.state.eta_s = 1.0, 0.0
        self._write(time.monotonic())

    def _write(self, now: float) -> None:
        self._last_write = now
        self.state.updated = time.time()
        write_json(self.path, asdict(self.state))


def read_progress(run_dir: str | Path, run: str) -> RunProgress:
    """
    A run's last recorded progress.

    :param run_dir: The run's folder
    :param run: The run's name
    :return: Its progress (``pending`` if it has not written any)
    """
    path = Path(run_dir) / PROGRESS_FILE
    if not path.exists():
        return RunProgress(run=run)
    try:
        return RunProgress(**read_json(path))
    except (ValueError, TypeError):
        return RunProgress(run=run)


def format_eta(seconds: float | None) -> str:
    """
    ``1h02m``, ``3m05s`` or ``12s``.

    :param seconds: Seconds, or None
    :return: The text (``-`` when unknown)
    """
    if seconds is None:
        return "-"
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


def progress_line(progress: RunProgress) -> str:
    """
    One run as one line: name, status, phase and step, last success, ETA.

    :param progress: The run's progress
    :return: The line
    """
    success = "-" if progress.success is None else f"{progress.success:.2f}"
    where = f"{progress.phase} {progress.step}/{progress.phase_steps}" if progress.phase else ""
    return (
        f"{progress.run:<60} {progress.status:<8} {where:<28} success {success:<5} "
        f"{100 * progress.done_fraction:5.1f}% ETA {format_eta(progress.eta_s)}"
    )


class ProgressMonitor:
    """
    The parent's view of every run: a rich live table on a terminal, else one line per run when its state changes
    (at most every ``line_interval`` seconds per run, and always when its status changes).

    :param runs: (name, run folder) of every run
    :param line_interval: Seconds between two lines of a run when not on a terminal
    """

    def __init__(self, runs: Sequence[tuple[str, str]], line_interval: float = 30.0):
        from rich.console import Console

        self.runs = list(runs)
        self.console = Console()
        self.line_interval = line_interval
        self._live: Any = None
        self._printed: dict[str, tuple[str, str, float]] = {}

    def __enter__(self) -> ProgressMonitor:
        if self.console.is_terminal:
            from rich.live import Live

            self._live = Live(self._table(), console=self.console, refresh_per_second=1, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.refresh()
        if self._live is not None:
            self._live.__exit__(*exc_info)

    def states(self) -> list[RunProgress]:
        """Every run's last recorded progress."""
        return [read_progress(run_dir, name) for name, run_dir in self.runs]

    def refresh(self) -> None:
        """Read every run's progress and show what changed."""
        if self._live is not None:
            self._live.update(self._table())
            return
        now = time.monotonic()
        for state in self.states():
            key = (state.status, f"{state.phase}{state.step}")
            previous = self._printed.get(state.run)
            status_changed = previous is None or previous[0] != state.status
            due = previous is not None and previous[1] != key[1] and now - previous[2] >= self.line_interval
            if (status_changed and state.status != "pending") or due:
                self.console.print(progress_line(state), highlight=False, soft_wrap=True)
                self._printed[state.run] = (*key, now)

    def _table(self) -> Any:
        from rich.table import Table

        table = Table(title="runs", expand=False)
        for column in ("run", "status", "phase", "step", "success", "done", "ETA"):
            table.add_column(column)
        for state in self.states():
            table.add_row(
                state.run,
                state.status,
                state.phase,
                f"{state.step}/{state.phase_steps}" if state.phase else "",
                "-" if state.success is None else f"{state.success:.2f}",
                f"{100 * state.done_fraction:.0f}%",
                format_eta(state.eta_s),
            )
        return table
