"""A self-describing byte container for encoded tensors.

Every codec returns real ``bytes`` (so a compression ratio is measured, never
estimated).  Layout::

    b"ETCF" | u8 version | u32 header length | JSON header | section 0 | section 1 ...

The JSON header holds the codec's metadata and, per section, the numpy dtype,
shape, stored length and whether the entropy stage (zstandard) was applied.
No pickle: arrays travel as raw little-endian buffers.
"""

from __future__ import annotations

import json
import struct
import threading
from typing import Any

import numpy as np
import zstandard

from edgetrain.errors import DataError

MAGIC = b"ETCF"
VERSION = 1
_HEAD = struct.Struct("<4sBI")


def pack_frame(
    meta: dict[str, Any],
    arrays: dict[str, np.ndarray],
    *,
    entropy: bool,
    level: int = 3,
    cctx: zstandard.ZstdCompressor | None = None,
) -> bytes:
    """Serialise ``meta`` and ``arrays``; with ``entropy`` each section is zstd-compressed
    (with ``cctx`` when given, a reused compressor, else a new one at ``level``).  A
    section that zstd does not shrink is stored raw: entropy coding is skipped where
    it does not pay."""
    sections: list[bytes] = []
    table = []
    if entropy and cctx is None:
        cctx = zstandard.ZstdCompressor(level=level)
    elif not entropy:
        cctx = None
    for name, arr in arrays.items():
        arr = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<"), copy=False)
        use_z = bool(cctx is not None and arr.nbytes > 64)
        # zstd reads the array's buffer directly (no bytes copy of a large code array)
        blob = cctx.compress(arr.reshape(-1).view(np.uint8)) if use_z else arr.tobytes()
        if use_z and len(blob) >= arr.nbytes:  # incompressible: keep raw
            blob, use_z = arr.tobytes(), False
        sections.append(blob)
        table.append(
            {
                "name": name,
                "dtype": arr.dtype.str,
                "shape": list(arr.shape),
                "len": len(blob),
                "z": use_z,
            }
        )
    header = json.dumps({"meta": meta, "sections": table}, separators=(",", ":")).encode()
    return _HEAD.pack(MAGIC, VERSION, len(header)) + header + b"".join(sections)


_local = threading.local()


def _decompressor() -> zstandard.ZstdDecompressor:
    """A per-thread reused decompression context."""
    d = getattr(_local, "dctx", None)
    if d is None:
        d = _local.dctx = zstandard.ZstdDecompressor()
    return d


def unpack_frame(data: bytes) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Inverse of :func:`pack_frame`; raises :class:`DataError` on foreign or truncated bytes."""
    if len(data) < _HEAD.size:
        raise DataError(f"encoded tensor is {len(data)} bytes; expected an ETCF frame")
    magic, version, hlen = _HEAD.unpack_from(data, 0)
    if magic != MAGIC or version != VERSION:
        raise DataError(
            f"not an edgetrain codec frame (magic {magic!r}, version {version}); "
            f"expected {MAGIC!r} version {VERSION}"
        )
    pos = _HEAD.size
    header = json.loads(data[pos : pos + hlen])
    pos += hlen
    dctx = _decompressor()
    view = memoryview(data)  # slices without copying the payload
    arrays: dict[str, np.ndarray] = {}
    for sec in header["sections"]:
        blob = view[pos : pos + sec["len"]]
        if len(blob) != sec["len"]:
            raise DataError("encoded tensor is truncated")
        pos += sec["len"]
        dtype = np.dtype(sec["dtype"])
        count = int(np.prod(sec["shape"], dtype=np.int64))
        raw = dctx.decompress(blob, max_output_size=count * dtype.itemsize) if sec["z"] else blob
        arrays[sec["name"]] = np.frombuffer(raw, dtype=dtype, count=count).reshape(sec["shape"])
    return header["meta"], arrays
