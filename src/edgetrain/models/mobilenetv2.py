"""MobileNetV2 (Sandler et al., 2018) with a width multiplier and small inputs.

FedHybrid trains MobileNetV2 on phones. The layout is the paper's Table 2
(inverted residual settings t, c, n, s; channels rounded to multiples of 8 as
in the reference code). At ``input_size`` 224, width 1.0 and 1000 classes it
has 3.50 M parameters (paper: 3.4 M).

For small inputs (``input_size < 64``, e.g. 28 for MNIST, 32 for CIFAR) the
stem and the first stride-2 stage use stride 1, the usual CIFAR adaptation,
so the last feature map is 4x4 instead of 1x1. The classifier's dropout is
left out so training graphs are deterministic.
"""

from __future__ import annotations

import torch
from torch import nn

from edgetrain.models.base import annotate
from edgetrain.models.registry import positive

# (expansion t, output channels c, repeats n, first stride s): Sandler et al. Table 2.
SETTINGS = [
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
]


def make_divisible(value: float, divisor: int = 8) -> int:
    """Round channels to a multiple of ``divisor``, never below 90% of ``value``."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def conv_bn(c_in: int, c_out: int, kernel: int, stride: int, groups: int = 1, act: bool = True):
    layers: list[nn.Module] = [
        nn.Conv2d(c_in, c_out, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
        nn.BatchNorm2d(c_out),
    ]
    if act:
        layers.append(nn.ReLU6())
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int, expand: int):
        super().__init__()
        hidden = c_in * expand
        layers = [conv_bn(c_in, hidden, 1, 1)] if expand != 1 else []
        layers += [
            conv_bn(hidden, hidden, 3, stride, groups=hidden),
            conv_bn(hidden, c_out, 1, 1, act=False),
        ]
        self.conv = nn.Sequential(*layers)
        self.residual = stride == 1 and c_in == c_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv(x)
        return x + out if self.residual else out


class MobileNetV2(nn.Module):
    def __init__(self, width_mult: float, in_channels: int, num_classes: int, small: bool):
        super().__init__()
        c_in = make_divisible(32 * width_mult)
        self.last_channels = make_divisible(1280 * max(1.0, width_mult))
        self.conv_stem = conv_bn(in_channels, c_in, 3, 1 if small else 2)
        blocks: list[nn.Module] = []
        for stage, (t, c, n, s) in enumerate(SETTINGS):
            c_out = make_divisible(c * width_mult)
            stride = 1 if (small and stage == 1) else s
            for i in range(n):
                blocks.append(InvertedResidual(c_in, c_out, stride if i == 0 else 1, t))
                c_in = c_out
        self.features = nn.Sequential(*blocks)
        self.last_conv = conv_bn(c_in, self.last_channels, 1, 1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(self.last_channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.last_conv(self.features(self.conv_stem(x)))
        return self.classifier(self.pool(x).flatten(1))


def build_mobilenetv2(
    num_classes: int = 10,
    width_mult: float = 1.0,
    in_channels: int = 3,
    input_size: int = 32,
) -> nn.Module:
    """MobileNetV2; ``input_size < 64`` selects the small-input strides."""
    positive(
        "mobilenetv2",
        num_classes=num_classes,
        width_mult=width_mult,
        in_channels=in_channels,
        input_size=input_size,
    )
    model = MobileNetV2(width_mult, in_channels, num_classes, small=input_size < 64)
    n_blocks = len(model.features)
    return annotate(
        model,
        input_shape=(in_channels, input_size, input_size),
        num_classes=num_classes,
        stem=["conv_stem"],
        blocks=[f"features.{i}" for i in range(n_blocks)] + ["last_conv"],
        head="classifier",
    )
