"""qc_sb3.benchmarks.speed.step_flops: the counted matmul FLOPs of a step against the spec's count of one Euler step (the plain
forward passes are the ones counted, whatever fast paths the CPU offers) and against the batch size."""

from __future__ import annotations

import pytest
from stable_baselines3.common.logger import configure

from qc_sb3 import QC
from qc_sb3.benchmarks.speed.step_flops import step_matmul_flops
from qc_sb3.benchmarks.speed.step_speed import ACTION_DIM, CHUNK_SIZE, ConstantEnv, random_dataset

HIDDEN, N_SAMPLES = [16, 12], 4


def tiny_qc(flow_steps: int) -> QC:
    model = QC(
        "MlpPolicy",
        ConstantEnv(),
        offline_dataset=random_dataset(n_steps=500, episode_length=50),
        actor_num_samples=N_SAMPLES,
        flow_steps=flow_steps,
        chunk_size=CHUNK_SIZE,
        policy_kwargs={"net_arch": HIDDEN},
        seed=0,
    )
    model.set_logger(configure(None, []))
    return model


@pytest.mark.parametrize("batch_size", [8, 16])
def test_one_more_euler_step_costs_one_velocity_evaluation_of_every_sample(batch_size):
    # docs/algorithms.md §3: the TD target integrates N flow samples per next state with T Euler steps; each step
    # evaluates the velocity on B * N rows: the first layer's action columns (the observations' share is computed
    # once per sample, before the steps), then the hidden and last layers. 2 FLOPs per multiply-add.
    flat_action = CHUNK_SIZE * ACTION_DIM
    macs_per_row = flat_action * HIDDEN[0] + HIDDEN[0] * HIDDEN[1] + HIDDEN[1] * flat_action
    extra = step_matmul_flops(tiny_qc(flow_steps=4), batch_size) - step_matmul_flops(tiny_qc(flow_steps=3), batch_size)
    assert extra == 2 * batch_size * N_SAMPLES * macs_per_row


def test_every_matmul_of_a_step_scales_with_the_batch():
    model = tiny_qc(flow_steps=3)
    assert step_matmul_flops(model, 16) == 2 * step_matmul_flops(model, 8)
