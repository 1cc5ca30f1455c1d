"""Mapping a format's raw activity ids to contiguous labels 0..K-1."""

from __future__ import annotations

import numpy as np


def encode_present(
    raw: np.ndarray, names: dict[int, str]
) -> tuple[np.ndarray, list[str], list[int]]:
    """Labels 0..K-1 over the raw ids present in ``raw``, in ascending raw-id order.

    Returns (labels, class names, raw ids). Using the ids present (not the whole
    official list) keeps every class non-empty, which stratified splits and
    per-class metrics need; the raw ids are kept so results stay comparable.
    """
    ids = [int(v) for v in np.unique(raw)]
    lookup = {v: i for i, v in enumerate(ids)}
    y = np.fromiter((lookup[int(v)] for v in raw), dtype=np.int64, count=len(raw))
    return y, [names.get(v, f"label_{v}") for v in ids], ids
