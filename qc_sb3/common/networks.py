"""Networks of the Q-chunking reference (docs/algorithms.md §2) and the flow samplers built on them (docs/algorithms.md §3)."""

import itertools
import math
from collections.abc import Sequence

import torch as th
import torch.nn.functional as F
from torch import nn

# Tanh-approximate GELU (docs/algorithms.md §2): 0.5 x (1 + tanh(u)) = x * sigmoid(2 u), u = sqrt(2 / pi) (x + 0.044715 x^3).
_GELU_SCALE = 2.0 * math.sqrt(2.0 / math.pi)
_GELU_CUBIC = _GELU_SCALE * 0.044715
_LAYER_NORM_EPS = 1e-6  # docs/algorithms.md §2: LayerNorm(eps 1e-6)
_HAS_FUSED_LINEAR_GELU = th.backends.mkldnn.is_available() and hasattr(th.ops.mkldnn, "_linear_pointwise")


def _gelu_tanh(x: th.Tensor, out: th.Tensor | None = None) -> th.Tensor:
    """
    GELU with the tanh approximation (docs/algorithms.md §2).

    Without ``out`` this is PyTorch's kernel (differentiable). With ``out`` (no autograd) it computes
    ``x * sigmoid(2 u)`` in four passes over ``out``, about 1.7x faster on CPU; both agree to float32 rounding.

    :param x: Pre-activations
    :param out: Destination of the same shape as ``x``, not overlapping it; None: a new (differentiable) tensor
    :return: The activations (``out`` when given)
    """
    if out is None:
        return F.gelu(x, approximate="tanh")
    # docs/algorithms.md §2: gelu = 0.5 x (1 + tanh(u)) = x * sigmoid(2 u), 2 u = x (2 sqrt(2/pi) + 2 sqrt(2/pi) 0.044715 x^2)
    th.addcmul(x.new_tensor(_GELU_SCALE), x, x, value=_GELU_CUBIC, out=out)
    return out.mul_(x).sigmoid_().mul_(x)


def _fuses_linear_gelu(h: th.Tensor) -> bool:
    """
    Whether a no-grad Linear -> GELU(tanh) on ``h`` runs as one oneDNN call (its matmul with a fused GELU post-op,
    about 15% faster on CPU than the matmul and a separate GELU; same values to float32 rounding).

    :param h: The layer's input
    :return: True for float32 CPU tensors with autograd off, when PyTorch ships the oneDNN op
    """
    return _HAS_FUSED_LINEAR_GELU and not th.is_grad_enabled() and h.device.type == "cpu" and h.dtype == th.float32


def _layer_norm(h: th.Tensor, scale: th.Tensor, offset: th.Tensor, in_place: bool) -> th.Tensor:
    """
    LayerNorm over the last dimension with eps 1e-6 (docs/algorithms.md §2), then ``* scale + offset``.

    In place (no autograd) it runs as two reductions and three passes over ``h``, about 2.5x faster on CPU than
    ``F.layer_norm`` followed by the affine map, and agrees with it to float32 rounding.

    :param h: Activations
    :param scale: Scale, broadcastable against ``h``
    :param offset: Offset, broadcastable against ``h``
    :param in_place: Overwrite ``h`` (no autograd) instead of returning a new (differentiable) tensor
    :return: The normalised activations (``h`` itself when ``in_place``)
    """
    if not in_place:
        return th.addcmul(offset, F.layer_norm(h, h.shape[-1:], eps=_LAYER_NORM_EPS), scale)
    h.sub_(h.mean(dim=-1, keepdim=True))  # docs/algorithms.md §2: x - mean
    variance = th.linalg.vector_norm(h, dim=-1, keepdim=True).square_().div_(h.shape[-1])  # biased variance
    h.mul_(variance.add_(_LAYER_NORM_EPS).rsqrt_())  # docs/algorithms.md §2: / sqrt(var + 1e-6)
    return th.addcmul(offset, h, scale, out=h)


