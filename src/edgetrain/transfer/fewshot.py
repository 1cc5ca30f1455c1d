"""k-shot-per-class sampling: the data a device has when a new task appears.

The few-shot protocol (TrainDeeploy §VI-A1, after the benchmark it cites) trains on
exactly ``k`` labelled samples of every target class and tests on the rest. Sampling
is seeded and per class, so the same seed always picks the same shots and every
class is represented equally — a class with fewer than ``k`` samples is an error,
never a silently smaller shot.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgetrain.data.dataset import Dataset
from edgetrain.errors import DataError


def k_shot_indices(labels: np.ndarray, k: int, seed: int) -> np.ndarray:
    """Indices of ``k`` samples of every class in ``labels``, chosen with ``seed``.

    Classes are visited in sorted order and each draws from its own permutation of
    one ``numpy.random.Generator``, so the choice depends only on (labels, k, seed).
    The result is sorted (class-interleaved order is the trainer's job).
    """
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise DataError(f"shots per class must be a positive integer, got {k!r}")
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.size == 0:
        raise DataError("few-shot sampling needs a non-empty 1-D label array")
    rng = np.random.default_rng(seed)
    classes, counts = np.unique(labels, return_counts=True)
    short = [f"class {c}: {n}" for c, n in zip(classes, counts, strict=True) if n < k]
    if short:
        raise DataError(
            f"{k}-shot sampling needs at least {k} samples of every class; too few in "
            + ", ".join(short)
            + f" (lower --shots to at most {int(counts.min())} or use more data)"
        )
    picked = [rng.permutation(np.flatnonzero(labels == c))[:k] for c in classes]
    return np.sort(np.concatenate(picked))


@dataclass(frozen=True)
class FewShotSplit:
    """The ``k``-shot training set and the held-out test set drawn from one data set."""

    train: Dataset
    test: Dataset
    shots: int
    seed: int


def few_shot_split(
    dataset: Dataset, shots: int, seed: int, test_size: int | None = None
) -> FewShotSplit:
    """Split ``dataset`` into ``shots`` samples per class (train) and the rest (test).

    Every class of ``dataset.classes`` must occur (a label with no samples would make
    the k-shot task silently smaller). ``test_size`` caps the test set with a seeded,
    class-stratified subsample, to keep evaluation cheap on 2-core machines.
    """
    y = dataset.y.numpy()
    present = set(np.unique(y).tolist())
    absent = [dataset.classes[c] for c in range(dataset.num_classes) if c not in present]
    if absent:
        raise DataError(
            f"data set {dataset.name!r} has no samples of class(es) {absent}; "
            f"{shots}-shot sampling needs every class"
        )
    train_idx = k_shot_indices(y, shots, seed)
    mask = np.ones(len(y), dtype=bool)
    mask[train_idx] = False
    test_idx = np.flatnonzero(mask)
    if test_idx.size == 0:
        raise DataError(
            f"data set {dataset.name!r} has no samples left to test on after taking "
            f"{shots} shots per class; lower --shots"
        )
    if test_size is not None:
        if test_size < 1:
            raise DataError(f"test size must be positive, got {test_size}")
        if test_size < test_idx.size:
            rng = np.random.default_rng([seed, 1])  # independent of the shot draw
            test_idx = _stratified_subsample(y, test_idx, test_size, rng)
    return FewShotSplit(dataset.subset(train_idx), dataset.subset(test_idx), shots, seed)


def _stratified_subsample(
    y: np.ndarray, idx: np.ndarray, size: int, rng: np.random.Generator
) -> np.ndarray:
    """About ``size`` of ``idx`` keeping each class's share (largest remainder rounding)."""
    classes, counts = np.unique(y[idx], return_counts=True)
    quota = counts * size / counts.sum()
    take = np.floor(quota).astype(int)
    for i in np.argsort(-(quota - take))[: size - int(take.sum())]:
        take[i] += 1
    picked = [
        rng.permutation(idx[y[idx] == c])[:t] for c, t in zip(classes, take, strict=True) if t
    ]
    return np.sort(np.concatenate(picked))
