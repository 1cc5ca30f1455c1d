"""Paired per-round ratio summary: interval, coverage, verdict, validation."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgetrain.engine.budget.stats import paired_summary
from edgetrain.errors import ConfigError

ratios = st.lists(st.floats(0.5, 2.0, allow_nan=False), min_size=1, max_size=15)


@settings(max_examples=80, deadline=None)
@given(ratios)
def test_interval_holds_median_within_range(r):
    s = paired_summary(r)
    assert min(r) <= s.lo <= s.median <= s.hi <= max(r)
    assert (s.min, s.max, s.rounds) == (min(r), max(r), len(r))
    assert 0.0 <= s.coverage < 1.0
    if s.verdict == "below":
        assert s.hi < 1.0 and s.coverage >= 0.9
    elif s.verdict == "above":
        assert s.lo > 1.0 and s.coverage >= 0.9
    else:
        assert s.verdict == "level"
    # order-statistic interval: its ends are samples
    assert s.lo in r and s.hi in r


def test_coverage_is_the_sign_test_value():
    # n = 7: [x_(2), x_(6)] covers 1 - 2 * (1 + 7) / 128 = 0.875 < 0.9, so [min, max]
    s = paired_summary([1.0 + i / 100 for i in range(7)])
    assert (s.lo, s.hi) == (1.0, 1.06)
    assert math.isclose(s.coverage, 1 - 2 / 128)
    # n = 9: [x_(2), x_(8)], coverage 1 - 2 * 10 / 512
    s = paired_summary([1.0 + i / 100 for i in range(9)])
    assert (s.lo, s.hi) == (1.01, 1.07)
    assert math.isclose(s.coverage, 1 - 20 / 512)


def test_verdicts():
    assert paired_summary([0.90, 0.93, 0.95, 0.92, 0.91, 0.94, 0.96]).verdict == "below"
    assert paired_summary([1.06, 1.08, 1.05, 1.07, 1.09, 1.04, 1.10]).verdict == "above"
    # one round on the other side of 1 with 7 rounds: [min, max] is the 90 % interval
    assert paired_summary([1.06, 1.08, 0.99, 1.07, 1.09, 1.04, 1.10]).verdict == "level"
    # rounds on both sides of 1: within noise
    s = paired_summary([0.95, 1.04, 1.01, 0.97, 1.06, 0.99, 1.02])
    assert s.verdict == "level" and s.lo < 1.0 < s.hi
    # 3 rounds all below 1 happen by chance 1 time in 8: no verdict
    few = paired_summary([0.8, 0.85, 0.9])
    assert few.verdict == "level" and few.coverage == 0.75
    assert paired_summary([0.8]).to_json()["rounds"] == 1


@pytest.mark.parametrize(
    "bad, kw",
    [([], {}), ([1.0, float("nan")], {}), ([1.0, -1.0], {}), ([1.0], {"level": 1.0})],
)
def test_rejects(bad, kw):
    with pytest.raises(ConfigError):
        paired_summary(bad, **kw)


def test_step_order_is_a_seeded_permutation_with_varied_predecessors():
    from edgetrain.engine.budget.runner import step_order

    names = ["none", "aa", "recompute", "hybrid"]
    assert step_order(names, 0) == names  # the warm-up keeps the given order
    orders = [step_order(names, r, 3) for r in range(1, 13)]
    assert all(sorted(o) == sorted(names) for o in orders)
    assert orders == [step_order(names, r, 3) for r in range(1, 13)]  # seeded
    assert orders != [step_order(names, r, 4) for r in range(1, 13)]
    # unlike a rotation, an entry does not always follow the same other entry
    before = {o[i - 1] for o in orders for i in range(1, 4) if o[i] == "hybrid"}
    assert len(before) >= 2
    # repeats come in mirrored pairs: every entry's mean position is the middle
    for a, b in zip(orders[::2], orders[1::2], strict=True):
        assert b == a[::-1]
        assert all(a.index(n) + b.index(n) == len(names) - 1 for n in names)
    assert step_order(["one"], 5) == ["one"]


def test_sign_test_is_two_sided_with_ties_excluded():
    from edgetrain.engine.budget.stats import sign_test_p

    assert sign_test_p(7, 0) == pytest.approx(2 / 128)  # 7 of 7 the same way
    assert sign_test_p(0, 7) == pytest.approx(2 / 128)
    assert sign_test_p(9, 1) == pytest.approx(2 * 11 / 1024)
    assert sign_test_p(5, 5) == 1.0 and sign_test_p(0, 0) == 1.0
