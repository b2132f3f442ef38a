"""Atomic file writes: a reader (or a run killed mid-write) only ever sees the old file or the new one.

A write goes to a temporary file ``.<name>.<hex>.tmp`` beside its target, made with the umask's permissions as any
other file. A writer killed mid-write leaves its temporary file behind: in a folder with a lock
(:mod:`qc_sb3.benchmarks.runner.locks`), the next write of the same target removes those older than the lock's holder,
which only a dead holder can have written (:func:`remove_stale_temporaries`).
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from qc_sb3.benchmarks.runner.locks import LOCK_FILE


@contextmanager
def atomic_path(target: str | os.PathLike, suffix: str = "") -> Iterator[Path]:
    """
    A temporary path in the target's folder; when the block exits normally, it replaces ``target`` (``os.replace``),
    else it is removed.

    :param target: The file to write
    :param suffix: Suffix of the temporary name (some writers insist on one, e.g. ``".zip"``)
    :return: The temporary path to write to
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(target.parent, f".{glob.escape(target.name)}.*.tmp{glob.escape(suffix)}")
    temporary = target.with_name(f".{target.name}.{secrets.token_hex(8)}.tmp{suffix}")
    # Mode 0o666 less the umask, as the other files (tempfile.mkstemp would make it 0600).
    os.close(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666))
    try:
        yield temporary
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)


def remove_stale_temporaries(folder: str | os.PathLike, pattern: str = ".*.tmp", recursive: bool = False) -> list[Path]:
    """
    Remove the temporary files of writers killed mid-write: in a folder with a lock file, those older than its lock's
    latest holder (who rewrites it on taking the lock), which no live writer of the folder can have made. A folder
    without a lock file is left as it is.

    :param folder: The folder with the lock file
    :param pattern: The temporary files' names (a glob pattern)
    :param recursive: Look in its sub-folders too
    :return: The files removed
    """
    folder = Path(folder)
    try:
        since = (folder / LOCK_FILE).lstat().st_mtime_ns
    except FileNotFoundError:
        return []
    removed = []
    for path in folder.rglob(pattern) if recursive else folder.glob(pattern):
        with contextlib.suppress(FileNotFoundError):
            status = path.lstat()
            if stat.S_ISREG(status.st_mode) and status.st_mtime_ns < since:
                path.unlink()
                removed.append(path)
    return removed


def write_text(target: str | os.PathLike, text: str) -> None:
    """
    Write ``text`` to ``target`` atomically.

    :param target: The file to write
    :param text: Its new content
    """
    with atomic_path(target) as temporary:
        temporary.write_text(text, encoding="utf-8")


def write_json(target: str | os.PathLike, data: Any) -> None:
    """
    Write ``data`` as indented JSON to ``target`` atomically.

    :param target: The file to write
    :param data: JSON-serialisable data
    """
    write_text(target, json.dumps(data, indent=2, sort_keys=False) + "\n")


def read_json(path: str | os.PathLike) -> Any:
    """
    Read a JSON file.

    :param path: The file
    :return: Its data
    """
    return json.loads(Path(path).read_text(encoding="utf-8"))
