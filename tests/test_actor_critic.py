"""What ActorCriticChunkPolicy owns for QC, QC-FQL and RLPD: the optimizers, the target copies, the features extractors."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn

from qc_sb3 import QC, QCFQL, RLPD

OBS_DIM, ACTION_DIM = 3, 2


class LinearExtractor(BaseFeaturesExtractor):
    """A features extractor with weights: tanh(W s + b), 4 features."""

    def __init__(self, observation_space: spaces.Box, features_dim: int = 4):
        super().__init__(observation_space, features_dim)
        self.linear = nn.Linear(int(np.prod(observation_space.shape)), features_dim)

    def forward(self, observations: th.Tensor) -> th.Tensor:
        return th.tanh(self.linear(observations.flatten(1)))


class NoisyEnv(gym.Env):
    """Random observations and rewards: enough for gradients to reach every network."""

    observation_space = spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
    action_space = spaces.Box(-1.0, 1.0, (ACTION_DIM,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.np_random.normal(size=OBS_DIM).astype(np.float32), {}

    def step(self, action):
        observation = self.np_random.normal(size=OBS_DIM).astype(np.float32)
        return observation, float(self.np_random.normal()), False, False, {}


ALGORITHMS = {
    "QC": (QC, {"flow_steps": 2, "actor_num_samples": 3, "offline_gradient_steps": 0}, "flow"),
    "QC-FQL": (QCFQL, {"flow_steps": 2, "offline_gradient_steps": 0}, "actor"),
    "RLPD": (RLPD, {"n_critics": 2}, "actor"),
}


def make_model(name: str, **policy_kwargs):
    cls, kwargs, _ = ALGORITHMS[name]
    policy_kwargs = {"net_arch": [8], "features_extractor_class": LinearExtractor, **policy_kwargs}
    env = gym.wrappers.TimeLimit(NoisyEnv(), 10)
    return cls("MlpPolicy", env, learning_starts=4, batch_size=4, chunk_size=2, policy_kwargs=policy_kwargs, seed=0, **kwargs)


def optimized_ids(optimizer: th.optim.Optimizer) -> set[int]:
    return {id(parameter) for group in optimizer.param_groups for parameter in group["params"]}


def extractors(policy) -> dict[str, nn.Module]:
    """The policy's features extractors by the side they belong to: the actor side's, and the critic's."""
    return {"actor": policy.features_extractor, "critic": policy.critic_features_extractor}


def snapshot(module: nn.Module) -> list[th.Tensor]:
    return [parameter.detach().clone() for parameter in module.parameters()]


SHARE = pytest.mark.parametrize("share", [False, True], ids=["own critic extractor", "shared extractor"])


@SHARE
@pytest.mark.parametrize("name", ALGORITHMS)
def test_each_features_extractor_is_held_by_the_optimizer_of_its_side(name: str, share: bool) -> None:
    policy = make_model(name, share_features_extractor=share).policy
    owner = ALGORITHMS[name][2]
    actor_ids = {id(parameter) for parameter in policy.features_extractor.parameters()}
    critic_ids = {id(parameter) for parameter in policy.critic_features_extractor.parameters()}
    assert actor_ids and critic_ids  # non-trivial extractors
    # SB3's SAC: a critic with its own extractor optimizes it; a shared one is the actor's alone.
    assert (policy.critic_features_extractor is policy.features_extractor) == share
    for module_name in policy.optimized_modules:
        held = optimized_ids(getattr(policy, module_name).optimizer)
        assert held & actor_ids == (actor_ids if module_name == owner else set()), module_name
        if not share:
            assert held & critic_ids == (critic_ids if module_name == "critic" else set()), module_name


# Which extractor each optimized loss trains (docs/design.md): the critic loss the critic's own one only, every
# actor-side loss the actor side's only (the temperature's none).
TRAINED_BY = {"critic_loss": {"critic"}, "actor_loss": {"actor"}, "alpha_loss": set(), "bc_loss": {"actor"}}
OPTIMIZED = {"QC": ["critic_loss", "actor_loss"], "QC-FQL": ["critic_loss", "actor_loss"], "RLPD": list(TRAINED_BY)}


