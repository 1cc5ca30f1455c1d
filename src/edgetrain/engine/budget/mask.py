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
        # a < hi also when hi = inf: +inf itself is outside (lo, hi), as in the float32
        # branch (found by hypothesis: float64 [inf] with (0, inf) decoded as inside)
        m = (a > lo) & (a < hi)
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


# -- the executor's fast path: a ReLU-family op that saves only the packed bits -----------
#: float dtype -> unsigned integer dtype of the same width (for the exact gradient select)
_UINT_OF = {np.dtype(np.float16): np.uint16, np.dtype(np.float32): np.uint32,
            np.dtype(np.float64): np.uint64}  # fmt: skip
_TORCH_NP = {torch.float16, torch.float32, torch.float64}


def fast_maskable(x: torch.Tensor) -> bool:
    """Whether :func:`masked_call` can run on ``x`` (C-contiguous float16/32/64 on CPU)."""
    return x.device.type == "cpu" and x.dtype in _TORCH_NP and x.is_contiguous()


def pass_bits(a: np.ndarray, lo: float, hi: float, on_output: bool) -> np.ndarray:
    """Packed bits of "the gradient passes" with the exact predicate of ATen's backward.

    ``hardtanh_backward`` passes where ``lo < x < hi``; ``threshold_backward`` (ReLU,
    read on the output) zeroes where ``y <= 0`` (NaN passes), computed as the packed
    zeroing predicate inverted (on 1/8 of the bytes).  A NaN *input* of the Hardtanh
    family is zeroed here; ATen itself is not consistent there (torch 2.x CPU: its
    vectorised body zeroes NaN, the scalar tail of the last ``numel % 64`` elements
    passes it), so NaN inputs are the one case without a bit-exact guarantee.
    """
    if on_output:
        return np.invert(np.packbits(np.less_equal(a, lo)))
    out = np.greater(a, lo)
    if math.isfinite(hi):
        out &= np.less(a, hi)
    return np.packbits(out)


def apply_bits(g: torch.Tensor, bits: np.ndarray) -> torch.Tensor:
    """``g`` where the bit is set, ``+0`` elsewhere: bit-identical to ATen's backward.

    Multiplying the gradient's bit pattern (as unsigned integers) by 0/1 keeps every
    passing element's bits (signed zeros, NaN payloads included) and writes +0.0
    elsewhere, as ``hardtanh_backward`` / ``threshold_backward`` do.  numpy allocates
    the result (on Linux with transparent huge pages where enabled).
    """
    gc = g.detach().contiguous()
    a = gc.numpy().reshape(-1)
    u = np.unpackbits(bits, count=a.size)
    uint = _UINT_OF[a.dtype]
    out = np.multiply(a.view(uint), u, dtype=uint).view(a.dtype)
    return torch.from_numpy(out).view(g.shape)


class _MaskedOp(torch.autograd.Function):
    """Run a ReLU-family forward; save only the packed pass bits (no saved-tensor hook)."""

    @staticmethod
    def forward(ctx, x, fn, lo, hi, on_output, held=None):  # type: ignore[override]
        y = fn(x)
        src = y if on_output else x
        bits = pass_bits(src.detach().numpy().reshape(-1), lo, hi, on_output)
        if held is not None:  # numpy's memory, alive as long as the saved tensor
            held(bits.nbytes, bits)
        ctx.save_for_backward(torch.from_numpy(bits))
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):  # type: ignore[override]
        (bits,) = ctx.saved_tensors
        return apply_bits(g, bits.numpy()), None, None, None, None, None


def masked_call(
    x: torch.Tensor, fn, lo: float, hi: float, on_output: bool, held=None
) -> torch.Tensor:
    """``fn(x)`` (a ReLU / ReLU6 / Hardtanh forward) holding only ``numel/8`` bytes for
    backward.  ``on_output``: the predicate is read from the output (ReLU) rather than
    the input (Hardtanh family), as the op's own backward does.  Requires
    :func:`fast_maskable`.  ``held(nbytes, owner)`` is told of the packed bits (numpy
    memory, outside torch's allocator) and the array that owns them
    (``MemoryAccountant.mark_outside``)."""
    return _MaskedOp.apply(x, fn, lo, hi, on_output, held)


# -- alias: a Hardtanh-family op that saves its output instead of its input ----------------
class _AliasOp(torch.autograd.Function):
    """``hardtanh(x, lo, hi)`` saving its output for backward.

    ``hardtanh_backward`` reads its saved tensor only through ``lo < v < hi``, and for
    ``y = clamp(x, lo, hi)`` that predicate holds exactly where it holds for ``x``
    (a clamped element equals ``lo`` or ``hi``, outside the open interval; NaN stays
    NaN), so the gradient is bit-identical.  The output is usually saved by the next
    op anyway (a convolution's input), so the input's storage is freed after the
    forward for nothing -- what PyTorch's in-place ``ReLU6`` does by saving its result.
    The save goes through the active saved-tensor hooks (the executor counts the shared
    storage once)."""

    @staticmethod
    def forward(ctx, x, lo, hi):  # type: ignore[override]
        y = torch.nn.functional.hardtanh(x, lo, hi)
        ctx.lo, ctx.hi = lo, hi
        ctx.save_for_backward(y)
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):  # type: ignore[override]
        (y,) = ctx.saved_tensors
        return torch.ops.aten.hardtanh_backward(g, y, ctx.lo, ctx.hi), None, None


def alias_call(x: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
    """``hardtanh(x, lo, hi)`` (ReLU6: ``lo, hi = 0, 6``) whose backward reads its output
    (:class:`_AliasOp`); a finite ``hi`` only (the Hardtanh family)."""
    if not math.isfinite(hi):
        raise ValueError(f"alias_call is for the Hardtanh family (finite hi); got hi={hi}")
    return _AliasOp.apply(x, float(lo), float(hi))
