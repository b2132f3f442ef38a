"""ChunkedActionWrapper: any Gymnasium env with a Box action space -> a macro-action env over chunks of h actions."""

from numbers import Integral, Real
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class ChunkedActionWrapper(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """
    Macro-action wrapper: one ``step`` executes a chunk of ``chunk_size`` primitive actions, open loop.

    The action space is a flat, time-major Box ``[a_0, a_1, ..., a_{h-1}]`` of shape ``(chunk_size * A,)``
    (A = number of elements of one primitive action) with the primitive bounds tiled and the same dtype.
    ``step`` also accepts the chunk as an array of shape ``(chunk_size, *primitive_shape)``.

    The chunk stops early at the first ``terminated`` or ``truncated`` primitive step; the remaining actions
    are not executed. The returned reward is the discounted sum ``sum_k gamma^k r_k`` over the executed steps,
    and the info of the last primitive step is extended with:

    - ``chunk_steps``: number of primitive steps executed (``k``, at most ``chunk_size``),
    - ``chunk_discount``: ``gamma ** chunk_steps``, the discount to bootstrap the macro-transition with,
    - ``chunk_rewards``: the raw primitive rewards, one per executed step.

    To train SB3 off-policy algorithms (SAC, TD3, TQC, CrossQ) with the correct bootstrap discount, use
    :class:`~qc_sb3.common.macro_buffer.ChunkDiscountReplayBuffer`. Episode statistics of a ``Monitor`` placed
    outside this wrapper are sums of discounted chunk rewards and count macro steps: wrap the primitive env in
    ``Monitor`` first (``ChunkedActionWrapper(Monitor(env), h)``) to log true returns and lengths.

    :param env: Environment to wrap; its action space must be a ``gymnasium.spaces.Box``
    :param chunk_size: Number of primitive actions per macro-action (h >= 1)
    :param gamma: Discount factor, in [0, 1], used for the in-chunk reward sum and ``chunk_discount``
    """

    def __init__(self, env: gym.Env, chunk_size: int, gamma: float = 0.99):
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, Integral) or chunk_size < 1:
            raise ValueError(f"chunk_size must be an int >= 1, got {chunk_size!r}")
        if isinstance(gamma, bool) or not isinstance(gamma, Real) or not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be a number in [0, 1], got {gamma!r}")
        if not isinstance(env.action_space, spaces.Box):
            raise ValueError(f"ChunkedActionWrapper needs a Box action space, got {env.action_space!r}")
        gym.utils.RecordConstructorArgs.__init__(self, chunk_size=chunk_size, gamma=gamma)
        gym.Wrapper.__init__(self, env)

        self.chunk_size = int(chunk_size)
        self.gamma = float(gamma)
        # The wrapped env's own (per-step) action space; `action_space` is the chunk space over it.
        self.primitive_action_space: spaces.Box = env.action_space
        primitive_shape = self.primitive_action_space.shape
        self._chunk_shape = (self.chunk_size, *primitive_shape)
        self._flat_shape = (self.chunk_size * int(np.prod(primitive_shape)),)
        # Chunk bounds: the primitive bounds repeated once per time step, time-major.
        self.action_space = spaces.Box(
            low=np.tile(self.primitive_action_space.low.reshape(-1), self.chunk_size),
            high=np.tile(self.primitive_action_space.high.reshape(-1), self.chunk_size),
            shape=self._flat_shape,
            dtype=self.primitive_action_space.dtype,  # type: ignore[arg-type]
        )

    def step(self, action: np.ndarray) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """
        Execute the chunk's primitive actions in order, stopping at the first termination or truncation.

        :param action: The chunk, of shape ``(chunk_size * A,)`` (flat, time-major) or ``(chunk_size, *primitive_shape)``
        :return: Last observation, discounted chunk reward, last ``terminated``, last ``truncated``,
            last info extended with ``chunk_steps``, ``chunk_discount`` and ``chunk_rewards``
        """
        chunk = np.asarray(action)
        if chunk.shape not in (self._flat_shape, self._chunk_shape):
            raise ValueError(
                f"Chunk action has shape {chunk.shape}, expected {self._flat_shape} (flat, time-major) or {self._chunk_shape}"
            )
        chunk = chunk.reshape(self._chunk_shape)

        rewards: list[float] = []
        for primitive_action in chunk:
            observation, reward, terminated, truncated, info = self.env.step(primitive_action)
            rewards.append(float(reward))
            if terminated or truncated:
                break

        chunk_rewards = np.asarray(rewards, dtype=np.float64)
        chunk_steps = len(rewards)
        # Discounted in-chunk return: R = sum_{k < chunk_steps} gamma^k r_k
        chunk_return = float(np.sum(self.gamma ** np.arange(chunk_steps) * chunk_rewards))
        info = dict(info)
        info["chunk_steps"] = chunk_steps
        # Bootstrap discount of the macro-transition: gamma^k for the k executed steps
        info["chunk_discount"] = self.gamma**chunk_steps
        info["chunk_rewards"] = chunk_rewards
        return observation, chunk_return, bool(terminated), bool(truncated), info
