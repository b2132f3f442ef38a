"""The RLPD family's critic ensemble: Linear -> LayerNorm -> ReLU per hidden layer (docs/algorithms.md §4)."""

from __future__ import annotations

from collections.abc import Sequence

import torch as th
from torch import nn

from qc_sb3.common.networks import EnsembleMLP


class LayerNormReLUCriticEnsemble(EnsembleMLP):
    """
    Critic ensemble Q_k(s, a), k = 1..K, of the RLPD family (docs/algorithms.md §4): K independent MLPs on
    ``concat[s, a]``, each hidden layer Linear -> LayerNorm -> ReLU (LayerNorm before the activation, unlike QC's
    critic), the last layer Linear to a scalar; weights Xavier-uniform, biases zero (§2).

    :param observation_dim: Size of the (flat) observation
    :param action_dim: Size of the (flat) action: ``h * A`` for a chunk, ``A`` for a single action
    :param hidden_dims: Width of each hidden layer
    :param n_critics: Number of ensemble members K
    """

    def __init__(
        self, observation_dim: int, action_dim: int, hidden_dims: Sequence[int] = (512, 512, 512, 512), n_critics: int = 10
    ):
        if n_critics < 1:
            raise ValueError(f"n_critics must be >= 1, got {n_critics}")
        super().__init__(
            n_critics,
            observation_dim + action_dim,
            hidden_dims,
            1,
            layer_norm=True,
            activation_fn=nn.ReLU,
            norm_before_activation=True,
        )
        self.n_critics = n_critics

    def forward(self, observations: th.Tensor, actions: th.Tensor, frozen: bool = False) -> th.Tensor:  # type: ignore[override]
        """
        :param observations: Observations of shape ``(B, observation_dim)``
        :param actions: Actions of shape ``(B, action_dim)``
        :param frozen: Use detached parameters: gradients reach the inputs but never the critic (the actor's Q loss)
        :return: Q-values of shape ``(K, B)``
        """
        return super().forward(th.cat((observations, actions), dim=-1), frozen=frozen).squeeze(-1)
