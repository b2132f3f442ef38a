"""Fitting SB3's ``VecNormalize`` statistics on offline data, before the offline phase trains on it."""

from __future__ import annotations

import numpy as np
from stable_baselines3.common.vec_env import VecNormalize


def discounted_returns(rewards: np.ndarray, episode_end: np.ndarray, gamma: float) -> np.ndarray:
    """
    The running discounted return that ``VecNormalize`` tracks for its reward scaling: ``G_t = gamma * G_{t-1} + r_t``,
    restarted after every episode end.

    :param rewards: ``(N,)`` rewards, episodes one after another
    :param episode_end: ``(N,)`` flags of each episode's last step
    :param gamma: ``VecNormalize``'s discount
    :return: ``(N,)`` returns
    """
    returns = np.empty(len(rewards), dtype=np.float64)
    running = 0.0
    for step, (reward, end) in enumerate(zip(rewards, episode_end, strict=True)):
        running = gamma * running + float(reward)
        returns[step] = running
        if end:
            running = 0.0
    return returns


def fit_vec_normalize(
    vec_normalize: VecNormalize, observations: np.ndarray, rewards: np.ndarray, episode_end: np.ndarray
) -> None:
    """
    Update a ``VecNormalize``'s running statistics with an offline dataset, as if its steps had been collected
    online: observation mean and variance (with ``norm_obs``), and the variance of the discounted return that scales
    rewards (with ``norm_reward``). Later online steps keep updating the same statistics (while ``training``).

    :param vec_normalize: The env's ``VecNormalize``
    :param observations: ``(N, *obs_shape)`` raw observations
    :param rewards: ``(N,)`` raw rewards
    :param episode_end: ``(N,)`` flags of each episode's last step
    """
    if vec_normalize.norm_obs:
        vec_normalize.obs_rms.update(np.asarray(observations, dtype=np.float64))
    if vec_normalize.norm_reward:
        returns = discounted_returns(rewards, episode_end, vec_normalize.gamma)
        vec_normalize.ret_rms.update(returns)