@SHARE
@pytest.mark.parametrize(("name", "loss"), [(name, loss) for name in ALGORITHMS for loss in OPTIMIZED[name]])
def test_train_moves_an_extractor_only_through_the_losses_that_train_it(name: str, loss: str, share: bool) -> None:
    model = make_model(name, share_features_extractor=share)
    model.learning_starts = 100
    with pytest.warns(UserWarning, match="no online update will happen"):
        model.learn(total_timesteps=10)  # data only
    policy = model.policy
    # Only `loss` is backpropagated: an extractor moves iff this loss trains it.
    model._optimized_loss = lambda losses: losses[loss]  # type: ignore[method-assign]
    before = {side: snapshot(extractor) for side, extractor in extractors(policy).items()}
    model.train(gradient_steps=2, batch_size=4)
    expected = TRAINED_BY[loss] if not share else TRAINED_BY[loss] - {"critic"}
    for side, extractor in extractors(policy).items():
        if share and side == "critic":
            continue  # the same module as the actor side's
        moved = any(not th.equal(old, new) for old, new in zip(before[side], extractor.parameters(), strict=True))
        assert moved == (side in expected), (side, loss)


@SHARE
@pytest.mark.parametrize("name", ALGORITHMS)
def test_both_extractors_train_and_the_target_critic_reads_a_polyak_copy_of_the_critics(name: str, share: bool) -> None:
    model = make_model(name, share_features_extractor=share)
    policy = model.policy
    target, critic_extractor = policy.features_extractor_target, policy.critic_features_extractor
    assert target is not critic_extractor
    assert all(not parameter.requires_grad for parameter in target.parameters())
    for online, copied in zip(critic_extractor.parameters(), target.parameters(), strict=True):
        assert th.equal(online, copied) and online.data_ptr() != copied.data_ptr()
    initial = {side: snapshot(extractor) for side, extractor in extractors(policy).items()}
    initial_target = snapshot(target)
    online_before_step, target_before_step = [], []
    original_step = model._gradient_step

    def recording_step(batch_size: int) -> dict[str, th.Tensor]:
        online_before_step[:] = snapshot(critic_extractor)
        target_before_step[:] = snapshot(target)
        return original_step(batch_size)

    model._gradient_step = recording_step  # type: ignore[method-assign]
    model.learn(total_timesteps=12)
    assert model._n_updates > 0
    for side, extractor in extractors(policy).items():
        assert all(not th.equal(a, b) for a, b in zip(initial[side], extractor.parameters(), strict=True)), side
    # docs/algorithms.md §3: target <- (1 - tau) target + tau online, from the online weights before the step.
    for old_target, old_online, new_target in zip(target_before_step, online_before_step, target.parameters(), strict=True):
        th.testing.assert_close(new_target, (1 - model.tau) * old_target + model.tau * old_online)
    assert any(not th.equal(a, b) for a, b in zip(initial_target, target.parameters(), strict=True))


def test_a_parameterless_extractor_is_one_module_and_share_features_extractor_must_be_a_bool() -> None:
    cls, kwargs, _ = ALGORITHMS["QC"]
    env = gym.wrappers.TimeLimit(NoisyEnv(), 10)
    policy = cls("MlpPolicy", env, policy_kwargs={"net_arch": [8]}, **kwargs).policy  # the flattening default
    assert policy.critic_features_extractor is policy.features_extractor
    with pytest.raises(TypeError, match="share_features_extractor must be True or False, got 'yes'"):
        make_model("QC", share_features_extractor="yes")


