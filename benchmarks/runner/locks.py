"""One writer per folder: an exclusive OS file lock (``fcntl.flock``) on a ``.lock`` file inside it.

The kernel releases the lock when its file is closed or its process dies, whatever the way (kill -9 included), so a
lock is never left behind by a dead runner. Locks of this kind are advisory: they hold between runners of this package
on one machine or on a file system that supports ``flock`` across machines (local disks do; NFS and other network file
systems may not, see their documentation). A lock file that is a symbolic link is refused, never followed.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from qc_sb3.benchmarks.runner.paths import open_regular_file

LOCK_FILE = ".lock"
# Seconds between two attempts of a waiting lock.
WAIT_INTERVAL = 0.5


class FolderBusyError(RuntimeError):
    """Another process holds the folder's lock."""


def _holder(path: Path) -> str:
    """Who holds a lock, as its holder wrote it (``pid <n> on <host>``), or ``another process``."""
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError:
        text = ""
    return text or "another process"


@contextmanager
def folder_lock(folder: str | os.PathLike, wait: bool = False, on_wait: Callable[[str], None] | None = None) -> Iterator[Path]:
    """
    Hold the exclusive lock of a folder (created if missing) for the block.

    :param folder: The folder
    :param wait: Wait until the lock is free; else raise :class:`FolderBusyError` at once if it is held
    :param on_wait: Called once with a message naming the holder when the lock is held and ``wait`` is True
    :return: The lock file
    :raises UnsafePathError: If the lock file is a symbolic link or not a regular file (it is never followed)
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_FILE
    descriptor = open_regular_file(path, os.O_RDWR | os.O_CREAT)
    try:
        while True:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                message = f"{folder} is locked by {_holder(path)}"
                if not wait:
                    raise FolderBusyError(message) from None
                if on_wait is not None:
                    on_wait(f"{message}; waiting for it")
                    on_wait = None
                time.sleep(WAIT_INTERVAL)
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"pid {os.getpid()} on {os.uname().nodename}\n".encode(), 0)
        yield path
    finally:
        # Closing the descriptor releases the lock; the file stays (removing it would race with a new holder).
        os.close(descriptor)
