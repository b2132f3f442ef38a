"""Local worker processes do not outlive the runner that started them."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]

# A worker stand-in: records its pid, watches its parent as the pool's initializer does, then would idle for a minute.
CHILD = """
import os, sys, time
open(sys.argv[1], "w").write(str(os.getpid()))
from qc_sb3.benchmarks.runner.executors import exit_with_parent
exit_with_parent(int(sys.argv[2]), interval=0.05)
time.sleep(60)
"""
# The runner stand-in: starts the worker, waits until it runs, then dies without stopping it (as under SIGKILL).
PARENT = """
import os, subprocess, sys, time
from pathlib import Path
subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2], str(os.getpid())])
while not Path(sys.argv[2]).exists():
    time.sleep(0.05)
os._exit(0)
"""


def is_running(pid: int) -> bool:
    """Whether a process exists and is not a zombie (Linux's /proc)."""
    status = Path(f"/proc/{pid}/status")
    try:
        return "\nState:\tZ" not in status.read_text()
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads process states from Linux's /proc")
def test_a_worker_exits_soon_after_its_runner_dies(tmp_path):
    pid_file = tmp_path / "worker.pid"
    subprocess.run([sys.executable, "-c", PARENT, CHILD, str(pid_file)], cwd=ROOT, check=True, timeout=60)
    worker = int(pid_file.read_text())
    deadline = time.monotonic() + 30  # the worker first imports benchmarks (torch): seconds on a loaded machine
    while is_running(worker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not is_running(worker), "the worker outlived its runner"
