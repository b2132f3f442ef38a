"""Ordered results of one function over many arguments, computed in spawned worker processes."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

Argument = TypeVar("Argument")
Result = TypeVar("Result")


def map_in_workers(
    function: Callable[[Argument], Result],
    arguments: Iterable[Argument],
    workers: int,
    initializer: Callable[..., None] | None = None,
    initargs: tuple[Any, ...] = (),
) -> Iterator[Result]:
    """
    ``function(argument)`` for each argument, in the arguments' order, computed by ``workers`` processes.

    The processes are spawned, not forked (forking a process that runs torch or MuJoCo threads can deadlock), and
    each runs ``initializer(*initargs)`` once. A worker that dies (killed, crashed, or its initializer raised) fails
    the iteration with ``BrokenProcessPool`` rather than leaving it waiting for a result that never comes, as
    ``multiprocessing.Pool`` does. Closing the iterator early cancels the calls not started and waits for the
    running ones.

    :param function: A module-level function (it is pickled by name)
    :param arguments: Its arguments
    :param workers: Number of processes
    :param initializer: Run once in each process before its first call
    :param initargs: The initializer's arguments
    """
    context = multiprocessing.get_context("spawn")
    executor = ProcessPoolExecutor(workers, mp_context=context, initializer=initializer, initargs=initargs)
    try:
        yield from executor.map(function, arguments)
    finally:
        executor.shutdown(wait=True, cancel_futures=True)
