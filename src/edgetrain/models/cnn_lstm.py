"""CNN-LSTM hybrid for multichannel sensor windows (``C x T`` input).

MDLdroid (§2, Fig. 1b) trains "a CNN-LSTM hybrid model [47]" on PAMAP2 and
reports only its size (11.61 M parameters, 46.4 MB); the layer configuration is
not given, so we do not claim that figure. Our topology follows the common
DeepConvLSTM pattern (Ordóñez & Roggen, 2016) compacted for phones: two
conv1d stages (kernel 5, ``conv_channels`` filters, ReLU, maxpool 2) turn the
window into a sequence of ``T/4`` feature vectors, two LSTM layers of
``hidden`` units read it, and a linear head classifies the last hidden state.

The LSTM is unrolled over the (static) sequence length with ``nn.Linear``
gates, so the model traces with ``make_fx``, FLOPs are counted and LoRA can
target the gate projections. Defaults follow PAMAP2 in MDLdroid Table 1
(9 channels, 12 classes) with a 128-sample window.
"""

from __future__ import annotations

import torch
from torch import nn

from edgetrain.models.base import annotate
from edgetrain.models.registry import positive
from edgetrain.models.sensor_cnn import flat_features


class UnrolledLSTM(nn.Module):
    """One LSTM layer over a fixed number of steps, starting from a zero state.

    Gates follow PyTorch's ``nn.LSTM`` order (input, forget, cell, output);
    ``input_proj`` carries the bias, ``hidden_proj`` has none.
    """

    def __init__(self, in_features: int, hidden: int, steps: int):
        super().__init__()
        self.hidden = hidden
        self.steps = steps
        self.input_proj = nn.Linear(in_features, 4 * hidden)
        self.hidden_proj = nn.Linear(hidden, 4 * hidden, bias=False)

    def _cell(self, gates: torch.Tensor, c: torch.Tensor | None):
        i, f, g, o = gates.chunk(4, dim=-1)
        i, f, g, o = torch.sigmoid(i), torch.sigmoid(f), torch.tanh(g), torch.sigmoid(o)
        c = i * g if c is None else f * c + i * g  # c is None only at step 0 (zero state)
        return o * torch.tanh(c), c

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        projected = self.input_proj(x)  # (B, T, 4H) for all steps at once
        h, c = self._cell(projected[:, 0], None)
        outputs = [h]
        for t in range(1, self.steps):
            h, c = self._cell(projected[:, t] + self.hidden_proj(h), c)
            outputs.append(h)
        return torch.stack(outputs, dim=1)


class CNNLSTM(nn.Module):
    def __init__(self, in_channels: int, length: int, num_classes: int, conv: int, hidden: int):
        super().__init__()
        self.conv1 = nn.Sequential(
            nn.Conv1d(in_channels, conv, 5, padding=2), nn.ReLU(), nn.MaxPool1d(2, 2)
        )
        self.conv2 = nn.Sequential(
            nn.Conv1d(conv, conv, 5, padding=2), nn.ReLU(), nn.MaxPool1d(2, 2)
        )
        steps = (
            flat_features("cnn-lstm", nn.Sequential(self.conv1, self.conv2), in_channels, length)
            // conv
        )
        self.lstm = nn.ModuleList(
            [UnrolledLSTM(conv, hidden, steps), UnrolledLSTM(hidden, hidden, steps)]
        )
        self.fc = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        seq = self.conv2(self.conv1(x)).transpose(1, 2)  # (B, steps, conv)
        for layer in self.lstm:
            seq = layer(seq)
        return self.fc(seq[:, -1])


def build_cnn_lstm(
    in_channels: int = 9,
    length: int = 128,
    num_classes: int = 12,
    conv_channels: int = 64,
    hidden: int = 128,
) -> nn.Module:
    """Conv1d feature extractor + 2-layer unrolled LSTM + linear head."""
    positive(
        "cnn-lstm",
        in_channels=in_channels,
        length=length,
        num_classes=num_classes,
        conv_channels=conv_channels,
        hidden=hidden,
    )
    model = CNNLSTM(in_channels, length, num_classes, conv_channels, hidden)
    return annotate(
        model,
        input_shape=(in_channels, length),
        num_classes=num_classes,
        stem=["conv1", "conv2"],
        blocks=["lstm.0", "lstm.1"],
        head="fc",
    )
