"""
The captured update on CUDA (``compile_step=True`` on a GPU): everything a gradient step does after its batch is
sampled (the losses, compiled; the backward pass; the Polyak update; every optimizer's step) captured once as one
CUDA graph and replayed at every later step, so that a step is one graph launch instead of hundreds of kernel
launches from Python (PyTorch's "whole-network capture": https://pytorch.org/docs/stable/notes/cuda.html#cuda-graphs).

How a step runs (:class:`GraphedUpdate`):

* the first :data:`WARMUP_STEPS` updates run eagerly on a side stream, as PyTorch requires before a capture (they
  initialise the optimizers' state, cuBLAS's handles and workspaces for that stream, and the compiled losses);
  they are real updates;
* the next one captures the update, on the same stream, on a copy of its batch (the graph's static input), then
  replays it: that is this step's update;
* every later one copies its batch into the static input and replays the graph; its losses are copied out of the
  graph's static output (the next replay overwrites it).

Batch sampling stays outside the graph: the buffer's sizes change with every env step. Random numbers inside the
graph (the flow's noise and times) come from the default CUDA generator, which CUDA graphs advance at each replay
as the eager kernels would. The optimizers run in their ``capturable`` mode (their step counters on the device),
which a capture needs.

What a captured graph keeps, and what is done when it changes:

* the optimizers' state tensors: a new state (``set_parameters``, ``optimizer.load_state_dict``) is seen before
  the next step, which warms up and captures again;
* the learning rates, as numbers: a rate that changes after the capture (a schedule) makes the model go back to
  eager updates, with a warning that says so;
* the batch's shapes: a batch of another size is updated eagerly.

Where a graph cannot be used (not a CUDA device, an optimizer without a capturable mode) or the capture fails, the
updates stay eager, with a warning that gives the reason.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch as th

Update = Callable[[Any], dict[str, th.Tensor]]

# Eager updates on a side stream before the capture (PyTorch's documented pattern uses a few).
WARMUP_STEPS = 3


def graph_unavailable_reason(device: th.device, optimizers: Sequence[th.optim.Optimizer]) -> str | None:
    """
    Why the update cannot be captured as a CUDA graph, or None if it can.

    :param device: The device of the model
    :param optimizers: The optimizers the update steps
    :return: A sentence naming what is missing, or None
    """
    if device.type != "cuda":
        return f"CUDA graphs need a CUDA device, got {device.type!r}"
    for optimizer in optimizers:
        if any("capturable" not in group for group in optimizer.param_groups):
            return f"{type(optimizer).__name__} has no capturable mode, which a CUDA graph capture needs"
    return None


def set_capturable(optimizers: Sequence[th.optim.Optimizer], capturable: bool) -> None:
    """
    Switch the optimizers' ``capturable`` mode (where they have one).

    :param optimizers: The optimizers
    :param capturable: The mode
    """
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            if "capturable" in group:
                group["capturable"] = capturable


class _CapturedFor(NamedTuple):
    """What a captured graph depends on beyond its static input's values."""

    batch_shapes: tuple[tuple[int, ...], ...]
    learning_rates: tuple[float, ...]
    optimizer_states: tuple[dict, ...]

    def same_states(self, other: _CapturedFor) -> bool:
        """Whether the optimizers hold the same state objects (a loaded state replaces them)."""
        return all(a is b for a, b in zip(self.optimizer_states, other.optimizer_states, strict=True))


