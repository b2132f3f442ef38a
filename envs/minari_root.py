"""Pointing Minari at another local root for a block, and the converters' staging roots (shared with the runner)."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def minari_root(path: str | os.PathLike) -> Iterator[Path]:
    """
    Point Minari (which reads ``MINARI_DATASETS_PATH`` at every call) at ``path`` for the duration of the block.

    The variable is process-global: Minari calls in concurrent threads of this process see the same root.

    :param path: The Minari root folder (created if missing)
    :return: The folder, as an absolute path
    """
    # Absolute: Minari joins a relative root with itself when it writes.
    root = Path(path).resolve()
    root.mkdir(parents=True, exist_ok=True)
    previous = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(root)
    try:
        yield root
    finally:
        if previous is None:
            del os.environ["MINARI_DATASETS_PATH"]
        else:
            os.environ["MINARI_DATASETS_PATH"] = previous


# Staging folders are named "<prefix><pid>-<random>", so that a later convert can tell those of killed processes.
STAGING_PREFIX = ".qc_sb3-staging-"


@contextmanager
def staging_root(root: str | os.PathLike) -> Iterator[Path]:
    """
    A temporary Minari root inside ``root`` (same file system, so moving a dataset out of it is a rename), named
    ``.qc_sb3-staging-<host>.<pid>-<random>`` and removed on exit; Minari points at it for the duration of the block.

    Staging folders left by processes that no longer run (a convert killed with kill -9) are removed first.

    :param root: The real Minari root (created if missing)
    :return: The staging folder, as an absolute path
    """
    root = Path(root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    remove_abandoned_staging(root)
    staging = Path(tempfile.mkdtemp(dir=root, prefix=f"{this_host_staging_prefix()}{os.getpid()}-"))
    try:
        with minari_root(staging) as staging_path:
            yield staging_path
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def remove_abandoned_staging(root: str | os.PathLike) -> list[Path]:
    """
    Remove the staging folders under ``root`` whose process is gone (by the pid in their name).

    :param root: A Minari root
    :return: The folders removed
    """
    removed = []
    # Only this host's: on a folder shared between machines, another host's pids mean nothing here.
    prefix = this_host_staging_prefix()
    for path in Path(root).glob(f"{prefix}*"):
        pid = path.name.removeprefix(prefix).split("-")[0]
        if path.is_dir() and pid.isdigit() and not process_is_running(int(pid)):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def process_is_running(pid: int) -> bool:
    """Whether a process with this pid exists (signal 0 checks without sending anything)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, under another user
    return True


def this_host_staging_prefix() -> str:
    """``.qc_sb3-staging-<host>.``: the start of this machine's staging folders (the host name without dots or dashes)."""
    return f"{STAGING_PREFIX}{this_host_tag()}."


def this_host_tag() -> str:
    """This machine's name without dots or dashes, for the names of folders that carry a pid."""
    return "".join(character if character.isalnum() else "_" for character in socket.gethostname())
