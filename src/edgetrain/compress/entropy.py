"""Huffman-only zstd: the entropy stage of the grid path's code stream.

Quantized activations are almost all *literals* for zstd: LZ matches are rare and
short, and the ratio comes from the Huffman coding of the literal bytes (order-0
statistics per 128 KiB block).  zstd's match finder still visits every position,
and on MobileNetV2's ReLU6 codes it took most of the codec's time (README, codec
stage profile).  This module asks libzstd for a frame with the match search
turned off but the literals still Huffman-coded:

* ``strategy = fast`` with the largest ``targetLength``: for the fast strategy
  targetLength is the *acceleration* (the search step grows with it), so the match
  finder probes only a handful of positions per block;
* ``ZSTD_c_literalCompressionMode = ZSTD_ps_enable``: zstd turns Huffman literals
  *off* when targetLength > 0 in "auto" mode (that is what its negative levels
  do); this experimental parameter forces them on.

Measured on MobileNetV2's ``conv_stem`` codes (1 MiB, thread CPU time): compress
2.2 ms instead of 5.5 ms with the previous fast-strategy parameters, decompress
1.0 instead of 1.5 ms, and 2.62x instead of 2.48x (the rare matches cost more
sequence headers than they saved).  The output is an ordinary zstd frame: any
zstd decoder (python-zstandard's included) reads it.

python-zstandard does not expose ``literalCompressionMode``, so the parameter is
set through the system's libzstd (``ctypes``; the public ``ZSTD_CCtx_setParameter``
entry point, parameter id and values from ``zstd.h``, stable since zstd 1.4.0).
Where no libzstd >= 1.4.0 is loadable the caller gets ``None`` from
:func:`literal_compressor` and uses the python-zstandard compressor instead (same
format, slower; see :func:`edgetrain.compress.grid.code_compressor`).  No worker
threads: libzstd runs on the calling thread (``nbWorkers`` stays 0), so thread
CPU time measures all of it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading

import numpy as np

from edgetrain.errors import DataError

# zstd.h: enum ZSTD_cParameter and ZSTD_paramSwitch_e (public numbering)
_C_WINDOW_LOG = 101
_C_HASH_LOG = 102
_C_CHAIN_LOG = 103
_C_SEARCH_LOG = 104
_C_MIN_MATCH = 105
_C_TARGET_LENGTH = 106
_C_STRATEGY = 107
_C_LITERAL_COMPRESSION_MODE = 1002  # ZSTD_c_experimentalParam5
_PS_ENABLE = 1
_STRATEGY_FAST = 1
#: ZSTD_TARGETLENGTH_MAX (zstd.h): the fast strategy's largest acceleration
_TARGET_LENGTH_MAX = 1 << 17
_MIN_VERSION = 10400  # 1.4.0: literalCompressionMode

#: parameters of the Huffman-only frames (module doc); window/hash/chain logs are the
#: smallest legal ones: the match tables are never useful here, and small tables are
#: cheap to reset for every frame
LITERAL_PARAMS = {
    _C_STRATEGY: _STRATEGY_FAST,
    _C_WINDOW_LOG: 17,
    _C_HASH_LOG: 6,
    _C_CHAIN_LOG: 6,
    _C_SEARCH_LOG: 1,
    _C_MIN_MATCH: 7,
    _C_TARGET_LENGTH: _TARGET_LENGTH_MAX,
    _C_LITERAL_COMPRESSION_MODE: _PS_ENABLE,
}

_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_lib_tried = False
_local = threading.local()


def _load() -> ctypes.CDLL | None:
    """The system libzstd (>= 1.4.0) with argument types declared, or None."""
    global _lib, _lib_tried
    if _lib_tried:
        return _lib
    with _lock:
        if _lib_tried:
            return _lib
        _lib_tried = True
        lib = None
        # the usual sonames first: find_library runs ldconfig/gcc in a subprocess
        for name in ("libzstd.so.1", "libzstd.1.dylib", None):
            try:
                lib = ctypes.CDLL(name or ctypes.util.find_library("zstd") or "libzstd.so")
                break
            except OSError:
                continue
        if lib is None:
            return None
        try:
            lib.ZSTD_versionNumber.restype = ctypes.c_uint
            if lib.ZSTD_versionNumber() < _MIN_VERSION:
                return None
            lib.ZSTD_createCCtx.restype = ctypes.c_void_p
            lib.ZSTD_freeCCtx.argtypes = [ctypes.c_void_p]
            lib.ZSTD_CCtx_setParameter.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
            lib.ZSTD_CCtx_setParameter.restype = ctypes.c_size_t
            lib.ZSTD_compress2.argtypes = [
                ctypes.c_void_p,
                ctypes.c_void_p,
                ctypes.c_size_t,
                ctypes.c_void_p,
                ctypes.c_size_t,
            ]
            lib.ZSTD_compress2.restype = ctypes.c_size_t
            lib.ZSTD_compressBound.argtypes = [ctypes.c_size_t]
            lib.ZSTD_compressBound.restype = ctypes.c_size_t
            lib.ZSTD_isError.argtypes = [ctypes.c_size_t]
            lib.ZSTD_isError.restype = ctypes.c_uint
            lib.ZSTD_createDCtx.restype = ctypes.c_void_p
            lib.ZSTD_freeDCtx.argtypes = [ctypes.c_void_p]
            lib.ZSTD_decompressDCtx.argtypes = [
                ctypes.c_void_p,
                ctypes.c_void_p,
                ctypes.c_size_t,
                ctypes.c_void_p,
                ctypes.c_size_t,
            ]
            lib.ZSTD_decompressDCtx.restype = ctypes.c_size_t
        except (OSError, AttributeError):
            return None
        _lib = lib
        return lib


class LiteralCompressor:
    """A libzstd compression context set to :data:`LITERAL_PARAMS` (one per thread).

    ``compress(arr)`` has the signature of ``zstandard.ZstdCompressor.compress`` on a
    contiguous numpy array (any buffer numpy can view) and returns the frame as bytes.
    """

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._lib = lib
        self._cctx = lib.ZSTD_createCCtx()
        if not self._cctx:
            raise MemoryError("ZSTD_createCCtx failed")
        for key, value in LITERAL_PARAMS.items():
            if lib.ZSTD_isError(lib.ZSTD_CCtx_setParameter(self._cctx, key, value)):
                lib.ZSTD_freeCCtx(self._cctx)
                self._cctx = None
                raise ValueError(f"libzstd rejected parameter {key}={value}")

    def compress(self, data) -> bytes:
        src = np.ascontiguousarray(np.frombuffer(data, dtype=np.uint8))
        bound = int(self._lib.ZSTD_compressBound(src.nbytes))
        # a fresh output buffer per call: a kept one would pin the largest stream's
        # size per thread (this codec exists to save memory), and reuse measured no
        # faster (1.65 vs 1.67 ms on a 1 MiB stream)
        out = np.empty(bound, dtype=np.uint8)
        n = self._lib.ZSTD_compress2(
            self._cctx, out.ctypes.data, bound, src.ctypes.data, src.nbytes
        )
        if self._lib.ZSTD_isError(n):
            raise RuntimeError(f"ZSTD_compress2 failed on {src.nbytes} bytes")
        return out[:n].tobytes()

    def __del__(self) -> None:
        if getattr(self, "_cctx", None):
            self._lib.ZSTD_freeCCtx(self._cctx)
            self._cctx = None


def literal_compressor() -> LiteralCompressor | None:
    """This thread's Huffman-only compressor, or None where libzstd is not loadable."""
    c = getattr(_local, "cctx", False)
    if c is False:
        lib = _load()
        try:
            c = LiteralCompressor(lib) if lib is not None else None
        except (MemoryError, ValueError):
            c = None
        _local.cctx = c
    return c


