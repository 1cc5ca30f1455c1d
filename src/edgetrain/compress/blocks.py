"""Block split of outlier-rich channel maps and CSR storage of sparse blocks.

FedHybrid §4.4.1: the non-zero mask of a channel's feature map is mean-filtered
with ``n x n`` average pooling; a block whose density is below the sparsity
threshold ``tau`` is *sparse* (stored CSR), otherwise *dense* (Lorenzo).  All
steps are array operations over every block at once.
"""

from __future__ import annotations

import numpy as np


def pad_maps(m: np.ndarray, n: int) -> np.ndarray:
    """Zero-pad ``[C, R, W]`` maps so R and W are multiples of ``n``."""
    c, r, w = m.shape
    pr, pw = (-r) % n, (-w) % n
    if pr or pw:
        m = np.pad(m, ((0, 0), (0, pr), (0, pw)))
    return m


def to_blocks(m: np.ndarray, n: int) -> np.ndarray:
    """``[C, R, W]`` (padded) -> ``[C, R/n, W/n, n, n]`` blocks."""
    c, r, w = m.shape
    return m.reshape(c, r // n, n, w // n, n).transpose(0, 1, 3, 2, 4)


def from_blocks(b: np.ndarray) -> np.ndarray:
    """Inverse of :func:`to_blocks`."""
    c, br, bc, n, _ = b.shape
    return b.transpose(0, 1, 3, 2, 4).reshape(c, br * n, bc * n)


def block_density(blocks: np.ndarray) -> np.ndarray:
    """Average pooling of the non-zero mask: fraction of non-zeros per block."""
    return (blocks != 0).mean(axis=(-2, -1))


def csr_encode(sparse: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CSR of ``[k, n, n]`` blocks: per-row counts, column indices, values."""
    k, n, _ = sparse.shape
    cdt = np.uint8 if n <= 256 else np.uint16
    counts = np.count_nonzero(sparse, axis=2).astype(cdt)
    nz = np.nonzero(sparse)
    cols = nz[2].astype(cdt)
    return counts, cols, sparse[nz]


def csr_decode(
    counts: np.ndarray, cols: np.ndarray, vals: np.ndarray, k: int, n: int, dtype=np.int64
) -> np.ndarray:
    """Inverse of :func:`csr_encode`."""
    out = np.zeros((k, n, n), dtype=dtype)
    rows_flat = np.repeat(np.arange(k * n), counts.reshape(-1).astype(np.int64))
    out.reshape(k * n, n)[rows_flat, cols.astype(np.int64)] = vals
    return out


def smallest_int(a: np.ndarray) -> np.ndarray:
    """Store integers in the narrowest signed dtype that holds them."""
    if a.size == 0:
        return a.astype(np.int8)
    lo, hi = int(a.min()), int(a.max())
    for dt in (np.int8, np.int16, np.int32):
        info = np.iinfo(dt)
        if info.min <= lo and hi <= info.max:
            return a.astype(dt)
    return a.astype(np.int64)


def delta_index(idx: np.ndarray) -> np.ndarray:
    """Sorted flat indices as gaps (small numbers entropy-code well)."""
    return smallest_int(np.diff(idx.astype(np.int64), prepend=0))


def undelta_index(gaps: np.ndarray) -> np.ndarray:
    return np.cumsum(gaps.astype(np.int64))