class _Scratch:
    """
    Reusable memory for the hidden activations of no-grad forward passes.

    Fresh activations for every layer of every call cost page faults on CPU; instead each network keeps two flat
    blocks and hands out views of them. Nothing a forward pass returns is a view of this memory. The blocks are
    created outside inference mode so that they can be written both inside and outside it.
    """

    def __init__(self) -> None:
        self._memory = th.empty(0)

    def take(self, like: th.Tensor, numel: int) -> tuple[th.Tensor, th.Tensor]:
        """
        Hand out the two blocks, (re)allocating the memory when it is too small or of another dtype or device.

        :param like: Tensor whose dtype and device the memory must have
        :param numel: Number of elements of each of the two blocks
        :return: Two flat, non-overlapping blocks of ``numel`` elements
        """
        memory = self._memory
        if memory.numel() < 2 * numel or memory.dtype != like.dtype or memory.device != like.device:
            with th.inference_mode(False):
                memory = self._memory = th.empty(2 * numel, dtype=like.dtype, device=like.device)
        return memory[:numel], memory[numel : 2 * numel]


def _region(block: th.Tensor | None, shape: tuple[int, ...]) -> th.Tensor | None:
    """
    View the start of a scratch block as an array of the given shape.

    :param block: A flat scratch block, or None (autograd path)
    :param shape: Shape of the wanted region
    :return: A contiguous view of the start of ``block`` with shape ``shape``, or None when ``block`` is None
    """
    return None if block is None else block[: math.prod(shape)].view(shape)


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
    bound = math.sqrt(6.0 / (linear_weight.shape[-2] + linear_weight.shape[-1]))  # docs/algorithms.md §2: Xavier-uniform
    with th.no_grad():
        linear_weight.uniform_(-bound, bound)
        bias.zero_()  # docs/algorithms.md §2: biases zero


class MLP(nn.Module):
    """
    Reference MLP (docs/algorithms.md §2): per hidden layer Linear -> GELU(tanh) [-> LayerNorm(eps 1e-6)]; last layer Linear
    only.

    With autograd off (``th.no_grad()``, ``th.inference_mode()``) the hidden activations live in scratch memory
    owned by the module, so one module must not run no-grad forward passes from several threads at once.

    :param input_dim: Size of the input features
    :param hidden_dims: Width of each hidden layer (empty: a single Linear layer)
    :param output_dim: Size of the output
    :param layer_norm: Whether to apply LayerNorm after each hidden activation
    """

    def __init__(self, input_dim: int, hidden_dims: Sequence[int], output_dim: int, layer_norm: bool = False):
        super().__init__()
        dims = [input_dim, *hidden_dims, output_dim]
        self.linears = nn.ModuleList(nn.Linear(d_in, d_out) for d_in, d_out in itertools.pairwise(dims))
        self.norms = nn.ModuleList(nn.LayerNorm(d, eps=_LAYER_NORM_EPS) for d in hidden_dims) if layer_norm else None
        for linear in self.linears:
            reference_init_(linear.weight, linear.bias)
        self._max_hidden_dim = max(hidden_dims, default=0)
        self._scratch = _Scratch()

    def forward(self, x: th.Tensor) -> th.Tensor:
        """
        :param x: Inputs of shape ``(..., input_dim)``
        :return: Outputs of shape ``(..., output_dim)``
        """
        h = x.reshape(-1, x.shape[-1])
        first = self.linears[0]
        if len(self.linears) > 1 and self.norms is None and _fuses_linear_gelu(h):
            # First hidden layer and its GELU as one oneDNN call (docs/algorithms.md §2: Linear -> GELU(tanh)).
            h = th.ops.mkldnn._linear_pointwise(h, first.weight, first.bias, "gelu", [], "tanh")
            out = self._hidden_layers_from(1, h)
        else:
            out = self.forward_from_first_layer(th.addmm(first.bias, h, first.weight.T))  # docs/algorithms.md §2: Linear
        return out.view(*x.shape[:-1], self.linears[-1].out_features)

    def forward_from_first_layer(self, pre: th.Tensor) -> th.Tensor:
        """
        Finish the forward pass from the first Linear layer's output (a caller may compute that layer its own way,
        as the Euler sampler does to reuse the observation's share of it across steps).

        :param pre: Output of the first Linear layer, shape ``(M, hidden_dims[0])`` (or ``(M, output_dim)``)
        :return: Outputs of shape ``(M, output_dim)``
        """
        if len(self.linears) == 1:
            return pre
        rows = pre.shape[0]
        post_block = None if th.is_grad_enabled() else self._scratch.take(pre, rows * self._max_hidden_dim)[1]
        h = _gelu_tanh(pre, out=_region(post_block, tuple(pre.shape)))  # docs/algorithms.md §2: -> GELU(tanh)
        if self.norms is not None:  # docs/algorithms.md §2: -> LayerNorm(eps 1e-6)
            h = _layer_norm(h, self.norms[0].weight, self.norms[0].bias, in_place=post_block is not None)
        return self._hidden_layers_from(1, h)

    def _hidden_layers_from(self, index: int, h: th.Tensor) -> th.Tensor:
        """
        Apply Linear layers ``index`` .. last to the activations ``h`` of the hidden layer before them.

        :param index: Index of the first Linear layer to apply (>= 1)
        :param h: Activations of hidden layer ``index - 1``, shape ``(M, hidden_dims[index - 1])``
        :return: Outputs of shape ``(M, output_dim)``
        """
        rows = h.shape[0]
        fused = self.norms is None and _fuses_linear_gelu(h)
        if fused or th.is_grad_enabled():
            pre_block = post_block = None
        else:
            # The input may live in the post-activation block: each layer reads it before its GELU overwrites it.
            pre_block, post_block = self._scratch.take(h, rows * self._max_hidden_dim)
        for i in range(index, len(self.linears) - 1):
            linear = self.linears[i]
            if fused:
                h = th.ops.mkldnn._linear_pointwise(h, linear.weight, linear.bias, "gelu", [], "tanh")  # docs/algorithms.md §2
                continue
            shape = (rows, linear.out_features)
            pre = th.addmm(linear.bias, h, linear.weight.T, out=_region(pre_block, shape))  # docs/algorithms.md §2: Linear
            h = _gelu_tanh(pre, out=_region(post_block, shape))  # docs/algorithms.md §2: -> GELU(tanh)
            if self.norms is not None:  # docs/algorithms.md §2: -> LayerNorm(eps 1e-6)
                h = _layer_norm(h, self.norms[i].weight, self.norms[i].bias, in_place=post_block is not None)
        last = self.linears[-1]
        return th.addmm(last.bias, h, last.weight.T)  # docs/algorithms.md §2: last layer linear


