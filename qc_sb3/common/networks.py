"""
Networks of the Q-chunking reference (docs/algorithms.md §2) and the flow samplers built on them (§3), in plain
PyTorch. Faster implementations of the same modules, tested against these, live in :mod:`qc_sb3.accel`.
"""

import itertools
import math
from collections.abc import Sequence

import torch as th
import torch.nn.functional as F
from torch import nn

LAYER_NORM_EPS = 1e-6


class TanhGELU(nn.GELU):
    """GELU with the tanh approximation, the reference's activation (docs/algorithms.md §2)."""

    def __init__(self) -> None:
        super().__init__(approximate="tanh")


def layer_norm(h: th.Tensor, scale: th.Tensor, offset: th.Tensor) -> th.Tensor:
    """LayerNorm over the last dimension with eps 1e-6, then ``* scale + offset`` (docs/algorithms.md §2)."""
    return th.addcmul(offset, F.layer_norm(h, h.shape[-1:], eps=LAYER_NORM_EPS), scale)


def reference_init_(linear_weight: th.Tensor, bias: th.Tensor) -> None:
    """
    Initialise one dense layer in place as the reference does (docs/algorithms.md §2): Xavier-uniform weight, zero bias.

    The bound ``sqrt(6 / (fan_in + fan_out))`` only depends on the sum of the last two dimensions, so it holds
    for ``nn.Linear`` weights ``(out, in)`` and for ensemble weights ``(K, in, out)`` alike; in the latter case
    the fans are those of one member and every member gets independent draws.

    :param linear_weight: Weight of shape ``(out, in)`` or ``(K, in, out)``
    :param bias: Bias (any shape)
    """
    if linear_weight.dim() not in (2, 3):
        raise ValueError(f"Expected a 2-D or 3-D weight, got shape {tuple(linear_weight.shape)}")
    bound = math.sqrt(6.0 / (linear_weight.shape[-2] + linear_weight.shape[-1]))
    with th.no_grad():
        linear_weight.uniform_(-bound, bound)
        bias.zero_()


class MLP(nn.Module):
    """
    Reference MLP (docs/algorithms.md §2): per hidden layer Linear -> GELU(tanh) [-> LayerNorm(eps 1e-6)]; last
    layer Linear only.

    :param input_dim: Size of the input features
    :param hidden_dims: Width of each hidden layer (empty: a single Linear layer)
    :param output_dim: Size of the output
    :param layer_norm: Whether to apply LayerNorm after each hidden activation
    :param activation_fn: Activation of the hidden layers (the reference's GELU(tanh) by default)
    """

    def __init__(
        self,
        input_dim: int,
        hidden_dims: Sequence[int],
        output_dim: int,
        layer_norm: bool = False,
        activation_fn: type[nn.Module] = TanhGELU,
    ):
        super().__init__()
        self.activation = activation_fn()
        dims = [input_dim, *hidden_dims, output_dim]
        self.linears = nn.ModuleList(nn.Linear(d_in, d_out) for d_in, d_out in itertools.pairwise(dims))
        self.norms = nn.ModuleList(nn.LayerNorm(d, eps=LAYER_NORM_EPS) for d in hidden_dims) if layer_norm else None
        for linear in self.linears:
            reference_init_(linear.weight, linear.bias)

    def forward(self, x: th.Tensor) -> th.Tensor:
        """
        :param x: Inputs of shape ``(..., input_dim)``
        :return: Outputs of shape ``(..., output_dim)``
        """
        return self.forward_from_first_layer(self.linears[0](x))

    def forward_from_first_layer(self, pre: th.Tensor) -> th.Tensor:
        """
        Finish the forward pass from the first Linear layer's output (a caller may compute that layer its own way,
        as the Euler sampler does to reuse the observation's share of it across steps).

        :param pre: Output of the first Linear layer, shape ``(..., hidden_dims[0])`` (or ``(..., output_dim)``)
        :return: Outputs of shape ``(..., output_dim)``
        """
        h = pre
        for i, linear in enumerate(self.linears[1:]):
            h = self.activation(h)
            if self.norms is not None:
                h = self.norms[i](h)
            h = linear(h)
        return h


