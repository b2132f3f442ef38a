"""Checks of the env a chunked algorithm is given: not already chunked."""

from __future__ import annotations

import gymnasium as gym
from stable_baselines3.common.env_util import is_wrapped, unwrap_wrapper
from stable_baselines3.common.vec_env import VecEnv

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
