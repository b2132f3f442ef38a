"""The reference's impala_small encoder: its pooling, layers, initialisation, and its forward against NumPy by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from torch import nn

from qc_sb3 import ImpalaSmallExtractor
from qc_sb3.common.encoders import same_max_pool


def image_space(channels: int, height: int, width: int) -> spaces.Box:
    return spaces.Box(0, 255, (channels, height, width), np.uint8)


def test_same_max_pool_puts_the_odd_padding_after_as_tensorflow_does():
    # 4 rows, windows of 3 with stride 2: TensorFlow's SAME pads one row after, so the windows are rows 0-2 and 2-3
    # (max_pool2d(padding=1) would pad one before and after: rows 0-1 and 1-3).
    x = th.tensor([[0.0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]])
    x[1, 1] = 100.0  # in the first window only under SAME; in all four under padding=1
    pooled = same_max_pool(x.view(1, 1, 4, 4))[0, 0]
    expected = th.tensor(
        [
            [x[0:3, 0:3].max(), x[0:3, 2:4].max()],
            [x[2:4, 0:3].max(), x[2:4, 2:4].max()],
        ]
    )
    assert th.equal(pooled, expected)
    assert pooled.tolist() == [[100.0, 11.0], [14.0, 15.0]]
    # Odd sizes pad one on each side: 5 -> 3 outputs, windows 0-1, 1-3, 3-4.
    y = th.arange(5.0).view(1, 1, 1, 5).expand(1, 1, 3, 5)
    assert same_max_pool(y)[0, 0, 0].tolist() == [1.0, 3.0, 4.0]


def test_layers_widths_and_the_reference_initialisation():
    extractor = ImpalaSmallExtractor(image_space(3, 64, 64))
    convs = [module for module in extractor.modules() if isinstance(module, nn.Conv2d)]
    # Three stacks (16, 32, 32 channels), each a convolution and one residual block of two: nine 3x3 convolutions.
    assert [conv.out_channels for conv in convs] == [16, 16, 16, 32, 32, 32, 32, 32, 32]
    assert all(conv.kernel_size == (3, 3) and conv.stride == (1, 1) for conv in convs)
    # 64 -> 32 -> 16 -> 8 after the three poolings: 8 * 8 * 32 features into one Linear layer of 512 units.
    assert (extractor.linear.in_features, extractor.linear.out_features, extractor.features_dim) == (2048, 512, 512)
    for layer in [*convs, extractor.linear]:
        weight = layer.weight.detach()
        fan_in, fan_out = weight[0].numel(), weight.shape[0] * weight[0, 0].numel()
        bound = math.sqrt(6.0 / (fan_in + fan_out))  # Xavier-uniform, receptive field in both fans (flax's)
        assert weight.abs().max() <= bound and th.equal(layer.bias, th.zeros_like(layer.bias))
        if weight.numel() >= 9000:  # the uniform's standard deviation, bound / sqrt(3), to a few percent
            assert abs(float(weight.std()) / (bound / math.sqrt(3.0)) - 1.0) < 0.05


def same_pads(size: int, kernel: int, stride: int) -> tuple[int, int]:
    """TensorFlow's SAME padding of one axis: ceil(size / stride) outputs, the odd element of the padding after."""
    total = max((-(-size // stride) - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


def numpy_conv_same(x: np.ndarray, kernel: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """A stride-1 convolution with SAME padding in NHWC, kernel HWIO (cross-correlation, as flax's nn.Conv)."""
    kh, kw = kernel.shape[:2]
    (top, bottom), (left, right) = same_pads(x.shape[1], kh, 1), same_pads(x.shape[2], kw, 1)
    padded = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)))
    out = np.zeros((*x.shape[:3], kernel.shape[3]))
    for dy in range(kh):
        for dx in range(kw):
            out += padded[:, dy : dy + x.shape[1], dx : dx + x.shape[2], :] @ kernel[dy, dx]
    return out + bias


def numpy_max_pool_same(x: np.ndarray, window: int = 3, stride: int = 2) -> np.ndarray:
    (top, bottom), (left, right) = same_pads(x.shape[1], window, stride), same_pads(x.shape[2], window, stride)
    padded = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)), constant_values=-np.inf)
    rows, columns = -(-x.shape[1] // stride), -(-x.shape[2] // stride)
    out = np.empty((x.shape[0], rows, columns, x.shape[3]))
    for i in range(rows):
        for j in range(columns):
            out[:, i, j] = padded[:, i * stride : i * stride + window, j * stride : j * stride + window].max(axis=(1, 2))
    return out


def numpy_impala_small(extractor: ImpalaSmallExtractor, images_nhwc: np.ndarray) -> np.ndarray:
    """The reference's ImpalaEncoder(num_blocks=1) in NumPy, NHWC as the reference computes, on the module's weights."""

    def conv(x: np.ndarray, layer: nn.Conv2d) -> np.ndarray:
        kernel = layer.weight.detach().double().numpy().transpose(2, 3, 1, 0)  # (out, in, h, w) -> HWIO
        return numpy_conv_same(x, kernel, layer.bias.detach().double().numpy())

    relu = lambda v: np.maximum(v, 0.0)  # noqa: E731
    x = images_nhwc.astype(np.float64) / 255.0
    for stack in extractor.stacks:
        x = numpy_max_pool_same(conv(x, stack.conv))
        for block in stack.blocks:
            first, second = (layer for layer in block if isinstance(layer, nn.Conv2d))
            x = x + conv(relu(conv(relu(x), first)), second)
    flat = relu(x).reshape(len(x), -1)  # the reference reshapes its NHWC maps
    dense = flat @ extractor.linear.weight.detach().double().numpy().T + extractor.linear.bias.detach().double().numpy()
    return 0.5 * dense * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (dense + 0.044715 * dense**3)))  # GELU (tanh)


@pytest.mark.parametrize("shape", [(3, 10, 7), (1, 9, 12)])
def test_forward_matches_a_numpy_forward_of_the_same_weights(shape):
    th.manual_seed(0)
    extractor = ImpalaSmallExtractor(image_space(*shape), features_dim=24, stack_channels=(4, 6, 5))
    with th.no_grad():  # biases off zero, so that each one's place is checked too
        for module in extractor.modules():
            if isinstance(module, nn.Conv2d | nn.Linear):
                module.bias.normal_(0.0, 0.1)
    images = np.random.default_rng(0).integers(0, 256, size=(2, *shape), dtype=np.uint8)
    features = extractor(th.as_tensor(images, dtype=th.float32) / 255.0)  # the policy's scaling, normalize_images
    expected = numpy_impala_small(extractor, images.transpose(0, 2, 3, 1))
    assert features.shape == (2, 24)
    np.testing.assert_allclose(features.detach().numpy(), expected, rtol=1e-4, atol=1e-5)


def test_refuses_observations_that_are_not_channels_first_images():
    with pytest.raises(ValueError, match=r"needs a Box of images \(C, H, W\)"):
        ImpalaSmallExtractor(spaces.Box(-1, 1, (5,), np.float32))
    with pytest.raises(ValueError, match=r"channels-first images \(C, H, W\), got shape \(16, 16, 3\)"):
        ImpalaSmallExtractor(spaces.Box(0, 255, (16, 16, 3), np.uint8))
