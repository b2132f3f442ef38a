"""The RLPD family's actor-side losses, as pure functions of tensors and the critic (docs/algorithms.md §4)."""

from __future__ import annotations

import torch as th

from qc_sb3.common.losses import q_loss
from qc_sb3.rlpd.networks import LayerNormReLUCriticEnsemble


def sac_actor_loss(
    critic: LayerNormReLUCriticEnsemble,
    observations: th.Tensor,
    actions: th.Tensor,
    log_prob: th.Tensor,
    ent_coef: th.Tensor,
) -> th.Tensor:
    """
    SAC actor loss over the ensemble mean (docs/algorithms.md §4): ``mean_B(alpha * log pi(a|s) - mean_K Q(s, a))``, with
    ``a ~ pi(.|s)`` reparameterized. The critic's parameters enter detached: the gradient reaches only the actor.

    :param critic: Online critic ensemble
    :param observations: s_t, shape (B, obs)
    :param actions: Reparameterized samples of the squashed Gaussian, in (-1, 1), shape (B, action_dim)
    :param log_prob: Their log-probabilities, shape (B,)
    :param ent_coef: The temperature alpha, a detached scalar tensor
    :return: The loss (scalar)
    """
    # docs/algorithms.md §4: the tanh samples lie in [-1, 1], where q_loss's clip is the identity (value and gradient).
    return (ent_coef * log_prob).mean() + q_loss(critic, observations, actions)


def temperature_loss(log_ent_coef: th.Tensor, log_prob: th.Tensor, target_entropy: float) -> th.Tensor:
    """
    Temperature loss of the reference (docs/algorithms.md §4): ``alpha * (entropy - target_entropy)`` with
    ``entropy = -mean_B log pi(a|s)`` detached, i.e. ``mean_B(-alpha * (log pi(a|s) + target_entropy))``.
    (SB3's SAC multiplies ``log alpha`` instead of ``alpha``: same sign, gradient smaller by a factor alpha.)

    :param log_ent_coef: The learned log alpha, a scalar tensor
    :param log_prob: Log-probabilities of the actor's samples, shape (B,) (detached here)
    :param target_entropy: Target entropy, -0.5 * (act_chunk_size * A) by default
    :return: The loss (scalar)
    """
    entropy = -log_prob.detach().mean()
    return log_ent_coef.exp() * (entropy - target_entropy)


def bc_loss(log_prob_of_data: th.Tensor) -> th.Tensor:
    """
    QC-RLPD's behavior-cloning term (docs/algorithms.md §4), before its weight ``bc_alpha``: ``-mean_B log pi(a_data | s_t)``
    on the batch's own (clipped) dataset chunks.

    :param log_prob_of_data: log pi(clip(a_data, -1 + 1e-5, 1 - 1e-5) | s_t), shape (B,)
    :return: The loss (scalar)
    """
    return -log_prob_of_data.mean()