class EnsembleMLP(nn.Module):
    """
    ``n_members`` independent MLPs evaluated together on a shared input, each layer one batched matmul over the
    members: weights are stored as ``(K, in, out)``, biases and LayerNorm scales/offsets as ``(K, out)``.

    Each hidden layer is Linear -> activation -> [LayerNorm] (QC's critic, docs/algorithms.md §2: GELU(tanh)), or
    with ``norm_before_activation`` Linear -> LayerNorm -> activation (the RLPD family's critic, §4: ReLU).

    :param n_members: Number of members K
    :param input_dim: Size of the input features
    :param hidden_dims: Width of each hidden layer
    :param output_dim: Size of each member's output
    :param layer_norm: Whether each hidden layer has a (per-member) LayerNorm
    :param activation_fn: Activation of the hidden layers
    :param norm_before_activation: Apply the LayerNorm before the activation instead of after it
    """

    def __init__(
        self,
        n_members: int,
        input_dim: int,
        hidden_dims: Sequence[int],
        output_dim: int,
        layer_norm: bool = False,
        activation_fn: type[nn.Module] = TanhGELU,
        norm_before_activation: bool = False,
    ):
        super().__init__()
        self.n_members = n_members
        dims = [input_dim, *hidden_dims, output_dim]
        self.weights = nn.ParameterList(th.empty(n_members, d_in, d_out) for d_in, d_out in itertools.pairwise(dims))
        self.biases = nn.ParameterList(th.empty(n_members, d) for d in dims[1:])
        for weight, bias in zip(self.weights, self.biases, strict=True):
            reference_init_(weight, bias)
        self.norm_weights = nn.ParameterList(th.ones(n_members, d) for d in hidden_dims) if layer_norm else None
        self.norm_biases = nn.ParameterList(th.zeros(n_members, d) for d in hidden_dims) if layer_norm else None
        self.activation = activation_fn()
        self.norm_before_activation = norm_before_activation

    def forward(self, x: th.Tensor, frozen: bool = False) -> th.Tensor:
        """
        :param x: Inputs of shape ``(B, input_dim)``, shared by all members
        :param frozen: Use detached parameters: gradients reach ``x`` but never the parameters
        :return: Outputs of shape ``(K, B, output_dim)``
        """
        parameters = [self.weights, self.biases, self.norm_weights or [], self.norm_biases or []]
        weights, biases, scales, offsets = ([p.detach() if frozen else p for p in group] for group in parameters)
        return self.layers(x, weights, biases, scales, offsets)

    def layers(
        self,
        x: th.Tensor,
        weights: list[th.Tensor],
        biases: list[th.Tensor],
        scales: list[th.Tensor],
        offsets: list[th.Tensor],
    ) -> th.Tensor:
        """
        The members' layers on a shared input, with the given parameters (the module's, or detached copies).

        :param x: Inputs of shape ``(B, input_dim)``
        :param weights: Weights ``(K, in, out)`` per layer
        :param biases: Biases ``(K, out)`` per layer
        :param scales: LayerNorm scales ``(K, out)`` per hidden layer (empty: no LayerNorm)
        :param offsets: LayerNorm offsets, likewise
        :return: Outputs of shape ``(K, B, output_dim)``
        """
        last = len(weights) - 1
        h = x.expand(self.n_members, *x.shape)  # a stride-0 view: one batched matmul for all members
        for i in range(last):
            h = th.baddbmm(biases[i].unsqueeze(1), h, weights[i])
            if scales and self.norm_before_activation:
                h = layer_norm(h, scales[i].unsqueeze(1), offsets[i].unsqueeze(1))
            h = self.activation(h)
            if scales and not self.norm_before_activation:
                h = layer_norm(h, scales[i].unsqueeze(1), offsets[i].unsqueeze(1))
        return th.baddbmm(biases[last].unsqueeze(1), h, weights[last])


