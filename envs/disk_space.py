"""
Free space checked before writing a dataset: HDF5 (h5py) can crash the process (SIGSEGV) after a write fails on a
full disk, so the converters and the robomimic generator refuse, naming the folder, before they start writing.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

import numpy as np

# Per-episode HDF5 overhead of a Minari dataset or a robomimic demo (groups, attributes, chunk indices): measured
# 15-18 KiB, rounded up.
EPISODE_OVERHEAD_BYTES = 32 * 1024
# Margin on the arrays' own bytes.
MARGIN = 1.1


def estimated_bytes(arrays: Iterable[np.ndarray | object], episodes: int) -> int:
    """
    A generous estimate of the bytes an HDF5 file holding these arrays takes (uncompressed, as Minari writes).

    :param arrays: The arrays written (anything else counts its ``len`` in bytes, e.g. a string attribute)
    :param episodes: Number of episodes (or demos), each with its own groups
    :return: The estimate
    """
    data = sum(value.nbytes if isinstance(value, np.ndarray) else len(value) for value in arrays)  # type: ignore[arg-type]
    return int(MARGIN * data) + EPISODE_OVERHEAD_BYTES * episodes


def check_free_space(folder: str | os.PathLike, needed: int, what: str) -> None:
    """
    Refuse to write ``needed`` bytes into ``folder`` when its file system has less free space.

    :param folder: An existing folder the data goes to
    :param needed: The bytes the data will take (:func:`estimated_bytes`)
    :param what: What is written, for the message, e.g. ``"Minari dataset 'ogbench/...'"``
    :raises OSError: ``ENOSPC``, naming the folder, the bytes needed and the bytes free
    """
    free = shutil.disk_usage(folder).free
    if free < needed:
        raise OSError(
            errno.ENOSPC,
            f"not enough free space for {what} in {str(Path(folder))!r}: it needs about {needed:,} bytes, {free:,} are "
            "free; nothing was written (free some space, or write elsewhere, and run again)",
        )