class _DCtx:
    """A libzstd decompression context (one per thread), freed with its thread."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib
        self.ptr = lib.ZSTD_createDCtx()

    def __del__(self) -> None:
        if getattr(self, "ptr", None):
            self.lib.ZSTD_freeDCtx(self.ptr)
            self.ptr = None


def decompress_into(blob, out: np.ndarray) -> bool:
    """Decode the zstd frame ``blob`` straight into the contiguous uint8 array ``out``
    (exactly ``out.size`` bytes); False where libzstd is not loadable (the caller then
    decompresses with python-zstandard).  Raises :class:`DataError` on a corrupt or
    wrongly sized frame."""
    lib = _load()
    if lib is None:
        return False
    d = getattr(_local, "dctx", None)
    if d is None:
        d = _local.dctx = _DCtx(lib)
        if not d.ptr:
            raise MemoryError("ZSTD_createDCtx failed")
    src = np.frombuffer(blob, dtype=np.uint8)
    n = lib.ZSTD_decompressDCtx(d.ptr, out.ctypes.data, out.size, src.ctypes.data, src.size)
    if lib.ZSTD_isError(n) or n != out.size:
        raise DataError(
            f"corrupt code section: zstd frame of {src.size} bytes does not decode to "
            f"the {out.size} bytes its header states"
        )
    return True


def describe() -> str:
    """Which entropy stage the code stream gets here (for benchmark notes)."""
    lib = _load()
    if lib is None or literal_compressor() is None:
        return "python-zstandard fast strategy (libzstd not loadable: no Huffman-only mode)"
    v = int(lib.ZSTD_versionNumber())
    return f"libzstd {v // 10000}.{v // 100 % 100}.{v % 100} Huffman-only literals (ctypes)"


def order0_bits(codes: np.ndarray) -> float:
    """Order-0 entropy of the bytes of ``codes`` times their count, in bits: what
    Huffman-only coding of them costs (up to the table and < 1 bit/symbol of code
    rounding), used to decide between code streams without compressing them."""
    b = np.ascontiguousarray(codes).reshape(-1).view(np.uint8)
    if b.size == 0:
        return 0.0
    h = np.bincount(b, minlength=256)
    p = h[h > 0] / b.size
    return float(-(p * np.log2(p)).sum() * b.size)
