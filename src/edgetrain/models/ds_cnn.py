"""DS-CNN for keyword spotting, as in the MLPerf Tiny KWS reference.

Input: 1 x 49 x 10 MFCC (49 frames of 10 coefficients). A 10x4 stride-2 conv
("same" padding) to 64 channels, four depthwise-separable blocks (3x3
depthwise + 1x1 pointwise, each with BatchNorm + ReLU), global average pooling
and a 12-way linear head (Zhang et al., "Hello Edge", DS-CNN-S topology). With
the default options this has about 24 K trainable parameters.

TrainDeeploy Table II quotes "DS-CNN with 52.5K parameters" for PULP-TrainLib;
that variant's layer configuration is not given in our papers, so we build the
MLPerf Tiny one and do not claim the 52.5 K figure. Dropout of the reference is
left out so the training graph is deterministic; convs before BatchNorm carry
no bias (the BatchNorm shift replaces it).
"""

from __future__ import annotations

import torch
from torch import nn

from edgetrain.models.base import annotate
from edgetrain.models.registry import positive


def _same_padding(size: int, kernel: int, stride: int) -> tuple[int, int]:
    """TensorFlow 'same' padding (before, after) for one axis."""
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


class DSBlock(nn.Module):
    """Depthwise 3x3 (+BN+ReLU) then pointwise 1x1 (+BN+ReLU)."""

    def __init__(self, channels: int):
        super().__init__()
        self.depthwise = nn.Conv2d(channels, channels, 3, padding=1, groups=channels, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.act1 = nn.ReLU()
        self.pointwise = nn.Conv2d(channels, channels, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.act2 = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act1(self.bn1(self.depthwise(x)))
        return self.act2(self.bn2(self.pointwise(x)))


class DSCNN(nn.Module):
    def __init__(self, frames: int, coeffs: int, channels: int, blocks: int, num_classes: int):
        super().__init__()
        top, bottom = _same_padding(frames, 10, 2)
        left, right = _same_padding(coeffs, 4, 2)
        self.conv_stem = nn.Sequential(
            nn.ZeroPad2d((left, right, top, bottom)),
            nn.Conv2d(1, channels, (10, 4), stride=2, bias=False),
            nn.BatchNorm2d(channels),
            nn.ReLU(),
        )
        self.ds_blocks = nn.Sequential(*(DSBlock(channels) for _ in range(blocks)))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.pool(self.ds_blocks(self.conv_stem(x))).flatten(1))


def build_ds_cnn(
    num_classes: int = 12,
    frames: int = 49,
    coeffs: int = 10,
    channels: int = 64,
    num_blocks: int = 4,
) -> nn.Module:
    """MLPerf Tiny KWS DS-CNN (input ``1 x frames x coeffs``)."""
    positive(
        "ds-cnn",
        num_classes=num_classes,
        frames=frames,
        coeffs=coeffs,
        channels=channels,
        num_blocks=num_blocks,
    )
    model = DSCNN(frames, coeffs, channels, num_blocks, num_classes)
    return annotate(
        model,
        input_shape=(1, frames, coeffs),
        num_classes=num_classes,
        stem=["conv_stem"],
        blocks=[f"ds_blocks.{i}" for i in range(num_blocks)],
        head="fc",
    )
