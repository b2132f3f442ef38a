"""ChunkedActionWrapper: any Gymnasium env with a Box action space -> a macro-action env over chunks of h actions."""

import math
import sys
import time
import warnings
from numbers import Integral, Real
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm

from qc_sb3.common.macro_buffer import ChunkDiscountReplayBuffer


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

    At the end of an episode the info also holds ``episode``: ``{"r": undiscounted sum of the primitive rewards,
    "l": number of primitive steps, "t": seconds since the wrapper was built}``, as SB3's ``Monitor`` writes it
    (or the one a ``Monitor`` inside this wrapper wrote, kept as is).

    Episode statistics: SB3 reads ``info["episode"]`` from the outermost ``Monitor``, and a ``Monitor`` outside
    this wrapper (the one SB3 adds to an env that has none) overwrites it with sums of discounted chunk rewards
    over macro steps, which ``rollout/ep_rew_mean``, ``rollout/ep_len_mean`` and ``evaluate_policy`` then report.
    Put the ``Monitor`` inside: ``ChunkedActionWrapper(Monitor(env), h)``, or
    ``make_vec_env(env_id, wrapper_class=ChunkedActionWrapper, wrapper_kwargs={"chunk_size": h})``. The wrapper
    warns when it sees its ``info["episode"]`` replaced by a gym wrapper outside it; a ``VecMonitor`` writes into
    a copy of the info, so that one it cannot see.

    To train SB3 off-policy algorithms (SAC, TD3, TQC, CrossQ) with the correct bootstrap discount, use
    :class:`~qc_sb3.common.macro_buffer.ChunkDiscountReplayBuffer`: it bootstraps with this wrapper's
    ``gamma ** chunk_steps``, and the algorithm's own ``gamma`` is then unused. The wrapper cannot see the
    algorithm that drives it, but SB3 resets the env inside ``learn()``: at a reset, the wrapper looks up the call
    stack for an SB3 ``OffPolicyAlgorithm`` and warns once if its replay buffer is not a
    ``ChunkDiscountReplayBuffer`` or its ``gamma`` differs from the wrapper's. An on-policy algorithm (PPO, A2C)
    discounts per macro step: its ``gamma`` (and GAE's ``gae_lambda``) applies once per chunk, so the same value
    gives a horizon ``chunk_size`` times longer in primitive steps; set ``gamma = wrapper_gamma ** chunk_size``
    (``0.99 ** 5 = 0.951``), and the wrapper warns once, at the same reset, if the algorithm's differs. The checks
    run where the env steps in the learner's process (a ``DummyVecEnv``), not inside ``SubprocVecEnv`` workers.
    The chunked algorithms of this library (QC, QC-FQL, RLPD) chunk actions themselves and refuse this wrapper.

    The wrapper has no re-planning or temporal ensembling (the ``replan_interval`` and ``temporal_ensemble_rate`` of
    qc_sb3's algorithms), on purpose: the chunk is the SB3 algorithm's action, scored by its critic and bootstrapped
    after the macro step. Executing only its first k actions would leave the other entries of the action unused by
    the env, the k-step chunk MDP with dead action dimensions, which ``chunk_size=k`` gives directly; averaging with
    chunks of earlier macro steps would make the executed actions depend on a history the observation does not show.

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
        self._start_time = time.time()
        self._episode_rewards: list[float] = []
        # The info of the last episode end and the ``episode`` entry it held when returned, to notice an outer
        # wrapper that replaces it.
        self._episode_end_infos: list[tuple[dict[str, Any], Any]] = []
        self._warned_episode_replaced = False
        self._algorithm_checked = False

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Reset the wrapped env and the episode statistics; check the setup around the wrapper (see the class)."""
        self._warn_if_episode_statistics_replaced()
        if not self._algorithm_checked:
            self._check_driving_algorithm()
        self._episode_rewards = []
        return self.env.reset(seed=seed, options=options)

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
        self._episode_rewards.extend(rewards)

        chunk_rewards = np.asarray(rewards, dtype=np.float64)
        chunk_steps = len(rewards)
        # Discounted in-chunk return: R = sum_{k < chunk_steps} gamma^k r_k
        chunk_return = float(np.sum(self.gamma ** np.arange(chunk_steps) * chunk_rewards))
        info = dict(info)
        info["chunk_steps"] = chunk_steps
        # Bootstrap discount of the macro-transition: gamma^k for the k executed steps
        info["chunk_discount"] = self.gamma**chunk_steps
        info["chunk_rewards"] = chunk_rewards
        if terminated or truncated:
            self._end_episode(info)
        return observation, chunk_return, bool(terminated), bool(truncated), info

    def _end_episode(self, info: dict[str, Any]) -> None:
        """Report the primitive episode statistics in ``info["episode"]``, unless a Monitor inside already did."""
        # A VecMonitor writes after the VecEnv has reset this env: the previous episode's info shows it by now.
        self._warn_if_episode_statistics_replaced()
        if "episode" not in info:
            info["episode"] = {
                "r": round(float(np.sum(self._episode_rewards)), 6),
                "l": len(self._episode_rewards),
                "t": round(time.time() - self._start_time, 6),
            }
        self._episode_end_infos = [*self._episode_end_infos[-1:], (info, info["episode"])]

    def _warn_if_episode_statistics_replaced(self) -> None:
        """Warn once if a wrapper outside (a Monitor) replaced the ``info["episode"]`` this wrapper returned."""
        replaced = any(info.get("episode") is not episode for info, episode in self._episode_end_infos)
        if replaced and not self._warned_episode_replaced:
            warnings.warn(
                "a wrapper outside ChunkedActionWrapper (e.g. SB3's Monitor, which SB3 adds to an env that has none) "
                "replaced info['episode']: its episode statistics (rollout/ep_rew_mean, rollout/ep_len_mean, "
                "evaluate_policy) are sums of discounted chunk rewards over macro steps. Put the Monitor inside: "
                "ChunkedActionWrapper(Monitor(env), chunk_size), or make_vec_env(env_id, "
                "wrapper_class=ChunkedActionWrapper, wrapper_kwargs={'chunk_size': ...}).",
                UserWarning,
                stacklevel=3,
            )
            self._warned_episode_replaced = True

    def _check_driving_algorithm(self) -> None:
        """Warn if the SB3 algorithm resetting this env ignores the chunk discount (see the class)."""
        algorithm = _sb3_algorithm_on_call_stack()
        if isinstance(algorithm, OnPolicyAlgorithm):
            self._algorithm_checked = True
            self._check_on_policy_gamma(algorithm)
            return
        if algorithm is None or getattr(algorithm, "replay_buffer", None) is None:
            return
        self._algorithm_checked = True
        name = type(algorithm).__name__
        if not isinstance(algorithm.replay_buffer, ChunkDiscountReplayBuffer):
            warnings.warn(
                f"{name} trains on ChunkedActionWrapper with a {type(algorithm.replay_buffer).__name__}: it bootstraps "
                f"every macro-transition with gamma={algorithm.gamma} whatever the number of primitive steps it "
                "spans (the right discount is gamma ** chunk_steps). Pass "
                "replay_buffer_class=ChunkDiscountReplayBuffer.",
                UserWarning,
                stacklevel=3,
            )
        elif algorithm.gamma != self.gamma:
            warnings.warn(
                f"{name} has gamma={algorithm.gamma} but its ChunkedActionWrapper has gamma={self.gamma}: "
                f"ChunkDiscountReplayBuffer bootstraps with the wrapper's gamma ** chunk_steps and the wrapper sums "
                f"rewards with it, so {name}'s gamma is unused. Give both the same value.",
                UserWarning,
                stacklevel=3,
            )

    def _check_on_policy_gamma(self, algorithm: OnPolicyAlgorithm) -> None:
        """Warn once if an on-policy algorithm's per-macro-step gamma is not the wrapper's gamma ** chunk_size."""
        macro_gamma = self.gamma**self.chunk_size
        if math.isclose(algorithm.gamma, macro_gamma, rel_tol=1e-6):
            return
        name = type(algorithm).__name__
        warnings.warn(
            f"{name} trains on ChunkedActionWrapper(chunk_size={self.chunk_size}): its gamma={algorithm.gamma} (and "
            f"GAE's gae_lambda) applies once per macro step of {self.chunk_size} primitive steps, a horizon "
            f"{self.chunk_size} times longer than the same gamma per primitive step. For the wrapper's per-step "
            f"gamma={self.gamma}, set {name}(gamma={self.gamma}**{self.chunk_size}={macro_gamma:.6g}).",
            UserWarning,
            stacklevel=4,
        )


def _sb3_algorithm_on_call_stack() -> BaseAlgorithm | None:
    """The innermost SB3 off- or on-policy algorithm whose method is running further up the call stack, if any."""
    frame = sys._getframe(1)
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, OffPolicyAlgorithm | OnPolicyAlgorithm):
            return candidate
        frame = frame.f_back
    return None
