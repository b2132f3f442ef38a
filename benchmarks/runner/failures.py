"""Recording a failed run in its folder without hiding the failure when the folder cannot take it (a full disk)."""

from __future__ import annotations

import traceback
import warnings
from pathlib import Path

from qc_sb3.benchmarks.runner.atomic import write_text
from qc_sb3.benchmarks.runner.progress import ProgressWriter


def record_failure(run_dir: Path, run: str, error: BaseException, error_file: str) -> None:
    """
    Record a run's failure: ``failed`` in its progress, the traceback in ``error_file``. Where either cannot be
    written, a warning says which file and why, and the run's own error is still the one raised.

    :param run_dir: The run's folder
    :param run: The run's name
    :param error: Its error
    :param error_file: The name of the traceback's file in ``run_dir``
    """
    records = (
        ("progress", lambda: ProgressWriter(run_dir, run, 1).finish("failed", error=f"{type(error).__name__}: {error}")),
        (error_file, lambda: write_text(run_dir / error_file, "".join(traceback.format_exception(error)))),
    )
    for what, record in records:
        try:
            record()
        except OSError as record_error:
            warnings.warn(
                f"run {run} failed ({type(error).__name__}: {error}), and its {what} could not be recorded in "
                f"{str(run_dir)!r}: {record_error}",
                stacklevel=2,
            )
