"""qc_sb3.benchmarks.speed.step_speed: the RLPD-AC model it times, its timed calls;
qc_sb3.benchmarks.speed.offline_speed: its timed blocks."""

from __future__ import annotations

import pytest

from qc_sb3.benchmarks.speed import offline_speed
from qc_sb3.benchmarks.speed.step_speed import RLPD_ONLINE_STEPS, build, random_dataset, synchronized
from qc_sb3.common.buffers import ChunkReplayBuffer


def test_the_rlpd_ac_model_has_online_windows_and_takes_a_gradient_step():
    model = build("RLPDAC", {"net_arch": [16, 16]}, "cpu", random_dataset(n_steps=600, episode_length=100))
    assert model.num_timesteps == RLPD_ONLINE_STEPS and model._n_updates == 0  # random actions only so far
    model.train(gradient_steps=1, batch_size=32)
    assert model._n_updates == 1
    with pytest.raises(ValueError, match="no compile_step"):
        build("RLPDAC", {"net_arch": [16, 16]}, "cpu", random_dataset(n_steps=600, episode_length=100), compile_step=True)


def test_synchronized_leaves_a_cpu_call_as_it_is():
    def call() -> int:
        return 1

    assert synchronized(call, "cpu") is call


def test_the_offline_phase_is_timed_in_blocks_of_real_offline_steps():
    model = build("QCFQL", {"net_arch": [16, 16]}, "cpu", random_dataset(n_steps=600, episode_length=100))
    assert type(model.replay_buffer) is ChunkReplayBuffer and model.replay_buffer.offline_size > 0  # NumPy buffer on CPU
    seconds = offline_speed.block_seconds(model, steps=25, block=10)
    assert len(seconds) == 2 and all(value > 0 for value in seconds)
    assert model.offline_steps_done == 20 and model._n_updates == 20  # whole blocks only


def test_the_sac_comparison_builds_each_model_at_the_same_widths():
    from qc_sb3.benchmarks.speed.sac_speed import build

    widths = {}
    for name in ("SAC", "RLPD K=2", "QC h=1 N=1"):
        model = build(name, [32, 32])
        widths[name] = sorted({p.shape[0] for n, p in model.policy.named_parameters() if n.endswith("bias") and p.dim() == 1})
    assert widths["SAC"][-1] == widths["RLPD K=2"][-1] == widths["QC h=1 N=1"][-1] == 32
    assert build("RLPD K=2", [32]).n_critics == 2
    qc = build("QC h=1 N=1", [32])
    assert (qc.chunk_size, qc.actor_num_samples, qc.offline_gradient_steps) == (1, 1, 0)
    with pytest.raises(ValueError, match="unknown model 'TD3'"):
        build("TD3", [32])
