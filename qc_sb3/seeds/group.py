"""Seeds in lockstep: each seed's gradient step waits for the others', and one stacked update serves them all."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch as th

from qc_sb3.common.flow_q import FlowQAlgorithm
from qc_sb3.seeds.stacked_update import StackedUpdate
from qc_sb3.seeds.turns import SeedGroupError, SeedTurns


def stacks_updates(device: th.device) -> bool:
    """
    Whether seeds trained together on ``device`` stack their updates by default: on a GPU, where one small update
    leaves the device idle. On a CPU they train one after another instead, each its model's own update: the stacked
    update runs without the CPU fast paths of :mod:`qc_sb3.accel`, and is slower per seed there
    (docs/guides/seeds.md, ``python -m qc_sb3.benchmarks.speed --seeds``).

    :param device: The models' device
    :return: True on CUDA
    """
    return device.type == "cuda"


class SeedGroup:
    """
    The meeting point of S seeds' gradient steps. Each seed runs in its own thread of a :class:`SeedTurns`; a seed
    that reaches a gradient step draws its noise (from its own generators), leaves its batch and noise here and
    yields its turn; the seed that completes the set runs the :class:`StackedUpdate` for all of them (built at the
    first step, once every seed's model exists), and each seed goes on with its own losses. Seeds must reach their
    steps in lockstep (the same number of updates): one that finishes or falls behind stops the group with an error.

    :param turns: The seeds' threads
    """

    def __init__(self, turns: SeedTurns):
        self.turns = turns
        self.n_seeds = turns.n_seeds
        self.models: list[FlowQAlgorithm | None] = [None] * self.n_seeds
        self.update: StackedUpdate | None = None
        self._requests: list[tuple[Any, dict[str, th.Tensor]] | None] = [None] * self.n_seeds
        self._results: list[dict[str, th.Tensor] | None] = [None] * self.n_seeds

    def join(self, index: int, model: FlowQAlgorithm) -> None:
        """
        Make ``model`` seed ``index`` of the group: its gradient steps are the group's from now on.

        :param index: The seed's position
        :param model: Its model (QC or QC-FQL)
        """
        if not isinstance(model, FlowQAlgorithm):
            raise TypeError(f"seeds in one process train QC or QC-FQL models, got {type(model).__name__}")
        self.models[index] = model
        model._seed_group_member = _Member(self, index)

    def leave(self) -> None:
        """End the group: every model gets its own storage and optimizer states back and trains alone again."""
        if self.update is not None:
            self.update.release()
            self.update = None
        for model in self.models:
            if model is not None:
                model._seed_group_member = None

    def gradient_step(self, index: int, batch: Any) -> dict[str, th.Tensor]:
        """
        Seed ``index``'s gradient step on its batch, run with every other seed's.

        :param index: The seed's position
        :param batch: Its batch of chunk windows
        :return: Its losses, detached
        :raises SeedGroupError: If another seed has finished or failed
        """
        model = self.models[index]
        assert model is not None
        self._requests[index] = (batch, model.step_noise(batch.observations.shape[0]))
        if all(request is not None for request in self._requests):
            self._run_update()
        while self._results[index] is None:
            finished = [i for i in range(self.n_seeds) if self.turns.is_finished(i)]
            if finished:
                raise SeedGroupError(
                    f"seed {index} asks for gradient step {model._n_updates + 1} but seed {finished[0]} has finished: "
                    "seeds in one process train in lockstep (same steps, same schedule, no callback stopping one early)"
                )
            self.turns.yield_turn(index)
        result, self._results[index] = self._results[index], None
        return result

    def seed_parameters(self, index: int) -> dict[str, Any] | None:
        """Seed ``index``'s own parameters and optimizer states while the group's update holds them, else None."""
        return None if self.update is None else self.update.seed_parameters(index)

    def _run_update(self) -> None:
        models = [model for model in self.models if model is not None]
        if len(models) != self.n_seeds:
            raise SeedGroupError("a seed asked for a gradient step before every seed had joined the group")
        steps = {model._n_updates for model in models}
        if len(steps) != 1:
            raise SeedGroupError(f"seeds in one process must train in lockstep; their update counts are {sorted(steps)}")
        if self.update is None:
            share_offline_segment(models)
            self.update = StackedUpdate(models)
        requests = [request for request in self._requests if request is not None]
        results = self.update([batch for batch, _ in requests], [noise for _, noise in requests])
        self._requests = [None] * self.n_seeds
        self._results = list(results)


class _Member:
    """What a model in a group calls in place of its own update (``_seed_group_member``)."""

    def __init__(self, group: SeedGroup, index: int):
        self.group = group
        self.index = index

    def gradient_step(self, batch: Any) -> dict[str, th.Tensor]:
        return self.group.gradient_step(self.index, batch)

    def parameters(self) -> dict[str, Any] | None:
        return self.group.seed_parameters(self.index)


def share_offline_segment(models: Sequence[FlowQAlgorithm]) -> None:
    """Let every seed's buffer hold the first seed's offline arrays where its own are equal to them (no copy)."""
    first = models[0].replay_buffer
    names = first.offline_fields
    for model in models[1:]:
        buffer = model.replay_buffer
        arrays = [(getattr(first, f"offline_{name}"), getattr(buffer, f"offline_{name}")) for name in names]
        if all(mine.shape == theirs.shape and (mine == theirs).all() for mine, theirs in arrays):
            for name in names:
                setattr(buffer, f"offline_{name}", getattr(first, f"offline_{name}"))
