"""A checkpoint holds the online ring's stored rows only, and restores the buffer exactly."""

from __future__ import annotations

import numpy as np

from qc_sb3 import QC
from qc_sb3.benchmarks.runner.checkpoints import BUFFER_FILE, CheckpointState, restore_checkpoint, save_checkpoint

from test_qc import make_model


def test_a_checkpoint_saves_the_stored_ring_rows_only_and_restores_the_buffer_exactly(tmp_path):
    model = make_model(QC, buffer_size=10_000, learning_starts=100)
    model.learn(total_timesteps=7)
    state = CheckpointState(phase="online", evaluations_done=1, offline_steps_done=0, num_timesteps=7, wall_time=1.0)
    folder = save_checkpoint(tmp_path, model, state)
    with np.load(folder / BUFFER_FILE, allow_pickle=False) as saved:
        # 7 online steps of one env: 7 rows, not the ring's 10,000.
        assert saved["observations"].shape[:2] == (7, 1) and saved["rewards"].shape == (7, 1)
    fresh = make_model(QC, buffer_size=10_000, learning_starts=100)
    restore_checkpoint(fresh, folder)
    for name, value in vars(model.replay_buffer).items():
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(getattr(fresh.replay_buffer, name), value, err_msg=name)
    assert (fresh.replay_buffer.pos, fresh.replay_buffer.full) == (7, False)
