"""2-D Lorenzo prediction with cuSZ's dual-quantization.

Dual-quantization (Tian et al., cuSZ, PACT'20): first *pre-quantize* every value to
the error bound, ``q = rint(x / 2eb)`` (error <= eb), then predict on the integers.
Because prediction uses integers that the decoder reproduces exactly, the
predictor's input is already the decoded value (FedHybrid §4.4.1: "predictions
utilize decompressed rather than original values") and the first-order 2-D
Lorenzo predictor (eq. 8 with n = 1, d = 2),

    pred[i, j] = q[i-1, j] + q[i, j-1] - q[i-1, j-1],

turns into a parallel difference ``delta = q - pred`` with no sequential loop.
Decoding is two prefix sums.  Blocks are predicted independently (zero border),
so any subset of blocks decodes on its own.
"""

from __future__ import annotations

import numpy as np

#: residuals outside ``[-RADIUS, RADIUS]`` are stored exactly ("outliers"); the rest
#: fit one signed byte, the sentinel -128 marks an outlier slot.
RADIUS = 127
SENTINEL = np.int8(-128)


def lorenzo_delta(q: np.ndarray) -> np.ndarray:
    """Prediction residual of the 2-D Lorenzo predictor over the last two axes."""
    d = np.diff(q, axis=-1, prepend=0)
    return np.diff(d, axis=-2, prepend=0)


def lorenzo_restore(delta: np.ndarray) -> np.ndarray:
    """Inverse of :func:`lorenzo_delta` (two cumulative sums)."""
    return np.cumsum(np.cumsum(delta, axis=-2), axis=-1)


def encode_codes(delta: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Split residuals into int8 codes plus exact (index, value) outliers."""
    flat = delta.reshape(-1)
    out = (flat < -RADIUS) | (flat > RADIUS)
    codes = flat.astype(np.int8)
    idx = np.flatnonzero(out)
    codes[idx] = SENTINEL
    return codes, idx.astype(np.int64), flat[idx].astype(np.int64)


def decode_codes(codes: np.ndarray, idx: np.ndarray, vals: np.ndarray) -> np.ndarray:
    """Inverse of :func:`encode_codes` (flat int64 residuals)."""
    flat = codes.astype(np.int64)
    flat[idx] = vals
    return flat
