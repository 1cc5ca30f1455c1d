"""Cutting continuous recordings into fixed-length windows.

Human-activity models classify short fixed windows. A window is cut only inside
one recording and one run of a constant label, so no window mixes two people, two
sessions or two activities (a window straddling a transition has no true label).
"""

from __future__ import annotations

import numpy as np

from edgetrain.errors import DataError


def window_step(window: int, overlap: float) -> int:
    """Hop between window starts for a fractional ``overlap`` in [0, 1)."""
    if not isinstance(window, int) or isinstance(window, bool) or window < 1:
        raise DataError(f"window must be a positive integer number of samples, got {window!r}")
    if not 0.0 <= float(overlap) < 1.0:
        raise DataError(f"overlap must be in [0, 1) (0.5 = 50 %), got {overlap!r}")
    return max(1, round(window * (1.0 - float(overlap))))


def label_runs(labels: np.ndarray) -> list[tuple[int, int, int]]:
    """Maximal runs of equal labels as (start, stop, label)."""
    labels = np.asarray(labels)
    if labels.size == 0:
        return []
    change = np.flatnonzero(labels[1:] != labels[:-1]) + 1
    starts = np.concatenate([[0], change])
    stops = np.concatenate([change, [labels.size]])
    return [(int(a), int(b), int(labels[a])) for a, b in zip(starts, stops, strict=True)]


def window_starts(length: int, window: int, step: int) -> np.ndarray:
    """Start offsets of every full window in a run of ``length`` samples."""
    if length < window:
        return np.zeros(0, dtype=np.int64)
    return np.arange(0, length - window + 1, step, dtype=np.int64)


def windows_by_label(
    signal: np.ndarray,
    labels: np.ndarray,
    window: int,
    step: int,
    skip: frozenset[int] = frozenset(),
) -> tuple[np.ndarray, np.ndarray]:
    """Windows (N x C x window, float32) and their labels from one T x C recording.

    Windows lie inside runs of a constant label; runs whose label is in ``skip``
    (e.g. the "null" class) give none.
    """
    xs: list[np.ndarray] = []
    ys: list[int] = []
    for a, b, lab in label_runs(labels):
        if lab in skip:
            continue
        for s in window_starts(b - a, window, step):
            xs.append(signal[a + s : a + s + window].T)
            ys.append(lab)
    if not xs:
        return np.zeros((0, signal.shape[1], window), np.float32), np.zeros(0, np.int64)
    return np.stack(xs).astype(np.float32), np.asarray(ys, dtype=np.int64)
