"""Fast path of the mix codec: error-bound grid quantization in the native layout.

For float32 tensors whose values lie within ~126 error-bound steps of zero (every
ReLU/GELU activation at a bound of 1% of its range), the mix codec runs this path
instead of the general one in :mod:`edgetrain.compress.mix`:

* **one grid for every channel**: ``q = rint(x / step)`` with ``step`` just below
  ``2 eb`` (cuSZ's pre-quantization; a channel's k-bit code is ``q`` with offset 0
  and scale ``step``, so zeros stay exactly zero).  int8 codes come from one pass
  of torch's per-tensor qint8 kernel (scale ``step``, zero point 0), checked once
  per process to compute exactly these codes; otherwise (and for int16 codes) from
  the float32 "magic number" rounding (``1.5 * 2^23 + x / step``, whose low bits
  *are* the rounded integer), one fused pass into an L2-sized chunk buffer and one
  narrowing copy.  No channel-major transpose: the codes keep the tensor's memory
  order and zstd sees them as one contiguous stream.
* **outlier-rich channels** (FedHybrid §4.4.1): mean, std and the per-channel share
  of 3-sigma outliers are measured on a row sample (:func:`sample_rows`); channels
  with more than ``outlier_fraction`` of them go to the block path (CSR sparse
  blocks; dense blocks with a per-block choice between the 2-D Lorenzo predictor
  and plain codes, whichever has the smaller sum of absolute codes; Lorenzo
  residuals beyond a byte stored exactly; with ``exact_outliers`` the 3-sigma
  outliers themselves are stored as exact float32 too).
* **batch template** (:func:`batch_template`): when the samples of a batch share a
  per-position pattern, ``codes - T`` is coded instead of the codes.
* **bound without a check pass**: the decoder computes ``fl32(q * step)``.  With
  ``u = 2^-24`` the error is at most ``step / 2 + 4 u (max|x| + step)`` (rounding of
  ``x * inv``, of ``inv = 1/step`` and of the product); ``step`` is chosen as
  ``2 eb - 8 u (max|x| + 2 eb)`` rounded down to float32, so every element is
  within ``eb`` by construction (the general path's explicit check is only needed
  for other dtypes).  When that margin would cost more than 1% of the step, or the
  codes do not fit int8, :func:`grid_step` / the caller refuse and the general
  path runs.

* **entropy stage**: the code stream is Huffman-coded by zstd with its match
  search off (:mod:`edgetrain.compress.entropy`); the rich channels' sections use
  the regular zstd context of :func:`compressor`.

Decoding is one zstd pass and one qint8 dequantization pass (``fl32(q * step)``).
"""

from __future__ import annotations

import math
import threading
import warnings
from typing import Any

import numpy as np
import torch
import zstandard

from edgetrain.compress import entropy
from edgetrain.compress.blocks import (
    block_density,
    csr_decode,
    csr_encode,
    delta_index,
    from_blocks,
    pad_maps,
    smallest_int,
    to_blocks,
    undelta_index,
)
from edgetrain.compress.lorenzo import decode_codes, encode_codes, lorenzo_delta, lorenzo_restore

#: float32 round-to-nearest trick: for |v| < 2^22, the bits of ``v + MAGIC`` are
#: ``0x4B400000 + rint(v)``, so the low byte (two bytes) is rint(v) as a two's
#: complement int8 (int16).
MAGIC = 12582912.0  # 1.5 * 2^23
U32 = 2.0**-24  # unit roundoff of float32
#: elements per chunk: 512 KiB of float32 work buffer, about one core's L2 here
CHUNK = 1 << 17
#: largest |q| the int8 codes take (127 is the int8 limit; one step of slack)
QLIM = 126.0
#: largest |q| the int16 codes take (tighter bounds, e.g. 0.1% of the range)
QLIM16 = 32000.0
#: codes per channel the outlier share is measured on (see :func:`outlier_share`)
SAMPLE = 1024

