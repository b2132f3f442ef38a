"""Image encoders as SB3 features extractors: the Q-chunking reference's ``impala_small`` (from FQL's code)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch as th
import torch.nn.functional as F
from gymnasium import spaces
from stable_baselines3.common.preprocessing import is_image_space_channels_first
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn

from qc_sb3.common.networks import reference_init_


def same_max_pool(x: th.Tensor, kernel_size: int = 3, stride: int = 2) -> th.Tensor:
    """
    Max pooling with TensorFlow's (and JAX's) ``"SAME"`` padding, as the reference pools: ``ceil(n / stride)`` outputs
    per spatial axis, the padding split with its odd element after (at the bottom and on the right), padded values
    never selected. For even sizes this differs from ``max_pool2d(padding=1)``, which pads one on each side.

    :param x: Feature maps of shape ``(B, C, H, W)``
    :param kernel_size: Window size, square
    :param stride: Window stride
    :return: The pooled maps, of shape ``(B, C, ceil(H / stride), ceil(W / stride))``
    """
    pads: list[int] = []
    for size in (x.shape[-1], x.shape[-2]):  # F.pad lists the last axis first
        total = max((math.ceil(size / stride) - 1) * stride + kernel_size - size, 0)
        pads += [total // 2, total - total // 2]
    return F.max_pool2d(F.pad(x, pads, value=-math.inf), kernel_size, stride)


def _conv3x3(in_channels: int, out_channels: int) -> nn.Conv2d:
    """A 3x3 convolution of stride 1 with ``"SAME"`` padding, Xavier-uniform weights and zero biases (the reference's)."""
    conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, stride=1, padding=1)
    nn.init.xavier_uniform_(conv.weight)  # fans 9 * in and 9 * out, as flax's xavier_uniform on (3, 3, in, out)
    nn.init.zeros_(conv.bias)
    return conv


class ResidualStack(nn.Module):
    """
    One stack of the IMPALA encoder: a 3x3 convolution, 3x3 max pooling of stride 2 (``"SAME"`` padding), then
    ``num_blocks`` residual blocks ``x + conv(relu(conv(relu(x))))``.

    :param in_channels: Channels of the input maps
    :param channels: Channels of every convolution of the stack
    :param num_blocks: Number of residual blocks
    """

    def __init__(self, in_channels: int, channels: int, num_blocks: int):
        super().__init__()
        self.conv = _conv3x3(in_channels, channels)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.ReLU(), _conv3x3(channels, channels), nn.ReLU(), _conv3x3(channels, channels))
            for _ in range(num_blocks)
        )

    def forward(self, x: th.Tensor) -> th.Tensor:
        """:param x: Maps of shape ``(B, in_channels, H, W)``; :return: maps ``(B, channels, ceil(H/2), ceil(W/2))``"""
        x = same_max_pool(self.conv(x))
        for block in self.blocks:
            x = x + block(x)
        return x


class ImpalaSmallExtractor(BaseFeaturesExtractor):
    """
    The reference's ``impala_small`` image encoder (FQL's ``ImpalaEncoder`` with one residual block per stack),
    for ``policy_kwargs=dict(features_extractor_class=ImpalaSmallExtractor)``: three :class:`ResidualStack` of
    16, 32 and 32 channels, a ReLU, the maps flattened in the reference's ``(H, W, C)`` order, then one Linear layer of
    ``features_dim`` units and GELU (tanh approximation). Convolutions and the Linear layer start with Xavier-uniform
    weights and zero biases, as in the reference; there is no LayerNorm and no dropout (the reference's defaults).

    It reads channels-first images (SB3's layout: ``VecTransposeImage`` makes channels-last image envs channels
    first) already scaled to [0, 1]: the policy divides uint8 images by 255 once (``normalize_images=True``), where
    the reference's encoder divides them itself.

    :param observation_space: A channels-first image space ``(C, H, W)``
    :param features_dim: Units of the final Linear layer (the reference's 512)
    :param stack_channels: Channels of each stack (the reference's 16, 32, 32)
    :param num_blocks: Residual blocks per stack (1 for ``impala_small``)
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        features_dim: int = 512,
        stack_channels: Sequence[int] = (16, 32, 32),
        num_blocks: int = 1,
    ):
        if not isinstance(observation_space, spaces.Box) or len(observation_space.shape) != 3:
            raise ValueError(f"ImpalaSmallExtractor needs a Box of images (C, H, W), got {observation_space}")
        if not is_image_space_channels_first(observation_space):
            raise ValueError(
                f"ImpalaSmallExtractor needs channels-first images (C, H, W), got shape {observation_space.shape}: "
                "SB3 transposes uint8 channels-last image envs itself (VecTransposeImage); transpose other ones"
            )
        if features_dim < 1 or num_blocks < 0 or not stack_channels or min(stack_channels) < 1:
            raise ValueError(
                f"ImpalaSmallExtractor needs features_dim >= 1, num_blocks >= 0 and channels >= 1 per stack, got "
                f"features_dim={features_dim}, num_blocks={num_blocks}, stack_channels={tuple(stack_channels)}"
            )
        super().__init__(observation_space, features_dim)
        channels, height, width = observation_space.shape
        stacks = []
        for stack_width in stack_channels:
            stacks.append(ResidualStack(channels, stack_width, num_blocks))
            channels, height, width = stack_width, math.ceil(height / 2), math.ceil(width / 2)
        self.stacks = nn.Sequential(*stacks)
        self.linear = nn.Linear(channels * height * width, features_dim)
        reference_init_(self.linear.weight, self.linear.bias)

    def forward(self, observations: th.Tensor) -> th.Tensor:
        """:param observations: Images ``(B, C, H, W)`` in [0, 1]; :return: features ``(B, features_dim)``"""
        maps = F.relu(self.stacks(observations))
        flat = maps.permute(0, 2, 3, 1).flatten(1)  # (H, W, C) order, as the reference flattens its NHWC maps
        return F.gelu(self.linear(flat), approximate="tanh")
