"""1-bit range masks for ReLU-family saved tensors (exact).

The backward of ``hardtanh(x, lo, hi)`` (ReLU6 is ``hardtanh(x, 0, 6)``) reads its
saved input only through ``lo < x < hi``; the backward of ``relu`` reads its saved
output only through ``y > 0``.  Holding that predicate as packed bits (``numel/8``
bytes, 1/32 of float32) and handing the backward a tensor with the same predicate
(``mid`` inside the range, ``lo`` outside) gives bit-identical gradients (the
"binarize" encoding of Jain et al., Gist, ISCA'18 §3.1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class PackedMask:
    """Bits of ``lo < x < hi`` (C order) plus what the decoder needs to rebuild a stand-in."""

    bits: np.ndarray
    shape: tuple[int, ...]
    dtype: torch.dtype
    lo: float
    hi: float

    @property
    def nbytes(self) -> int:
        return int(self.bits.nbytes)


def mask_bytes(numel: int) -> int:
    return (numel + 7) // 8


def encode_mask(t: torch.Tensor, lo: float, hi: float) -> PackedMask:
    a = t.detach().contiguous().numpy().reshape(-1)  # numpy compares: ~2x torch's here
    if t.dtype == torch.float32 and lo == 0.0 and hi > 0.0:
        # 0 < x < hi  <=>  0 < bits(x) < bits(hi) as int32 (positive floats order like
        # their bit patterns; negatives and -0.0 have the sign bit): one unsigned
        # compare of bits - 1 (0 wraps to 2^32 - 1), NaN/inf fall outside as well
        top = np.float32(hi).view(np.uint32) if math.isfinite(hi) else np.uint32(0x7F800000)
        m = (a.view(np.uint32) - np.uint32(1)) < top - np.uint32(1)
    else:
        m = a > lo
        if math.isfinite(hi):
            m &= a < hi
    return PackedMask(np.packbits(m), tuple(t.shape), t.dtype, lo, hi)


def decode_mask(p: PackedMask) -> torch.Tensor:
    """A tensor whose elements satisfy ``lo < v < hi`` exactly where the original did."""
    n = math.prod(p.shape)
    u8 = np.unpackbits(p.bits, count=n)
    inside = (p.lo + p.hi) / 2 if math.isfinite(p.hi) else p.lo + 1.0
    if p.dtype == torch.float32 and p.lo == 0.0:
        return torch.from_numpy(np.multiply(u8, np.float32(inside), dtype=np.float32)).reshape(
            p.shape
        )
    out = torch.from_numpy(u8).to(p.dtype)
    if inside - p.lo != 1.0:
        out.mul_(inside - p.lo)
    if p.lo != 0.0:
        out.add_(p.lo)
    return out.reshape(p.shape)
