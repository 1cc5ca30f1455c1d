"""Splitting one data set across a fleet: IID, by subject, Dirichlet non-IID (optionally with
some classes held by chosen devices only).

Every partitioner returns a list of sorted int64 index arrays that are pairwise
disjoint and together cover the samples they were given, so ``ds.subset(part)``
yields each device's local data.

:func:`js_divergence` measures how non-IID a partition is: for each non-empty
part i with label distribution P_i and the global label distribution Q (over all
``labels``),

    JS(P_i, Q) = 1/2 KL(P_i || M) + 1/2 KL(Q || M),   M = (P_i + Q) / 2,

with base-2 logarithms, so each term lies in [0, 1]; the result is the unweighted
mean over parts (0 = every device sees the global mix; 1 = disjoint supports).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from edgetrain.errors import DataError

ArrayLike = np.ndarray | torch.Tensor | Sequence[int]


def _np(a: ArrayLike, what: str) -> np.ndarray:
    arr = a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)
    if arr.ndim != 1:
        raise DataError(f"{what} must be one-dimensional, got shape {arr.shape}")
    return arr


def _check_parts(n_parts: object, n: int) -> int:
    if not isinstance(n_parts, int) or isinstance(n_parts, bool) or n_parts < 1:
        raise DataError(f"n_parts must be a positive integer, got {n_parts!r}")
    if n_parts > n:
        raise DataError(f"n_parts={n_parts} exceeds the {n} samples; every part needs one")
    return n_parts


def partition_iid(
    n_samples_or_labels: int | ArrayLike, n_parts: int, seed: int = 0
) -> list[np.ndarray]:
    """A random permutation cut into ``n_parts`` near-equal parts (sizes differ by <= 1)."""
    if isinstance(n_samples_or_labels, (int, np.integer)) and not isinstance(
        n_samples_or_labels, bool
    ):
        n = int(n_samples_or_labels)
    else:
        n = len(_np(n_samples_or_labels, "labels"))
    _check_parts(n_parts, n)
    perm = np.random.default_rng(seed).permutation(n)
    return [np.sort(p).astype(np.int64) for p in np.array_split(perm, n_parts)]


def partition_by_group(groups: ArrayLike, n_parts: int | None = None) -> list[np.ndarray]:
    """One part per group (ascending group id), or groups packed into ``n_parts`` parts.

    With ``n_parts`` each group stays whole (a person's data never spans devices):
    groups are taken largest first and each goes to the currently smallest part
    (ties -> lowest part index), which balances sample counts deterministically.
    """
    g = _np(groups, "groups")
    ids, inverse, counts = np.unique(g, return_inverse=True, return_counts=True)
    members = [np.flatnonzero(inverse == i).astype(np.int64) for i in range(len(ids))]
    if n_parts is None:
        return members
    if not isinstance(n_parts, int) or isinstance(n_parts, bool) or n_parts < 1:
        raise DataError(f"n_parts must be a positive integer or None, got {n_parts!r}")
    if n_parts > len(ids):
        raise DataError(
            f"n_parts={n_parts} exceeds the {len(ids)} distinct groups; whole groups are kept "
            f"together, so use n_parts <= {len(ids)} (or None for one part per group)"
        )
    order = sorted(range(len(ids)), key=lambda i: (-counts[i], i))
    bins: list[list[int]] = [[] for _ in range(n_parts)]
    sizes = [0] * n_parts
    for i in order:
        j = min(range(n_parts), key=lambda k: (sizes[k], k))
        bins[j].append(i)
        sizes[j] += int(counts[i])
    return [np.sort(np.concatenate([members[i] for i in b])) for b in bins]


def partition_dirichlet(
    labels: ArrayLike,
    n_parts: int,
    alpha: float,
    seed: int = 0,
    min_size: int = 1,
    max_tries: int = 100,
) -> list[np.ndarray]:
    """Label-skewed parts: each class is spread over parts by p ~ Dir(alpha * 1).

    The scheme of Hsu et al. 2019 (arXiv:1909.06335) as implemented in NIID-Bench
    (Li et al. 2022): per class, draw proportions over the parts, zero those of
    parts already holding >= N / n_parts samples (keeps sizes in check), and cut the
    class's shuffled indices at the cumulative proportions. The draw is repeated
    (up to ``max_tries``) until every part has ``min_size`` samples; if none does
    (e.g. one class and a tiny alpha), the last draw is repaired by moving random
    samples from the largest part to each short one. Small alpha -> each device
    sees few classes.
    """
    y = _np(labels, "labels")
    n = len(y)
    _check_parts(n_parts, n)
    if not alpha > 0:
        raise DataError(f"alpha must be > 0 (e.g. 0.1 very skewed, 100 near IID), got {alpha!r}")
    if (
        not isinstance(min_size, int)
        or isinstance(min_size, bool)
        or min_size < 0
        or min_size * n_parts > n
    ):
        raise DataError(
            f"min_size={min_size!r} must be a non-negative integer with min_size x n_parts "
            f"({n_parts}) <= the {n} samples"
        )
    rng = np.random.default_rng(seed)
    classes = np.unique(y)
    parts: list[np.ndarray] = []
    for _ in range(max(1, max_tries)):
        chunks: list[list[np.ndarray]] = [[] for _ in range(n_parts)]
        sizes = np.zeros(n_parts, dtype=np.int64)
        for c in classes:
            idx = rng.permutation(np.flatnonzero(y == c))
            p = rng.dirichlet(np.full(n_parts, float(alpha)))
            p = p * (sizes < n / n_parts)
            p = p / p.sum() if p.sum() > 0 else np.full(n_parts, 1.0 / n_parts)
            cuts = (np.cumsum(p) * len(idx)).astype(np.int64)[:-1]
            for j, chunk in enumerate(np.split(idx, cuts)):
                chunks[j].append(chunk)
                sizes[j] += len(chunk)
        parts = [np.concatenate(ch).astype(np.int64) for ch in chunks]
        if sizes.min() >= min_size:
            break
    else:
        for j in range(n_parts):
            while len(parts[j]) < min_size:
                donor = int(np.argmax([len(q) for q in parts]))
                k = int(rng.integers(len(parts[donor])))
                parts[j] = np.append(parts[j], parts[donor][k])
                parts[donor] = np.delete(parts[donor], k)
    return [np.sort(q) for q in parts]


def partition_dirichlet_held(
    labels: ArrayLike,
    n_parts: int,
    alpha: float,
    held_classes: Sequence[int],
    holders: Sequence[int],
    seed: int = 0,
    min_size: int = 1,
) -> list[np.ndarray]:
    """:func:`partition_dirichlet`, except that the samples of ``held_classes`` go only to
    the parts listed in ``holders`` (their own Dirichlet split among those parts).

    Data that only some devices hold: FedHybrid §1's "unique data" on the low-end phones a
    memory wall drops. The other classes are split over all ``n_parts`` parts as
    :func:`partition_dirichlet` splits them (every part gets ``min_size`` of them), so a
    holder's part is the union of its two shares. With ``held_classes`` empty the result is
    ``partition_dirichlet(labels, n_parts, alpha, seed, min_size)``.
    """
    y = _np(labels, "labels")
    _check_parts(n_parts, len(y))
    held = sorted({int(c) for c in held_classes})
    if not held:
        return partition_dirichlet(y, n_parts, alpha, seed=seed, min_size=min_size)
    present = set(np.unique(y).tolist())
    missing = [c for c in held if c not in present]
    if missing:
        raise DataError(
            f"held_classes {missing} have no samples; the labels hold classes {sorted(present)}"
        )
    if len(held) >= len(present):
        raise DataError(
            f"held_classes {held} cover every class; leave at least one class for all parts "
            f"(at most {len(present) - 1} held classes)"
        )
    hold = sorted({int(h) for h in holders})
    if not hold or hold[0] < 0 or hold[-1] >= n_parts:
        raise DataError(
            f"holders must be a non-empty set of part indices in 0..{n_parts - 1}, got "
            f"{list(holders)!r}"
        )
    in_held = np.isin(y, held)
    rest = np.flatnonzero(~in_held)
    mine = np.flatnonzero(in_held)
    if len(rest) < max(1, min_size) * n_parts:
        raise DataError(
            f"the classes not held have {len(rest)} samples, fewer than {max(1, min_size)} for "
            f"each of the {n_parts} parts; hold fewer classes"
        )
    if len(hold) > len(mine):
        raise DataError(
            f"{len(hold)} holders but only {len(mine)} samples of held_classes {held}; "
            "use fewer holders or more held classes"
        )
    base = partition_dirichlet(y[rest], n_parts, alpha, seed=seed, min_size=min_size)
    extra = partition_dirichlet(y[mine], len(hold), alpha, seed=seed + 1, min_size=0)
    parts = [rest[b] for b in base]
    for j, e in zip(hold, extra, strict=True):
        parts[j] = np.concatenate([parts[j], mine[e]])
    return [np.sort(q).astype(np.int64) for q in parts]


def _js(p: np.ndarray, q: np.ndarray) -> float:
    m = 0.5 * (p + q)

    def kl(a: np.ndarray) -> float:
        nz = a > 0
        return float(np.sum(a[nz] * np.log2(a[nz] / m[nz])))

    return 0.5 * kl(p) + 0.5 * kl(q)


def js_divergence(parts: Sequence[ArrayLike], labels: ArrayLike) -> float:
    """Mean base-2 Jensen-Shannon divergence of part label mixes vs the global mix, in [0, 1]."""
    y = _np(labels, "labels")
    classes, yi = np.unique(y, return_inverse=True)
    k = len(classes)
    if k == 0:
        raise DataError("labels are empty; js_divergence needs at least one sample")
    q = np.bincount(yi, minlength=k) / len(y)
    values = []
    for part in parts:
        idx = _np(part, "each part")
        if idx.size == 0:
            continue
        if idx.min() < 0 or idx.max() >= len(y):
            raise DataError(f"a part holds an index outside 0..{len(y) - 1} (the labels' range)")
        p = np.bincount(yi[idx], minlength=k) / idx.size
        values.append(_js(p, q))
    if not values:
        raise DataError("every part is empty; js_divergence needs at least one sample")
    return float(np.clip(np.mean(values), 0.0, 1.0))