@pytest.mark.parametrize("name", ALGORITHMS)
def test_every_trained_parameter_has_exactly_one_optimizer_and_every_optimizer_is_saved(name: str, tmp_path) -> None:
    model = make_model(name)
    policy = model.policy
    targets = {id(p) for p in [*policy.critic_target.parameters(), *policy.features_extractor_target.parameters()]}
    trained = {id(p) for p in policy.parameters() if id(p) not in targets}
    held = [optimized_ids(optimizer) for optimizer in policy.optimizers]
    assert sum(len(ids) for ids in held) == len(trained) and set().union(*held) == trained
    model.learn(total_timesteps=8)
    model.save(tmp_path / "model.zip")
    loaded = type(model).load(tmp_path / "model.zip", env=model.get_env())
    assert len(loaded.policy.optimizers) == len(policy.optimizers)
    for saved, restored in zip(policy.optimizers, loaded.policy.optimizers, strict=True):
        assert saved is not restored and saved.state_dict()["state"].keys() == restored.state_dict()["state"].keys()
        for key, state in saved.state_dict()["state"].items():
            th.testing.assert_close(restored.state_dict()["state"][key]["exp_avg"], state["exp_avg"])
    saved_target, loaded_target = policy.features_extractor_target, loaded.policy.features_extractor_target
    for online, copied in zip(saved_target.parameters(), loaded_target.parameters(), strict=True):
        assert th.equal(online, copied)


@pytest.mark.parametrize("name", ALGORITHMS)
def test_net_arch_follows_sb3(name: str) -> None:
    def first_widths(policy) -> tuple[int, int]:
        actor = policy.flow if name != "RLPD" else policy.actor
        actor_width = actor.mlp.linears[0].out_features if name != "RLPD" else actor.latent_pi[0].out_features
        return actor_width, policy.critic_hidden_dims[0]

    assert first_widths(make_model(name, net_arch=dict(pi=[6], qf=[10])).policy) == (6, 10)
    assert first_widths(make_model(name, net_arch=[7]).policy) == (7, 7)
    with pytest.raises(ValueError, match="no 'qf' key"):  # refused as SB3 refuses it, not filled in with 4 x 512
        make_model(name, net_arch=dict(pi=[6]))
    policy_kwargs = {"features_extractor_class": LinearExtractor}
    cls, kwargs, _ = ALGORITHMS[name]
    env = gym.wrappers.TimeLimit(NoisyEnv(), 10)
    assert cls("MlpPolicy", env, policy_kwargs=policy_kwargs, **kwargs).policy.actor_hidden_dims == [512] * 4
    with pytest.raises(ValueError, match="vf"):
        make_model(name, net_arch=dict(pi=[6], vf=[6]))


class BatchNormExtractor(BaseFeaturesExtractor):
    """A features extractor with normalisation statistics: Linear -> BatchNorm."""

    def __init__(self, observation_space: spaces.Box, features_dim: int = 4):
        super().__init__(observation_space, features_dim)
        self.net = nn.Sequential(nn.Linear(int(np.prod(observation_space.shape)), features_dim), nn.BatchNorm1d(features_dim))

    def forward(self, observations: th.Tensor) -> th.Tensor:
        return self.net(observations)


@SHARE
@pytest.mark.parametrize("name", ALGORITHMS)
def test_targets_stay_in_eval_mode_and_copy_the_online_normalisation_statistics(name: str, share: bool) -> None:
    # SB3's SAC: target networks never train; their BatchNorm statistics are the online ones, copied after each update.
    model = make_model(name, features_extractor_class=BatchNormExtractor, share_features_extractor=share)
    model.learn(total_timesteps=8)
    policy = model.policy
    assert not policy.features_extractor_target.training and not policy.critic_target.training
    online = policy.critic_features_extractor.net[1]
    target = policy.features_extractor_target.net[1]
    assert not th.equal(online.running_mean, th.zeros_like(online.running_mean)), "the online statistics moved"
    th.testing.assert_close(target.running_mean, online.running_mean, rtol=0, atol=0)
    th.testing.assert_close(target.running_var, online.running_var, rtol=0, atol=0)
