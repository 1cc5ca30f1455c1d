"""ShuffleNetV2 (Ma et al., 2018) with a width multiplier and small inputs.

FedHybrid trains ShuffleNet on phones. Stage repeats (4, 8, 4) and per-width
channels follow the paper's Table 5 (widths 0.5, 1.0, 1.5, 2.0). At
``input_size`` 224, width 1.0 and 1000 classes it has 2.28 M parameters
(paper: 2.3 M). For small inputs (``input_size < 64``) the stem conv uses
stride 1 and the stem max-pool is dropped (CIFAR adaptation).

The channel shuffle is written with ``unflatten``/``transpose``/``flatten`` on
channel counts known at build time, so no tensor sizes are read in forward.
"""

from __future__ import annotations

import torch
from torch import nn

from edgetrain.models.base import annotate
from edgetrain.models.registry import require

# width -> output channels of (stem, stage2, stage3, stage4, conv5): Ma et al. Table 5.
WIDTHS = {
    0.5: (24, 48, 96, 192, 1024),
    1.0: (24, 116, 232, 464, 1024),
    1.5: (24, 176, 352, 704, 1024),
    2.0: (24, 244, 488, 976, 2048),
}
REPEATS = (4, 8, 4)


def channel_shuffle(x: torch.Tensor, channels: int, groups: int = 2) -> torch.Tensor:
    return x.unflatten(1, (groups, channels // groups)).transpose(1, 2).flatten(1, 2)


def _conv_bn(c_in: int, c_out: int, kernel: int, stride: int, groups: int = 1, act: bool = True):
    layers: list[nn.Module] = [
        nn.Conv2d(c_in, c_out, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
        nn.BatchNorm2d(c_out),
    ]
    if act:
        layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class ShuffleUnit(nn.Module):
    """Stride 1: split channels, transform one half. Stride 2: both branches, doubling width."""

    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.stride = stride
        self.c_out = c_out
        half = c_out // 2
        if stride > 1:
            self.branch1 = nn.Sequential(
                _conv_bn(c_in, c_in, 3, stride, groups=c_in, act=False), _conv_bn(c_in, half, 1, 1)
            )
        b2_in = c_in if stride > 1 else half
        self.branch2 = nn.Sequential(
            _conv_bn(b2_in, half, 1, 1),
            _conv_bn(half, half, 3, stride, groups=half, act=False),
            _conv_bn(half, half, 1, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride == 1:
            keep, work = x.chunk(2, dim=1)
            out = torch.cat((keep, self.branch2(work)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, self.c_out)


class ShuffleNetV2(nn.Module):
    def __init__(self, width_mult: float, in_channels: int, num_classes: int, small: bool):
        super().__init__()
        widths = WIDTHS[width_mult]
        stem: list[nn.Module] = [_conv_bn(in_channels, widths[0], 3, 1 if small else 2)]
        if not small:
            stem.append(nn.MaxPool2d(3, 2, 1))
        self.conv_stem = nn.Sequential(*stem)
        c_in = widths[0]
        stages = []
        for repeats, c_out in zip(REPEATS, widths[1:4], strict=True):
            units = [ShuffleUnit(c_in, c_out, 2)]
            units += [ShuffleUnit(c_out, c_out, 1) for _ in range(repeats - 1)]
            stages.append(nn.Sequential(*units))
            c_in = c_out
        self.stages = nn.Sequential(*stages)
        self.conv5 = _conv_bn(c_in, widths[4], 1, 1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(widths[4], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv5(self.stages(self.conv_stem(x)))
        return self.fc(self.pool(x).flatten(1))


def build_shufflenetv2(
    num_classes: int = 10,
    width_mult: float = 1.0,
    in_channels: int = 3,
    input_size: int = 32,
) -> nn.Module:
    """ShuffleNetV2; ``input_size < 64`` selects the small-input stem."""
    require(
        width_mult in WIDTHS,
        f"option 'width_mult' of model 'shufflenetv2' must be one of {sorted(WIDTHS)}, "
        f"got {width_mult!r}",
    )
    for key, value in (
        ("num_classes", num_classes),
        ("in_channels", in_channels),
        ("input_size", input_size),
    ):
        require(value > 0, f"option {key!r} of model 'shufflenetv2' must be > 0, got {value}")
    model = ShuffleNetV2(float(width_mult), in_channels, num_classes, small=input_size < 64)
    return annotate(
        model,
        input_shape=(in_channels, input_size, input_size),
        num_classes=num_classes,
        stem=["conv_stem"],
        blocks=["stages.0", "stages.1", "stages.2", "conv5"],
        head="fc",
    )
