"""Tiny models with the zoo attributes (CCT-like transformer, small CNN), shared by the tests."""

from __future__ import annotations

import torch
from torch import nn

from edgetrain.finetune import apply_strategy
from edgetrain.graph import capture


class TinyAttention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads, self.hd = heads, dim // heads
        self.q = nn.Linear(dim, dim, bias=False)
        self.k = nn.Linear(dim, dim, bias=False)
        self.v = nn.Linear(dim, dim, bias=False)
        self.out = nn.Linear(dim, dim)

    def forward(self, x):
        def split(t):
            return t.unflatten(-1, (self.heads, self.hd)).transpose(1, 2)

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        w = torch.softmax(q @ k.transpose(-2, -1) / self.hd**0.5, dim=-1)
        return self.out((w @ v).transpose(1, 2).flatten(2))


class TinyBlock(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.pre_norm = nn.LayerNorm(dim)
        self.attn = TinyAttention(dim, heads)
        self.norm1 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, dim)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(dim, dim)

    def forward(self, x):
        x = self.norm1(x + self.attn(self.pre_norm(x)))
        return x + self.fc2(self.act(self.fc1(x)))


class TinyCCT(nn.Module):
    """conv tokenizer -> 2 blocks -> LayerNorm -> sequence pooling -> fc (input 3x8x8)."""

    def __init__(self, dim: int = 8, heads: int = 2, classes: int = 3, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.tokenizer = nn.Sequential(
            nn.Conv2d(3, dim, 3, padding=1, bias=False), nn.ReLU(), nn.MaxPool2d(3, 2, 1)
        )
        self.encoder = nn.ModuleList([TinyBlock(dim, heads), TinyBlock(dim, heads)])
        self.norm = nn.LayerNorm(dim)
        self.attention_pool = nn.Linear(dim, 1)
        self.fc = nn.Linear(dim, classes)
        self.stem = ["tokenizer"]
        self.blocks = ["encoder.0", "encoder.1"]
        self.head = "fc"
        self.input_shape = (3, 8, 8)
        self.num_classes = classes

    def forward(self, x):
        x = self.tokenizer(x).flatten(2).transpose(1, 2)
        for b in self.encoder:
            x = b(x)
        x = self.norm(x)
        w = torch.softmax(self.attention_pool(x), dim=1)
        return self.fc((w.transpose(1, 2) @ x).squeeze(1))


def batch(n: int = 4, seed: int = 1, classes: int = 3):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 3, 8, 8, generator=g), torch.randint(0, classes, (n,), generator=g)


def vector_task(n: int, features: int, classes: int, seed: int = 1):
    """``(x, y, loss_fn)``: ``n`` seeded feature vectors, their labels and cross-entropy."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g)
    y = torch.randint(0, classes, (n,), generator=g)

    def loss_fn(out):
        return nn.functional.cross_entropy(out, y)

    return x, y, loss_fn


class TinyCNN(nn.Module):
    """Two conv blocks and a linear head on 3x8x8 inputs."""

    def __init__(self, classes: int = 3, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.conv1 = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU())
        self.conv2 = nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.fc = nn.Linear(4 * 4 * 4, classes)
        self.stem = ["conv1"]
        self.blocks = ["conv1", "conv2"]
        self.head = "fc"

    def forward(self, x):
        return self.fc(self.conv2(self.conv1(x)).flatten(1))


_CACHE: dict = {}


def captured(strategy: str, optimizer: str, model_cls=TinyCCT):
    """One capture per (model, strategy, optimizer), shared by the test files: capture is slow."""
    key = (model_cls.__name__, strategy, optimizer)
    if key not in _CACHE:
        model = model_cls(seed=1)
        info = apply_strategy(model, strategy)
        x, y = batch()
        _CACHE[key] = (model, capture(model, x, y, optimizer=optimizer, strategy_info=info))
    return _CACHE[key]
