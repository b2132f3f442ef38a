"""Success-rate evaluation the reference's way (docs/algorithms.md §5), as a function and as an SB3 callback."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from stable_baselines3.common import type_aliases
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import VecEnv


def evaluate_success(
    model: type_aliases.PolicyPredictor, env: gym.Env | VecEnv, n_eval_episodes: int = 50, warn: bool = True
) -> dict[str, float]:
    """
    Run ``n_eval_episodes`` episodes with the model's stochastic policy and report the success rate (docs/algorithms.md §5):
    the final step's ``info["success"]`` averaged over episodes.

    The episodes run through SB3's :func:`~stable_baselines3.common.evaluation.evaluate_policy`, which passes
    ``state`` and ``episode_start`` to ``model.predict``: a chunk policy executes its chunks open-loop through its
    action queue, as when it acts online. Episodes are split over the envs of a VecEnv and counted exactly as
    ``evaluate_policy`` counts them (with a ``Monitor``, only the true episode ends count).

    :param model: The agent, or any object with SB3's ``predict(observation, state, episode_start, deterministic)``
    :param env: The evaluation env, a gym env or a VecEnv; its info must hold ``"success"`` at every episode end
    :param n_eval_episodes: Number of episodes
    :param warn: Whether to warn, as ``evaluate_policy`` does, when the env is not wrapped in a ``Monitor``
    :return: ``success`` (fraction of successful episodes), ``return`` and ``length`` (means over episodes)
    """
    successes: list[float] = []

    def record_success(locals_: dict[str, Any], globals_: dict[str, Any]) -> None:
        # Called once per env and step; count an episode exactly where evaluate_policy counts it.
        info = locals_["info"]
        if not locals_["done"] or (locals_["is_monitor_wrapped"] and "episode" not in info):
            return
        if "success" not in info:
            raise ValueError(
                'evaluate_success needs the env to report info["success"] at the end of every episode; the final '
                f"step's info has keys {sorted(info)}"
            )
        successes.append(float(info["success"]))

    returns, lengths = evaluate_policy(
        model,
        env,
        n_eval_episodes=n_eval_episodes,
        deterministic=False,
        callback=record_success,
        return_episode_rewards=True,
        warn=warn,
    )
    return {"success": float(np.mean(successes)), "return": float(np.mean(returns)), "length": float(np.mean(lengths))}


class SuccessEvalCallback(BaseCallback):
    """
    Evaluate the success rate every ``eval_freq`` env steps with :func:`evaluate_success` and log ``eval/success``,
    ``eval/return`` and ``eval/length``.

    The schedule follows ``num_timesteps`` (env steps over all envs), not callback calls: an evaluation runs at the
    first step at or past each multiple of ``eval_freq``, whatever the number of training envs, and the offline
    phase's gradient steps (which call ``on_step`` too) do not count. With ``offline_eval_freq``, the offline phase
    is evaluated too, every ``offline_eval_freq`` offline gradient steps, logged as ``offline_eval/*`` with the
    offline gradient steps as x (as ``offline/*``), so that no two evaluations share an x. Each result is also kept
    in ``history``, with the env step it was taken at (``step``) and, for offline ones, the offline gradient step
    (``offline_step``).

    :param eval_env: The evaluation env, a gym env or a VecEnv reporting ``info["success"]`` at episode ends
    :param eval_freq: Env steps between two evaluations
    :param n_eval_episodes: Episodes per evaluation
    :param offline_eval_freq: Offline gradient steps between two evaluations in the offline phase (None: none there)
    :param verbose: Verbosity level: 0 no output, 1 the results of each evaluation
    """

    def __init__(
        self,
        eval_env: gym.Env | VecEnv,
        eval_freq: int,
        n_eval_episodes: int = 50,
        offline_eval_freq: int | None = None,
        verbose: int = 0,
    ):
        super().__init__(verbose)
        if eval_freq < 1:
            raise ValueError(f"eval_freq must be >= 1, got {eval_freq}")
        if offline_eval_freq is not None and offline_eval_freq < 1:
            raise ValueError(f"offline_eval_freq must be None or >= 1, got {offline_eval_freq}")
        self.eval_env = eval_env
        self.eval_freq = eval_freq
        self.n_eval_episodes = n_eval_episodes
        self.offline_eval_freq = offline_eval_freq
        self.history: list[dict[str, float]] = []
        self._last_eval_period = 0
        self._last_offline_steps = 0

    def _on_training_start(self) -> None:
        # A run that continues (reset_num_timesteps=False) resumes the schedule where it is.
        self._last_eval_period = self.num_timesteps // self.eval_freq
        self._last_offline_steps = getattr(self.model, "offline_steps_done", 0)

    def _on_step(self) -> bool:
        offline_steps = getattr(self.model, "offline_steps_done", 0)
        if offline_steps != self._last_offline_steps:  # this call follows an offline gradient step, not an env step
            self._last_offline_steps = offline_steps
            if self.offline_eval_freq is not None and offline_steps % self.offline_eval_freq == 0:
                self._evaluate(offline_steps)
            return True
        period = self.num_timesteps // self.eval_freq
        if period > self._last_eval_period:
            self._last_eval_period = period
            self._evaluate()
        return True

    def _evaluate(self, offline_steps: int | None = None) -> None:
        """
        Evaluate the model now, log the results and dump them at the current step.

        :param offline_steps: In the offline phase, the offline gradient steps done (logged as ``offline_eval/*``
            at that x); None online
        """
        results = evaluate_success(self.model, self.eval_env, self.n_eval_episodes)
        prefix, x = ("eval", self.num_timesteps) if offline_steps is None else ("offline_eval", offline_steps)
        where = {"step": self.num_timesteps} if offline_steps is None else {"step": 0, "offline_step": offline_steps}
        self.history.append({**where, **results})
        for name, value in results.items():
            self.logger.record(f"{prefix}/{name}", value)
        if offline_steps is None:
            self.logger.record("time/total_timesteps", self.num_timesteps, exclude="tensorboard")
        self.logger.dump(x)
        if self.verbose >= 1:
            counter = f"num_timesteps={self.num_timesteps}" if offline_steps is None else f"offline_steps_done={x}"
            self.logger.log(
                f"Eval {counter}: success={results['success']:.2f}, "
                f"return={results['return']:.2f}, length={results['length']:.1f}"
            )
