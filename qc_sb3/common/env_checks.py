"""Checks of the env a chunked algorithm is given: not already chunked, observations of the space's shape."""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from stable_baselines3.common.env_util import is_wrapped, unwrap_wrapper
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv, VecEnvWrapper

from qc_sb3.common.wrappers import ChunkedActionWrapper


def refuse_chunked_env(env: gym.Env | VecEnv, algorithm: str, chunk_size: int) -> None:
    """
    Refuse an env wrapped in :class:`~qc_sb3.common.wrappers.ChunkedActionWrapper` (anywhere in its wrapper chain,
    or in any env of a VecEnv): the chunked algorithms chunk actions themselves, so each decision would execute a
    chunk of chunks.

    :param env: The env given to the algorithm (a gym env or a VecEnv)
    :param algorithm: The algorithm's name, for the message
    :param chunk_size: The algorithm's chunk size h
    """
    if isinstance(env, VecEnv):
        wrapped = env.env_is_wrapped(ChunkedActionWrapper)
        if not any(wrapped):
            return
        index = wrapped.index(True)
        wrapper_chunk_size = env.get_attr("chunk_size", indices=[index])[0]
    elif is_wrapped(env, ChunkedActionWrapper):
        index, wrapper_chunk_size = 0, unwrap_wrapper(env, ChunkedActionWrapper).chunk_size  # type: ignore[union-attr]
    else:
        return
    raise ValueError(
        f"the env (env {index}) is wrapped in ChunkedActionWrapper(chunk_size={wrapper_chunk_size}), but {algorithm} "
        f"chunks actions itself (chunk_size={chunk_size}): each of its decisions would execute a chunk of chunks, "
        f"{chunk_size} x {wrapper_chunk_size} = {chunk_size * wrapper_chunk_size} primitive steps. Give {algorithm} "
        "the primitive env, without ChunkedActionWrapper (which is for SB3's own algorithms: SAC, TD3, PPO, ...)"
    )


class ObservationShapeCheck(gym.Wrapper):
    """
    Refuse an observation whose shape is not the observation space's, at every reset and step, before a VecEnv
    copies it into its buffer (where a (1,) or scalar observation would be broadcast silently into a (3,) space).
    The chunked algorithms put it around the env they are given (:func:`with_observation_checks`).

    :param env: The env to check
    :param env_index: The env's index in its VecEnv, for the message
    """

    def __init__(self, env: gym.Env, env_index: int = 0):
        super().__init__(env)
        self.env_index = env_index
        self.steps_since_wrapped = 0
        self.episode_steps = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Reset the env and check its first observation."""
        observation, info = self.env.reset(seed=seed, options=options)
        self.episode_steps = 0
        if np.shape(observation) != self.observation_space.shape:
            self._refuse(observation, "at a reset")
        return observation, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step the env and check the observation it returns."""
        observation, reward, terminated, truncated, info = self.env.step(action)
        self.steps_since_wrapped += 1
        self.episode_steps += 1
        if np.shape(observation) != self.observation_space.shape:
            steps = f"{self.steps_since_wrapped} steps since the algorithm got it"
            self._refuse(observation, f"at step {self.episode_steps} of its episode ({steps})")
        return observation, reward, terminated, truncated, info

    def _refuse(self, observation: Any, when: str) -> None:
        """Raise the error for an observation of another shape than the space's."""
        raise ValueError(
            f"env {self.env_index} returned an observation of shape {np.shape(observation)} {when}, expected "
            f"{self.observation_space.shape}, the shape of its observation space {self.observation_space}: an "
            "observation must keep the space's shape at every step (a VecEnv would broadcast it into its buffer, or "
            "fail to copy it)"
        )


def with_observation_checks(env: gym.Env | VecEnv) -> gym.Env | VecEnv:
    """
    Put :class:`ObservationShapeCheck` around a gym env, or, in place, around each env of a ``DummyVecEnv`` (also
    under VecEnv wrappers), where not already there. Other VecEnvs (``SubprocVecEnv``) step their envs in other
    processes: their observations are checked as a batch where transitions are stored (:func:`check_observation_batch`).

    :param env: The env given to the algorithm
    :return: The env to use (the same object for a VecEnv)
    """
    if not isinstance(env, VecEnv):
        return env if is_wrapped(env, ObservationShapeCheck) else ObservationShapeCheck(env)
    inner: VecEnv = env
    while isinstance(inner, VecEnvWrapper):
        inner = inner.venv
    if isinstance(inner, DummyVecEnv):
        for index, sub_env in enumerate(inner.envs):
            if not is_wrapped(sub_env, ObservationShapeCheck):
                inner.envs[index] = ObservationShapeCheck(sub_env, index)
    return env


def check_observation_batch(
    observations: np.ndarray, infos: list[dict[str, Any]], dones: np.ndarray, obs_shape: tuple[int, ...], env_step: int
) -> None:
    """
    Refuse a VecEnv step whose observations (or an episode's terminal observation) do not have the space's shape,
    before they are stored.

    :param observations: The step's observations, ``(n_envs, *obs_shape)`` expected
    :param infos: The step's infos (``terminal_observation`` at episode ends)
    :param dones: The step's episode ends
    :param obs_shape: The observation space's shape
    :param env_step: The env step (``num_timesteps``), for the message
    """
    n_envs = len(infos)
    if np.shape(observations) != (n_envs, *obs_shape):
        raise ValueError(
            f"the env returned observations of shape {np.shape(observations)} at env step {env_step} (num_timesteps), "
            f"expected {(n_envs, *obs_shape)} ({n_envs} env(s) of observation shape {obs_shape})"
        )
    for env_index, (done, info) in enumerate(zip(dones, infos, strict=True)):
        terminal = info.get("terminal_observation") if done else None
        if terminal is not None and np.shape(terminal) != obs_shape:
            raise ValueError(
                f"env {env_index} returned a terminal observation of shape {np.shape(terminal)} at env step {env_step} "
                f"(num_timesteps), expected {obs_shape}, the observation space's"
            )
