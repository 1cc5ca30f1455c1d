"""Deep-AE: the MLPerf Tiny anomaly-detection autoencoder (ToyADMOS / DCASE 2020).

640 log-mel features (5 frames x 128 bins) -> 4 x Dense(128) -> Dense(8) ->
4 x Dense(128) -> Dense(640), every hidden Dense followed by BatchNorm and
ReLU: 267,928 trainable parameters (the Keras reference reports 269,992
including BatchNorm running statistics). TrainDeeploy Table II and
PULP-TrainLib use it at "270K" parameters.

The model reconstructs its input: ``num_classes`` is the number of
reconstructed features (640) and ``head`` is the decoder's last Linear layer.
"""

from __future__ import annotations

import torch
from torch import nn

from edgetrain.models.base import annotate
from edgetrain.models.registry import positive


def _dense(n_in: int, n_out: int, batchnorm: bool) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Linear(n_in, n_out)]
    if batchnorm:
        layers.append(nn.BatchNorm1d(n_out))
    layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DeepAE(nn.Module):
    """Encoder (stack of dense blocks down to the bottleneck) and mirrored decoder."""

    def __init__(self, input_dim: int, hidden: int, depth: int, bottleneck: int, batchnorm: bool):
        super().__init__()
        enc = [_dense(input_dim if i == 0 else hidden, hidden, batchnorm) for i in range(depth)]
        enc.append(_dense(hidden, bottleneck, batchnorm))
        dec = [_dense(bottleneck if i == 0 else hidden, hidden, batchnorm) for i in range(depth)]
        self.encoder = nn.Sequential(*enc)
        self.decoder = nn.Sequential(*dec)
        self.output = nn.Linear(hidden, input_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output(self.decoder(self.encoder(x)))


def build_deep_ae(
    input_dim: int = 640,
    hidden: int = 128,
    depth: int = 4,
    bottleneck: int = 8,
    batchnorm: bool = True,
) -> nn.Module:
    """MLPerf Tiny AD autoencoder. ``batchnorm=False`` allows training at batch size 1."""
    positive("deep-ae", input_dim=input_dim, hidden=hidden, depth=depth, bottleneck=bottleneck)
    model = DeepAE(input_dim, hidden, depth, bottleneck, batchnorm)
    return annotate(
        model,
        input_shape=(input_dim,),
        num_classes=input_dim,
        stem=["encoder.0"],
        blocks=[f"encoder.{i}" for i in range(1, depth + 1)]
        + [f"decoder.{i}" for i in range(depth)],
        head="output",
    )
