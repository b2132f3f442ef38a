"""
The compiled decision (``compile_step=True``): a policy's whole chunk decision, from the observation tensor to the
chunk (features, noise, the flow's Euler steps, the critic's scoring, the argmax), as one ``torch.compile`` graph,
with the policy's eager decision as the fallback.

At a decision's batch size (one observation per env, times N samples for best-of-N) the eager decision is bound by
per-operation overhead: a few hundred small kernels, each dispatched from Python. Compiled, the graph runs as one
call into inductor's generated C++ (``cpp_wrapper``: no Python between its kernels). Measured on CPU, one thread,
obs 40, A 5, h 5 (``python -m benchmarks.speed --compile-step``; the README's speed notes): about 2x faster with
2 x 256 networks, and no faster with the paper's 4 x 512, N = 32, whose matmuls dominate.

Random numbers are drawn by PyTorch's own kernels in the eager order (inductor's ``fallback_random``), so that the
compiled decision gives the eager one's chunk to float32 rounding from the same generator state. The graph reads
the networks' parameters at every call: training between decisions is seen at the next one. A new batch size
recompiles once, then the graph is compiled for any batch size (``torch.compile``'s automatic dynamic shapes).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable

import torch as th

from qc_sb3.common.compiled_step import INDUCTOR_OPTIONS, compile_unavailable_reason, samplers_traced

Decision = Callable[[th.Tensor, bool], th.Tensor]


class CompiledDecision:
    """
    A policy's decision ``(observation, deterministic) -> chunk``, compiled on its first call, or eager where
    compiling is impossible.

    The fallback is automatic, with a warning that gives the reason: before any work when the device lacks what
    ``torch.compile`` needs (:func:`~qc_sb3.common.compiled_step.compile_unavailable_reason`), or when a compile
    fails (the first one, or a recompile for a new batch size or ``deterministic`` value); the policy then decides
    eagerly.

    :param decide: The eager decision, ``decide(observation, deterministic)``, run without autograd
    :param device: The device of the policy
    """

    def __init__(self, decide: Decision, device: th.device):
        self.eager_decision = decide
        self.compile_seconds: float | None = None
        self.fallback_reason = compile_unavailable_reason(th.device(device))
        self._compiled: Decision | None = None
        if self.fallback_reason is None:
            options = {**INDUCTOR_OPTIONS, "cpp_wrapper": th.device(device).type == "cpu"}
            self._compiled = th.compile(decide, options=options)
        else:
            self._warn_fallback()

    @property
    def compiled(self) -> bool:
        """Whether the decision runs compiled (False after a fallback)."""
        return self._compiled is not None

    def _warn_fallback(self) -> None:
        warnings.warn(f"compile_step=True: the policy decides eagerly, because {self.fallback_reason}", stacklevel=3)

    def __call__(self, observation: th.Tensor, deterministic: bool = False) -> th.Tensor:
        if self._compiled is None:
            return self.eager_decision(observation, deterministic)
        start = time.perf_counter()
        try:
            with samplers_traced():
                chunk = self._compiled(observation, deterministic)
        except Exception as error:  # any compiler failure falls back to eager, with its message
            self._compiled = None
            self.fallback_reason = f"compiling it failed with {type(error).__name__}: {str(error).strip()[:500]}"
            self._warn_fallback()
            return self.eager_decision(observation, deterministic)
        if self.compile_seconds is None:
            self.compile_seconds = time.perf_counter() - start
        return chunk
