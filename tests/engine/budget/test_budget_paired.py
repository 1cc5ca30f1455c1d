"""Paired in-step overheads (profile.paired_schedule / paired_extra) on synthetic timings."""

from __future__ import annotations

import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgetrain.engine.budget.profile import paired_extra, paired_schedule
from edgetrain.errors import ConfigError

KINDS = ["masks", "recompute", "regen"]


def test_schedule_sandwiches_and_mirrors():
    order = paired_schedule(KINDS, 2)
    assert order == [
        "none", "masks", "none", "recompute", "none", "regen", "none",
        "regen", "none", "recompute", "none", "masks", "none",
    ]  # fmt: skip
    assert len(paired_schedule(KINDS, 3)) == 1 + 2 * 3 * 3
    # over two rounds every kind has the same mean position
    pos = {k: statistics.mean(i for i, n in enumerate(order) if n == k) for k in KINDS}
    assert len(set(pos.values())) == 1


def _times(order, extra, base, drift):
    return [base + drift * i + extra.get(k, 0.0) for i, k in enumerate(order)]


def test_linear_drift_cancels():
    order = paired_schedule(KINDS, 3)
    extra = {"masks": 0.05, "recompute": 0.10, "regen": 0.02}
    times = _times(order, extra, base=1.8, drift=0.01)  # load rising 10 ms per step
    got = paired_extra(order, times)
    assert got == pytest.approx(extra, abs=1e-12)


def test_a_slow_stretch_lands_on_both_sides():
    order = paired_schedule(["recompute"], 5)
    times = _times(order, {"recompute": 0.1}, base=1.8, drift=0.0)
    for i in range(2, 7):  # the machine was busy for five steps in a row
        times[i] += 0.5
    assert paired_extra(order, times)["recompute"] == pytest.approx(0.1)


@settings(max_examples=40, deadline=None)
@given(
    rounds=st.integers(1, 4),
    base=st.floats(0.1, 5.0),
    drift=st.floats(-0.05, 0.05),
    over=st.lists(st.floats(-0.5, 0.5), min_size=3, max_size=3),
)
def test_paired_extra_recovers_any_constant_overhead_under_drift(rounds, base, drift, over):
    order = paired_schedule(KINDS, rounds)
    extra = dict(zip(KINDS, over, strict=True))
    got = paired_extra(order, _times(order, extra, base, drift))
    assert got == pytest.approx(extra, abs=1e-9)


def test_bad_input_is_named():
    with pytest.raises(ConfigError, match="rounds"):
        paired_schedule(KINDS, 0)
    with pytest.raises(ConfigError, match="reference"):
        paired_schedule(["none"], 1)
    with pytest.raises(ConfigError, match="times"):
        paired_extra(["none", "masks", "none"], [1.0, 2.0])
    with pytest.raises(ConfigError, match="between two"):
        paired_extra(["none", "masks", "masks", "none"], [1.0, 2.0, 2.0, 1.0])
