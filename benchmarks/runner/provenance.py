"""Where a run's results come from: the versions of the packages they depend on, the source revision of the code and
the machine that ran it."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

import torch as th

PACKAGES = ("qc_sb3", "torch", "stable_baselines3", "gymnasium", "minari", "numpy", "ogbench", "mujoco", "robosuite")


def package_versions() -> dict[str, str]:
    """Versions of Python and of the packages a run's results depend on (``not installed`` for absent ones)."""
    versions = {"python": platform.python_version()}
    for package in PACKAGES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return versions


def source_revision() -> dict[str, Any]:
    """
    The git revision of the checkout the runner's code is imported from: ``commit`` and ``dirty`` (uncommitted changes
    to tracked files), or ``commit`` None outside a git checkout. Results that back a claim come from a pinned, clean
    checkout (``git worktree add DIR COMMIT``).
    """
    root = Path(__file__).resolve().parents[2]

    def git(*arguments: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(root), *arguments], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "dirty": None}
    return {"commit": commit, "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


def machine() -> dict[str, Any]:
    """
    The machine a run's wall times come from: ``cpu`` (the model name in Linux's /proc/cpuinfo, the platform's name
    elsewhere), ``cores`` and ``cpu_capability``, the widest vector instructions PyTorch's CPU kernels use there
    (``AVX512``, ``AVX2``, ...), on which the speed of the networks' matmuls depends.
    """
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    return {
        "cpu": names[0] if names else platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "cpu_capability": th.backends.cpu.get_cpu_capability(),
    }
