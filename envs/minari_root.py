"""Pointing Minari at another local root for the duration of a block (shared by the converters and the runner)."""

from __future__ import annotations

import os
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
