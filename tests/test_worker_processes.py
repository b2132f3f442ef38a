"""map_in_workers: results in order, and a dead worker fails the iteration instead of hanging it."""

import os
import time
from concurrent.futures.process import BrokenProcessPool

import pytest

from qc_sb3.envs.worker_processes import map_in_workers


def test_results_come_in_the_arguments_order() -> None:
    arguments = [-3, 1, -2, 5, -8, 0]
    assert list(map_in_workers(abs, arguments, workers=2)) == [abs(argument) for argument in arguments]


def test_a_worker_that_dies_in_a_call_fails_the_iteration() -> None:
    with pytest.raises(BrokenProcessPool):
        list(map_in_workers(os._exit, [3], workers=2))


def test_an_initializer_that_raises_fails_the_iteration() -> None:
    with pytest.raises(BrokenProcessPool):
        list(map_in_workers(abs, [1, 2], workers=2, initializer=int, initargs=("not a number",)))


def test_closing_early_does_not_run_the_remaining_calls() -> None:
    results = map_in_workers(time.sleep, [0.0] + [2.0] * 30, workers=1)
    start = time.monotonic()
    next(results)
    results.close()
    # The 30 remaining calls take 60 s; at most the running one and one queued ahead still finish.
    assert time.monotonic() - start < 20
