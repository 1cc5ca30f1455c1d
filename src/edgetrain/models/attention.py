"""Multi-head self-attention written with plain ``nn.Linear`` layers.

Separate ``q``, ``k``, ``v`` and ``out`` projections let LoRA target each one by
name, and the explicit matmul/softmax keeps the module traceable by
``torch.fx`` and ``make_fx`` (no fused kernels, no data-dependent branches).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from edgetrain.models.registry import require


class AttentionCore(nn.Module):
    """The parameter-free middle of attention: split heads, scores, softmax, mix heads.

    A module of its own (no parameters, no state-dict keys) so that tools working on
    modules can address it: the budget executor recomputes it in backward from the
    q/k/v projections instead of holding the softmax output and the per-head copies
    that ``torch.matmul`` saves (``edgetrain.engine.budget``).
    """

    def __init__(self, heads: int, head_dim: int) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = head_dim
        self.scale = 1.0 / math.sqrt(head_dim)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        return x.unflatten(-1, (self.heads, self.head_dim)).transpose(1, 2)

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        attn_bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        q, k, v = self._split(q), self._split(k), self._split(v)
        scores = torch.matmul(q, k.transpose(-2, -1)) * self.scale
        if attn_bias is not None:
            scores = scores + attn_bias
        weights = torch.softmax(scores, dim=-1)
        return torch.matmul(weights, v).transpose(1, 2).flatten(2)


class SelfAttention(nn.Module):
    """Scaled dot-product self-attention over ``(B, L, dim)`` inputs.

    ``attn_bias`` (optional, broadcastable to ``(B, heads, L, L)``) is added to
    the scores before the softmax; text models pass ``-1e9`` at padded keys.
    """

    def __init__(self, dim: int, heads: int, qkv_bias: bool = True, model: str = "") -> None:
        super().__init__()
        require(
            dim % heads == 0,
            f"model {model!r}: embedding dim {dim} must be divisible by the number of heads {heads}",
        )
        self.heads = heads
        self.head_dim = dim // heads
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.q = nn.Linear(dim, dim, bias=qkv_bias)
        self.k = nn.Linear(dim, dim, bias=qkv_bias)
        self.v = nn.Linear(dim, dim, bias=qkv_bias)
        self.core = AttentionCore(heads, self.head_dim)
        self.out = nn.Linear(dim, dim)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        return self.core._split(x)

    def forward(self, x: torch.Tensor, attn_bias: torch.Tensor | None = None) -> torch.Tensor:
        return self.out(self.core(self.q(x), self.k(x), self.v(x), attn_bias))
