"""The losses of QC and QC-FQL, as pure functions of networks, a batch and explicit noise (docs/algorithms.md §3)."""

from __future__ import annotations

import torch as th

from qc_sb3.common.networks import CriticEnsemble, FlowVectorField

Q_AGGREGATIONS = ("mean", "min")


def aggregate_ensemble(q_values: th.Tensor, q_agg: str) -> th.Tensor:
    """
    Aggregate Q over the ensemble axis (docs/algorithms.md §3: mean by default, "min" optional).

    :param q_values: Q values of shape (K, ...)
    :param q_agg: "mean" or "min"
    :return: Aggregated values of shape (...)
    """
    if q_agg == "mean":
        return q_values.mean(dim=0)
    if q_agg == "min":
        return q_values.min(dim=0).values
    raise ValueError(f"q_agg must be one of {Q_AGGREGATIONS}, got {q_agg!r}")


def chunked_td_target(
    critic_target: CriticEnsemble,
    next_observations: th.Tensor,
    next_actions: th.Tensor,
    cumulative_rewards: th.Tensor,
    masks: th.Tensor,
    gamma: float,
    chunk_size: int,
    q_agg: str = "mean",
) -> th.Tensor:
    """
    TD target of the chunk MDP (docs/algorithms.md §3): ``y = R[:, -1] + gamma^h * M[:, -1] * agg_K Q_target(s_{t+h}, A')``,
    one A' shared by all K heads.

    :param critic_target: Target critic ensemble
    :param next_observations: s_{t+h}, shape (B, obs)
    :param next_actions: A' from the policy at s_{t+h}, shape (B, action_dim), no gradient
    :param cumulative_rewards: R, shape (B, h)
    :param masks: M, shape (B, h)
    :param gamma: Discount factor
    :param chunk_size: h (the window length, also for the ``-n`` variants)
    :param q_agg: Ensemble aggregation of the target
    :return: Targets of shape (B,)
    """
    next_q = aggregate_ensemble(critic_target(next_observations, next_actions), q_agg)
    return cumulative_rewards[:, -1] + gamma**chunk_size * masks[:, -1] * next_q


def critic_loss(critic: CriticEnsemble, observations: th.Tensor, actions: th.Tensor, target: th.Tensor, valid: th.Tensor):
    """
    Chunked TD loss (docs/algorithms.md §3): ``mean over (K, B) of (Q_k(s_t, a) - y)^2 * valid[:, -1]``; every member regresses
    to the same target, and invalid windows stay in the mean's denominator.

    :param critic: Online critic ensemble
    :param observations: s_t, shape (B, obs)
    :param actions: The critic's action input (flat chunk, or a_t for the ``-n`` variants), shape (B, action_dim)
    :param target: y, shape (B,), no gradient
    :param valid: valid flags, shape (B, h)
    :return: The loss (scalar) and the Q values (K, B)
    """
    q_values = critic(observations, actions)
    loss = ((q_values - target) ** 2 * valid[:, -1]).mean()
    return loss, q_values


def flow_matching_loss(
    flow: FlowVectorField,
    observations: th.Tensor,
    actions: th.Tensor,
    noise: th.Tensor,
    times: th.Tensor,
    valid: th.Tensor | None,
) -> th.Tensor:
    """
    Flow-matching behavior cloning (docs/algorithms.md §3): ``x_t = (1-t) x0 + t a1``, ``v* = a1 - x0``,
    ``mean over (B, h, A) of (f(s, x_t, t) - v*)^2 * valid`` (divided by B*h*A).

    :param flow: Flow vector field
    :param observations: s_t, shape (B, obs)
    :param actions: a1, the flat dataset chunk (or a_t for the ``-n`` variants), shape (B, action_dim)
    :param noise: x0 ~ N(0, I), shape (B, action_dim)
    :param times: t ~ U[0, 1], shape (B, 1)
    :param valid: Per-position valid flags (B, h) weighting each action of the chunk, or None for no weighting
        (the ``-n`` variants: "BC unmasked")
    :return: The loss (scalar)
    """
    x_t = (1 - times) * noise + times * actions
    target_velocity = actions - noise
    squared_error = (flow(observations, x_t, times) - target_velocity) ** 2
    if valid is None:
        return squared_error.mean()
    batch_size, horizon = valid.shape
    return (squared_error.reshape(batch_size, horizon, -1) * valid[:, :, None]).mean()


def distillation_loss(actor_actions: th.Tensor, flow_actions: th.Tensor) -> th.Tensor:
    """
    One-step distillation (docs/algorithms.md §3, QC-FQL): ``mean over (B, h*A) of (mu(s, z) - a_flow)^2``, with ``a_flow`` the
    clipped Euler flow sample of the same noise z (no gradient) and ``mu`` NOT clipped here.

    :param actor_actions: mu(s, z), shape (B, action_dim)
    :param flow_actions: EulerFlow(s, z), shape (B, action_dim), no gradient
    :return: The loss (scalar)
    """
    return ((actor_actions - flow_actions) ** 2).mean()


def q_loss(critic: CriticEnsemble, observations: th.Tensor, actions: th.Tensor) -> th.Tensor:
    """
    Actor Q loss (docs/algorithms.md §3, QC-FQL): ``-mean_B mean_K Q(s, clip(a, -1, 1))``; the gradient flows only through the
    action, never into the critic's parameters (they enter detached).

    :param critic: Online critic ensemble
    :param observations: s_t, shape (B, obs)
    :param actions: The actor's unclipped actions mu(s, z), shape (B, action_dim)
    :return: The loss (scalar)
    """
    q_values = critic(observations, actions.clamp(-1.0, 1.0), frozen=True)
    return -q_values.mean(dim=0).mean()
