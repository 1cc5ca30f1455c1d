"""Baseline codec: uniform per-channel k-bit quantization (GACT-like, no entropy stage).

Per channel: offset = min, scale = range / (2^k - 1), codes = rint((x - min) / scale).
4-bit codes are packed two per byte.  The error is at most scale / 2 per channel;
:meth:`UniformCodec.error_bound` reports the largest such bound.  Zeros are not
preserved unless they coincide with a grid point (the weakness FedHybrid §4.4.1
points out).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from edgetrain.compress.base import (
    FLOAT_DTYPES,
    channel_maps,
    check_input,
    default_channel_dim,
    from_channel_maps,
    to_output,
)
from edgetrain.compress.container import pack_frame, unpack_frame
from edgetrain.errors import ConfigError


@dataclass(frozen=True)
class UniformCodec:
    """k-bit (k in {2, 4, 8}) per-channel uniform quantization."""

    bits: int = 8

    def __post_init__(self) -> None:
        if self.bits not in (2, 4, 8):
            raise ConfigError(f"bits={self.bits}; the uniform codec supports 2, 4 or 8")

    @property
    def name(self) -> str:
        return f"int{self.bits}"

    def _params(self, a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int | None]:
        cd = default_channel_dim(a.ndim)
        m = channel_maps(a, cd)
        cmin = m.min(axis=(1, 2))
        rng = m.max(axis=(1, 2)) - cmin
        levels = float(2**self.bits - 1)
        scale = np.where(rng > 0, rng / levels, 1.0).astype(a.dtype)
        return m, cmin, scale, cd

    def error_bound(self, x: torch.Tensor) -> float:
        a = check_input(x)
        if a.size == 0:
            return 0.0
        _, _, scale, _ = self._params(a)
        m = channel_maps(a, default_channel_dim(a.ndim))
        live = (m.max(axis=(1, 2)) - m.min(axis=(1, 2))) > 0
        # half a step, plus float rounding of the reconstruction and the output cast
        return float((scale[live] / 2).max() * (1 + 1e-5)) if live.any() else 0.0

    def encode(self, x: torch.Tensor) -> bytes:
        a = check_input(x)
        meta = {"codec": self.name, "dtype": FLOAT_DTYPES[x.dtype], "shape": list(a.shape)}
        if a.size == 0:
            return pack_frame(meta, {}, entropy=False)
        m, cmin, scale, cd = self._params(a)
        codes = np.rint((m - cmin[:, None, None]) / scale[:, None, None])
        codes = np.clip(codes, 0, 2**self.bits - 1).astype(np.uint8).reshape(-1)
        per = 8 // self.bits
        pad = (-codes.size) % per
        if pad:
            codes = np.concatenate([codes, np.zeros(pad, np.uint8)])
        grouped = codes.reshape(-1, per).astype(np.uint16)
        packed = np.zeros(grouped.shape[0], np.uint16)
        for j in range(per):  # at most 4 vectorised passes (2-bit), not per element
            packed |= grouped[:, j] << (self.bits * j)
        meta.update(map_shape=list(m.shape), channel_dim=cd, work=a.dtype.str, n=int(a.size))
        arrays = {"codes": packed.astype(np.uint8), "min": cmin, "scale": scale}
        return pack_frame(meta, arrays, entropy=False)

    def decode(self, data: bytes) -> torch.Tensor:
        meta, arr = unpack_frame(data)
        shape = meta["shape"]
        if "map_shape" not in meta:
            return to_output(np.zeros(shape, np.float32), meta["dtype"], shape)
        per = 8 // self.bits
        packed = arr["codes"].astype(np.uint16)
        mask = (1 << self.bits) - 1
        codes = np.stack([(packed >> (self.bits * j)) & mask for j in range(per)], axis=1)
        codes = codes.reshape(-1)[: meta["n"]].reshape(meta["map_shape"])
        work = np.dtype(meta["work"])
        vals = codes.astype(work) * arr["scale"][:, None, None] + arr["min"][:, None, None]
        full = from_channel_maps(vals, tuple(shape), meta["channel_dim"])
        return to_output(np.array(full), meta["dtype"], shape)
