"""Dataset container: validation, subset, deterministic stratified / by-group splits."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from edgetrain.data import Dataset, synthetic_sensor
from edgetrain.errors import DataError


def _ds(n: int = 40, k: int = 4, subjects: int = 5) -> Dataset:
    return Dataset(
        name="toy",
        x=torch.arange(n * 2 * 3, dtype=torch.float32).reshape(n, 2, 3),
        y=torch.arange(n) % k,
        classes=[f"c{i}" for i in range(k)],
        groups=torch.arange(n) % subjects,
        meta={"kind": "sensor"},
    )


def test_properties_and_subset_keep_rows_aligned():
    ds = _ds()
    assert len(ds) == 40 and ds.num_classes == 4 and ds.input_shape == (2, 3)
    sub = ds.subset([5, 1, 7])
    assert sub.y.tolist() == [1, 1, 3]
    assert sub.groups.tolist() == [0, 1, 2]
    assert torch.equal(sub.x[0], ds.x[5])
    assert sub.classes == ds.classes and sub.meta == ds.meta and sub.meta is not ds.meta
    mask = ds.y == 2
    assert ds.subset(mask).y.unique().tolist() == [2]
    assert len(ds.subset(np.array([], dtype=np.int64))) == 0


def test_invalid_construction_and_indices_raise():
    with pytest.raises(DataError, match="y has shape"):
        Dataset("bad", torch.zeros(3, 1), torch.zeros(2, dtype=torch.int64), ["a"])
    with pytest.raises(DataError, match="labels must lie in 0..1"):
        Dataset("bad", torch.zeros(2, 1), torch.tensor([0, 2]), ["a", "b"])
    with pytest.raises(DataError, match="out of range"):
        _ds().subset([40])
    with pytest.raises(DataError, match="boolean mask"):
        _ds().subset(torch.ones(3, dtype=torch.bool))


def test_stratified_split_keeps_class_shares_and_is_deterministic():
    ds = _ds(n=100, k=4)
    tr, te = ds.train_test_split(test_fraction=0.2, seed=3)
    assert len(tr) + len(te) == 100 and len(te) == 20
    assert te.y.bincount().tolist() == [5, 5, 5, 5]
    tr2, te2 = ds.train_test_split(test_fraction=0.2, seed=3)
    assert torch.equal(te.x, te2.x)
    _, te3 = ds.train_test_split(test_fraction=0.2, seed=4)
    assert not torch.equal(te.x, te3.x)


def test_by_group_split_holds_out_whole_subjects():
    ds = synthetic_sensor(n=200, channels=2, length=16, classes=3, seed=1, subjects=10)
    tr, te = ds.train_test_split(test_fraction=0.3, seed=0, by_group=True)
    assert set(tr.groups.tolist()).isdisjoint(te.groups.tolist())
    assert len(set(te.groups.tolist())) == 3
    with pytest.raises(DataError, match="no groups"):
        Dataset("g", torch.zeros(4, 1), torch.tensor([0, 1, 0, 1]), ["a", "b"]).train_test_split(
            by_group=True
        )
    with pytest.raises(DataError, match="test_fraction"):
        ds.train_test_split(test_fraction=1.0)


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(2, 60),
    frac=st.floats(0.05, 0.95),
    seed=st.integers(0, 10_000),
    stratify=st.booleans(),
)
def test_split_partitions_every_sample_once(n, frac, seed, stratify):
    ds = _ds(n=n, k=min(3, n))
    tr, te = ds.train_test_split(test_fraction=frac, seed=seed, stratify=stratify)
    assert len(tr) > 0 and len(te) > 0
    rows = sorted(tr.x[:, 0, 0].tolist() + te.x[:, 0, 0].tolist())
    assert rows == ds.x[:, 0, 0].tolist()
