"""Compact Convolutional Transformer, CCT-2/3x2 (Hassani et al., 2021).

TrainDeeploy (§V-A) fine-tunes this model: two convolutional tokenizer layers
(kernel 3, each conv -> ReLU -> maxpool(3, 2, 1)), two pre-norm encoder blocks
with 2 heads, 128-dim embedding and a 128-dim MLP (ratio 1), sequence pooling
and a linear head: 0.28 M parameters and 67 MFLOPs per inference at 32x32x3.
As in the reference code, the tokenizer convolutions and the q/k/v projections
have no bias, the MLP uses GELU and each block applies LayerNorm after the
attention residual (``norm1``) before the MLP residual.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from edgetrain.models.attention import SelfAttention
from edgetrain.models.base import annotate
from edgetrain.models.registry import positive, require


class Tokenizer(nn.Module):
    """Conv tokenizer: ``n`` x (conv k x k -> ReLU -> maxpool 3/2/1), then flatten to tokens."""

    def __init__(self, in_channels: int, dim: int, layers: int, kernel: int, mid: int = 64):
        super().__init__()
        widths = [in_channels] + [mid] * (layers - 1) + [dim]
        stages: list[nn.Module] = []
        for c_in, c_out in zip(widths[:-1], widths[1:], strict=True):
            stages += [
                nn.Conv2d(
                    c_in,
                    c_out,
                    kernel,
                    stride=max(1, kernel // 2 - 1),
                    padding=max(1, kernel // 2),
                    bias=False,
                ),
                nn.ReLU(),
                nn.MaxPool2d(3, stride=2, padding=1),
            ]
        self.layers = nn.Sequential(*stages)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x).flatten(2).transpose(1, 2)  # (B, tokens, dim)


class EncoderBlock(nn.Module):
    """CCT encoder layer: x + attn(LN(x)) -> LN -> + MLP (GELU)."""

    def __init__(self, dim: int, heads: int, mlp_dim: int):
        super().__init__()
        self.pre_norm = nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, heads, qkv_bias=False, model="cct2")
        self.norm1 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, mlp_dim)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(mlp_dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.attn(self.pre_norm(x)))
        return x + self.fc2(self.act(self.fc1(x)))


def sinusoidal_embedding(tokens: int, dim: int) -> torch.Tensor:
    """Fixed sine/cosine positions as in Vaswani et al. (shape ``(1, tokens, dim)``)."""
    pos = torch.arange(tokens, dtype=torch.float64)[:, None]
    idx = torch.arange(dim, dtype=torch.float64)[None, :]
    angle = pos / torch.pow(10000.0, 2 * torch.div(idx, 2, rounding_mode="floor") / dim)
    table = torch.where(idx % 2 == 0, torch.sin(angle), torch.cos(angle))
    return table.to(torch.float32)[None]


class CCT(nn.Module):
    """Tokenizer -> (+ positions) -> encoder blocks -> LayerNorm -> SeqPool -> head."""

    def __init__(
        self,
        *,
        in_channels: int,
        input_size: int,
        num_classes: int,
        dim: int,
        layers: int,
        heads: int,
        mlp_dim: int,
        conv_layers: int,
        kernel: int,
        positional_embedding: str,
    ):
        super().__init__()
        self.tokenizer = Tokenizer(in_channels, dim, conv_layers, kernel)
        side = input_size
        stride, pad = max(1, kernel // 2 - 1), max(1, kernel // 2)
        for _ in range(conv_layers):
            side = math.floor((side + 2 * pad - kernel) / stride) + 1  # conv
            side = math.floor((side + 2 * 1 - 3) / 2) + 1  # maxpool(3, 2, 1)
        require(
            side >= 1,
            f"model 'cct2': input_size {input_size} is too small for {conv_layers} tokenizer "
            "layers (each halves the side); use a larger input_size or fewer conv_layers",
        )
        tokens = side * side
        if positional_embedding == "learnable":
            self.pos_embedding = nn.Parameter(torch.empty(1, tokens, dim))
            nn.init.trunc_normal_(self.pos_embedding, std=0.2)
        elif positional_embedding == "sine":
            self.register_buffer("pos_embedding", sinusoidal_embedding(tokens, dim))
        else:
            self.pos_embedding = None
        self.encoder = nn.ModuleList(EncoderBlock(dim, heads, mlp_dim) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.attention_pool = nn.Linear(dim, 1)
        self.fc = nn.Linear(dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.tokenizer(x)
        if self.pos_embedding is not None:
            x = x + self.pos_embedding
        for block in self.encoder:
            x = block(x)
        x = self.norm(x)
        weights = torch.softmax(self.attention_pool(x), dim=1)  # (B, tokens, 1): SeqPool
        pooled = torch.matmul(weights.transpose(1, 2), x).squeeze(1)
        return self.fc(pooled)


def build_cct2(
    num_classes: int = 10,
    in_channels: int = 3,
    input_size: int = 32,
    embed_dim: int = 128,
    num_layers: int = 2,
    num_heads: int = 2,
    mlp_dim: int = 128,
    conv_layers: int = 2,
    kernel_size: int = 3,
    positional_embedding: str = "learnable",
) -> nn.Module:
    """CCT-2/3x2 at its TrainDeeploy defaults (CIFAR-10 shape)."""
    positive(
        "cct2",
        num_classes=num_classes,
        in_channels=in_channels,
        input_size=input_size,
        embed_dim=embed_dim,
        num_layers=num_layers,
        num_heads=num_heads,
        mlp_dim=mlp_dim,
        conv_layers=conv_layers,
        kernel_size=kernel_size,
    )
    require(
        positional_embedding in ("learnable", "sine", "none"),
        "option 'positional_embedding' of model 'cct2' must be one of 'learnable', 'sine', "
        f"'none', got {positional_embedding!r}",
    )
    require(
        kernel_size % 2 == 1, f"option 'kernel_size' of model 'cct2' must be odd, got {kernel_size}"
    )
    model = CCT(
        in_channels=in_channels,
        input_size=input_size,
        num_classes=num_classes,
        dim=embed_dim,
        layers=num_layers,
        heads=num_heads,
        mlp_dim=mlp_dim,
        conv_layers=conv_layers,
        kernel=kernel_size,
        positional_embedding=positional_embedding,
    )
    return annotate(
        model,
        input_shape=(in_channels, input_size, input_size),
        num_classes=num_classes,
        stem=["tokenizer"],
        blocks=[f"encoder.{i}" for i in range(num_layers)],
        head="fc",
    )
