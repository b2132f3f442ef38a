"""Checks of the keyword-argument dictionaries an SB3 user passes (``policy_kwargs``, ``replay_buffer_kwargs``)."""

from __future__ import annotations

import inspect
from typing import Any

# Arguments that SB3's OffPolicyAlgorithm passes to the replay buffer itself, with where a user sets them instead.
_BUFFER_ARGUMENTS_SET_BY_THE_ALGORITHM = {
    "buffer_size": "the algorithm's buffer_size",
    "observation_space": "the env",
    "action_space": "the env",
    "device": "the algorithm's device",
    "n_envs": "the env (the number of envs of its VecEnv)",
    "chunk_size": "the algorithm's chunk_size",
    "gamma": "the algorithm's gamma",
}
# The policy's constructor arguments that are not keyword arguments of the user's.
_POSITIONAL_POLICY_ARGUMENTS = {"self", "observation_space", "action_space", "lr_schedule"}


def _named_parameters(cls: type, base: type) -> set[str]:
    """The named ``__init__`` parameters of ``cls`` and of its parents up to ``base`` (where ``**kwargs`` leads)."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if not (isinstance(klass, type) and issubclass(klass, base)) or "__init__" not in vars(klass):
            continue
        for parameter in inspect.signature(klass.__init__).parameters.values():  # type: ignore[misc]
            if parameter.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
                names.add(parameter.name)
    return names


def check_policy_kwargs(algorithm: type, algorithm_base: type, policy_class: type, policy_kwargs: dict[str, Any]) -> None:
    """
    Refuse, before any work, a ``policy_kwargs`` key the policy does not take (a TypeError naming it and listing the
    accepted keys), one the algorithm sets from its own argument (a ValueError naming that argument), and a
    ``net_arch`` dict without both ``pi`` and ``qf`` (as SB3's ``get_actor_critic_arch`` refuses it), or with others.

    :param algorithm: The algorithm class (QC, QCFQL, RLPD, ...)
    :param algorithm_base: The base class whose subclasses' constructor arguments count as the algorithm's
    :param policy_class: The policy class the algorithm builds
    :param policy_kwargs: The user's ``policy_kwargs``
    """
    from qc_sb3.common.actor_critic import hidden_dims_of
    from qc_sb3.common.policies import ChunkPolicy

    accepted = _named_parameters(policy_class, ChunkPolicy) - _POSITIONAL_POLICY_ARGUMENTS
    algorithm_arguments = _named_parameters(algorithm, algorithm_base)
    set_by_algorithm = (accepted & algorithm_arguments) | {"chunk_size", "action_chunking"}
    name = algorithm.__name__
    for key in policy_kwargs:
        if key in set_by_algorithm:
            where = f"pass {name}(..., {key}=...) instead" if key in algorithm_arguments else "it cannot be changed"
            raise ValueError(f"policy_kwargs[{key!r}] is set by {name} itself: {where} (policy_kwargs would be overridden)")
        if key not in accepted:
            raise TypeError(
                f"policy_kwargs has an unknown key {key!r} for {policy_class.__name__}; accepted keys: "
                f"{', '.join(sorted(accepted - set_by_algorithm))}"
            )
    hidden_dims_of(policy_kwargs.get("net_arch"))  # a ValueError for a net_arch SB3 refuses


def check_replay_buffer_kwargs(replay_buffer_class: type, replay_buffer_kwargs: dict[str, Any]) -> None:
    """
    Refuse, before any work, a ``replay_buffer_kwargs`` key the buffer class does not take or that the algorithm
    passes itself (a ValueError naming it and where to set it instead), and ``optimize_memory_usage=True``, which
    the chunk buffer does not support.

    :param replay_buffer_class: The replay buffer class (ChunkReplayBuffer or a subclass)
    :param replay_buffer_kwargs: The user's ``replay_buffer_kwargs``
    """
    from qc_sb3.common.buffers import ChunkReplayBuffer

    if "optimize_memory_usage" in replay_buffer_kwargs:
        raise ValueError(
            f"replay_buffer_kwargs: optimize_memory_usage is not supported by the chunk replay buffer (got "
            f"{replay_buffer_kwargs['optimize_memory_usage']!r}; leave the key out). SB3's memory-saving variant reads "
            "each next observation from the following slot, which loses the true last observation of an episode (SB3 "
            "refuses it with handle_timeout_termination=True, its default, for that reason); the chunk windows "
            "bootstrap from it at every truncation. To save memory, lower buffer_size (float64 observations are "
            "already stored as float32)"
        )
    for key in replay_buffer_kwargs:
        if key in _BUFFER_ARGUMENTS_SET_BY_THE_ALGORITHM:
            raise ValueError(
                f"replay_buffer_kwargs[{key!r}] is passed to the replay buffer by the algorithm: it comes from "
                f"{_BUFFER_ARGUMENTS_SET_BY_THE_ALGORITHM[key]}"
            )
    accepted = _named_parameters(replay_buffer_class, ChunkReplayBuffer) - {
        "self",
        "optimize_memory_usage",
        *_BUFFER_ARGUMENTS_SET_BY_THE_ALGORITHM,
    }
    unknown = sorted(set(replay_buffer_kwargs) - accepted)
    if unknown:
        raise ValueError(
            f"replay_buffer_kwargs has unknown key(s) {unknown} for {replay_buffer_class.__name__}; accepted keys: "
            f"{', '.join(sorted(accepted))}"
        )
