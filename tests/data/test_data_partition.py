"""Partitioners (IID, by subject, Dirichlet) and the Jensen-Shannon skew measure."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from edgetrain.data import (
    js_divergence,
    partition_by_group,
    partition_dirichlet,
    partition_dirichlet_held,
    partition_iid,
)
from edgetrain.errors import DataError


def _assert_exact_cover(parts: list[np.ndarray], n: int) -> None:
    joined = np.concatenate(parts)
    assert len(joined) == n
    assert np.array_equal(np.sort(joined), np.arange(n))
    for p in parts:
        assert p.dtype == np.int64 and np.all(np.diff(p) > 0)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 300), n_parts=st.integers(1, 20), seed=st.integers(0, 2**31))
def test_iid_parts_are_disjoint_cover_and_balanced(n, n_parts, seed):
    if n_parts > n:
        with pytest.raises(DataError, match="exceeds"):
            partition_iid(n, n_parts, seed)
        return
    parts = partition_iid(n, n_parts, seed)
    _assert_exact_cover(parts, n)
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1
    assert all(
        np.array_equal(a, b) for a, b in zip(parts, partition_iid(n, n_parts, seed), strict=True)
    )


def test_iid_accepts_labels_and_tensors():
    parts = partition_iid(torch.arange(10) % 2, 3, seed=1)
    _assert_exact_cover(parts, 10)


@settings(max_examples=40, deadline=None)
@given(
    labels=st.lists(st.integers(0, 5), min_size=20, max_size=300),
    n_parts=st.integers(1, 10),
    alpha=st.sampled_from([0.01, 0.3, 1.0, 10.0]),
    seed=st.integers(0, 1000),
)
def test_dirichlet_parts_are_disjoint_cover_and_nonempty(labels, n_parts, alpha, seed):
    y = np.array(labels)
    parts = partition_dirichlet(y, n_parts, alpha, seed=seed, min_size=1)
    assert len(parts) == n_parts
    _assert_exact_cover(parts, len(y))
    assert min(len(p) for p in parts) >= 1
    again = partition_dirichlet(y, n_parts, alpha, seed=seed, min_size=1)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_js_divergence_grows_as_alpha_falls(seed):
    y = np.arange(2000) % 10
    js = [
        js_divergence(partition_dirichlet(y, 10, alpha, seed=seed), y)
        for alpha in (1000.0, 1.0, 0.05)
    ]
    assert js[0] < 0.02 < js[1] < js[2] <= 1.0
    assert js[2] > 0.4


def test_js_divergence_known_values():
    y = np.array([0, 0, 1, 1])
    assert js_divergence([np.array([0, 2]), np.array([1, 3])], y) == pytest.approx(0.0)
    # each part holds one class: JS([1, 0], [1/2, 1/2]) with M = [3/4, 1/4], by hand:
    p, q = np.array([1.0, 0.0]), np.array([0.5, 0.5])
    m = (p + q) / 2
    expected = 0.5 * np.log2(1 / m[0]) + 0.5 * (
        0.5 * np.log2(0.5 / m[0]) + 0.5 * np.log2(0.5 / m[1])
    )
    assert js_divergence([np.array([0, 1]), np.array([2, 3])], y) == pytest.approx(expected)
    assert expected == pytest.approx(0.31128, abs=1e-5)
    with pytest.raises(DataError, match="outside"):
        js_divergence([np.array([7])], y)
    with pytest.raises(DataError, match="every part is empty"):
        js_divergence([np.array([], dtype=np.int64)], y)


def test_partition_by_group_one_per_subject_and_packed():
    groups = np.array([7, 7, 3, 3, 3, 9, 7, 9, 1])
    parts = partition_by_group(groups)
    assert [groups[p][0] for p in parts] == [1, 3, 7, 9]
    assert all(len(set(groups[p])) == 1 for p in parts)
    _assert_exact_cover(parts, len(groups))
    packed = partition_by_group(torch.tensor(groups), n_parts=2)
    _assert_exact_cover(packed, len(groups))
    seen = [set(groups[p]) for p in packed]
    assert seen[0].isdisjoint(seen[1])
    assert sorted(len(p) for p in packed) == [4, 5]
    with pytest.raises(DataError, match="distinct groups"):
        partition_by_group(groups, n_parts=5)


def test_dirichlet_rejects_bad_arguments():
    y = np.arange(10) % 2
    with pytest.raises(DataError, match="alpha must be > 0"):
        partition_dirichlet(y, 2, 0.0)
    with pytest.raises(DataError, match="min_size"):
        partition_dirichlet(y, 5, 1.0, min_size=3)


def test_dirichlet_repairs_a_draw_that_leaves_parts_short():
    y = np.zeros(30, dtype=np.int64)  # one class: Dir(0.01) puts almost all in one part
    parts = partition_dirichlet(y, 6, 0.01, seed=0, min_size=3, max_tries=2)
    _assert_exact_cover(parts, 30)
    assert min(len(p) for p in parts) >= 3
    with pytest.raises(DataError, match="n_parts"):
        partition_dirichlet(y, 0, 1.0)


@settings(max_examples=40, deadline=None)
@given(
    labels=st.lists(st.integers(0, 5), min_size=30, max_size=300),
    n_parts=st.integers(2, 10),
    alpha=st.sampled_from([0.01, 0.3, 1.0, 10.0]),
    seed=st.integers(0, 1000),
    data=st.data(),
)
def test_held_classes_live_only_on_their_holders(labels, n_parts, alpha, seed, data):
    y = np.array(labels)
    present = sorted(set(labels))
    if len(present) < 2:
        return
    held = data.draw(st.lists(st.sampled_from(present), min_size=1, max_size=len(present) - 1))
    holders = data.draw(st.lists(st.integers(0, n_parts - 1), min_size=1, max_size=n_parts))
    if int((~np.isin(y, held)).sum()) < n_parts:
        with pytest.raises(DataError, match="hold fewer classes"):
            partition_dirichlet_held(y, n_parts, alpha, held, holders, seed=seed)
        return
    if len(set(holders)) > int(np.isin(y, held).sum()):
        with pytest.raises(DataError, match="holders"):
            partition_dirichlet_held(y, n_parts, alpha, held, holders, seed=seed)
        return
    parts = partition_dirichlet_held(y, n_parts, alpha, held, holders, seed=seed)
    _assert_exact_cover(parts, len(y))
    assert min(len(p) for p in parts) >= 1
    for j, p in enumerate(parts):
        if j not in holders:
            assert not np.isin(y[p], held).any()
    again = partition_dirichlet_held(y, n_parts, alpha, held, holders, seed=seed)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))


def test_held_classes_split_the_rest_like_dirichlet_and_reject_bad_arguments():
    y = np.arange(200) % 4
    # nothing held: exactly partition_dirichlet
    same = partition_dirichlet_held(y, 5, 0.5, [], [0], seed=7)
    ref = partition_dirichlet(y, 5, 0.5, seed=7)
    assert all(np.array_equal(a, b) for a, b in zip(same, ref, strict=True))
    parts = partition_dirichlet_held(y, 5, 0.5, [3], [1, 4], seed=7)
    on = {j: int(np.isin(y[p], [3]).sum()) for j, p in enumerate(parts)}
    assert on[0] == on[2] == on[3] == 0 and on[1] + on[4] == 50
    with pytest.raises(DataError, match="no samples"):
        partition_dirichlet_held(y, 5, 0.5, [9], [1], seed=7)
    with pytest.raises(DataError, match="every class"):
        partition_dirichlet_held(y, 5, 0.5, [0, 1, 2, 3], [1], seed=7)
    with pytest.raises(DataError, match="part indices in 0..4"):
        partition_dirichlet_held(y, 5, 0.5, [3], [5], seed=7)
    with pytest.raises(DataError, match="part indices"):
        partition_dirichlet_held(y, 5, 0.5, [3], [], seed=7)