class CriticEnsemble(nn.Module):
    """
    Critic ensemble Q_k(s, a), k = 1..K (docs/algorithms.md §2): K independent MLPs on ``concat[s, a]`` with a
    scalar output each.

    :param observation_dim: Size of the (flat) observation
    :param action_dim: Size of the (flat) action, e.g. ``h * A`` for a chunk
    :param hidden_dims: Width of each hidden layer
    :param n_critics: Number of ensemble members K
    :param layer_norm: Whether to apply LayerNorm after each hidden activation
    :param activation_fn: Activation of the hidden layers (the reference's GELU(tanh) by default)
    """

    def __init__(
        self,
        observation_dim: int,
        action_dim: int,
        hidden_dims: Sequence[int] = (512, 512, 512, 512),
        n_critics: int = 2,
        layer_norm: bool = True,
        activation_fn: type[nn.Module] = TanhGELU,
    ):
        super().__init__()
        self.n_critics = n_critics
        self.net = EnsembleMLP(
            n_critics, observation_dim + action_dim, hidden_dims, 1, layer_norm=layer_norm, activation_fn=activation_fn
        )

    def forward(self, observations: th.Tensor, actions: th.Tensor, frozen: bool = False) -> th.Tensor:
        """
        :param observations: Observations of shape ``(B, observation_dim)``
        :param actions: Actions of shape ``(B, action_dim)``
        :param frozen: Use detached parameters: gradients reach the inputs but never the critic (the actor's Q loss)
        :return: Q-values of shape ``(K, B)``
        """
        return self.net(th.cat((observations, actions), dim=-1), frozen=frozen).squeeze(-1)


class FlowVectorField(nn.Module):
    """
    Flow-matching velocity field f(s, x, t) (docs/algorithms.md §2): MLP on ``concat[s, x, t]`` with the raw time t.

    :param observation_dim: Size of the (flat) observation
    :param action_dim: Size of the (flat) action x and of the velocity
    :param hidden_dims: Width of each hidden layer
    :param layer_norm: Whether to apply LayerNorm after each hidden activation (the reference uses none)
    :param activation_fn: Activation of the hidden layers (the reference's GELU(tanh) by default)
    """

    def __init__(
        self,
        observation_dim: int,
        action_dim: int,
        hidden_dims: Sequence[int] = (512, 512, 512, 512),
        layer_norm: bool = False,
        activation_fn: type[nn.Module] = TanhGELU,
    ):
        super().__init__()
        self.observation_dim = observation_dim
        self.action_dim = action_dim
        self.mlp = MLP(
            observation_dim + action_dim + 1, hidden_dims, action_dim, layer_norm=layer_norm, activation_fn=activation_fn
        )

    def forward(self, observations: th.Tensor, x: th.Tensor, t: th.Tensor) -> th.Tensor:
        """
        :param observations: Observations of shape ``(B, observation_dim)``
        :param x: Current flow points of shape ``(B, action_dim)``
        :param t: Times in [0, 1] of shape ``(B, 1)``
        :return: Velocities of shape ``(B, action_dim)``
        """
        return self.mlp(th.cat((observations, x, t), dim=-1))

    def state_term(self, observations: th.Tensor) -> th.Tensor:
        """
        The observations' share of the first layer, ``s W_s^T + b``, which an ODE solver computes once for all its
        steps: ``concat[s, x, t] W^T + b = (s W_s^T + b) + x W_x^T + t w_t``.

        :param observations: Observations of shape ``(M, observation_dim)``
        :return: Shape ``(M, first layer width)``
        """
        first = self.mlp.linears[0]
        return th.addmm(first.bias, observations, first.weight[:, : self.observation_dim].T)

    def velocity(self, state_term: th.Tensor, x: th.Tensor, t: float) -> th.Tensor:
        """
        f(s, x, t) from the observations' :meth:`state_term`, at one time t shared by all rows: the same values as
        :meth:`forward` with a smaller first matmul and no concatenation.

        :param state_term: ``self.state_term(observations)``, shape ``(M, first layer width)``
        :param x: Current flow points of shape ``(M, action_dim)``
        :param t: Time in [0, 1]
        :return: Velocities of shape ``(M, action_dim)``
        """
        weight = self.mlp.linears[0].weight
        pre = th.addmm(state_term, x, weight[:, self.observation_dim : -1].T)
        if t != 0.0:
            pre = pre.add_(weight[:, -1], alpha=t)
        return self.mlp.forward_from_first_layer(pre)

    def integrate(self, observations: th.Tensor, noise: th.Tensor, flow_steps: int) -> th.Tensor:
        """
        Flow actions: integrate from noise with ``flow_steps`` Euler steps, a <- a + f(s, a, i / T) / T, and clip
        the result to [-1, 1] once, at the end (docs/algorithms.md §3).

        :param observations: Observations of shape ``(M, observation_dim)``
        :param noise: Starting points z of shape ``(M, action_dim)``
        :param flow_steps: Number of Euler steps T
        :return: Actions of shape ``(M, action_dim)``
        """
        state_term = self.state_term(observations)  # once for all T steps
        actions = noise
        for i in range(flow_steps):
            actions = actions + self.velocity(state_term, actions, i / flow_steps) / flow_steps
        return actions.clamp(-1.0, 1.0)


