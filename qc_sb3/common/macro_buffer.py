"""ChunkDiscountReplayBuffer: SB3 replay buffer that bootstraps each macro-transition with its own chunk discount."""

from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import ReplayBuffer
from stable_baselines3.common.type_aliases import ReplayBufferSamples
from stable_baselines3.common.vec_env import VecNormalize


class ChunkDiscountReplayBuffer(ReplayBuffer):
    """
    Replay buffer for the macro-transitions of a :class:`~qc_sb3.common.wrappers.ChunkedActionWrapper` env.

    Stores, for every added macro-transition, ``info["chunk_discount"]`` (``gamma ** chunk_steps``) and returns
    it in the ``discounts`` field of ``ReplayBufferSamples`` (shape ``(batch_size, 1)``). SB3's SAC and TD3 and
    sb3-contrib's TQC and CrossQ then bootstrap with
    ``target = reward + (1 - done) * discount * next_value`` using this per-transition discount instead of their
    own ``gamma``: ``gamma ** h`` for a full chunk, ``gamma ** k`` (k < h) for a chunk cut short by a termination
    or a truncation. As in ``ReplayBuffer``, ``done`` keeps only true terminations (``handle_timeout_termination``),
    so a chunk cut by a time limit is still bootstrapped.

    Usage::

        env = ChunkedActionWrapper(Monitor(gym.make("Pendulum-v1")), chunk_size=5, gamma=0.99)
        model = SAC("MlpPolicy", env, replay_buffer_class=ChunkDiscountReplayBuffer, gamma=0.99)

    The wrapper's ``gamma`` sets the discount; the algorithm's own ``gamma`` is not used for the critic target
    (the wrapper warns when the two differ).

    :param buffer_size: Max number of element in the buffer
    :param observation_space: Observation space (Dict observation spaces are not supported)
    :param action_space: Action space
    :param device: PyTorch device
    :param n_envs: Number of parallel environments
    :param optimize_memory_usage: Not supported, must be False
    :param handle_timeout_termination: Handle timeout termination (due to timelimit)
        separately and treat the task as infinite horizon task.
        https://github.com/DLR-RM/stable-baselines3/issues/284
    """

    discounts: np.ndarray

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        device: th.device | str = "auto",
        n_envs: int = 1,
        optimize_memory_usage: bool = False,
        handle_timeout_termination: bool = True,
    ):
        if optimize_memory_usage:
            raise ValueError("ChunkDiscountReplayBuffer does not support optimize_memory_usage=True, pass False")
        if isinstance(observation_space, spaces.Dict):
            raise ValueError(f"ChunkDiscountReplayBuffer does not support Dict observation spaces, got {observation_space!r}")
        super().__init__(
            buffer_size,
            observation_space,
            action_space,
            device=device,
            n_envs=n_envs,
            optimize_memory_usage=optimize_memory_usage,
            handle_timeout_termination=handle_timeout_termination,
        )
        self.discounts = np.zeros((self.buffer_size, self.n_envs), dtype=np.float32)

    def add(
        self,
        obs: np.ndarray,
        next_obs: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        done: np.ndarray,
        infos: list[dict[str, Any]],
    ) -> None:
        """
        Add one macro-transition per env, with its ``info["chunk_discount"]``.

        :param obs: Observations, one per env
        :param next_obs: Next observations, one per env
        :param action: Actions (chunks), one per env
        :param reward: Discounted chunk rewards, one per env
        :param done: Done flags, one per env
        :param infos: Step infos, one per env; each must hold ``chunk_discount``
        """
        missing = [env_index for env_index, info in enumerate(infos) if "chunk_discount" not in info]
        if missing:
            raise ValueError(
                f"info of env(s) {missing} has no 'chunk_discount': the env must be wrapped in ChunkedActionWrapper "
                "to use ChunkDiscountReplayBuffer"
            )
        # Write at the current position before the parent advances it.
        self.discounts[self.pos] = np.array([info["chunk_discount"] for info in infos], dtype=np.float32)
        super().add(obs, next_obs, action, reward, done, infos)

    def _get_samples(self, batch_inds: np.ndarray, env: VecNormalize | None = None) -> ReplayBufferSamples:
        # One env index per sample, shared by every field including the discount (the parent draws its own).
        # The global NumPy generator, as in ReplayBuffer, so SB3's `set_random_seed` seeds it.
        env_indices = np.random.randint(0, high=self.n_envs, size=(len(batch_inds),))
        # Bootstrap mask: only true terminations stop bootstrapping, done * (1 - timeout)
        dones = self.dones[batch_inds, env_indices] * (1 - self.timeouts[batch_inds, env_indices])
        return ReplayBufferSamples(
            observations=self.to_torch(self._normalize_obs(self.observations[batch_inds, env_indices, :], env)),  # type: ignore[arg-type]
            actions=self.to_torch(self.actions[batch_inds, env_indices, :]),
            next_observations=self.to_torch(self._normalize_obs(self.next_observations[batch_inds, env_indices, :], env)),  # type: ignore[arg-type]
            dones=self.to_torch(dones.reshape(-1, 1)),
            rewards=self.to_torch(self._normalize_reward(self.rewards[batch_inds, env_indices].reshape(-1, 1), env)),
            # Per-transition bootstrap discount gamma^chunk_steps
            discounts=self.to_torch(self.discounts[batch_inds, env_indices].reshape(-1, 1)),
        )
