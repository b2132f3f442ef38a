"""
Moving a complete Minari dataset from a staging root into place, so that a kill at any moment leaves one complete copy.

Replacing a dataset takes two renames (a folder cannot be renamed onto a non-empty one): the old copy is first moved
aside to ``<root>/.qc_sb3-replaced-<host>.<pid>-<random>/dataset``, next to a file naming its id, then the new copy
into place, then the old one is deleted. A convert killed between the two renames leaves the old copy aside: the
next convert in that root (:func:`restore_interrupted_publishes`) moves it back, or deletes it if the new copy made
it into place.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from qc_sb3.common.dataset_checksums import record_checksums
from qc_sb3.envs.minari_root import process_is_running, this_host_tag

# Folders holding a replaced dataset are named "<prefix><host>.<pid>-<random>".
REPLACED_PREFIX = ".qc_sb3-replaced-"


def publish_dataset(staging: Path, root: Path, dataset_id: str) -> None:
    """
    Record the checksums of the complete dataset ``staging/<dataset_id>`` (:mod:`qc_sb3.common.dataset_checksums`,
    verified when qc_sb3 reads it) and move it to ``root/<dataset_id>``, replacing an existing dataset there.

    :param staging: The staging root the dataset was created in (on the same file system as ``root``)
    :param root: The real Minari root
    :param dataset_id: The dataset's id
    """
    record_checksums(staging / dataset_id / "data")
    final = root / dataset_id
    final.parent.mkdir(parents=True, exist_ok=True)
    if not final.exists():
        os.replace(staging / dataset_id, final)
        return
    aside = Path(tempfile.mkdtemp(dir=root, prefix=f"{REPLACED_PREFIX}{this_host_tag()}.{os.getpid()}-"))
    (aside / "dataset_id").write_text(dataset_id)
    os.replace(final, aside / "dataset")
    try:
        os.replace(staging / dataset_id, final)
    except BaseException:
        os.replace(aside / "dataset", final)
        shutil.rmtree(aside, ignore_errors=True)
        raise
    shutil.rmtree(aside, ignore_errors=True)


def restore_interrupted_publishes(root: str | os.PathLike) -> list[str]:
    """
    Finish the replacements of this host's converts that no longer run (by the pid in the folder's name): a dataset
    moved aside goes back into place if nothing took its place, and is deleted otherwise.

    :param root: A Minari root
    :return: The ids of the datasets moved back
    """
    restored = []
    prefix = f"{REPLACED_PREFIX}{this_host_tag()}."
    for folder in Path(root).glob(f"{prefix}*"):
        pid = folder.name.removeprefix(prefix).split("-")[0]
        if not (folder.is_dir() and pid.isdigit()) or process_is_running(int(pid)):
            continue
        held = folder / "dataset"
        if held.is_dir():
            dataset_id = (folder / "dataset_id").read_text()
            final = Path(root) / dataset_id
            if not final.exists():
                final.parent.mkdir(parents=True, exist_ok=True)
                os.replace(held, final)
                restored.append(dataset_id)
        shutil.rmtree(folder, ignore_errors=True)
    return restored
