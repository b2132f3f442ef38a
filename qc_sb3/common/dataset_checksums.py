"""
Checksums of a Minari dataset's files: recorded by qc_sb3's converters, verified whenever qc_sb3 reads the dataset.

A dataset's ``data`` folder then holds ``qc_sb3-sha256.json``: the size and SHA-256 of each of its other files. A file
verified once is not hashed again in the same process while its size, modification time and inode stay the same
(shards are read again at every swap). Datasets without the file (downloaded, or written by other tools) are read
unverified.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

CHECKSUM_FILE = "qc_sb3-sha256.json"
# (path, size, mtime_ns, inode) of the files this process verified.
_verified: set[tuple[str, int, int, int]] = set()


def record_checksums(data_folder: str | os.PathLike) -> Path:
    """
    Write the size and SHA-256 of every file of a Minari dataset's ``data`` folder to its ``qc_sb3-sha256.json``.

    :param data_folder: The dataset's ``data`` folder (``<root>/<id>/data``), complete
    :return: The checksum file
    """
    folder = Path(data_folder)
    files = {
        path.name: {"size": path.stat().st_size, "sha256": _sha256(path)}
        for path in sorted(folder.iterdir())
        if path.is_file() and path.name != CHECKSUM_FILE
    }
    checksum_file = folder / CHECKSUM_FILE
    checksum_file.write_text(json.dumps({"files": files}, indent=1))
    return checksum_file


def verify_checksums(data_folder: str | os.PathLike) -> None:
    """
    Check a Minari dataset's files against the checksums recorded with it, if any.

    :param data_folder: The dataset's ``data`` folder
    :raises ValueError: A file is missing, or its size or SHA-256 is not the recorded one (naming the file)
    """
    folder = Path(data_folder)
    checksum_file = folder / CHECKSUM_FILE
    if not checksum_file.is_file():
        return
    try:
        files = json.loads(checksum_file.read_text())["files"]
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"the checksum file {str(checksum_file)!r} is not readable ({error}); expected JSON") from error
    remedy = f"convert the dataset again (or delete {str(checksum_file)!r} to read it unverified)"
    for name, recorded in files.items():
        path = folder / name
        try:
            stat = path.stat()
        except FileNotFoundError as error:
            raise ValueError(f"Minari dataset file {str(path)!r} is missing; {remedy}") from error
        if stat.st_size != recorded["size"]:
            raise ValueError(
                f"Minari dataset file {str(path)!r} has {stat.st_size} bytes, {recorded['size']} when it was written "
                f"(truncated or damaged); {remedy}"
            )
        key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns, stat.st_ino)
        if key in _verified:
            continue
        if _sha256(path) != recorded["sha256"]:
            raise ValueError(
                f"Minari dataset file {str(path)!r} does not match the SHA-256 recorded when it was written (damaged "
                f"since); {remedy}"
            )
        _verified.add(key)


def _sha256(path: Path) -> str:
    """The SHA-256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while block := file.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()
