"""Atomic file writes: a reader (or a run killed mid-write) only ever sees the old file or the new one."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


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
    descriptor, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=f".tmp{suffix}", dir=target.parent)
    os.close(descriptor)
    temporary = Path(name)
    try:
        yield temporary
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)


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
