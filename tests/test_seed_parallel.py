"""Seeds in one process: S seeds, stacked or one after another, against S models trained alone (qc_sb3.seeds)."""

from __future__ import annotations

import numpy as np
import pytest
import torch as th
from stable_baselines3.common.callbacks import BaseCallback

from qc_sb3 import QC, QCFQL, RLPD
from qc_sb3.seeds import SeedParallel
from qc_sb3.seeds import group as group_module
from qc_sb3.seeds.group import stacks_updates
from qc_sb3.seeds.stacked_update import StackedUpdate
from qc_sb3.seeds.turns import SeedGroupError, global_random_state, set_global_random_state

from toy_tasks import PointReachEnv, scripted_demonstrations

OFFLINE_STEPS = ONLINE_STEPS = 100
SEEDS = (0, 1, 2)
# float32 rounding: a batched matmul adds in another order than a single one, over 200 Adam steps
TOLERANCE = 1e-5


def settings(algorithm: type, offline_steps: int = OFFLINE_STEPS) -> dict:
    kwargs = dict(
        policy_kwargs=dict(net_arch=[32, 32]),
        offline_dataset=scripted_demonstrations(20),
        offline_gradient_steps=offline_steps,
        learning_starts=0,
        batch_size=16,
        buffer_size=1000,
        chunk_size=3,
    )
    return {**kwargs, "actor_num_samples": 4} if algorithm is QC else kwargs


def record_steps(model) -> list[dict[str, float]]:
    """Record the losses of every gradient step the model takes (alone or in a group)."""
    steps: list[dict[str, float]] = []
    gradient_step = model._gradient_step

    def recorded(batch_size: int):
        losses = gradient_step(batch_size)
        steps.append({name: value.item() for name, value in losses.items()})
        return losses

    model._gradient_step = recorded
    return steps


def alone(algorithm: type, seed: int, online_steps: int = ONLINE_STEPS, offline_steps: int = OFFLINE_STEPS):
    model = algorithm("MlpPolicy", PointReachEnv(), seed=seed, **settings(algorithm, offline_steps))
    steps = record_steps(model)
    model.learn(online_steps)
    return model, steps


def together(
    algorithm: type, seeds=SEEDS, online_steps: int = ONLINE_STEPS, stacked: bool = True, offline_steps: int = OFFLINE_STEPS
):
    group = SeedParallel(algorithm, lambda seed: PointReachEnv(), seeds, stacked=stacked, **settings(algorithm, offline_steps))
    steps = [record_steps(model) for model in group.models]
    group.learn(online_steps)
    return group, steps


def assert_close_states(first: dict, second: dict, tolerance: float) -> None:
    assert first.keys() == second.keys()
    for name in first:
        assert th.allclose(first[name], second[name], atol=tolerance, rtol=0), name


@pytest.mark.parametrize("algorithm", [QCFQL, QC])
def test_stacked_seeds_are_the_seeds_trained_alone(algorithm):
    group, group_steps = together(algorithm)
    for index, seed in enumerate(SEEDS):
        model, steps = alone(algorithm, seed)
        member = group.models[index]
        assert len(steps) == len(group_steps[index]) == OFFLINE_STEPS + ONLINE_STEPS
        for step, (mine, theirs) in enumerate(zip(steps, group_steps[index], strict=True)):
            assert mine.keys() == theirs.keys()
            for name in mine:
                assert mine[name] == pytest.approx(theirs[name], abs=1e-4, rel=1e-4), (seed, step, name)
        assert_close_states(model.policy.state_dict(), member.policy.state_dict(), TOLERANCE)
        size = model.replay_buffer.pos
        assert member.replay_buffer.pos == size == ONLINE_STEPS
        np.testing.assert_allclose(member.replay_buffer.actions[:size], model.replay_buffer.actions[:size], atol=1e-5)
        # the Adam states of the seed's optimizers, as its own model would hold them
        for mine, theirs in zip(model.policy.optimizers, member.policy.optimizers, strict=True):
            for state, other in zip(mine.state_dict()["state"].values(), theirs.state_dict()["state"].values(), strict=True):
                assert th.allclose(state["exp_avg"], other["exp_avg"], atol=1e-6, rtol=1e-3)
                assert float(state["step"]) == float(other["step"]) == OFFLINE_STEPS + ONLINE_STEPS


