"""Checking that a generator's output folder takes files before hours of generation, not after."""

from __future__ import annotations

import tempfile
from pathlib import Path


def check_writable_folder(folder: Path) -> None:
    """
    Create ``folder`` (and its parents) if missing and check that a file can be created in it.

    :param folder: The folder a generator will write into
    :raises NotADirectoryError: ``folder`` is an existing file
    :raises PermissionError: nothing can be written there
    """
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(f"output folder {str(folder)!r} is a file; expected a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise PermissionError(
            f"output folder {str(folder)!r} is not writable ({error}); checked before generating anything"
        ) from error