#: zstd parameters for the codes: level-1 "fast" strategy with a small hash table and
#: the longest minimum match.  Quantized activations are mostly literals; fewer
#: spurious short matches make the stream both smaller and faster (see
#: benchmarks/codec.py and the README's codec table).
ZSTD_PARAMS = dict(
    window_log=17,
    hash_log=10,
    chain_log=10,
    search_log=1,
    min_match=7,
    target_length=0,
    strategy=zstandard.STRATEGY_FAST,
)

_local = threading.local()


def compressor() -> zstandard.ZstdCompressor:
    """A per-thread reused ZstdCompressor with :data:`ZSTD_PARAMS` (contexts are not thread-safe)."""
    c = getattr(_local, "cctx", None)
    if c is None:
        params = zstandard.ZstdCompressionParameters(**ZSTD_PARAMS)
        c = _local.cctx = zstandard.ZstdCompressor(compression_params=params)
    return c


def code_compressor():
    """The compressor of the code stream (and the template): Huffman-only zstd
    (:mod:`edgetrain.compress.entropy`) where libzstd is loadable, else the
    python-zstandard context of :func:`compressor`."""
    return entropy.literal_compressor() or compressor()


def stream_cost(codes: np.ndarray, huffman: bool = True) -> float:
    """Bytes the code stream's entropy stage gives ``codes`` (as :func:`split_planes`
    stores them): order-0 entropy for Huffman-only coding (no matches, so that is
    what it pays), else (``huffman`` False, or no libzstd) zstd itself (LZ matches
    between samples that repeat each other are invisible to order-0); the high
    bytes of int16 codes always go through zstd with matches."""
    low, high = split_planes(np.ascontiguousarray(codes))
    cost = float(len(compressor().compress(high))) if high is not None else 0.0
    if huffman and entropy.literal_compressor() is not None:
        return cost + entropy.order0_bits(low) / 8.0
    return cost + float(len(compressor().compress(low.reshape(-1).view(np.uint8))))


