"""Threads that take turns: one runs at a time, each with the global random generators of its own seed."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np
import torch as th

T = TypeVar("T")
# Seconds between two checks for Ctrl-C while the main thread waits for the seeds' threads.
JOIN_POLL_S = 0.2


class SeedGroupError(RuntimeError):
    """The seeds of a group cannot go on together (one failed, stopped early, or left the lockstep)."""


def global_random_state() -> tuple[Any, ...]:
    """The states of every global generator a model draws from: Python's, NumPy's, torch's CPU and CUDA ones."""
    cuda = th.cuda.get_rng_state_all() if th.cuda.is_available() and th.cuda.is_initialized() else None
    return random.getstate(), np.random.get_state(), th.get_rng_state(), cuda


def set_global_random_state(state: tuple[Any, ...]) -> None:
    """Put back the states of :func:`global_random_state`."""
    python_state, numpy_state, torch_state, cuda_state = state
    random.setstate(python_state)
    np.random.set_state(numpy_state)
    th.set_rng_state(torch_state)
    if cuda_state is not None:
        th.cuda.set_rng_state_all(cuda_state)


class SeedTurns:
    """
    Runs one task per seed, each in its own thread, one thread at a time: a task runs until it calls
    :meth:`yield_turn`, and the next seed's thread (in cyclic order) resumes. At every switch the global random
    generators are saved for the seed that stops and restored for the seed that resumes, so each seed draws from
    its own streams as it would in a process of its own. A task that raises stops the group: the other tasks raise
    :class:`SeedGroupError` when their turn comes, and :meth:`run` raises the first error.

    :param random_states: The global generator states each seed starts from (None: a seed starts from the state
        it finds, as a fresh process does; its model's ``seed`` then sets it)
    """

    def __init__(self, random_states: Sequence[tuple[Any, ...] | None]):
        self.random_states = list(random_states)
        self.n_seeds = len(self.random_states)
        self._condition = threading.Condition()
        self._turn = 0
        self._finished = [False] * self.n_seeds
        self._error: BaseException | None = None

    def run(self, tasks: Sequence[Callable[[], T]]) -> list[T]:
        """
        Run ``tasks[i]`` as seed i's thread, seed 0 first, and wait for all of them.

        :param tasks: One callable per seed
        :return: Their results, in seed order
        :raises: The first error a task raised (or KeyboardInterrupt, once every thread has stopped)
        """
        if len(tasks) != self.n_seeds:
            raise ValueError(f"expected {self.n_seeds} tasks, one per seed, got {len(tasks)}")
        self._turn, self._finished, self._error = 0, [False] * self.n_seeds, None
        results: list[Any] = [None] * self.n_seeds
        threads = [
            threading.Thread(target=self._run_task, args=(index, task, results), name=f"seed-{index}", daemon=True)
            for index, task in enumerate(tasks)
        ]
        for thread in threads:
            thread.start()
        try:
            for thread in threads:
                while thread.is_alive():
                    thread.join(JOIN_POLL_S)
        except KeyboardInterrupt:
            self._stop(SeedGroupError("interrupted"))
            for thread in threads:
                thread.join()
            raise
        if self._error is not None:
            raise self._error
        return results

    def run_one_after_another(self, tasks: Sequence[Callable[[], T]]) -> list[T]:
        """
        Run ``tasks[i]`` in this thread, seed 0 first, each to its end with the global random generators of its seed
        (those the seed stood at are kept for its next task). A task that raises stops the others.

        :param tasks: One callable per seed
        :return: Their results, in seed order
        """
        if len(tasks) != self.n_seeds:
            raise ValueError(f"expected {self.n_seeds} tasks, one per seed, got {len(tasks)}")
        results = []
        for index, task in enumerate(tasks):
            state = self.random_states[index]
            if state is not None:
                set_global_random_state(state)
            try:
                results.append(task())
            finally:
                self.random_states[index] = global_random_state()
        return results

    def is_finished(self, index: int) -> bool:
        """Whether seed ``index``'s task has returned or raised."""
        return self._finished[index]

    def yield_turn(self, index: int) -> None:
        """
        Called by seed ``index``'s thread during its turn: let the next seed run, and return when the turn is back.

        :raises SeedGroupError: If another seed failed meanwhile
        """
        self._pass_turn(index)
        self._wait_for_turn(index)

    def _run_task(self, index: int, task: Callable[[], Any], results: list[Any]) -> None:
        try:
            self._wait_for_turn(index)
        except SeedGroupError:
            self._finish(index, save_state=False)
            return
        try:
            results[index] = task()
        except BaseException as error:  # handed to run(), which raises it in the main thread
            self._stop(error)
        self._finish(index, save_state=True)

    def _wait_for_turn(self, index: int) -> None:
        with self._condition:
            while self._turn != index and self._error is None:
                self._condition.wait()
            if self._error is not None:
                raise SeedGroupError(f"seed {index} stops: another seed of the group failed ({self._error!r})")
        state = self.random_states[index]
        if state is not None:
            set_global_random_state(state)

    def _pass_turn(self, index: int) -> None:
        self.random_states[index] = global_random_state()
        with self._condition:
            following = [(index + step) % self.n_seeds for step in range(1, self.n_seeds + 1)]
            self._turn = next((i for i in following if not self._finished[i]), index)
            self._condition.notify_all()

    def _finish(self, index: int, save_state: bool) -> None:
        with self._condition:
            self._finished[index] = True
        if save_state:
            self._pass_turn(index)

    def _stop(self, error: BaseException) -> None:
        with self._condition:
            if self._error is None:
                self._error = error
            self._condition.notify_all()