class GraphedUpdate:
    """
    The update of a gradient step, after its batch is sampled, captured as one CUDA graph (see the module's
    docstring), or eager where that is impossible.

    :param update: The eager update of one batch (a NamedTuple of tensors): the losses, the backward pass, the
        Polyak update and the optimizers' steps; it returns its losses, detached
    :param optimizers: The optimizers ``update`` steps
    :param device: The device of the model
    """

    def __init__(self, update: Update, optimizers: Sequence[th.optim.Optimizer], device: th.device):
        self.eager_update = update
        self.optimizers = list(optimizers)
        self.capture_seconds: float | None = None
        self.fallback_reason = graph_unavailable_reason(th.device(device), self.optimizers)
        self._warmup_left = WARMUP_STEPS
        self._graph: th.cuda.CUDAGraph | None = None
        self._stream: th.cuda.Stream | None = None
        self._captured_for: _CapturedFor | None = None
        self._static_batch: Any = None
        self._static_losses: th.Tensor | None = None
        self._loss_names: list[str] = []
        if self.fallback_reason is not None:
            self._warn_fallback()

    @property
    def captured(self) -> bool:
        """Whether the updates replay a captured graph now."""
        return self.fallback_reason is None and self._graph is not None

    def _warn_fallback(self) -> None:
        warnings.warn(f"compile_step=True: the update is not a CUDA graph, because {self.fallback_reason}", stacklevel=3)

    def _depends_on(self, batch: Any) -> _CapturedFor:
        return _CapturedFor(
            batch_shapes=tuple(tuple(tensor.shape) for tensor in batch),
            learning_rates=tuple(float(group["lr"]) for optimizer in self.optimizers for group in optimizer.param_groups),
            optimizer_states=tuple(optimizer.state for optimizer in self.optimizers),
        )

    def _drop_graph(self) -> None:
        self._graph = self._static_batch = self._static_losses = None

    def _fall_back(self, reason: str) -> None:
        self.fallback_reason = reason
        self._drop_graph()
        set_capturable(self.optimizers, False)
        self._warn_fallback()

    def __call__(self, batch: Any) -> dict[str, th.Tensor]:
        if self.fallback_reason is not None:
            return self.eager_update(batch)
        now, captured_for = self._depends_on(batch), self._captured_for
        if self._graph is not None and captured_for is not None:
            if now.learning_rates != captured_for.learning_rates:
                self._fall_back(
                    "the learning rate changed after the capture (a schedule?), and a captured update keeps the "
                    f"rates it was captured with ({captured_for.learning_rates} -> {now.learning_rates})"
                )
                return self.eager_update(batch)
            if not now.same_states(captured_for):
                # New optimizer state tensors (loaded parameters): warm up and capture again.
                self._drop_graph()
                self._warmup_left = WARMUP_STEPS
            elif now.batch_shapes != captured_for.batch_shapes:
                return self.eager_update(batch)
        if self._graph is None:
            if self._warmup_left > 0:
                return self._warm_up(batch)
            return self._capture_and_replay(batch)
        for static, new in zip(self._static_batch, batch, strict=True):
            static.copy_(new)
        self._graph.replay()
        return self._losses_out()

    def _losses_out(self) -> dict[str, th.Tensor]:
        """The losses of the last replay, copied out of the graph's static output (the next replay overwrites it)."""
        assert self._static_losses is not None
        return dict(zip(self._loss_names, self._static_losses.clone().unbind(), strict=True))

    def _side_stream(self) -> th.cuda.Stream:
        """
        The stream of the warm-up updates and of the capture: one stream for both, so that the libraries' handles
        and workspaces that are kept per stream (cuBLAS's) are made during the warm-up, not in the capture.
        """
        if self._stream is None:
            self._stream = th.cuda.Stream()
        return self._stream

    def _warm_up(self, batch: Any) -> dict[str, th.Tensor]:
        """One eager update on a side stream, with the optimizers already capturable (their state is made so)."""
        set_capturable(self.optimizers, True)
        stream = self._side_stream()
        stream.wait_stream(th.cuda.current_stream())
        with th.cuda.stream(stream), warnings.catch_warnings():
            # Capturable optimizers warn when they step outside a capture, as these warm-up steps must.
            warnings.filterwarnings("ignore", message="This instance was constructed with capturable=True")
            losses = self.eager_update(batch)
        th.cuda.current_stream().wait_stream(stream)
        self._warmup_left -= 1
        return losses

    def _capture_and_replay(self, batch: Any) -> dict[str, th.Tensor]:
        """Capture the update on a copy of ``batch``, then replay it: this batch's update."""
        start = time.perf_counter()
        self._static_batch = type(batch)(*(tensor.clone() for tensor in batch))
        graph = th.cuda.CUDAGraph()
        try:
            with th.cuda.graph(graph, stream=self._side_stream()):
                # The update sets the gradients to None first: backward allocates them in the graph's memory.
                losses = self.eager_update(self._static_batch)
                self._static_losses = th.stack(list(losses.values()))
        except Exception as error:  # nothing ran during the failed capture: this batch is updated eagerly
            self._fall_back(f"capturing it failed with {type(error).__name__}: {str(error).strip()[:500]}")
            return self.eager_update(batch)
        self._loss_names = list(losses)
        self._graph = graph
        self._captured_for = self._depends_on(batch)
        graph.replay()
        self.capture_seconds = time.perf_counter() - start
        return self._losses_out()