@pytest.mark.parametrize("algorithm", [QCFQL, QC])
def test_seeds_one_after_another_are_exactly_the_seeds_trained_alone(algorithm):
    # Each seed runs its model's own learn(): bit-identical to the model alone, so a few steps of each phase suffice.
    group, group_steps = together(algorithm, online_steps=30, stacked=False, offline_steps=30)
    for index, seed in enumerate(SEEDS):
        model, steps = alone(algorithm, seed, online_steps=30, offline_steps=30)
        member = group.models[index]
        assert steps == group_steps[index] and len(steps) == 60
        assert_close_states(model.policy.state_dict(), member.policy.state_dict(), 0.0)
        size = model.replay_buffer.pos
        np.testing.assert_array_equal(member.replay_buffer.actions[:size], model.replay_buffer.actions[:size])
        for mine, theirs in zip(model.policy.optimizers, member.policy.optimizers, strict=True):
            for state, other in zip(mine.state_dict()["state"].values(), theirs.state_dict()["state"].values(), strict=True):
                assert th.equal(state["exp_avg_sq"], other["exp_avg_sq"])


def test_seeds_stack_their_updates_on_a_gpu_only_unless_told(monkeypatch):
    assert stacks_updates(th.device("cuda", 0)) and not stacks_updates(th.device("cpu"))
    built = []
    monkeypatch.setattr(group_module, "StackedUpdate", lambda models: built.append(models) or StackedUpdate(models))
    SeedParallel(QCFQL, lambda seed: PointReachEnv(), (0, 1), **settings(QCFQL)).pretrain(2)
    assert built == []  # on the CPU, one seed after another
    SeedParallel(QCFQL, lambda seed: PointReachEnv(), (0, 1), stacked=True, **settings(QCFQL)).pretrain(2)
    assert len(built) == 1 and len(built[0]) == 2
    with pytest.raises(TypeError, match="stacked"):
        SeedParallel(QCFQL, lambda seed: PointReachEnv(), (0, 1), stacked="yes", **settings(QCFQL))


@pytest.mark.parametrize("stacked", [True, False])
def test_a_seed_does_not_depend_on_the_other_seeds(stacked):
    first, _ = together(QCFQL, seeds=(0, 1, 2), online_steps=20, stacked=stacked)
    second, _ = together(QCFQL, seeds=(0, 1, 7), online_steps=20, stacked=stacked)
    for index in (0, 1):
        mine, theirs = first.models[index].policy.state_dict(), second.models[index].policy.state_dict()
        assert all(th.equal(mine[name], theirs[name]) for name in mine)
    changed = first.models[2].policy.state_dict(), second.models[2].policy.state_dict()
    assert not all(th.equal(changed[0][name], changed[1][name]) for name in changed[0])


@pytest.mark.parametrize("stacked", [True, False])
def test_seeds_differ_from_each_other_and_share_the_offline_segment(stacked):
    group = SeedParallel(QCFQL, lambda seed: PointReachEnv(), SEEDS, stacked=stacked, **settings(QCFQL))
    weights = [model.policy.flow.mlp.linears[0].weight for model in group.models]
    assert not th.equal(weights[0], weights[1])
    group.pretrain(1)  # the seeds' buffers share their offline segment from the first gradient step on
    buffers = [model.replay_buffer for model in group.models]
    assert all(buffer.offline_observations is buffers[0].offline_observations for buffer in buffers)


@pytest.mark.parametrize("stacked", [True, False])
def test_each_seed_saves_an_ordinary_model_file(tmp_path, stacked):
    group, _ = together(QCFQL, online_steps=10, stacked=stacked)
    paths = group.save(tmp_path)
    assert [path.name for path in paths] == [f"seed{seed}.zip" for seed in SEEDS]
    model, _ = alone(QCFQL, 1, online_steps=10)
    model.save(tmp_path / "alone.zip")
    # the file holds one seed: the size of the model trained alone, not S times it
    assert paths[1].stat().st_size == pytest.approx((tmp_path / "alone.zip").stat().st_size, rel=0.05)
    loaded = QCFQL.load(paths[1], env=PointReachEnv())
    assert_close_states(loaded.policy.state_dict(), model.policy.state_dict(), TOLERANCE)
    assert_close_states(loaded.policy.state_dict(), group.models[1].policy.state_dict(), 0.0)
    loaded_state = loaded.policy.critic.optimizer.state_dict()["state"]
    alone_state = model.policy.critic.optimizer.state_dict()["state"]
    assert loaded_state.keys() == alone_state.keys()
    for key in alone_state:
        assert th.allclose(loaded_state[key]["exp_avg_sq"], alone_state[key]["exp_avg_sq"], atol=1e-7, rtol=1e-3)


