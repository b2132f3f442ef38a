"""The cost of the offline phase made visible: the estimated time left of its gradient steps (logged, and said at
verbose >= 1), and the warning when learn()'s online steps all fall within learning_starts."""

from __future__ import annotations

import csv
import warnings

import pytest
from stable_baselines3.common.logger import configure

from qc_sb3 import QC
from qc_sb3.common import offline_phase

from test_qc import make_model

SECONDS_PER_STEP = 2.0


class FakeClock:
    """A clock that advances SECONDS_PER_STEP at every gradient step, so the estimate can be computed by hand."""

    def __init__(self):
        self.now = 100.0

    def perf_counter(self) -> float:
        return self.now


@pytest.fixture
def timed_model(monkeypatch, tmp_path):
    clock = FakeClock()
    monkeypatch.setattr(offline_phase, "time", clock)
    model = make_model(QC, offline_gradient_steps=30, offline_log_interval=15, verbose=1)
    gradient_step = model._gradient_step

    def timed_gradient_step(batch_size):
        clock.now += SECONDS_PER_STEP
        return gradient_step(batch_size)

    model._gradient_step = timed_gradient_step
    model.set_logger(configure(str(tmp_path), ["csv", "log"]))
    return model, tmp_path


def _logged_estimates(folder) -> list[tuple[int, float]]:
    with open(folder / "progress.csv") as file:
        return [(int(row["offline/gradient_steps"]), float(row["time/offline_eta_s"])) for row in csv.DictReader(file)]


def test_the_offline_phase_logs_its_estimated_time_left_and_says_it_early(timed_model):
    model, folder = timed_model
    model.learn(0)
    # By hand: 2 s per step; after step 15 of 30, 15 steps (30 s) are left; after step 30, none.
    assert _logged_estimates(folder) == [(15, 30.0), (30, 0.0)]
    # The first estimate, after 1 + 10 steps: 19 steps left, 38 s = 0.0106 h.
    expected = "offline phase: 2 s per gradient step over its first steps, about 0.0106 h for the 19 left"
    assert expected in (folder / "log.txt").read_text()


def test_pretrain_in_pieces_estimates_the_time_left_of_the_whole_offline_phase(timed_model):
    model, folder = timed_model
    model.pretrain(gradient_steps=20)
    model.pretrain(gradient_steps=10)
    # By hand, 2 s per step of a 30-step phase: after step 15, 15 steps (30 s) are left; at the end of the first
    # call (step 20), 10 steps (20 s); after step 30, none.
    assert _logged_estimates(folder) == [(15, 30.0), (20, 20.0), (30, 0.0)]


def test_pretrain_past_the_offline_phase_estimates_the_time_left_of_its_own_steps(timed_model):
    model, folder = timed_model
    model.pretrain(gradient_steps=40)  # 10 steps past the 30 of offline_gradient_steps
    # By hand: after step 15, 25 of its 40 steps are left (50 s); after step 30, 10 (20 s); after step 40, none.
    assert _logged_estimates(folder) == [(15, 50.0), (30, 20.0), (40, 0.0)]


@pytest.mark.parametrize(
    ("learning_starts", "first_steps", "steps", "warned"),
    [(50, 0, 20, True), (50, 0, 50, True), (50, 0, 51, False), (50, 40, 20, False), (50, 0, 0, False)],
)
def test_learn_warns_before_any_work_when_learning_starts_leaves_no_online_update(learning_starts, first_steps, steps, warned):
    model = make_model(QC, learning_starts=learning_starts, offline_gradient_steps=3)
    if first_steps:
        model.learn(first_steps)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        if not warned:
            model.learn(steps, reset_num_timesteps=not first_steps)
            return
        with pytest.raises(UserWarning, match=rf"learning_starts=50 but this learn\(\) runs the env to step {steps} "):
            model.learn(steps)
    assert (model.offline_steps_done, model.num_timesteps) == (0, 0), "warned before any gradient or env step"