class EnsembleMLP(nn.Module):
    """
    ``n_members`` independent MLPs with :class:`MLP`'s layer recipe, evaluated together on a shared input.

    Each layer is one batched operation over the members: weights are stored as ``(K, in, out)``, biases and
    LayerNorm scales/offsets as ``(K, out)``. The first layer multiplies the input by all members' weights at
    once, the later ones use ``torch.baddbmm``. As in :class:`MLP`, no-grad forward passes keep their hidden
    activations in scratch memory owned by the module.

    :param n_members: Number of members K
    :param input_dim: Size of the input features
    :param hidden_dims: Width of each hidden layer
    :param output_dim: Size of each member's output
    :param layer_norm: Whether to apply (per-member) LayerNorm after each hidden activation
    """

    def __init__(self, n_members: int, input_dim: int, hidden_dims: Sequence[int], output_dim: int, layer_norm: bool = False):
        super().__init__()
        self.n_members = n_members
        dims = [input_dim, *hidden_dims, output_dim]
        self.weights = nn.ParameterList(th.empty(n_members, d_in, d_out) for d_in, d_out in itertools.pairwise(dims))
        self.biases = nn.ParameterList(th.empty(n_members, d) for d in dims[1:])
        for weight, bias in zip(self.weights, self.biases, strict=True):
            reference_init_(weight, bias)
        self.norm_weights = nn.ParameterList(th.ones(n_members, d) for d in hidden_dims) if layer_norm else None
        self.norm_biases = nn.ParameterList(th.zeros(n_members, d) for d in hidden_dims) if layer_norm else None
        self._max_hidden_dim = max(hidden_dims, default=0)
        self._scratch = _Scratch()

    def forward(self, x: th.Tensor, frozen: bool = False) -> th.Tensor:
        """
        :param x: Inputs of shape ``(B, input_dim)``, shared by all members
        :param frozen: Use detached parameters: gradients reach ``x`` but never the parameters
        :return: Outputs of shape ``(K, B, output_dim)``
        """
        parameters = [self.weights, self.biases, self.norm_weights or [], self.norm_biases or []]
        weights, biases, scales, offsets = ([p.detach() if frozen else p for p in group] for group in parameters)
        n_members, d_in, d_out = weights[0].shape
        rows, last = x.shape[0], len(weights) - 1
        numel = n_members * rows * self._max_hidden_dim
        pre_block, post_block = (None, None) if th.is_grad_enabled() or last == 0 else self._scratch.take(x, numel)
        # First layer of all members as one batched matmul on the shared input, a stride-0 view of it (docs/algorithms.md §2:
        # Linear): its (K, B, out) output is contiguous, so LayerNorm and its backward need no copy.
        first_out = _region(pre_block, (n_members, rows, d_out)) if last > 0 else None
        h = th.baddbmm(biases[0].unsqueeze(1), x.expand(n_members, rows, d_in), weights[0], out=first_out)
        for i in range(1, last + 1):
            shape = (n_members, rows, weights[i].shape[1])
            h = _gelu_tanh(h, out=_region(post_block, shape))  # docs/algorithms.md §2: -> GELU(tanh)
            if scales:
                # docs/algorithms.md §2: -> LayerNorm(eps 1e-6), each member with its own scale and offset.
                scale, offset = scales[i - 1].unsqueeze(1), offsets[i - 1].unsqueeze(1)
                h = _layer_norm(h, scale, offset, in_place=post_block is not None)
            out = _region(pre_block, (n_members, rows, weights[i].shape[2])) if i < last else None
            h = th.baddbmm(biases[i].unsqueeze(1), h, weights[i], out=out)  # docs/algorithms.md §2: Linear
        return h


