"""Fast path of the mix codec: error-bound grid quantization in the native layout.

For float32 tensors whose values lie within ~126 error-bound steps of zero (every
ReLU/GELU activation at a bound of 1% of its range), the mix codec runs this path
instead of the general one in :mod:`edgetrain.compress.mix`:

* **one grid for every channel**: ``q = rint(x / step)`` with ``step`` just below
  ``2 eb`` (cuSZ's pre-quantization; a channel's k-bit code is ``q`` with offset 0
  and scale ``step``, so zeros stay exactly zero).  ``q`` is computed with the
  float32 "magic number" rounding (``1.5 * 2^23 + x / step``, whose low bits *are*
  the rounded integer): one fused pass into an L2-sized chunk buffer and one
  narrowing copy straight into int8 codes.  No channel-major transpose: the codes
  keep the tensor's memory order and zstd sees them as one contiguous stream.
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

Decoding is one zstd pass and, per chunk, an int8 -> float32 copy and a multiply.
"""

from __future__ import annotations

import math
import threading
import warnings
from typing import Any

import numpy as np
import torch
import zstandard

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
    """Grid codes ``rint(t / step)`` of ``t`` (flat, memory order; int8 or int16), chunk
    by chunk.

    Per chunk: one fused ``MAGIC + inv * x`` pass into the L2-sized float32 work
    buffer and one narrowing int32 -> int8/int16 copy (the low bytes are the code).
    (Streaming the chunks through a zstd compressobj instead of one compress call
    on the whole code array was measured ~20% slower.)
    """
    flat = t.reshape(-1)
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

    Counting uses float sign/clamp/sum (torch's bool reductions are ~5x slower).
    """
    _, c, q_ = sub.shape
    cnt = torch.zeros(c, dtype=torch.float64)
    work = _workspace()
    for p0, p1, c0, c1, q0, q1 in _chunks(sub.shape[0], c, q_):
        src = sub[p0:p1, c0:c1, q0:q1]
        w = work[: src.numel()].view(src.shape)
        # sign(x - hi) > 0 <=> x above hi (float ops: torch's bool reductions are slower)
        # (a chunk's counts are < 2^24: exact in float32)
        if hi_thr is not None:
            torch.sub(src, hi_thr, out=w).sign_().clamp_(min=0)
            cnt[c0:c1] += w.sum(dim=(0, 2))
        if lo_thr is not None:
            torch.sub(torch.tensor(lo_thr, dtype=torch.float32), src, out=w).sign_().clamp_(min=0)
            cnt[c0:c1] += w.sum(dim=(0, 2))
    return cnt.numpy() / float(sub.shape[0] * q_)


def batch_template(codes: torch.Tensor, rows: int) -> torch.Tensor | None:
    """Batch-template predictor: ``T = rint(mean of the codes over the batch axis)``.

    Activations of one layer share a per-position component across the samples of a
    batch (positional embeddings in CCT/BERT make the GELU outputs of every sample
    alike; SZ3's multi-dimensional predictors exploit the same).  Predicting each
    sample's codes by ``T`` and coding ``codes - T`` (int8/int16, wrapping: the
    decoder's ``r + T`` wraps back to the exact code, which lies within
    :data:`QLIM` / :data:`QLIM16`) pays when the residual compresses better.  This
    is decided by zstd on a sample of positions (all ``rows`` samples in four column
    blocks, about :data:`SAMPLE` * 8 codes): returns ``T`` ([rest], the codes' dtype)
    if the sample's compressed size, template included, drops by more than 3%, else
    None.
    """
    if rows < 2:
        return None
    m = codes.view(rows, -1)
    rest = m.shape[1]
    # four contiguous column blocks (cache-friendly), ~SAMPLE * 8 codes in all
    blk = max(1, min(rest // 4, SAMPLE * 2 // rows))
    starts = [rest * i // 4 for i in range(4)]
    sm = torch.cat([m[:, j : j + blk] for j in starts], dim=1)
    ts = _template(sm, rows)
    # zstd itself on the sample (not an entropy estimate): plain codes of samples that
    # repeat each other also compress through LZ matches, which order-0 entropy misses
    cctx = compressor()
    plain = len(cctx.compress(sm.numpy().reshape(-1).view(np.uint8)))
    # T is stored too: compressed with the residual in one frame, like the plain sample
    both = torch.cat([ts.reshape(1, -1), sm - ts])
    res = len(cctx.compress(both.numpy().reshape(-1).view(np.uint8)))
    if not res < 0.97 * plain:
        return None
    return _template(m, rows)


def _template(m: torch.Tensor, rows: int) -> torch.Tensor:
    s = m.sum(dim=0, dtype=torch.int32).to(torch.float32).div_(rows)
    return s.round_().to(m.dtype)


def dequantize(codes: np.ndarray, step: float, out: torch.Tensor) -> torch.Tensor:
    """``out = fl32(codes * step)`` chunk by chunk (the decoder's formula in the module doc)."""
    flat_c, flat_o = as_tensor(codes).reshape(-1), out.reshape(-1)
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
