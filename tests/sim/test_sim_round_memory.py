"""A client's budget along a trace: eq. 10, page reclaim through the round, regeneration."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgetrain.devices import PAGE_BYTES, generate_fleet
from edgetrain.sim.clock import PRESSURE_SLOWDOWN_CAL, pressure_factor
from edgetrain.sim.memory import MemoryModel
from edgetrain.sim.round_memory import (
    TRACE_STEP_S,
    BudgetTrace,
    ClientMemoryState,
    budget_trace,
    predict,
    train_through,
)

GB = 1e9


def _trace(budget, start=1, weight=None):
    b = np.asarray(budget, dtype=float)
    w = np.ones_like(b) if weight is None else np.asarray(weight, dtype=float)
    return BudgetTrace(b, w, start)


def test_predict_is_eq10_weighted_window():
    tr = _trace([1.0, 2.0, 4.0, 8.0], start=4, weight=[1.0, 1.0, 3.0, 1.0])
    # window of 2 samples before step 4: (3*4 + 1*8) / 4
    assert predict(tr, 4, 2 * TRACE_STEP_S) == pytest.approx(5.0)
    assert predict(tr, 2, 10.0) == pytest.approx(1.5)


def test_train_through_fits_then_pays_pressure_and_counts_pages():
    fit = train_through(_trace([5 * GB] * 20), base_s=4.0, demand=3 * GB, overhead=1.5)
    assert fit.elapsed_s == pytest.approx(6.0) and fit.work_s == pytest.approx(6.0)
    assert fit.pages == 0 and not fit.regenerated
    # budget 2 GB for a 3 GB demand: overflow r = 0.5 -> factor 1 + 5.1 * 0.5
    press = pressure_factor(3 * GB, 2 * GB)
    assert press == pytest.approx(1 + (PRESSURE_SLOWDOWN_CAL - 1) * 0.5)
    over = train_through(_trace([2 * GB] * 40), base_s=2.0, demand=3 * GB)
    assert over.elapsed_s == pytest.approx(2.0 * press)
    assert over.work_s == pytest.approx(2.0)
    steps = math.ceil(2.0 * press / TRACE_STEP_S)
    assert over.pages == steps * math.ceil(1 * GB / PAGE_BYTES)


def test_regeneration_fires_once_and_lowers_the_demand():
    calls = []

    def regen(i):
        calls.append(i)
        return 1.5 * GB, 1.2

    # the budget drops from 5 GB to 2 GB at step 3 (of the round starting at step 1)
    tr = _trace([5 * GB] * 3 + [2 * GB] * 40)
    rm = train_through(tr, base_s=10.0, demand=3 * GB, regen=regen, fault_limit=0)
    assert rm.regenerated and len(calls) == 1 and rm.demand_end == 1.5 * GB
    # without the rule the client stays under pressure for the rest of the round
    stay = train_through(tr, base_s=10.0, demand=3 * GB)
    assert stay.elapsed_s > rm.elapsed_s and stay.pages > rm.pages


@settings(max_examples=30, deadline=None)
@given(
    budgets=st.lists(st.floats(0.2, 8.0), min_size=2, max_size=30),
    demand=st.floats(0.1, 8.0),
    base=st.floats(0.1, 20.0),
    ovh=st.floats(1.0, 3.0),
)
def test_elapsed_between_work_and_full_pressure(budgets, demand, base, ovh):
    rm = train_through(_trace([b * GB for b in budgets]), base, demand * GB, ovh)
    assert rm.work_s == pytest.approx(base * ovh)
    assert rm.work_s - 1e-9 <= rm.elapsed_s <= rm.work_s * PRESSURE_SLOWDOWN_CAL + 1e-6
    assert (rm.pages == 0) == (rm.elapsed_s <= rm.work_s * (1 + 1e-9))


def test_budget_trace_is_seeded_and_bounded_by_physical_memory():
    mm = MemoryModel()
    p = generate_fleet(1, seed=4)[0]
    ub = mm.user_budget(p, np.random.default_rng(0))
    a = budget_trace(mm, p, ub, seed=7, warmup_s=5.0, horizon_s=60.0)
    b = budget_trace(mm, p, ub, seed=7, warmup_s=5.0, horizon_s=60.0)
    c = budget_trace(mm, p, ub, seed=8, warmup_s=5.0, horizon_s=60.0)
    assert np.array_equal(a.budget, b.budget) and not np.array_equal(a.budget, c.budget)
    assert a.start == 5 and len(a.budget) == 65
    assert (a.budget >= 0).all() and (a.budget <= mm.hard_limit(p)).all()


def test_client_memory_state_round_trips():
    s = ClientMemoryState(3.5, [0, 12, 40], 2, 1, 2.5e9)
    assert ClientMemoryState.from_json(s.to_json()) == s
    assert ClientMemoryState.from_json({}) == ClientMemoryState()