class CriticEnsemble(nn.Module):
    """
    Critic ensemble Q_k(s, a), k = 1..K (docs/algorithms.md §2): K independent MLPs on ``concat[s, a]`` with a scalar output
    each.

    :param observation_dim: Size of the (flat) observation
    :param action_dim: Size of the (flat) action, e.g. ``h * A`` for a chunk
    :param hidden_dims: Width of each hidden layer
    :param n_critics: Number of ensemble members K
    :param layer_norm: Whether to apply LayerNorm after each hidden activation
    """

    def __init__(
        self,
        observation_dim: int,
        action_dim: int,
        hidden_dims: Sequence[int] = (512, 512, 512, 512),
        n_critics: int = 2,
        layer_norm: bool = True,
    ):
        super().__init__()
        self.n_critics = n_critics
        self.net = EnsembleMLP(n_critics, observation_dim + action_dim, hidden_dims, 1, layer_norm=layer_norm)

    def forward(self, observations: th.Tensor, actions: th.Tensor, frozen: bool = False) -> th.Tensor:
        """
        :param observations: Observations of shape ``(B, observation_dim)``
        :param actions: Actions of shape ``(B, action_dim)``
        :param frozen: Use detached parameters: gradients reach the inputs but never the critic (the actor's Q loss)
        :return: Q-values of shape ``(K, B)``
        """
        # docs/algorithms.md §2: Q(concat[s, a]) -> (K, B)
        return self.net(th.cat((observations, actions), dim=-1), frozen=frozen).squeeze(-1)


