"""Paths in results folders: names that become folder and file names, and files opened without following symlinks.

A name read from a config or a run's ``config.json`` (a config's ``name``, a task) becomes a path component only once
:func:`check_name` accepts it: one folder name, never a path (``../x``, ``/tmp/x``). A results folder unpacked from
elsewhere may hold symbolic links where the runner expects its own files: the runner refuses a run folder that holds
one or that resolves outside its results folder (:func:`check_run_paths`), and opens its lock files with
:func:`open_regular_file`, which never follows a link.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

NAME_RULE = "letters, digits, '.', '_', '+' and '-', starting with a letter or a digit (one folder name, not a path)"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")


class UnsafePathError(ValueError):
    """A path of a results folder that is a symbolic link, or that leads outside the results folder."""


def is_valid_name(name: object) -> bool:
    """
    Whether a name may become a path component.

    :param name: The name
    :return: True if it is a string that follows :data:`NAME_RULE`
    """
    return isinstance(name, str) and _NAME.fullmatch(name) is not None


def check_name(name: object, what: str) -> str:
    """
    Refuse a name that may not become a path component.

    :param name: The name
    :param what: What it names, for the message (``config name``, ``task``)
    :return: The name
    :raises ValueError: If it does not follow :data:`NAME_RULE`
    """
    if not is_valid_name(name):
        raise ValueError(f"{what} {name!r} is not a valid name: use {NAME_RULE}")
    return str(name)


def open_regular_file(path: str | os.PathLike, flags: int, mode: int = 0o644) -> int:
    """
    ``os.open`` that never follows a symbolic link and only opens a regular file.

    :param path: The file
    :param flags: ``os.open`` flags (``os.O_NOFOLLOW`` and ``os.O_CLOEXEC`` are added)
    :param mode: The mode of a file it creates (less the umask)
    :return: The file descriptor
    :raises UnsafePathError: If the path is a symbolic link or not a regular file
    """
    try:
        descriptor = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as error:
        if os.path.islink(path):
            raise UnsafePathError(f"{path} is a symbolic link, where a file is expected: refusing to open it") from error
        raise
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise UnsafePathError(f"{path} is not a regular file: refusing to use it")
    return descriptor


def check_run_paths(run_dir: str | os.PathLike, levels: int) -> None:
    """
    Refuse a run folder that is (or lies in) a symbolic link below its results folder, that resolves outside it, or
    that holds a symbolic link anywhere: the runner writes only inside the results folder.

    :param run_dir: The run folder (it may not exist yet)
    :param levels: Folders between the results folder and the run folder, the run folder included
        (``<task>/<method>/seed<k>``: 3)
    :raises UnsafePathError: If it does
    """
    run_dir = Path(run_dir)
    chain = [run_dir, *run_dir.parents][:levels]
    root = chain[-1].parent
    for folder in chain:
        if folder.is_symlink():
            raise UnsafePathError(
                f"{folder} is a symbolic link inside the results folder {root}: the runner writes only inside it; "
                "replace the link by a copy of its folder"
            )
    if run_dir.exists() and not run_dir.resolve().is_relative_to(root.resolve()):
        raise UnsafePathError(f"{run_dir} resolves to {run_dir.resolve()}, outside the results folder {root}")
    for folder, folders, files in os.walk(run_dir):
        for name in [*folders, *files]:
            if os.path.islink(os.path.join(folder, name)):
                raise UnsafePathError(
                    f"{os.path.join(folder, name)} is a symbolic link inside a run folder, where the runner expects "
                    "its own files: refusing to write through it; replace the link by a copy of its target"
                )


class NotWritableError(ValueError):
    """A folder the runner must write in that it cannot make or write in."""


def check_writable_folder(folder: str | os.PathLike, what: str) -> None:
    """
    Refuse a folder that this process can neither write in nor make: checked before any work, so that a run fails at
    once rather than once its datasets are made.

    :param folder: The folder (it may not exist yet: then its nearest existing parent must be a writable folder)
    :param what: What it is, for the message (``results folder``, ``dataset cache``)
    :raises NotWritableError: If it cannot be written in or made
    """
    folder = Path(folder)
    existing = next(path for path in [folder, *folder.absolute().parents] if path.exists())
    if not existing.is_dir():
        raise NotWritableError(f"the {what} {folder} cannot be made: {existing} is not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        where = "" if existing == folder else f" (its nearest existing parent {existing} is not)"
        raise NotWritableError(
            f"the {what} {folder} is not writable{where}: check its permissions and whether its file system is read-only"
        )


def find_files(root: str | os.PathLike, name: str) -> list[Path]:
    """
    The files of a name under a folder, following symbolic links to folders (``Path.rglob`` does not): a results
    folder assembled from links to run folders elsewhere is read whole. A folder reached twice (a link cycle, or
    two links to one folder) is read once.

    :param root: The folder
    :param name: The files' name
    :return: Their paths under ``root``, sorted
    """
    found, seen = [], set()
    for folder, folders, files in os.walk(root, followlinks=True):
        real = os.path.realpath(folder)
        if real in seen:
            folders.clear()
            continue
        seen.add(real)
        if name in files:
            found.append(Path(folder) / name)
    return sorted(found)
