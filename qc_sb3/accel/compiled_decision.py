"""
The compiled decision (``compile_step=True``): a policy's whole chunk decision, from the observation tensor to the
chunk (features, noise, the flow's Euler steps, the critic's scoring, the argmax), as one ``torch.compile`` graph,
with the policy's eager decision as the fallback.

At a decision's batch size (one observation per env, times N samples for best-of-N) the eager decision is bound by
the fixed cost of each of its small kernel calls (a few per Euler step, each dispatched from Python). Compiled, the
graph runs as one call into inductor's generated C++ (``cpp_wrapper``: no Python between its kernels). Where the
matmuls dominate (large networks, many samples) the eager samplers' fused oneDNN Linear -> GELU layers
(:mod:`qc_sb3.accel.fast_inference`) can beat inductor's separate matmul and GELU kernels, so the first decision
compiles the graph, then times both decisions on its observation and keeps the faster (the docs' speed page has
the figures).

Random numbers are drawn by PyTorch's own kernels in the eager order (inductor's ``fallback_random``), so that the
compiled decision gives the eager one's chunk to float32 rounding from the same generator state. The graph reads
the networks' parameters at every call: training between decisions is seen at the next one. A new batch size
recompiles once, then the graph is compiled for any batch size (``torch.compile``'s automatic dynamic shapes).

On CUDA the compiled graph is also captured as a CUDA graph (inductor's ``triton.cudagraphs``, what
``mode="reduce-overhead"`` turns on), recorded once per batch size and replayed: one launch per decision instead of
one per kernel.
"""

from __future__ import annotations

import copy
import time
import warnings
from collections.abc import Callable

import torch as th

from qc_sb3.accel.compiled_step import INDUCTOR_OPTIONS, compile_unavailable_reason, samplers_traced

Decision = Callable[[th.Tensor, bool], th.Tensor]


TRIAL_CALLS = 5


class CompiledDecision:
    """
    A policy's decision ``(observation, deterministic) -> chunk``, compiled on its first call, or eager where
    compiling is impossible or slower.

    The first call compiles the graph and, with ``measure``, times :data:`TRIAL_CALLS` calls of the compiled and of
    the eager decision on its observation, in turns, and keeps the faster (best of its calls): the trials draw
    their noise from a fork of the random generators, so that the first chunk, and every later one, is drawn from
    the generator state it would be drawn from without them.

    The fallback is automatic, with a warning that gives the reason: before any work when the device lacks what
    ``torch.compile`` needs (:func:`~qc_sb3.accel.compiled_step.compile_unavailable_reason`), or when a compile
    fails (the first one, or a recompile for a new batch size or ``deterministic`` value); the policy then decides
    eagerly. A compiled decision that is slower than the eager one is left without a warning
    (:attr:`compiled_faster`).

    :param decide: The eager decision, ``decide(observation, deterministic)``, run without autograd
    :param device: The device of the policy
    :param measure: Time both decisions at the first call and keep the faster; False: always the compiled one
    """

    def __init__(self, decide: Decision, device: th.device, measure: bool = True):
        self.eager_decision = decide
        self.device = th.device(device)
        self.measure = measure
        self.compile_seconds: float | None = None
        # Whether the compiled decision was the faster at the first call (None before it, or without ``measure``).
        self.compiled_faster: bool | None = None
        self.fallback_reason = compile_unavailable_reason(th.device(device))
        self._compiled: Decision | None = None
        if self.fallback_reason is None:
            on_cuda = self.device.type == "cuda"
            options = {**INDUCTOR_OPTIONS, "cpp_wrapper": not on_cuda, "triton.cudagraphs": on_cuda}
            self._compiled = th.compile(decide, options=options)
        else:
            self._warn_fallback()

    def __deepcopy__(self, memo: dict) -> CompiledDecision:
        # The compiled function runs the networks of the policy it was made from: a copy (of a copied policy, whose
        # eager decision is the copy's) compiles its own at its first call.
        return CompiledDecision(copy.deepcopy(self.eager_decision, memo), self.device, self.measure)

    @property
    def compiled(self) -> bool:
        """Whether the decision runs compiled (False after a fallback, or when the eager one was faster)."""
        return self._compiled is not None and self.compiled_faster is not False

    def _warn_fallback(self) -> None:
        warnings.warn(f"compile_step=True: the policy decides eagerly, because {self.fallback_reason}", stacklevel=3)

    def _run_compiled(self, observation: th.Tensor, deterministic: bool) -> th.Tensor:
        with samplers_traced():
            chunk = self._compiled(observation, deterministic)  # type: ignore[misc]  # only called while compiled
        # On CUDA the graph is replayed as a CUDA graph, whose output the next call overwrites: the chunk is a copy.
        return chunk.clone() if self.device.type == "cuda" else chunk

    def _compile_and_measure(self, observation: th.Tensor, deterministic: bool) -> None:
        """The first call's compile, then (with ``measure``) the trials, all on a fork of the generators."""
        devices = [observation.device] if observation.device.type == "cuda" else []
        with th.random.fork_rng(devices=devices):
            start = time.perf_counter()
            self._run_compiled(observation, deterministic)
            self.compile_seconds = time.perf_counter() - start
            if not self.measure:
                return
            seconds: dict[bool, list[float]] = {True: [], False: []}
            for _ in range(TRIAL_CALLS):
                for compiled, decide in ((True, self._run_compiled), (False, self.eager_decision)):
                    start = time.perf_counter()
                    decide(observation, deterministic).cpu()  # .cpu(): waits for an asynchronous device
                    seconds[compiled].append(time.perf_counter() - start)
            self.compiled_faster = min(seconds[True]) < min(seconds[False])

    def __call__(self, observation: th.Tensor, deterministic: bool = False) -> th.Tensor:
        if not self.compiled:
            return self.eager_decision(observation, deterministic)
        try:
            if self.compile_seconds is None:
                self._compile_and_measure(observation, deterministic)
                if not self.compiled:
                    return self.eager_decision(observation, deterministic)
            return self._run_compiled(observation, deterministic)
        except Exception as error:  # a compiler failure falls back to eager, with its message
            chunk = self.eager_decision(observation, deterministic)  # an error of the decision itself is raised here
            self._compiled = None
            self.fallback_reason = f"compiling it failed with {type(error).__name__}: {str(error).strip()[:500]}"
            self._warn_fallback()
            return chunk
