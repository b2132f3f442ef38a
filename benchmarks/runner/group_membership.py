"""Which group of seeds the run of this thread trains in (:mod:`qc_sb3.benchmarks.runner.seed_groups`).

A group runs each of its runs in its own thread; :func:`qc_sb3.benchmarks.runner.runs.execute_run` hands the run's
model, once built or restored from its checkpoint, to :func:`join_seed_group`, which makes it its thread's member of
the group. A run in a thread of no group trains alone.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from qc_sb3.common.chunked import ChunkedOffPolicyAlgorithm
from qc_sb3.seeds.group import SeedGroup

_thread = threading.local()


@contextmanager
def group_member(group: SeedGroup, index: int) -> Iterator[None]:
    """
    Make the models built in this thread, for the block, seed ``index`` of ``group``.

    :param group: The group
    :param index: The seed's position in it
    """
    _thread.member = (group, index)
    try:
        yield
    finally:
        _thread.member = None


def join_seed_group(model: ChunkedOffPolicyAlgorithm) -> None:
    """
    Make a run's model its thread's member of a group of seeds, if the thread has one (else nothing happens).

    :param model: The run's model, built or restored
    """
    member = getattr(_thread, "member", None)
    if member is not None:
        group, index = member
        group.join(index, model)
