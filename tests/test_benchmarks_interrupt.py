"""Ctrl-C to the runner: it stops (its workers too), the runs keep their checkpoints, one line says how to resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from qc_sb3.benchmarks.runner.locks import folder_lock

from test_benchmarks_toys import toy_config, write_config

REPOSITORY = Path(__file__).parents[1]
TESTS = Path(__file__).parent


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


RUNNER = (
    "import sys; from test_benchmarks_toys import register_toy_suite; register_toy_suite(); "
    "from qc_sb3.benchmarks.run import main; sys.exit(main(sys.argv[1:]))"
)
# Long enough to be interrupted, checkpointed every 20 gradient steps.
PROTOCOL = {"offline_steps": 1_000_000, "online_steps": 0, "eval_interval": 20, "eval_episodes": 1}


def is_running(pid: int) -> bool:
    """Whether a process exists and is not a zombie (Linux's /proc)."""
    try:
        return "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads process states from Linux's /proc")
@pytest.mark.parametrize("workers", [1, 0])
def test_ctrl_c_stops_the_runner_and_its_workers_and_says_how_to_resume(tmp_path, workers):
    config = write_config(tmp_path / "toy.yaml", toy_config(protocol=PROTOCOL))
    out = tmp_path / "results"
    arguments = [str(config), "--out", str(out), "--workers", str(workers), "--no-report"]
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPOSITORY), str(TESTS)]), "COLUMNS": "300"}
    command = [sys.executable, "-c", RUNNER, *arguments]
    # A shell without job control starts background jobs with SIGINT ignored, and children inherit that; restore
    # the default so that the runner sees Ctrl+C however the test suite was started.
    runner = subprocess.Popen(
        command,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=_default_sigint,
    )
    run_dir = out / "point-reach" / "QC" / "seed0"
    try:
        wait_for((run_dir / "checkpoints" / "latest.json").exists, 60, "the run's first checkpoint")
        holder = int((run_dir / ".lock").read_text().split()[1])  # the process working on the run
        assert (holder != runner.pid) == (workers > 0)
        runner.send_signal(signal.SIGINT)
        output, _ = runner.communicate(timeout=20)
    finally:
        runner.kill()
    assert runner.returncode == 130, output
    assert "Traceback" not in output and "KeyboardInterrupt" not in output, output
    (line,) = [line for line in output.splitlines() if "interrupted" in line]
    assert line.endswith(f"to resume, run again: python -m qc_sb3.benchmarks.run {' '.join(arguments)}")
    wait_for(lambda: not is_running(holder), 10, "the worker to stop")
    latest = json.loads((run_dir / "checkpoints" / "latest.json").read_text())["checkpoint"]
    assert (run_dir / "checkpoints" / latest / "state.json").is_file()
    with folder_lock(run_dir):  # nobody holds the run any more
        pass
