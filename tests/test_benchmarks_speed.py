"""benchmarks.speed: the RLPD-AC model it times."""

from __future__ import annotations

import pytest

from benchmarks.speed import RLPD_ONLINE_STEPS, build, random_dataset


def test_the_rlpd_ac_model_has_online_windows_and_takes_a_gradient_step():
    model = build("RLPDAC", {"net_arch": [16, 16]}, "cpu", random_dataset(n_steps=600, episode_length=100))
    assert model.num_timesteps == RLPD_ONLINE_STEPS and model._n_updates == 0  # random actions only so far
    model.train(gradient_steps=1, batch_size=32)
    assert model._n_updates == 1
    with pytest.raises(ValueError, match="no compile_step"):
        build("RLPDAC", {"net_arch": [16, 16]}, "cpu", random_dataset(n_steps=600, episode_length=100), compile_step=True)
