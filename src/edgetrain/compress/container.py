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
import math
import struct
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import zstandard

from edgetrain.compress import entropy
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
    cctx: Any = None,
    section_cctx: dict[str, Any] | None = None,
) -> bytes:
    """Serialise ``meta`` and ``arrays``; with ``entropy`` each section is zstd-compressed
    (with ``cctx`` when given, a reused compressor, else a new one at ``level``;
    ``section_cctx`` names sections that use another compressor, e.g. the
    Huffman-only one of :mod:`edgetrain.compress.entropy`: every one writes plain
    zstd frames, so decoding never needs to know).  A section that zstd does not
    shrink is stored raw: entropy coding is skipped where it does not pay."""
    sections: list[bytes] = []
    table = []
    if entropy and cctx is None:
        cctx = zstandard.ZstdCompressor(level=level)
    elif not entropy:
        cctx = None
    for name, arr in arrays.items():
        arr = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<"), copy=False)
        cc = (section_cctx or {}).get(name, cctx) if cctx is not None else None
        use_z = bool(cc is not None and arr.nbytes > 64)
        # zstd reads the array's buffer directly (no bytes copy of a large code array)
        blob = cc.compress(arr.reshape(-1).view(np.uint8)) if use_z else arr.tobytes()
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


@dataclass(frozen=True)
class Section:
    """A section :func:`unpack_frame` left as stored (``lazy``): :func:`read_section`
    decodes it, optionally straight into a caller's buffer."""

    blob: memoryview
    z: bool
    dtype: np.dtype
    shape: tuple[int, ...]

    @property
    def count(self) -> int:
        return math.prod(self.shape)


def read_section(sec: Section, out: np.ndarray | None = None) -> np.ndarray:
    """The array of a lazy section; with ``out`` (contiguous, ``sec.count`` elements of
    any dtype of the same total size) zstd decodes straight into it (no intermediate
    bytes object) and ``out`` is returned."""
    nbytes = sec.count * sec.dtype.itemsize
    if out is None:
        try:
            raw = (
                _decompressor().decompress(sec.blob, max_output_size=nbytes) if sec.z else sec.blob
            )
        except zstandard.ZstdError as e:
            raise DataError(f"corrupt section in encoded tensor: {e}") from e
        if len(raw) != nbytes:
            raise DataError(f"section holds {len(raw)} bytes; the header says {nbytes}")
        return np.frombuffer(raw, dtype=sec.dtype, count=sec.count).reshape(sec.shape)
    target = out.reshape(-1).view(np.uint8)
    if target.size != nbytes:
        raise ValueError(f"output buffer has {target.size} bytes; the section needs {nbytes}")
    if not sec.z:
        if len(sec.blob) != nbytes:
            raise DataError(f"section holds {len(sec.blob)} bytes; the header says {nbytes}")
        target[...] = np.frombuffer(sec.blob, dtype=np.uint8)
    elif not entropy.decompress_into(sec.blob, target):
        target[...] = read_section(Section(sec.blob, True, np.dtype(np.uint8), (nbytes,)))
    return out


def unpack_frame(data: bytes, lazy: tuple[str, ...] = ()) -> tuple[dict[str, Any], dict[str, Any]]:
    """Inverse of :func:`pack_frame`; raises :class:`DataError` on foreign or truncated bytes.

    Sections named in ``lazy`` come back as :class:`Section` (not decompressed yet)."""
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
        if sec["name"] in lazy:
            arrays[sec["name"]] = Section(blob, bool(sec["z"]), dtype, tuple(sec["shape"]))
            continue
        count = int(np.prod(sec["shape"], dtype=np.int64))
        raw = dctx.decompress(blob, max_output_size=count * dtype.itemsize) if sec["z"] else blob
        arrays[sec["name"]] = np.frombuffer(raw, dtype=dtype, count=count).reshape(sec["shape"])
    return header["meta"], arrays
