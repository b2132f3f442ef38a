"""The RLPD family's critic ensemble: Linear -> LayerNorm -> ReLU per hidden layer (docs/algorithms.md §4)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch as th
import torch.nn.functional as F
from torch import nn

from qc_sb3.common.networks import reference_init_

LAYER_NORM_EPS = 1e-6  # docs/algorithms.md §2: LayerNorm(eps 1e-6)


class LayerNormReLUCriticEnsemble(nn.Module):
    """
    Critic ensemble Q_k(s, a), k = 1..K, of the RLPD family (docs/algorithms.md §4): K independent MLPs on ``concat[s, a]``,
    each hidden layer Linear -> LayerNorm -> ReLU (LayerNorm before the activation, unlike QC's critic), the last
    layer Linear to a scalar. Weights Xavier-uniform, biases zero (docs/algorithms.md §2).

    Every layer is one batched computation over the members: weights are stored as ``(K, in, out)``, biases and
    LayerNorm scales/offsets as ``(K, out)``, and each layer is a ``torch.baddbmm``.

    :param observation_dim: Size of the (flat) observation
    :param action_dim: Size of the (flat) action: ``h * A`` for a chunk, ``A`` for a single action
    :param hidden_dims: Width of each hidden layer
    :param n_critics: Number of ensemble members K
    """

    def __init__(
        self,
        observation_dim: int,
        action_dim: int,
        hidden_dims: Sequence[int] = (512, 512, 512, 512),
        n_critics: int = 10,
    ):
        super().__init__()
        if n_critics < 1:
            raise ValueError(f"n_critics must be >= 1, got {n_critics}")
        self.n_critics = n_critics
        dims = [observation_dim + action_dim, *hidden_dims, 1]
        self.weights = nn.ParameterList(th.empty(n_critics, d_in, d_out) for d_in, d_out in itertools.pairwise(dims))
        self.biases = nn.ParameterList(th.empty(n_critics, d) for d in dims[1:])
        for weight, bias in zip(self.weights, self.biases, strict=True):
            reference_init_(weight, bias)
        self.norm_weights = nn.ParameterList(th.ones(n_critics, d) for d in hidden_dims)
        self.norm_biases = nn.ParameterList(th.zeros(n_critics, d) for d in hidden_dims)

    def forward(self, observations: th.Tensor, actions: th.Tensor, frozen: bool = False) -> th.Tensor:
        """
        :param observations: Observations of shape ``(B, observation_dim)``
        :param actions: Actions of shape ``(B, action_dim)``
        :param frozen: Use detached parameters: gradients reach the inputs but never the critic (the actor's Q loss)
        :return: Q-values of shape ``(K, B)``
        """
        parameters = [self.weights, self.biases, self.norm_weights, self.norm_biases]
        weights, biases, scales, offsets = ([p.detach() if frozen else p for p in group] for group in parameters)
        x = th.cat((observations, actions), dim=-1)  # docs/algorithms.md §4: Q(concat[s, a])
        h = x.unsqueeze(0).expand(self.n_critics, *x.shape)  # (K, B, in), shared by the members
        last = len(weights) - 1
        for i in range(last):
            h = th.baddbmm(biases[i].unsqueeze(1), h, weights[i])  # docs/algorithms.md §4: Linear
            h = F.layer_norm(h, h.shape[-1:], eps=LAYER_NORM_EPS)  # docs/algorithms.md §4: -> LayerNorm, per member below
            h = th.addcmul(offsets[i].unsqueeze(1), h, scales[i].unsqueeze(1))
            h = F.relu(h)  # docs/algorithms.md §4: -> ReLU
        return th.baddbmm(biases[last].unsqueeze(1), h, weights[last]).squeeze(-1)  # docs/algorithms.md §4: Linear -> (K, B)
