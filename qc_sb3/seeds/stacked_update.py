"""One gradient step of S seeds at once: their losses vmapped over stacked parameters (docs/guides/seeds.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch as th
from torch import nn
from torch.func import functional_call, vmap
from torch.utils._pytree import tree_map

from qc_sb3.common.flow_q import FlowQAlgorithm, FlowQPolicy

# Algorithm attributes that every seed of a group must share (the update is one computation for all of them).
SHARED_SETTINGS = (
    "gamma", "tau", "batch_size", "chunk_size", "action_chunking", "flow_steps", "n_critics", "q_agg", "alpha",
    "actor_num_samples", "device",
)  # fmt: skip


class _SeedLosses(nn.Module):
    """The losses of one seed, as a module whose parameters ``functional_call`` substitutes."""

    def __init__(self, algorithm: FlowQAlgorithm, policy: FlowQPolicy):
        super().__init__()
        self.policy = policy
        object.__setattr__(self, "algorithm", algorithm)  # not a submodule: only its settings are read

    def forward(self, batch: Any, noise: dict[str, th.Tensor]) -> dict[str, th.Tensor]:
        return self.algorithm._losses(batch, noise, policy=self.policy)


def check_same_settings(models: Sequence[FlowQAlgorithm]) -> None:
    """
    Refuse seeds that cannot share one update: other classes, settings or network shapes.

    :param models: The seeds' models
    :raises ValueError: Naming the first setting that differs
    """
    first = models[0]
    for index, model in enumerate(models[1:], start=1):
        if type(model) is not type(first):
            raise ValueError(f"seed {index} is a {type(model).__name__}, seed 0 a {type(first).__name__}")
        for name in SHARED_SETTINGS:
            if getattr(model, name, None) != getattr(first, name, None):
                raise ValueError(
                    f"seeds must share {name!r} to train together: seed 0 has {getattr(first, name, None)!r}, "
                    f"seed {index} {getattr(model, name, None)!r}"
                )
        shapes = {name: p.shape for name, p in model.policy.state_dict().items()}
        if shapes != {name: p.shape for name, p in first.policy.state_dict().items()}:
            raise ValueError(f"seed {index}'s networks differ in shape from seed 0's (policy_kwargs must be the same)")


class StackedUpdate:
    """
    The gradient update of S seeds as one computation (docs/algorithms.md §3, once per seed): every parameter and
    buffer of the seeds' policies is stacked along a new leading dimension, and each seed's policy then holds views
    of its slice, so acting, evaluating and saving a seed read the current weights without a copy. One call runs
    :meth:`~qc_sb3.common.flow_q.FlowQAlgorithm._losses` vmapped over the seeds on plain (unaccelerated) copies of
    the networks, backpropagates the sum of the seeds' optimized losses (each seed's parameters get its own
    gradient), moves the stacked targets by Polyak averaging, and steps one optimizer per policy optimizer over the
    stacked tensors (its class and settings; Adam's state is per element, so per seed).

    :param models: The seeds' models, built alike (same class, settings, networks), their optimizers' states
        (empty, or restored from a checkpoint) stacked into the shared optimizers
    """

    def __init__(self, models: Sequence[FlowQAlgorithm]):
        check_same_settings(models)
        first = models[0]
        if first.compile_step:
            raise ValueError("seeds in one process need compile_step=False (the stacked update runs eagerly)")
        if first._has_running_statistics:
            raise ValueError("seeds in one process do not support normalisation statistics (BatchNorm) in the networks")
        self.models = list(models)
        self.n_seeds = len(models)
        self.template = _plain_copy(first.policy)
        self._losses_module = _SeedLosses(first, self.template)
        policies = [model.policy for model in models]
        self.parameters = _stack_into(policies, "named_parameters")
        self.buffers = _stack_into(policies, "named_buffers")
        self.optimizers = [
            _stacked_optimizer(policies, index, self.parameters) for index in range(len(first.policy.optimizers))
        ]
        targets, sources = first.policy.target_parameters()
        names = {id(parameter): name for name, parameter in first.policy.named_parameters()}
        self.target_pairs = (
            [self.parameters[names[id(t)]] for t in targets],
            [self.parameters[names[id(s)]] for s in sources],
        )

    def __call__(self, batches: Sequence[Any], noises: Sequence[dict[str, th.Tensor]]) -> list[dict[str, th.Tensor]]:
        """
        One gradient step of every seed.

        :param batches: Each seed's batch of chunk windows
        :param noises: Each seed's random draws of the step (``step_noise``)
        :return: Each seed's losses, detached scalars
        """
        batch = tree_map(lambda *leaves: th.stack(leaves), *batches)
        noise = tree_map(lambda *leaves: th.stack(leaves), *noises)
        for optimizer, member_optimizer in zip(self.optimizers, self.models[0].policy.optimizers, strict=True):
            for group, member_group in zip(optimizer.param_groups, member_optimizer.param_groups, strict=True):
                group["lr"] = member_group["lr"]  # the seeds' schedule, set by their train() / offline phase
        parameters = {f"policy.{name}": tensor for name, tensor in self.parameters.items()}
        buffers = {f"policy.{name}": tensor for name, tensor in self.buffers.items()}
        losses = vmap(self._seed_losses, randomness="error")(parameters, buffers, batch, noise)
        for optimizer in self.optimizers:
            optimizer.zero_grad(set_to_none=True)
        # Each seed's optimized loss depends on its own slice only: the sum's gradient is every seed's own.
        self.models[0]._optimized_loss(losses).sum().backward()
        with th.no_grad():  # docs/algorithms.md §3: the target follows the critic's weights before this step
            th._foreach_lerp_(*self.target_pairs, self.models[0].tau)
        for optimizer in self.optimizers:
            optimizer.step()
        return [{name: value[index].detach() for name, value in losses.items()} for index in range(self.n_seeds)]

    def _seed_losses(self, parameters: dict, buffers: dict, batch: Any, noise: dict) -> dict[str, th.Tensor]:
        return functional_call(self._losses_module, (parameters, buffers), (batch, noise), strict=True)

    def release(self) -> None:
        """Give every seed its own storage again: parameters, buffers and optimizer states (its slices, copied)."""
        for index, model in enumerate(self.models):
            for _, tensor in [*model.policy.named_parameters(), *model.policy.named_buffers()]:
                tensor.data = tensor.data.clone()
            for optimizer, member_optimizer in zip(self.optimizers, model.policy.optimizers, strict=True):
                member_optimizer.load_state_dict(seed_optimizer_state(optimizer, index))

    def seed_parameters(self, index: int) -> dict[str, Any]:
        """
        Seed ``index``'s policy and optimizer states as its model's ``get_parameters()`` gives them alone: copies of
        its slices, so that a saved file holds that seed only.

        :param index: The seed's position in the group
        :return: ``{"policy": state dict, "policy.<module>.optimizer": state dict, ...}``
        """
        model = self.models[index]
        states: dict[str, Any] = {"policy": {name: t.clone() for name, t in model.policy.state_dict().items()}}
        for name, optimizer in zip(model.policy.optimizer_names(), self.optimizers, strict=True):
            states[f"policy.{name}"] = seed_optimizer_state(optimizer, index)
        return states


def seed_optimizer_state(optimizer: th.optim.Optimizer, index: int) -> dict[str, Any]:
    """
    One seed's slice of a stacked optimizer's state dict (per-element states sliced and copied, the shared step
    count copied).

    :param optimizer: An optimizer over stacked tensors
    :param index: The seed's position in the stack
    :return: A state dict for the seed's own optimizer
    """
    state_dict = optimizer.state_dict()
    sliced = {
        key: {name: (value[index].clone() if name != "step" else value.clone()) for name, value in state.items()}
        for key, state in state_dict["state"].items()
    }
    return {"state": sliced, "param_groups": state_dict["param_groups"]}


def _plain_copy(policy: FlowQPolicy) -> FlowQPolicy:
    """A policy of the same class and settings with the plain networks, drawn without touching any generator."""
    with th.random.fork_rng(devices=[policy.device] if policy.device.type == "cuda" else []):
        return type(policy)(**{**policy._get_constructor_parameters(), "fast_paths": False}).to(policy.device)


def _stack_into(policies: Sequence[FlowQPolicy], kind: str) -> dict[str, th.Tensor]:
    """
    Stack each named tensor of the policies (``named_parameters`` or ``named_buffers``) and make every policy's
    tensor a view of its slice.

    :return: The stacked tensors by name (parameters stay trainable where the policy's were)
    """
    members = [dict(getattr(policy, kind)()) for policy in policies]
    stacked = {}
    for name, tensor in members[0].items():
        stacked[name] = th.stack([member[name].detach() for member in members]).requires_grad_(tensor.requires_grad)
        for index, member in enumerate(members):
            member[name].data = stacked[name].data[index]
    return stacked


def _stacked_optimizer(policies: Sequence[FlowQPolicy], index: int, stacked: dict[str, th.Tensor]) -> th.optim.Optimizer:
    """
    An optimizer of the class and settings of every policy's ``index``-th optimizer over the stacked tensors, with
    the seeds' states stacked in it (after a restored checkpoint).
    """
    member_optimizers = [policy.optimizers[index] for policy in policies]
    names = {id(p): name for name, p in policies[0].named_parameters()}
    first = member_optimizers[0]
    groups = [
        {**{k: v for k, v in group.items() if k != "params"}, "params": [stacked[names[id(p)]] for p in group["params"]]}
        for group in first.param_groups
    ]
    optimizer = type(first)(groups, **first.defaults)
    states = [member.state_dict()["state"] for member in member_optimizers]
    if states[0]:
        state_dict = optimizer.state_dict()
        state_dict["state"] = {
            key: {
                name: (th.stack([s[key][name] for s in states]) if name != "step" else value) for name, value in state.items()
            }
            for key, state in states[0].items()
        }
        optimizer.load_state_dict(state_dict)
    return optimizer
