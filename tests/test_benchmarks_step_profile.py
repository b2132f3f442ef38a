"""qc_sb3.benchmarks.speed.step_profile: each part counted once (nested calls of one part are not added twice), the
parts of a real step found, and the algorithms' samplers restored after profiling."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch as th

import qc_sb3.qc.policies
from qc_sb3.benchmarks.speed.step_profile import (
    ROWS,
    SAMPLERS,
    label_model,
    labelled_samplers,
    outermost_seconds,
    profile_steps,
)
from qc_sb3.benchmarks.speed.step_speed import build, random_dataset


def event(name: str, microseconds: float, parent=None) -> SimpleNamespace:
    return SimpleNamespace(name=name, cpu_parent=parent, time_range=SimpleNamespace(elapsed_us=lambda: microseconds))


def test_outermost_seconds_counts_a_part_once_and_nested_parts_apart():
    losses = event("losses (forward)", 100.0)
    inner_losses = event("losses (forward)", 40.0, parent=losses)  # a recursive call: already inside the outer one
    sampler = event(SAMPLERS, 30.0, parent=inner_losses)
    unrelated = event("aten::mm", 500.0)
    backward = event("CompiledFunctionBackward", 20.0)
    rows = {"losses (forward)": "losses (forward)", SAMPLERS: SAMPLERS, "CompiledFunctionBackward": "compiled graph backward"}
    seconds = outermost_seconds([losses, inner_losses, sampler, unrelated, backward], rows)
    assert set(seconds) == set(ROWS)
    assert seconds["losses (forward)"] == pytest.approx(100e-6)
    assert seconds[SAMPLERS] == pytest.approx(30e-6)
    assert seconds["compiled graph backward"] == pytest.approx(20e-6)
    assert sum(seconds.values()) == pytest.approx(150e-6)


def test_a_profiled_step_finds_its_parts_and_restores_the_samplers():
    original = qc_sb3.qc.policies.best_of_n_actions
    threads = th.get_num_threads()
    th.set_num_threads(1)
    try:
        with labelled_samplers():
            dataset = random_dataset(n_steps=600, episode_length=100)
            model = build("QC", {"net_arch": [16], "actor_num_samples": 2}, "cpu", dataset)
            label_model(model)
            seconds, wall = profile_steps(model, 2)
    finally:
        th.set_num_threads(threads)
    assert qc_sb3.qc.policies.best_of_n_actions is original
    for part in ("batch sampling", "losses (forward)", SAMPLERS, "backward", "optimizer steps"):
        assert seconds[part] > 0, part
    assert seconds[SAMPLERS] < seconds["losses (forward)"]  # the TD target's sampler runs inside the losses
    top_level = ("batch sampling", "losses (forward)", "backward", "zero_grad", "Polyak", "optimizer steps")
    assert sum(seconds[part] for part in top_level) <= wall