def test_a_seed_trains_alone_after_the_group():
    group, _ = together(QCFQL, online_steps=10)
    model, _ = alone(QCFQL, 0, online_steps=10)
    member = group.models[0]
    assert member._seed_group_member is None
    # the seed's random streams stand where its model's alone do
    streams, alone_streams = group._turns.random_states[0], global_random_state()
    assert th.equal(streams[2], alone_streams[2]) and all(
        np.array_equal(mine, theirs) for mine, theirs in zip(streams[1], alone_streams[1], strict=True)
    )
    model.learn(10, reset_num_timesteps=False)
    set_global_random_state(streams)
    member.learn(10, reset_num_timesteps=False)
    assert_close_states(model.policy.state_dict(), member.policy.state_dict(), TOLERANCE)


class StopAt(BaseCallback):
    def __init__(self, calls: int):
        super().__init__()
        self.calls = calls

    def _on_step(self) -> bool:
        return self.n_calls < self.calls


def test_a_seed_stopping_early_stops_stacked_seeds_with_a_message():
    group = SeedParallel(QCFQL, lambda seed: PointReachEnv(), (0, 1), stacked=True, **settings(QCFQL))
    with pytest.raises(SeedGroupError, match="lockstep"):
        group.learn(10, callbacks=[None, StopAt(5)])


def test_a_seed_stopping_early_leaves_the_others_going_one_after_another():
    group = SeedParallel(QCFQL, lambda seed: PointReachEnv(), (0, 1), stacked=False, **settings(QCFQL))
    group.learn(10, callbacks=[None, StopAt(5)])
    first, second = group.models
    assert first.num_timesteps == 10 and second.num_timesteps == 0  # the callback stops seed 1 in its offline phase
    assert first._n_updates == OFFLINE_STEPS + 10 and second._n_updates == 5


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"compile_step": True}, ValueError, "compile_step"),
        ({"seed": 3}, TypeError, "'seed'"),
        ({"train_freq": (1, "episode")}, ValueError, "train_freq"),
    ],
)
def test_unsupported_settings_are_refused_by_name(kwargs, error, message):
    with pytest.raises(error, match=message):
        SeedParallel(QCFQL, lambda seed: PointReachEnv(), SEEDS, stacked=True, **{**settings(QCFQL), **kwargs})


def test_seeds_one_after_another_take_what_each_model_takes_alone():
    kwargs = {**settings(QCFQL), "compile_step": True, "train_freq": (1, "episode")}
    group = SeedParallel(QCFQL, lambda seed: PointReachEnv(), (0, 1), stacked=False, **kwargs)
    assert all(model.compile_step for model in group.models)


def test_other_algorithms_and_bad_seeds_are_refused():
    with pytest.raises(TypeError, match="QC or QCFQL"):
        SeedParallel(RLPD, lambda seed: PointReachEnv(), SEEDS)
    with pytest.raises(ValueError, match="distinct"):
        SeedParallel(QCFQL, lambda seed: PointReachEnv(), [1, 1], **settings(QCFQL))
    group = SeedParallel(QCFQL, lambda seed: PointReachEnv(), (0, 1), **settings(QCFQL))
    with pytest.raises(ValueError, match="one entry per seed"):
        group.learn(10, callbacks=[None])


def test_each_seed_logs_to_its_own_tensorboard_run(tmp_path):
    kwargs = {**settings(QCFQL), "offline_gradient_steps": 5, "tensorboard_log": str(tmp_path)}
    SeedParallel(QCFQL, lambda seed: PointReachEnv(), (3, 4), **kwargs).learn(5, tb_log_name="pilot")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["pilot_seed3_1", "pilot_seed4_1"]
