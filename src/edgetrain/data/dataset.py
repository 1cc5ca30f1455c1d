"""The one in-memory data set type every loader returns.

A :class:`Dataset` is plain tensors plus the few facts later stages need (class
names, who recorded each sample, where it came from), so that partitioners,
trainers and reports never have to know which file format it was read from.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from edgetrain.errors import DataError


def _as_index(idx: object, n: int) -> torch.Tensor:
    """Turn a list / array / tensor of indices or a boolean mask into an int64 index tensor."""
    t = idx if isinstance(idx, torch.Tensor) else torch.as_tensor(np.asarray(idx))
    if t.dtype == torch.bool:
        if t.numel() != n:
            raise DataError(f"boolean mask has {t.numel()} entries; the data set has {n} samples")
        return torch.nonzero(t, as_tuple=False).flatten()
    if t.numel() == 0:
        return torch.zeros(0, dtype=torch.int64)
    if t.dtype.is_floating_point or t.dtype.is_complex:
        raise DataError(f"subset indices must be integers or a boolean mask, got dtype {t.dtype}")
    t = t.to(torch.int64).flatten()
    if int(t.min()) < -n or int(t.max()) >= n:
        raise DataError(f"subset index out of range for a data set of {n} samples")
    return t


@dataclass
class Dataset:
    """Samples ``x`` with labels ``y`` (0..K-1) and optional per-sample ``groups``.

    ``x`` is float32 N x C x T for sensor windows, float32 N x 1 x H x W for images,
    int64 N x L for token ids. ``groups`` holds the subject (or recording) id of each
    sample when the source records it, so a fleet can be split by person.
    """

    name: str
    x: torch.Tensor
    y: torch.Tensor
    classes: list[str]
    groups: torch.Tensor | None = None
    source: str = ""
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = self.x.shape[0]
        if self.y.shape != (n,):
            raise DataError(
                f"data set {self.name!r}: y has shape {tuple(self.y.shape)}; expected ({n},)"
            )
        if self.groups is not None and self.groups.shape != (n,):
            raise DataError(
                f"data set {self.name!r}: groups has shape {tuple(self.groups.shape)}; "
                f"expected ({n},)"
            )
        if n and (int(self.y.min()) < 0 or int(self.y.max()) >= len(self.classes)):
            raise DataError(
                f"data set {self.name!r}: labels must lie in 0..{len(self.classes) - 1}"
            )

    def __len__(self) -> int:
        return int(self.x.shape[0])

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one sample (without the batch dimension)."""
        return tuple(int(s) for s in self.x.shape[1:])

    def subset(self, idx: Sequence[int] | np.ndarray | torch.Tensor) -> Dataset:
        """The samples at ``idx`` (indices or boolean mask); classes and meta are kept."""
        index = _as_index(idx, len(self))
        return replace(
            self,
            x=self.x[index],
            y=self.y[index],
            groups=None if self.groups is None else self.groups[index],
            meta=dict(self.meta),
        )

    def train_test_split(
        self,
        test_fraction: float = 0.2,
        seed: int = 0,
        stratify: bool = True,
        by_group: bool = False,
    ) -> tuple[Dataset, Dataset]:
        """Split into (train, test), deterministically for a given ``seed``.

        ``stratify`` keeps each class's share in both halves (per class, round(n_c *
        test_fraction) samples go to test). ``by_group`` instead holds out whole groups
        (subjects), so no person appears on both sides — the honest test for wearables.
        """
        if not 0.0 < test_fraction < 1.0:
            raise DataError(f"test_fraction must be in (0, 1), got {test_fraction}")
        n = len(self)
        if n < 2:
            raise DataError(f"data set {self.name!r} has {n} samples; a split needs at least 2")
        rng = np.random.default_rng(seed)
        if by_group:
            if self.groups is None:
                raise DataError(
                    f"data set {self.name!r} has no groups; by_group=True needs per-sample "
                    "subject ids (use by_group=False)"
                )
            g = self.groups.numpy()
            ids = np.unique(g)
            if len(ids) < 2:
                raise DataError(f"data set {self.name!r} has one group; by_group needs >= 2")
            n_test = min(max(1, round(len(ids) * test_fraction)), len(ids) - 1)
            test_ids = rng.permutation(ids)[:n_test]
            mask = np.isin(g, test_ids)
        else:
            mask = np.zeros(n, dtype=bool)
            y = self.y.numpy()
            pools = [np.flatnonzero(y == c) for c in np.unique(y)] if stratify else [np.arange(n)]
            for pool in pools:
                k = round(len(pool) * test_fraction)
                mask[rng.permutation(pool)[:k]] = True
            if not mask.any():
                mask[rng.integers(n)] = True
            if mask.all():
                mask[rng.choice(np.flatnonzero(mask))] = False
        return self.subset(np.flatnonzero(~mask)), self.subset(np.flatnonzero(mask))
