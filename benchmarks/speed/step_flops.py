"""
Matmul FLOPs of one gradient step, counted rather than derived: PyTorch's ``FlopCounterMode`` over one ``train(1)``
call of a copy of the model, with every network on its plain forward pass (:func:`qc_sb3.common.networks` modules'
own differentiable code with PyTorch's matmuls, :func:`~qc_sb3.accel.onednn_matmul.plain_matmuls`: the CPU fast
paths' oneDNN calls are not counted by ``FlopCounterMode``, and compute the same products).

Times the steps per second of :mod:`qc_sb3.benchmarks.speed.step_speed`, this gives the achieved GFLOP/s of a step, to
read against the
plain matmul's GFLOP/s timed in the same rounds: how close a step is to the machine's matmul roof. The reference's
timing harness reports its own analytic count (``analytic_matmul_flops``) the same way.
"""

from __future__ import annotations

import copy
from unittest import mock

from torch.utils.flop_counter import FlopCounterMode

from qc_sb3.accel import fast_networks
from qc_sb3.accel.onednn_matmul import plain_matmuls
from qc_sb3.common.chunked import ChunkedOffPolicyAlgorithm


def step_matmul_flops(model: ChunkedOffPolicyAlgorithm, batch_size: int = 256) -> int:
    """
    The matmul FLOPs (2 per multiply-add) of one gradient step of ``model``: every loss's forward pass, the TD
    target's sampling, the backward pass; the optimizer and Polyak updates hold no matmul.

    :param model: A QC or QC-FQL model (left untouched: a copy takes the step)
    :param batch_size: Minibatch size of the step
    :return: FLOPs of the matmuls of one ``train(gradient_steps=1)`` call
    """
    scratch = copy.deepcopy(model)
    plain_forward = mock.patch.object(fast_networks, "inference_path", return_value="plain")
    with plain_forward, plain_matmuls(), FlopCounterMode(display=False) as counter:
        scratch.train(gradient_steps=1, batch_size=batch_size)
    return counter.get_total_flops()
