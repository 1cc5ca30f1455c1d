import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from edgetrain.data.dataset import Dataset
from edgetrain.errors import DataError
from edgetrain.transfer import few_shot_split, k_shot_indices


def _labels(counts):
    return np.repeat(np.arange(len(counts)), counts)


def _dataset(counts, n_classes=None):
    y = torch.as_tensor(_labels(counts))
    x = torch.arange(len(y), dtype=torch.float32)[:, None]
    k = n_classes or len(counts)
    return Dataset("toy", x, y, [f"c{i}" for i in range(k)])


def test_exactly_k_per_class_and_seeded():
    y = _labels([30, 12, 50])
    a = k_shot_indices(y, 10, seed=3)
    assert np.bincount(y[a]).tolist() == [10, 10, 10]
    assert np.array_equal(a, k_shot_indices(y, 10, seed=3))
    assert not np.array_equal(a, k_shot_indices(y, 10, seed=4))


def test_class_with_fewer_than_k_is_an_error_naming_it():
    y = _labels([30, 7, 50])
    with pytest.raises(DataError, match=r"class 1: 7.*at most 7"):
        k_shot_indices(y, 10, seed=0)
    with pytest.raises(DataError, match="positive integer"):
        k_shot_indices(y, 0, seed=0)


@settings(max_examples=40, deadline=None)
@given(
    counts=st.lists(st.integers(1, 40), min_size=1, max_size=6),
    k=st.integers(1, 10),
    seed=st.integers(0, 2**31),
)
def test_k_shot_invariants(counts, k, seed):
    y = _labels(counts)
    if min(counts) < k:
        with pytest.raises(DataError):
            k_shot_indices(y, k, seed)
        return
    idx = k_shot_indices(y, k, seed)
    assert len(np.unique(idx)) == len(idx) == k * len(counts)
    assert idx.min() >= 0 and idx.max() < len(y)
    assert (np.bincount(y[idx], minlength=len(counts)) == k).all()


def test_split_disjoint_covering_and_capped_test_is_stratified():
    ds = _dataset([40, 40, 80])
    split = few_shot_split(ds, 5, seed=1)
    tr = split.train.x[:, 0].long().tolist()
    te = split.test.x[:, 0].long().tolist()
    assert not set(tr) & set(te) and len(tr) + len(te) == len(ds)
    capped = few_shot_split(ds, 5, seed=1, test_size=30)
    assert len(capped.test) == 30
    # class shares of the remaining 35/35/75 samples are kept: 7/7/16 (largest remainder)
    assert sorted(torch.bincount(capped.test.y).tolist()) == [7, 7, 16]
    assert torch.equal(capped.train.x, split.train.x)  # the cap never changes the shots


def test_missing_class_is_an_error():
    ds = _dataset([10, 10], n_classes=3)
    with pytest.raises(DataError, match=r"no samples of class\(es\) \['c2'\]"):
        few_shot_split(ds, 2, seed=0)
    with pytest.raises(DataError, match="no samples left"):
        few_shot_split(_dataset([3, 3]), 3, seed=0)
