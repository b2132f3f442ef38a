"""The observations and policy names the chunked algorithms accept, refused by name before any work starts."""

from __future__ import annotations

from gymnasium import spaces
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import GymEnv
from stable_baselines3.common.vec_env import VecEnv

from qc_sb3.common.env_checks import with_observation_checks

_FLATTEN_HINT = (
    "flatten it with `gymnasium.wrappers.FlattenObservation` (or SB3's `VecFlattenObservation` around a VecEnv)"
)


class AcceptedInputsMixin(OffPolicyAlgorithm):
    """
    Flat observations only (a vector or an image): the chunk buffer stores each observation as one array, so dict
    observation spaces and SB3's ``"MultiInputPolicy"`` are refused with what to use instead.
    """

    def _get_policy_from_name(self, policy_name: str) -> type[BasePolicy]:
        if policy_name in self.policy_aliases:
            return self.policy_aliases[policy_name]
        if policy_name == "MultiInputPolicy":
            raise ValueError(
                f"{type(self).__name__} does not support 'MultiInputPolicy': dict observations are not supported, "
                f"{_FLATTEN_HINT}; for image observations use 'CnnPolicy'"
            )
        raise ValueError(
            f"policy {policy_name!r} unknown for {type(self).__name__}; expected one of {sorted(self.policy_aliases)}"
        )

    @staticmethod
    def _wrap_env(env: GymEnv, verbose: int = 0, monitor_wrapper: bool = True) -> VecEnv:
        wrapped = OffPolicyAlgorithm._wrap_env(with_observation_checks(env), verbose, monitor_wrapper)
        if isinstance(wrapped.observation_space, spaces.Dict):
            raise ValueError(
                f"dict observation spaces are not supported, got {wrapped.observation_space}: {_FLATTEN_HINT}"
            )
        return wrapped
