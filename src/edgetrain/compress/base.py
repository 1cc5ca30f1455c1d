"""What every activation codec shares: input checks, dtype handling, channel maps.

A codec turns a floating tensor into ``bytes`` and back.  ``error_bound(x)`` is
the absolute max error the codec guarantees on ``x`` (lossy baselines report the
bound their quantisation step implies).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
import torch

from edgetrain.errors import DataError

FLOAT_DTYPES = {
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.float32: "float32",
    torch.float64: "float64",
}
NAME_TO_DTYPE = {v: k for k, v in FLOAT_DTYPES.items()}


class CodecInputError(DataError):
    """A tensor a codec cannot encode (non-float dtype, NaN or inf values)."""


@runtime_checkable
class Codec(Protocol):
    """Encode a floating tensor to real bytes and back."""

    name: str

    def encode(self, x: torch.Tensor) -> bytes: ...

    def decode(self, data: bytes) -> torch.Tensor: ...

    def error_bound(self, x: torch.Tensor) -> float: ...


def check_input(x: torch.Tensor) -> np.ndarray:
    """Validate ``x`` and return its values as a contiguous float32/float64 numpy array."""
    if not isinstance(x, torch.Tensor):
        raise CodecInputError(f"codec input must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in FLOAT_DTYPES:
        raise CodecInputError(
            f"codec input has dtype {x.dtype}; only floating tensors "
            f"({', '.join(FLOAT_DTYPES.values())}) can be compressed"
        )
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    a = x.detach().to("cpu", work).contiguous().numpy()
    if a.size and not np.isfinite(a).all():
        bad = int((~np.isfinite(a)).sum())
        raise CodecInputError(
            f"codec input contains {bad} NaN/inf value(s); only finite tensors can be "
            "compressed with an error bound"
        )
    return a


def to_output(values: np.ndarray, dtype_name: str, shape: list[int]) -> torch.Tensor:
    """Cast decoded float64/float32 values to the original dtype and shape."""
    t = torch.from_numpy(np.ascontiguousarray(values))
    return t.to(NAME_TO_DTYPE[dtype_name]).reshape(shape)


def default_channel_dim(ndim: int) -> int | None:
    """NCHW conv activations: dim 1; (B, T, H) / (N, F) activations: the last dim."""
    if ndim >= 4:
        return 1
    if ndim >= 2:
        return ndim - 1
    return None


def channel_maps(a: np.ndarray, channel_dim: int | None) -> np.ndarray:
    """View ``a`` as ``[C, R, W]``: one 2-D feature map per channel (a copy if needed)."""
    if a.ndim == 0 or channel_dim is None:
        flat = a.reshape(1, 1, -1)
        return flat
    moved = np.moveaxis(a, channel_dim, 0)
    c = moved.shape[0]
    rest = moved.shape[1:]
    w = rest[-1] if rest else 1
    return np.ascontiguousarray(moved).reshape(c, -1, w)


def from_channel_maps(m: np.ndarray, shape: tuple[int, ...], channel_dim: int | None) -> np.ndarray:
    """Inverse of :func:`channel_maps`."""
    if len(shape) == 0 or channel_dim is None:
        return m.reshape(shape)
    moved_shape = (shape[channel_dim],) + tuple(s for i, s in enumerate(shape) if i != channel_dim)
    return np.moveaxis(m.reshape(moved_shape), 0, channel_dim)