class FlowVectorField(nn.Module):
    """
    Flow-matching velocity field f(s, x, t) (docs/algorithms.md §2): MLP on ``concat[s, x, t]`` with the raw time t.

    :param observation_dim: Size of the (flat) observation
    :param action_dim: Size of the (flat) action x and of the velocity
    :param hidden_dims: Width of each hidden layer
    :param layer_norm: Whether to apply LayerNorm after each hidden activation (the reference uses none)
    """

    def __init__(
        self,
        observation_dim: int,
        action_dim: int,
        hidden_dims: Sequence[int] = (512, 512, 512, 512),
        layer_norm: bool = False,
    ):
        super().__init__()
        self.observation_dim = observation_dim
        self.action_dim = action_dim
        self.mlp = MLP(observation_dim + action_dim + 1, hidden_dims, action_dim, layer_norm=layer_norm)

    def forward(self, observations: th.Tensor, x: th.Tensor, t: th.Tensor) -> th.Tensor:
        """
        :param observations: Observations of shape ``(B, observation_dim)``
        :param x: Current flow points of shape ``(B, action_dim)``
        :param t: Times in [0, 1] of shape ``(B, 1)``
        :return: Velocities of shape ``(B, action_dim)``
        """
        return self.mlp(th.cat((observations, x, t), dim=-1))  # docs/algorithms.md §2: f(concat[s, x, t])

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
        action_weight, time_weight = weight[:, self.observation_dim : -1], weight[:, -1]
        pre = th.addmm(state_term, x, action_weight.T)  # docs/algorithms.md §2: concat[s, x, t] W^T + b, split by input
        if t != 0.0:
            pre = pre.add_(time_weight, alpha=t)
        return self.mlp.forward_from_first_layer(pre)

    def fuses_euler(self, observations: th.Tensor) -> bool:
        """
        Whether :meth:`fused_euler` can integrate from these observations: autograd off, float32 on CPU with PyTorch's
        oneDNN op, at least one hidden layer and no LayerNorm (the reference's flow).

        :param observations: The observations the sampler starts from
        :return: True when :func:`euler_flow_actions` may take the fused path
        """
        return self.mlp.norms is None and len(self.mlp.linears) > 1 and _fuses_linear_gelu(observations)

    def fused_euler(self, observations: th.Tensor, noise: th.Tensor, flow_steps: int) -> th.Tensor:
        """
        The Euler sampler of :func:`euler_flow_actions` (docs/algorithms.md §3) as few, fused calls per step; only where
        :meth:`fuses_euler` holds. Same values to float32 rounding.

        Each step runs every hidden layer as one oneDNN Linear -> GELU(tanh) call on a buffer that holds
        concat[s, x, t], and the step itself as one matmul. Both rest on carrying the last layer's bias b_L outside
        the loop: with t_i = i / T and y_i = a_i - t_i b_L, the update a_{i+1} = a_i + (h_i W_L^T + b_L) / T becomes
        y_{i+1} = y_i + h_i W_L^T / T, a_T = y_T + b_L, and the first layer sees y_i in place of a_i through its time
        column: concat[s, a_i, t_i] W^T = concat[s, y_i, t_i] [W_s, W_x, w_t + W_x b_L]^T.

        :param observations: Observations of shape ``(M, observation_dim)``
        :param noise: Starting points z of shape ``(M, action_dim)``
        :param flow_steps: Number of Euler steps T
        :return: Actions of shape ``(M, action_dim)``, clipped to [-1, 1]
        """
        if flow_steps < 1:
            raise ValueError(f"flow_steps must be >= 1, got {flow_steps}")
        linears = self.mlp.linears
        first, last = linears[0], linears[-1]
        actions_in = slice(self.observation_dim, self.observation_dim + self.action_dim)
        first_weight = first.weight.clone()
        # Time column w_t + W_x b_L: the time step also carries t_i b_L through the first layer.
        th.addmv(first.weight[:, -1], first.weight[:, actions_in], last.bias, out=first_weight[:, -1])
        # (weight, bias) of each hidden layer, the first with its new time column
        hidden = [(first_weight, first.bias), *((linear.weight, linear.bias) for linear in linears[1:-1])]
        last_weight_t = last.weight.T
        inputs = th.cat((observations, noise, noise.new_zeros(noise.shape[0], 1)), dim=1)  # concat[s, y_0, t_0]
        action_columns, time_column = inputs[:, actions_in], inputs[:, -1]
        y = noise
        for i in range(flow_steps):
            if i > 0:
                time_column.fill_(i / flow_steps)  # docs/algorithms.md §3: t = i / T
                action_columns.copy_(y)
            h = inputs
            for weight, bias in hidden:
                h = th.ops.mkldnn._linear_pointwise(h, weight, bias, "gelu", [], "tanh")  # Linear -> GELU(tanh)
            y = th.addmm(y, h, last_weight_t, alpha=1.0 / flow_steps)  # docs/algorithms.md §3: a <- a + f(s, a, t) / T
        return y.add_(last.bias).clamp_(-1.0, 1.0)  # a_T = y_T + b_L; docs/algorithms.md §3: clip once, at the end