def split_planes(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """The code stream's sections: int8 codes as they are (no high plane); int16 codes
    as their low-byte and high-byte planes (uint8 each).

    The planes get different entropy stages: the low bytes are literal-heavy
    (Huffman-only), the high bytes are long runs of 0x00 / 0xFF, which only zstd's
    matches compress well (measured on MobileNetV2 at rel 0.1%: 6.61x and 3.0 ms,
    against 5.55x and 4.4 ms with both planes Huffman-only and 6.47x and 3.9 ms with
    both through zstd with matches)."""
    if codes.dtype == np.int8:
        return codes.reshape(-1), None
    planes = to_planes(codes)
    return planes[0], planes[1]


def grid_step(eb: float, amax: float) -> float | None:
    """The float32 step that guarantees ``eb`` (module doc), or None if it cannot pay."""
    if not (eb > 0 and math.isfinite(eb)):
        return None
    step = 2.0 * eb - 8.0 * U32 * (amax + 2.0 * eb)
    if step < 2.0 * eb * 0.99 or step < 1e-30:
        return None
    s32 = np.float32(step)
    if float(s32) > step:
        s32 = np.nextafter(s32, np.float32(0))
    return float(s32)


def _workspace() -> torch.Tensor:
    """Per-thread reused CHUNK-element float32 buffer (512 KiB): stays hot in L2, and a
    fresh tensor per call would pay page faults on first touch."""
    ws = getattr(_local, "ws", None)
    if ws is None:
        ws = _local.ws = torch.empty(CHUNK, dtype=torch.float32)
    return ws


def _chunks(p_: int, c: int, q_: int):
    """(p0, p1, c0, c1, q0, q1) boxes of the [P, C, Q] view: contiguous runs of at most
    CHUNK elements in memory order."""
    row = c * q_
    if row <= CHUNK:
        k = max(1, CHUNK // max(row, 1))
        for p0 in range(0, p_, k):
            yield p0, min(p_, p0 + k), 0, c, 0, q_
    elif q_ <= CHUNK:
        kc = CHUNK // q_
        for p0 in range(p_):
            for c0 in range(0, c, kc):
                yield p0, p0 + 1, c0, min(c, c0 + kc), 0, q_
    else:
        for p0 in range(p_):
            for c0 in range(c):
                for q0 in range(0, q_, CHUNK):
                    yield p0, p0 + 1, c0, c0 + 1, q0, min(q_, q0 + CHUNK)


def quantize_codes(t: torch.Tensor, step: float, dtype: torch.dtype = torch.int8) -> torch.Tensor:
    """Grid codes ``rint(t / step)`` of ``t`` (flat, memory order; int8 or int16).

    int8: one pass of torch's per-tensor ``qint8`` quantization kernel (scale
    ``step``, zero point 0: ``rint(fl32(x * fl32(1/step)))``, vectorised; 0.23 ms
    per 4 MiB instead of 1.09 ms for the chunked passes below), whose int8 storage is
    viewed, not copied, when :func:`qint8_kernels` confirms the kernel computes the
    grid codes; else, and for int16, chunk by chunk: one fused ``MAGIC + inv * x``
    pass into the L2-sized float32 work buffer and one narrowing int32 -> int8/int16
    copy (the low bytes are the code).  Both are the rounding the bound in the
    module doc assumes.  (Streaming the chunks through a zstd compressobj instead of
    one compress call on the whole code array was measured ~20% slower.)
    """
    flat = t.reshape(-1)
    if dtype == torch.int8 and qint8_kernels():
        return _quantize_q8(flat, step)
    n = flat.numel()
    codes = torch.empty(n, dtype=dtype)
    inv = float(np.float32(1.0) / np.float32(step))
    magic = torch.tensor(MAGIC, dtype=torch.float32)
    work = _workspace()
    for i in range(0, n, CHUNK):
        w = work[: min(CHUNK, n - i)]
        torch.add(magic, flat[i : i + CHUNK], alpha=inv, out=w)
        codes[i : i + CHUNK].copy_(w.view(torch.int32))
    return codes


def _int8_alias(q: torch.Tensor) -> torch.Tensor:
    """A plain int8 tensor on a qint8 tensor's storage (no copy; keeps the storage
    alive).  ``q.view(torch.int8)`` is not used: indexing that view crashed (torch 2.13)."""
    n = q.numel()
    return torch.empty(0, dtype=torch.int8).set_(
        q.untyped_storage(), q.storage_offset(), (n,), (1,)
    )


def _quantize_q8(flat: torch.Tensor, step: float) -> torch.Tensor:
    with warnings.catch_warnings():  # quantized dtypes carry a deprecation notice
        warnings.simplefilter("ignore", UserWarning)
        q = torch.quantize_per_tensor(flat, step, 0, torch.qint8)
    return _int8_alias(q)


def q8_buffer(n: int, step: float) -> tuple[torch.Tensor, torch.Tensor]:
    """An uninitialised qint8 tensor of ``n`` codes (scale ``step``, zero point 0) and its
    int8 alias: the decoder writes the codes into the alias, then
    :func:`dequantize_q8` reconstructs (see :func:`qint8_kernels`)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        qt = torch._empty_affine_quantized([n], scale=step, zero_point=0, dtype=torch.qint8)
    return qt, _int8_alias(qt)


def dequantize_q8(qt: torch.Tensor, shape: list[int]) -> torch.Tensor:
    """``fl32(codes * step)`` of a :func:`q8_buffer` as a new float32 tensor of ``shape``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return qt.dequantize().view(shape)


def _dequantize_q8(codes: torch.Tensor, step: float) -> torch.Tensor:
    qt, alias = q8_buffer(codes.numel(), step)
    alias.copy_(codes.reshape(-1))
    return dequantize_q8(qt, [codes.numel()])


_q8_ok: bool | None = None


def qint8_kernels() -> bool:
    """Whether torch's per-tensor qint8 kernels compute exactly this module's codes and
    reconstruction (probed once per process; False where they are missing or differ,
    and the chunked passes run instead).

    The probe covers every int8 code at 0 and +-0.3 steps off the grid points (no
    ties, so any correct rounding agrees) and checks ``fl32(q * step)`` bit for bit.
    """
    global _q8_ok
    if _q8_ok is None:
        try:
            step = float(np.float32(0.0371))
            k = torch.arange(-126, 127, dtype=torch.float32)
            x = torch.cat([k, k + 0.3, k - 0.3]).mul_(step)
            ref = quantize(x, step, torch.int8)
            fast = _quantize_q8(x, step)
            back = _dequantize_q8(ref, step)
            _q8_ok = bool(
                torch.equal(fast, ref) and torch.equal(back, ref.to(torch.float32).mul_(step))
            )
        except (RuntimeError, NotImplementedError, AttributeError, TypeError):
            _q8_ok = False
    return _q8_ok


def quantize(t: torch.Tensor, step: float, dtype: torch.dtype = torch.int8) -> torch.Tensor:
    """Grid codes of a (small) tensor, same arithmetic as :func:`quantize_codes`."""
    inv = float(np.float32(1.0) / np.float32(step))
    w = torch.add(torch.tensor(MAGIC, dtype=torch.float32), t, alpha=inv)
    return w.view(torch.int32).to(dtype)


def to_planes(codes: np.ndarray) -> np.ndarray:
    """int16 codes -> [2, n] byte planes (low bytes, then high bytes): each plane gets
    its own Huffman statistics in zstd; int8 codes pass through."""
    if codes.dtype == np.int8:
        return codes
    return np.ascontiguousarray(codes.reshape(-1).view(np.uint8).reshape(-1, 2).T)


def from_planes(planes: np.ndarray) -> np.ndarray:
    """Inverse of :func:`to_planes`."""
    if planes.dtype == np.int8:
        return planes
    return np.ascontiguousarray(planes.T).view(np.int16).reshape(-1)


def sample_rows(t: torch.Tensor, pcq: tuple[int, int, int]) -> torch.Tensor:
    """Every s-th row of the [P, C, Q] view, s chosen so that each channel still has at
    least :data:`SAMPLE` values (all rows when it has fewer).

    The 3-sigma statistics and the per-channel outlier share are measured on it: they
    only decide which channels take the block path (never the error bound), and a
    full pass for them cost about as much as the quantization itself.
    """
    p_, c, q_ = pcq
    need = -(-SAMPLE // max(q_, 1))
    return t.reshape(p_, c, q_)[:: max(1, p_ // need)]


def moments(sub: torch.Tensor) -> tuple[float, float]:
    """Mean and standard deviation of ``sub`` (no temporaries; torch's float32 reductions
    sum pairwise, and a float64 accumulation was ~5x slower on strided samples)."""
    n = sub.numel()
    mu = float(sub.sum()) / n
    ms = float(torch.linalg.vector_norm(sub)) ** 2 / n
    return mu, math.sqrt(max(ms - mu * mu, 0.0))


def outlier_share(sub: torch.Tensor, hi_thr: float | None, lo_thr: float | None) -> np.ndarray:
    """Per-channel share of 3-sigma outliers (values above ``hi_thr`` / below ``lo_thr``)
    in the [P', C, Q] sample ``sub`` (see :func:`sample_rows`).

    Counted with numpy's comparison and bool sums per chunk of at most :data:`CHUNK`
    values (bool temporaries stay small): 0.02 ms on a MobileNetV2 sample, against
    0.28 ms for torch's float sign/clamp/sum per chunk, and 2.2 vs 4.3 ms on BERT's.
    """
    _, c, q_ = sub.shape
    cnt = np.zeros(c, dtype=np.int64)
    s = sub.numpy()
    for p0, p1, c0, c1, q0, q1 in _chunks(sub.shape[0], c, q_):
        src = s[p0:p1, c0:c1, q0:q1]
        if hi_thr is not None:
            cnt[c0:c1] += (src > hi_thr).sum(axis=(0, 2))
        if lo_thr is not None:
            cnt[c0:c1] += (src < lo_thr).sum(axis=(0, 2))
    return cnt / float(sub.shape[0] * q_)


def batch_template(codes: torch.Tensor, rows: int, huffman: bool = True) -> torch.Tensor | None:
    """Batch-template predictor: ``T = rint(mean of the codes over the batch axis)``.

    Activations of one layer share a per-position component across the samples of a
    batch (positional embeddings in CCT/BERT make the GELU outputs of every sample
    alike; SZ3's multi-dimensional predictors exploit the same).  Predicting each
    sample's codes by ``T`` and coding ``codes - T`` (int8/int16, wrapping: the
    decoder's ``r + T`` wraps back to the exact code, which lies within
    :data:`QLIM` / :data:`QLIM16`) pays when the residual compresses better.  This
    is decided on a sample of positions (all ``rows`` samples in four column blocks,
    about :data:`SAMPLE` * 8 codes) by the size the code stream's entropy stage would
    give it (:func:`stream_cost`, ``huffman`` as there): returns ``T`` ([rest], the codes' dtype) if the
    sample's size, template included, drops by more than 3%, else None.
    """
    if rows < 2:
        return None
    m = codes.view(rows, -1)
    mn = m.numpy()
    rest = mn.shape[1]
    # four contiguous column blocks (cache-friendly), ~SAMPLE * 8 codes in all; a few
    # small numpy ops (the torch version of this decision cost ~0.4 ms of overhead)
    blk = max(1, min(rest // 4, SAMPLE * 2 // rows))
    sm = np.concatenate([mn[:, j : j + blk] for j in (rest * i // 4 for i in range(4))], axis=1)
    # rint(mean) exactly as _template computes it (float32 division, half to even)
    ts = np.rint(sm.sum(axis=0, dtype=np.int32).astype(np.float32) / np.float32(rows))
    ts = ts.astype(sm.dtype)
    plain = stream_cost(sm, huffman)
    # T is stored too (its own section; counted with the residual: it is tiny)
    res = stream_cost(np.concatenate([ts[None, :], sm - ts]), huffman)  # int8/int16 wrap
    if not res < 0.97 * plain:
        return None
    return _template(m, rows)


def _template(m: torch.Tensor, rows: int) -> torch.Tensor:
    s = m.sum(dim=0, dtype=torch.int32).to(torch.float32).div_(rows)
    return s.round_().to(m.dtype)


def dequantize(codes: np.ndarray, step: float, shape: list[int]) -> torch.Tensor:
    """``fl32(codes * step)`` as a new float32 tensor of ``shape`` (the decoder's formula
    in the module doc): int8 codes in one pass of torch's qint8 dequantization kernel
    (see :func:`qint8_kernels`), else chunk by chunk, an int8/int16 -> float32 copy
    and a multiply."""
    flat_c = as_tensor(codes).reshape(-1)
    if flat_c.dtype == torch.int8 and qint8_kernels():
        return _dequantize_q8(flat_c, step).view(shape)
    out = torch.empty(shape, dtype=torch.float32)
    flat_o = out.reshape(-1)
    for i in range(0, flat_o.numel(), CHUNK):
        flat_o[i : i + CHUNK].copy_(flat_c[i : i + CHUNK]).mul_(step)
    return out


def encode_rich(
    xr: np.ndarray,
    step: float,
    map_rw: tuple[int, int],
    outlier: tuple[float, float] | None,
    block: int,
    tau: float,
) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """Block path of the outlier-rich channels (module doc); ``xr`` is their [P, Cr, Q] values.

    ``outlier`` = (low, high) 3-sigma thresholds: values beyond them are stored exactly
    (float32); ``None`` keeps them on the grid like every other value (within eb)."""
    p_, cr, q_ = xr.shape
    r, w = map_rw
    xr = np.ascontiguousarray(xr.transpose(1, 0, 2)).reshape(cr, r, w)
    q = quantize(torch.from_numpy(xr), step, torch.int16).numpy().astype(np.int32)
    if outlier is not None:
        lo_t, hi_t = outlier
        out_flat = np.flatnonzero((xr > hi_t) | (xr < lo_t))
        q.reshape(-1)[out_flat] = 0
    else:
        out_flat = np.zeros(0, dtype=np.int64)
    qb = to_blocks(pad_maps(q, block), block)
    dense = block_density(qb) >= tau
    dblocks = qb[dense]
    sblocks = qb[~dense]
    delta = lorenzo_delta(dblocks.astype(np.int32))
    lor = np.abs(delta).sum(axis=(1, 2)) < np.abs(dblocks).sum(axis=(1, 2))
    dcodes, oidx, ovals = encode_codes(delta[lor])
    counts, cols, vals = csr_encode(sblocks)
    arrays = {
        "r_out_idx": delta_index(out_flat),
        "r_out_vals": xr.reshape(-1)[out_flat],
        "r_dense": np.packbits(dense.reshape(-1)),
        "r_lorenzo": np.packbits(lor),
        "r_codes": dcodes,
        "r_code_out_idx": delta_index(oidx),
        "r_code_out_vals": smallest_int(ovals),
        "r_plain": smallest_int(dblocks[~lor]),
        "r_csr_counts": counts,
        "r_csr_cols": cols,
        "r_csr_vals": smallest_int(vals),
    }
    stats = {
        "dense_blocks": int(dense.sum()),
        "lorenzo_blocks": int(lor.sum()),
        "sparse_blocks": int((~dense).sum()),
        "outliers": int(out_flat.size),
    }
    return arrays, stats


def decode_rich(
    arr: dict[str, np.ndarray], meta: dict[str, Any], recon: np.ndarray, step: float
) -> None:
    """Write the outlier-rich channels into ``recon`` ([P, C, Q] float32)."""
    p_, c, q_ = meta["pcq"]
    _, r, w = meta["map_shape"]
    n = meta["block"]
    rich_idx = arr["rich_idx"].astype(np.int64)
    cr = rich_idx.size
    br, bc = (r + (-r) % n) // n, (w + (-w) % n) // n
    dense = np.unpackbits(arr["r_dense"], count=cr * br * bc).astype(bool).reshape(cr, br, bc)
    nd = int(dense.sum())
    lor = np.unpackbits(arr["r_lorenzo"], count=nd).astype(bool)
    qb = np.zeros((cr, br, bc, n, n), dtype=np.int64)
    dq = np.zeros((nd, n, n), dtype=np.int64)
    nl = int(lor.sum())
    delta = decode_codes(
        arr["r_codes"], undelta_index(arr["r_code_out_idx"]), arr["r_code_out_vals"]
    )
    dq[lor] = lorenzo_restore(delta.reshape(nl, n, n))
    dq[~lor] = arr["r_plain"]
    qb[dense] = dq
    qb[~dense] = csr_decode(
        arr["r_csr_counts"], arr["r_csr_cols"], arr["r_csr_vals"], cr * br * bc - nd, n
    )
    q = from_blocks(qb)[:, :r, :w]
    rr = q.astype(np.float32) * np.float32(step)
    rr.reshape(-1)[undelta_index(arr["r_out_idx"])] = arr["r_out_vals"]
    recon[:, rich_idx, :] = rr.reshape(cr, p_, q_).transpose(1, 0, 2)


def as_tensor(a: np.ndarray) -> torch.Tensor:
    """Read-only numpy buffer (a decoded frame) as a tensor that is only ever read."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(a)