class OneStepActor(nn.Module):
    """
    One-step policy mu(s, z) of QC-FQL (docs/algorithms.md §2): MLP on ``concat[s, z]``, no squashing.

    :param observation_dim: Size of the (flat) observation
    :param action_dim: Size of the (flat) action and of the noise z
    :param hidden_dims: Width of each hidden layer
    :param layer_norm: Whether to apply LayerNorm after each hidden activation (the reference uses none)
    :param activation_fn: Activation of the hidden layers (the reference's GELU(tanh) by default)
    """

    def __init__(
        self,
        observation_dim: int,
        action_dim: int,
        hidden_dims: Sequence[int] = (512, 512, 512, 512),
        layer_norm: bool = False,
        activation_fn: type[nn.Module] = TanhGELU,
    ):
        super().__init__()
        self.mlp = MLP(
            observation_dim + action_dim, hidden_dims, action_dim, layer_norm=layer_norm, activation_fn=activation_fn
        )

    def forward(self, observations: th.Tensor, noise: th.Tensor) -> th.Tensor:
        """
        :param observations: Observations of shape ``(B, observation_dim)``
        :param noise: Noise z of shape ``(B, action_dim)``
        :return: Unclipped actions of shape ``(B, action_dim)``
        """
        return self.mlp(th.cat((observations, noise), dim=-1))


def best_of_n_actions(
    vector_field: FlowVectorField,
    critic: CriticEnsemble,
    observations: th.Tensor,
    n_samples: int,
    flow_steps: int,
    q_agg: str = "mean",
    noise: th.Tensor | None = None,
    critic_observations: th.Tensor | None = None,
) -> th.Tensor:
    """
    Best-of-N policy (docs/algorithms.md §3): sample N flow actions per state, keep the one with the highest
    ensemble-aggregated Q (the mean over the K critics by default, or the min).

    All ``B * N`` samples are integrated in one batched Euler call and scored in one critic call. Callers that do
    not need gradients should wrap the call in ``th.no_grad()`` (or ``th.inference_mode()``).

    :param vector_field: Velocity field of the flow policy
    :param critic: Critic ensemble scoring the samples
    :param observations: Observations of shape ``(B, observation_dim)``
    :param n_samples: Number of samples N per state
    :param flow_steps: Number of Euler steps T
    :param q_agg: How to aggregate the K critics: ``"mean"`` or ``"min"``
    :param noise: Starting noise of shape ``(B, N, action_dim)``; drawn from N(0, I) when ``None``
    :param critic_observations: The critic's input for the same states, ``(B, critic_observation_dim)``, where it
        differs from the flow's (a critic with its own features extractor); None: ``observations``
    :return: The selected actions, of shape ``(B, action_dim)``
    """
    if q_agg not in ("mean", "min"):
        raise ValueError(f"q_agg must be 'mean' or 'min', got {q_agg!r}")
    batch_size, action_dim = observations.shape[0], vector_field.action_dim
    if noise is None:
        noise = th.randn(batch_size, n_samples, action_dim, dtype=observations.dtype, device=observations.device)
    elif noise.shape != (batch_size, n_samples, action_dim):
        raise ValueError(f"noise must have shape {(batch_size, n_samples, action_dim)}, got {tuple(noise.shape)}")
    repeated_observations = observations.repeat_interleave(n_samples, dim=0)  # row b * N + j is state b
    actions = vector_field.integrate(repeated_observations, noise.reshape(-1, action_dim), flow_steps)
    if n_samples == 1:  # the best of one sample is that sample: no critic call
        return actions
    if critic_observations is not None:
        repeated_observations = critic_observations.repeat_interleave(n_samples, dim=0)
    q_values = critic(repeated_observations, actions)  # (K, B * N)
    scores = q_values.mean(dim=0) if q_agg == "mean" else q_values.amin(dim=0)
    best = scores.view(batch_size, n_samples).argmax(dim=1)
    index = best.view(batch_size, 1, 1).expand(batch_size, 1, action_dim)
    return actions.view(batch_size, n_samples, action_dim).gather(1, index).squeeze(1)