class OneStepActor(nn.Module):
    """
    One-step policy mu(s, z) of QC-FQL (docs/algorithms.md §2): MLP on ``concat[s, z]``, no squashing.

    :param observation_dim: Size of the (flat) observation
    :param action_dim: Size of the (flat) action and of the noise z
    :param hidden_dims: Width of each hidden layer
    :param layer_norm: Whether to apply LayerNorm after each hidden activation (the reference uses none)
    """

    def __init__(
        self,
        observation_dim: int,
        action_dim: int,
        hidden_dims: Sequence[int] = (512, 512, 512, 512),
        layer_norm: bool = False,
    ):
        super().__init__()
        self.mlp = MLP(observation_dim + action_dim, hidden_dims, action_dim, layer_norm=layer_norm)

    def forward(self, observations: th.Tensor, noise: th.Tensor) -> th.Tensor:
        """
        :param observations: Observations of shape ``(B, observation_dim)``
        :param noise: Noise z of shape ``(B, action_dim)``
        :return: Unclipped actions of shape ``(B, action_dim)``
        """
        return self.mlp(th.cat((observations, noise), dim=-1))  # docs/algorithms.md §2: mu(concat[s, z]), no tanh


def euler_flow_actions(vector_field: FlowVectorField, observations: th.Tensor, noise: th.Tensor, flow_steps: int) -> th.Tensor:
    """
    Integrate the flow from noise with ``flow_steps`` Euler steps and clip the result to [-1, 1] (docs/algorithms.md §3).

    Without autograd on CPU the reference's flow (no LayerNorm) takes :meth:`FlowVectorField.fused_euler`, the same
    values to float32 rounding in fewer calls; otherwise the loop below, which is differentiable.

    :param vector_field: Velocity field f(s, x, t)
    :param observations: Observations of shape ``(M, observation_dim)``
    :param noise: Starting points z of shape ``(M, action_dim)``
    :param flow_steps: Number of Euler steps T
    :return: Actions of shape ``(M, action_dim)``
    """
    if flow_steps > 0 and vector_field.fuses_euler(observations):
        return vector_field.fused_euler(observations, noise, flow_steps)
    state_term = vector_field.state_term(observations)  # once for all T steps
    actions = noise
    for i in range(flow_steps):
        velocity = vector_field.velocity(state_term, actions, i / flow_steps)  # docs/algorithms.md §3: t = i / T
        actions = actions + velocity / flow_steps  # docs/algorithms.md §3: a <- a + f(s, a, t) / T
    return actions.clamp(-1.0, 1.0)  # docs/algorithms.md §3: clip once, at the end


def best_of_n_actions(
    vector_field: FlowVectorField,
    critic: CriticEnsemble,
    observations: th.Tensor,
    n_samples: int,
    flow_steps: int,
    q_agg: str = "mean",
    noise: th.Tensor | None = None,
) -> th.Tensor:
    """
    Best-of-N policy (docs/algorithms.md §3): sample N flow actions per state, keep the one with the highest
    ensemble-aggregated Q.

    All ``B * N`` samples are integrated in one batched Euler call and scored in one critic call. Callers that do
    not need gradients should wrap the call in ``th.no_grad()`` (or ``th.inference_mode()``).

    :param vector_field: Velocity field of the flow policy
    :param critic: Critic ensemble scoring the samples
    :param observations: Observations of shape ``(B, observation_dim)``
    :param n_samples: Number of samples N per state
    :param flow_steps: Number of Euler steps T
    :param q_agg: How to aggregate the K critics: ``"mean"`` or ``"min"``
    :param noise: Starting noise of shape ``(B, N, action_dim)``; drawn from N(0, I) when ``None``
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
    actions = euler_flow_actions(vector_field, repeated_observations, noise.reshape(-1, action_dim), flow_steps)
    q_values = critic(repeated_observations, actions)  # (K, B * N)
    # docs/algorithms.md §3: score = aggregate over the ensemble ("mean" by default), then argmax over the N samples.
    scores = q_values.mean(dim=0) if q_agg == "mean" else q_values.amin(dim=0)
    best = scores.view(batch_size, n_samples).argmax(dim=1)
    index = best.view(batch_size, 1, 1).expand(batch_size, 1, action_dim)
    return actions.view(batch_size, n_samples, action_dim).gather(1, index).squeeze(1)
