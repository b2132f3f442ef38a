"""
The opt-in compiled gradient step (``compile_step=True``): the losses of one update and their backward pass as
``torch.compile`` graphs, with the eager losses as the fallback.

What is compiled is the differentiable part of an update: every loss of ``_losses`` (forward, and through
AOTAutograd its backward). The rest of the step stays as in the eager one (the docs' speed page has the
measurements behind each choice):

* the flow integrations without autograd (the TD target's Euler steps, best-of-N) run eagerly on CPU, through
  their oneDNN fast paths (:mod:`qc_sb3.accel.fast_inference`);
* the optimizers are already one fused kernel each (Adam ``fused=True``) and the Polyak update one ``_foreach``
  call;
* batch sampling is NumPy gathering.

Compiled code on CPU traces GELU(tanh) as ``x * sigmoid(2 u)`` (:func:`traced_gelu_tanh`), the same function as
``0.5 x (1 + tanh(u))``, for which inductor's CPU code is slower.

Random numbers inside the compiled graph are drawn by PyTorch's own kernels in the eager order (inductor's
``fallback_random``), so that a compiled step draws the same noise as an eager one from the same generator state
and gives the same update to float32 rounding.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import torch as th

from qc_sb3.accel.fast_inference import GELU_CUBIC, GELU_SCALE

T = TypeVar("T")
Losses = Callable[[T], dict[str, th.Tensor]]

# Inductor options: eager random kernels (the same stream as the eager step); a pool of at most two compile workers,
# which builds a cold compile's C++ kernels in parallel, and no larger, so that parallel training processes on a
# many-core machine do not each start a pool as wide as the machine.
INDUCTOR_OPTIONS = {"fallback_random": True, "compile_threads": min(2, os.cpu_count() or 1)}

# Whether compiled code traces the samplers that ``run_eagerly_on_cpu`` marks (True while a compiled decision,
# qc_sb3.accel.compiled_decision, runs): ``torch.compile`` guards on this value.
_samplers_traced = False


def compile_unavailable_reason(device: th.device) -> str | None:
    """
    Why ``torch.compile`` (of the gradient step, or of the decision) cannot run on ``device``, or None if it can.

    :param device: The device of the model
    :return: A sentence naming what is missing, or None
    """
    if device.type == "cpu":
        from torch._inductor import config, cpp_builder, exc

        try:
            cpp_builder.get_cpp_compiler()
        except exc.InvalidCxxCompiler:
            return f"torch.compile on CPU needs a C++ compiler, and none of {config.cpp.cxx} runs"
        return None
    if device.type == "cuda":
        from torch.utils._triton import has_triton

        return None if has_triton() else "torch.compile on CUDA needs triton, which is not installed"
    return f"torch.compile here supports the cpu and cuda devices, got {device.type!r}"


def traced_gelu_tanh(x: th.Tensor) -> th.Tensor:
    """
    GELU with the tanh approximation as compiled code computes it on CPU: ``x * sigmoid(2 u)``, equal to
    ``0.5 x (1 + tanh(u))`` since ``0.5 (1 + tanh(u)) = sigmoid(2 u)`` (the same values and gradients to float32
    rounding), which inductor's CPU code computes faster, forward and backward.

    :param x: Pre-activations
    :return: GELU(tanh) of ``x``
    """
    return x * th.sigmoid(x * (GELU_SCALE + GELU_CUBIC * x * x))


@contextlib.contextmanager
def samplers_traced() -> Iterator[None]:
    """
    Within this context, compiled code traces the samplers that :func:`run_eagerly_on_cpu` marks, as a compiled
    decision does: at its batch sizes (a few rows) inductor's code beats their eager fast paths. Not thread-safe
    (a module-level switch), as the samplers' scratch memory is not.
    """
    global _samplers_traced
    previous, _samplers_traced = _samplers_traced, True
    try:
        yield
    finally:
        _samplers_traced = previous


def run_eagerly_on_cpu(function: Callable[..., T]) -> Callable[..., T]:
    """
    ``function`` as it is, except that a compiled gradient step runs it eagerly when its first tensor argument is
    on the CPU, where its fast paths beat inductor's code (see the module's docstring); a compiled decision traces
    it (:func:`samplers_traced`). Outside ``torch.compile`` this is one check more per call.

    :param function: A sampler that runs without autograd, e.g. ``f(network, observations, ...)``
    :return: The same function, seen by ``torch.compile`` as a graph break on CPU
    """
    eager = th.compiler.disable(function)

    @functools.wraps(function)
    def dispatch(*args: Any, **kwargs: Any) -> T:
        traced = not th.compiler.is_compiling() or _samplers_traced
        if not traced and next(arg for arg in args if isinstance(arg, th.Tensor)).device.type == "cpu":
            return eager(*args, **kwargs)
        return function(*args, **kwargs)

    return dispatch


class CompiledLosses:
    """
    The losses of a gradient step, compiled on their first call, or eager where compiling is impossible.

    The fallback is automatic, with a warning that gives the reason: before any work when the device lacks what
    ``torch.compile`` needs (:func:`compile_unavailable_reason`), or when the first compile fails; the model then
    trains with the eager losses.

    :param losses: The eager losses, a function of one batch returning named scalar tensors
    :param device: The device of the model
    """

    def __init__(self, losses: Losses, device: th.device):
        self.eager_losses = losses
        self.compile_seconds: float | None = None
        self.fallback_reason = compile_unavailable_reason(th.device(device))
        self._compiled: Losses | None = None
        if self.fallback_reason is None:
            self._compiled = th.compile(losses, options=INDUCTOR_OPTIONS)
        else:
            self._warn_fallback()

    @property
    def compiled(self) -> bool:
        """Whether the losses run compiled (False after a fallback)."""
        return self._compiled is not None

    def _warn_fallback(self) -> None:
        warnings.warn(f"compile_step=True: the gradient step runs eagerly, because {self.fallback_reason}", stacklevel=3)

    def __call__(self, batch: T) -> dict[str, th.Tensor]:
        if self._compiled is None:
            return self.eager_losses(batch)
        if self.compile_seconds is not None:
            return self._compiled(batch)
        start = time.perf_counter()
        try:
            losses = self._compiled(batch)
        except Exception as error:  # any compiler failure falls back to eager, with its message
            self._compiled = None
            self.fallback_reason = f"compiling it failed with {type(error).__name__}: {str(error).strip()[:500]}"
            self._warn_fallback()
            return self.eager_losses(batch)
        self.compile_seconds = time.perf_counter() - start
        return losses
