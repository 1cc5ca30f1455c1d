"""LeNet and AlexNet for sensor windows (``C x T`` input), as MDLdroid uses them.

MDLdroid trains DL4J's zoo LeNet and AlexNet on multichannel sensor windows
(its Table 1: HAR, sEMG, PAMAP2, ...). We keep DL4J's layer configuration and
turn every 2-D kernel into a 1-D kernel along time, with the sensor channels
as input channels:

* LeNet (DL4J ``LeNet``): conv 5 x 20 (identity activation) -> maxpool 2/2 ->
  conv 5 x 50 (identity) -> maxpool 2/2 -> dense 500 ReLU -> dense classes.
* AlexNet (DL4J ``AlexNet``): conv 11/4 pad 3 x 96 -> ReLU -> LRN -> maxpool 3/2
  -> conv 5 pad 2 x 256 -> ReLU -> LRN -> maxpool 3/2 -> 3 x conv 3 pad 1
  (384, 384, 256) with ReLU -> maxpool 3/2 -> dense 4096 ReLU -> dense 4096
  ReLU -> dense classes. Dropout is left out so training graphs are
  deterministic; ``fc_width`` shrinks the two 4096-wide layers.

DL4J's LeNet has no normalisation. ``build_lenet(norm=...)`` adds one after
each convolution (as MobileNetV2 has, whose classifier is a plain linear
layer), for controlled comparisons with normalised models (round 51: does
normalisation change what federated training does with class-skewed
clients?): ``"batch"`` (BatchNorm1d, running statistics in the state dict) or
``"group"`` (GroupNorm with 5 groups, no batch dependence, no running
statistics). Both normalise over time as well as the batch, so a batch of one
window trains.

Defaults follow UCI HAR in MDLdroid Table 1 (9 channels, 6 classes) with the
usual 128-sample window. MDLdroid reports no parameter counts for these two.
"""

from __future__ import annotations

import torch
from torch import nn

from edgetrain.errors import ModelError
from edgetrain.models.base import annotate
from edgetrain.models.registry import positive, require


def flat_features(name: str, features: nn.Module, in_channels: int, length: int) -> int:
    """Size of ``features``' output for one ``C x T`` window (checked at build time)."""
    try:
        with torch.no_grad():
            out = features(torch.zeros(1, in_channels, length))
    except RuntimeError as exc:
        raise ModelError(
            f"model {name!r}: a window of length {length} is too short for its "
            f"convolution/pooling stack; use a larger 'length' ({exc})"
        ) from None
    return int(out[0].numel())


LENET_NORMS = ("none", "batch", "group")


def _norm(kind: str, channels: int) -> list[nn.Module]:
    if kind == "batch":
        return [nn.BatchNorm1d(channels)]
    if kind == "group":
        return [nn.GroupNorm(5, channels)]
    return []


class LeNet1D(nn.Module):
    def __init__(self, in_channels: int, length: int, num_classes: int, norm: str = "none"):
        super().__init__()
        self.stage1 = nn.Sequential(
            nn.Conv1d(in_channels, 20, 5), *_norm(norm, 20), nn.MaxPool1d(2, 2)
        )
        self.stage2 = nn.Sequential(nn.Conv1d(20, 50, 5), *_norm(norm, 50), nn.MaxPool1d(2, 2))
        flat = flat_features("lenet", nn.Sequential(self.stage1, self.stage2), in_channels, length)
        self.fc = nn.Sequential(nn.Flatten(), nn.Linear(flat, 500), nn.ReLU())
        self.classifier = nn.Linear(500, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.fc(self.stage2(self.stage1(x))))


class AlexNet1D(nn.Module):
    def __init__(self, in_channels: int, length: int, num_classes: int, fc_width: int):
        super().__init__()
        self.stage1 = nn.Sequential(
            nn.Conv1d(in_channels, 96, 11, stride=4, padding=3),
            nn.ReLU(),
            nn.LocalResponseNorm(5),
            nn.MaxPool1d(3, 2),
        )
        self.stage2 = nn.Sequential(
            nn.Conv1d(96, 256, 5, padding=2), nn.ReLU(), nn.LocalResponseNorm(5), nn.MaxPool1d(3, 2)
        )
        self.stage3 = nn.Sequential(
            nn.Conv1d(256, 384, 3, padding=1),
            nn.ReLU(),
            nn.Conv1d(384, 384, 3, padding=1),
            nn.ReLU(),
            nn.Conv1d(384, 256, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool1d(3, 2),
        )
        features = nn.Sequential(self.stage1, self.stage2, self.stage3)
        flat = flat_features("alexnet", features, in_channels, length)
        self.fc1 = nn.Sequential(nn.Flatten(), nn.Linear(flat, fc_width), nn.ReLU())
        self.fc2 = nn.Sequential(nn.Linear(fc_width, fc_width), nn.ReLU())
        self.classifier = nn.Linear(fc_width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stage3(self.stage2(self.stage1(x)))
        return self.classifier(self.fc2(self.fc1(x)))


def build_lenet(
    in_channels: int = 9, length: int = 128, num_classes: int = 6, norm: str = "none"
) -> nn.Module:
    """DL4J LeNet adapted to 1-D sensor windows (``norm``: see the module docstring)."""
    positive("lenet", in_channels=in_channels, length=length, num_classes=num_classes)
    require(
        norm in LENET_NORMS,
        f"option 'norm' of model 'lenet' must be one of {list(LENET_NORMS)}, got {norm!r}",
    )
    model = LeNet1D(in_channels, length, num_classes, norm)
    return annotate(
        model,
        input_shape=(in_channels, length),
        num_classes=num_classes,
        stem=["stage1"],
        blocks=["stage2", "fc"],
        head="classifier",
    )


def build_alexnet(
    in_channels: int = 9, length: int = 128, num_classes: int = 6, fc_width: int = 4096
) -> nn.Module:
    """DL4J AlexNet adapted to 1-D sensor windows."""
    positive(
        "alexnet",
        in_channels=in_channels,
        length=length,
        num_classes=num_classes,
        fc_width=fc_width,
    )
    model = AlexNet1D(in_channels, length, num_classes, fc_width)
    return annotate(
        model,
        input_shape=(in_channels, length),
        num_classes=num_classes,
        stem=["stage1"],
        blocks=["stage2", "stage3", "fc1", "fc2"],
        head="classifier",
    )
