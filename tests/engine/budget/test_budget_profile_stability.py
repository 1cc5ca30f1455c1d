"""In-step costs with a cost per decision (profile.split_by_price / fit_in_step).

A single in-step recompute factor (measured overhead / summed eq. 6 price) over-priced
MobileNetV2's few costly recomputations and under-priced its many cheap ones.  The
profile now measures recomputation in two groups (costliest half by eq. 6, the rest) and
fits ``a * eq. 6 + b`` per unit; regenerations keep one factor per kind
(profile.regen_kind: leaf forwards, and elementwise ones from held data).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import edgetrain.engine.budget.profile as P
from edgetrain import models
from edgetrain.engine.budget import profile_model
from edgetrain.engine.budget.profile import (
    RC_SCALE_BOUNDS,
    fit_in_step,
    regen_kind,
    split_by_price,
)
from edgetrain.engine.budget.regen import clear_cost_cache
from edgetrain.errors import ConfigError
from tiny_models import vector_task


def test_split_puts_the_costliest_half_first():
    prices = [1.0, 30.0, 2.0, 25.0, 3.0, 1.5]
    hi, lo = split_by_price(prices)
    assert hi == [1, 3]  # 55 of 62.5: the fewest costliest reaching half
    assert sorted(hi + lo) == list(range(len(prices)))
    assert sum(prices[i] for i in hi) >= sum(prices) / 2
    assert min(prices[i] for i in hi) >= max(prices[i] for i in lo)
    assert split_by_price([4.0]) == ([0], [])
    hi, lo = split_by_price([2.0, 2.0])
    assert len(hi) == len(lo) == 1  # two decisions: never one group of both


@settings(max_examples=60, deadline=None)
@given(
    prices=st.lists(st.floats(1e-4, 0.05), min_size=2, max_size=30),
    a=st.floats(0.3, 1.5),
    b=st.floats(0.0, 0.01),
)
def test_fit_recovers_a_cost_per_decision(prices, a, b):
    hi, lo = split_by_price(prices)
    groups = [
        (sum(prices[i] for i in g), len(g), sum(a * prices[i] + b for i in g)) for g in (hi, lo)
    ]
    fa, fb = fit_in_step(groups, bounds=(0.0, 1e9))
    per_hi, per_lo = groups[0][0] / groups[0][1], groups[1][0] / groups[1][1]
    if per_hi > per_lo * (1 + 1e-3):  # the groups' prices per decision differ
        assert fa == pytest.approx(a, rel=1e-5, abs=1e-9)
        assert fb == pytest.approx(b, rel=1e-5, abs=1e-9)
    # whatever the split, the fit reproduces the measured total
    total = sum(g[2] for g in groups)
    assert fa * sum(prices) + fb * len(prices) == pytest.approx(total, rel=1e-6)


def test_one_factor_misranks_what_the_fit_ranks_right():
    """The round-13 diagnosis in numbers: a few costly decisions cost less in the step than
    one factor says, many cheap ones more.  Plan A recomputes the two costly units, plan B
    the eight cheap ones; B is slower in truth, the single factor ranks it first."""
    prices = [0.034, 0.034] + [0.007] * 8
    a, b = 0.27, 0.0034  # the fit of MobileNetV2 b32's recompute groups (round 13)

    def true(ix):
        return sum(a * prices[i] + b for i in ix)

    hi, lo = split_by_price(prices)
    assert hi == [0, 1]
    plan_a, plan_b = [0, 1], list(range(2, 10))
    assert true(plan_a) < true(plan_b)
    single = true(range(10)) / sum(prices)  # the one factor measured with every unit on
    assert single * sum(prices[i] for i in plan_a) > single * sum(prices[i] for i in plan_b)
    fa, fb = fit_in_step([(sum(prices[i] for i in g), len(g), true(g)) for g in (hi, lo)])
    assert sum(fa * prices[i] + fb for i in plan_a) == pytest.approx(true(plan_a))
    assert sum(fa * prices[i] + fb for i in plan_b) == pytest.approx(true(plan_b))


def test_fit_edges():
    # one group, or equal prices per decision: the single factor, no per-decision term
    assert fit_in_step([(0.2, 4, 0.1)]) == pytest.approx((0.5, 0.0))
    assert fit_in_step([(0.2, 4, 0.1), (0.1, 2, 0.05)]) == pytest.approx((0.5, 0.0))
    # the costly group measured cheaper per price than the cheap one allows: a = 0
    a, b = fit_in_step([(0.2, 2, 0.02), (0.1, 8, 0.16)])
    assert a == 0.0 and b == pytest.approx(0.18 / 10)
    # the costly group measured dearer per decision than a pure factor: b = 0
    a, b = fit_in_step([(0.2, 2, 0.3), (0.1, 8, 0.01)])
    assert b == 0.0 and a == pytest.approx(0.31 / 0.3)
    # the implied factor stays within the bounds the single factor had
    lo, hi = RC_SCALE_BOUNDS
    a, b = fit_in_step([(0.2, 2, 5.0), (0.1, 8, 3.0)])
    assert (a * 0.3 + b * 10) / 0.3 == pytest.approx(hi)
    a, b = fit_in_step([(0.2, 2, 0.001), (0.1, 8, 0.0)])
    assert (a * 0.3 + b * 10) / 0.3 == pytest.approx(lo)
    assert fit_in_step([]) == (1.0, 0.0)
    with pytest.raises(ConfigError, match="two groups"):
        fit_in_step([(0.1, 1, 0.1)] * 3)


class _Block(nn.Module):
    def __init__(self, d: int, h: int) -> None:
        super().__init__()
        self.up = nn.Linear(d, h)
        self.act = nn.GELU()
        self.down = nn.Linear(h, d)

    def forward(self, x):
        return torch.tanh(self.down(self.act(self.up(x))))


class _Net(nn.Module):
    """Blocks of very different widths: recompute / regen prices per decision differ."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*[_Block(32, h) for h in (512, 384, 32, 48, 32, 40)])
        self.head = nn.Linear(32, 3)

    def forward(self, x):
        return self.head(self.blocks(x))


def _profile_timed(monkeypatch, model, inputs, loss_fn, extra, before=None):
    """``profile_model`` with its in-step timings replaced: a plan's step takes 1 s plus
    ``extra(decision, seen)`` for each of its decisions, where ``seen`` holds the units
    (by name) and regenerations (by state key) being profiled; ``before(units, regens)``
    runs first (to derive the stand-in's constants from them)."""
    seen: dict = {}
    real = P._in_situ_costs

    def capture(model, inputs, loss_fn, units, regens, masks, steps):
        seen["units"] = {u.name: u for u in units}
        seen["regens"] = {r.state_key: r for r in regens}
        if before is not None:
            before(units, regens)
        return real(model, inputs, loss_fn, units, regens, masks, steps)

    def timed(model, plans, order, inputs, loss_fn):
        return [1.0 + sum(extra(d, seen) for d in plans[k].units) for k in order]

    monkeypatch.setattr(P, "_in_situ_costs", capture)
    monkeypatch.setattr(P, "_time_schedule", timed)
    clear_cost_cache()
    try:
        return profile_model(model, inputs, loss_fn, repeats=1, max_units=8, in_situ_steps=4)
    finally:
        clear_cost_cache()


def _regen_of(d, seen):
    return seen["regens"]["regen:" + ">".join(d.chain or [d.name])]


def test_profile_fits_recompute_from_two_groups(monkeypatch):
    """End to end through profile_model: in-step times that are exactly affine in eq. 6
    (a stand-in for the timed steps) come back as every unit's recompute cost, which one
    factor cannot reproduce; the regenerations' measured overhead is spread over them by
    isolated price (one factor: this model's regenerations are all leaf forwards)."""
    torch.manual_seed(0)
    model = _Net()
    x, _, loss_fn = vector_task(64, 32, 3)
    truth = {"rc": (0.6, 0.0), "regen": (0.3, 0.0)}

    def derive(units, regens):
        rcs = [u for u in units if u.recomputable()]
        rgs = P._regen_set(regens)
        # a cost per decision of half the mean isolated price: f = a + 0.5
        truth["rc"] = (0.6, 0.5 * sum(u.rc_eq6() for u in rcs) / len(rcs))
        truth["regen"] = (0.3, 0.5 * sum(r.fwd_s for r in rgs) / len(rgs))

    def extra(d, seen) -> float:
        (ra, rb), (ga, gb) = truth["rc"], truth["regen"]
        if d.decision == "recompute":
            return ra * seen["units"][d.name].rc_eq6() + rb
        if d.decision == "regen":
            g = _regen_of(d, seen)
            return (ga * g.fwd_s + gb) * max(g.saves, 1)
        return 0.0

    prof = _profile_timed(monkeypatch, model, (x,), loss_fn, extra, derive)
    rcs = [u for u in prof.units if u.recomputable()]
    assert len(rcs) >= 4 and len({round(u.rc_eq6(), 9) for u in rcs}) > 1
    (ra, rb), (ga, gb) = truth["rc"], truth["regen"]
    for u in rcs:
        assert u.rc_compute() == pytest.approx(ra * u.rc_eq6() + rb, rel=1e-6)
    assert len(prof.regens) >= 2
    rgs = P._regen_set(prof.regens)
    price = sum(r.fwd_s * max(r.saves, 1) for r in rgs)
    factor = sum((ga * r.fwd_s + gb) * max(r.saves, 1) for r in rgs) / price
    for r in prof.regens:
        assert r.regen_cost() == pytest.approx(factor * r.fwd_s * max(r.saves, 1), rel=1e-6)
    # one factor per kind (the earlier estimate) would miss the per-unit costs
    single = sum(ra * u.rc_eq6() + rb for u in rcs) / sum(u.rc_eq6() for u in rcs)
    worst = max(abs(single * u.rc_eq6() - (ra * u.rc_eq6() + rb)) for u in rcs)
    assert worst > 0.05 * rb


def test_regen_kind_names_how_the_executor_regenerates():
    bn, relu6, conv = nn.BatchNorm2d(4), nn.ReLU6(), nn.Conv2d(4, 4, 1)
    assert regen_kind([bn]) == "elementwise"  # from the batch statistics
    assert regen_kind([bn, relu6]) == "elementwise"
    assert regen_kind([bn, nn.ReLU()]) == "elementwise"
    assert regen_kind([relu6], inplace=True) == "elementwise"  # a clamp in place
    assert regen_kind([relu6]) == "forward"  # a fresh clamp: the leaf's forward
    assert regen_kind([conv]) == "forward"
    assert regen_kind([nn.GELU()]) == "forward"
    assert regen_kind([bn, nn.GELU()]) == "forward"  # the tail is not a clamp
    assert regen_kind([bn.eval()]) == "forward"  # eval mode: running statistics, no fma


def test_each_kind_of_regeneration_gets_its_own_factor(monkeypatch):
    """Through profile_model on a tiny MobileNetV2 (convolution, BatchNorm and ReLU6
    regenerations): in-step times in which elementwise regenerations cost 0.3 of their
    isolated price and leaf forwards 0.9 come back as each regeneration's cost; the
    single factor measured before would price both kinds alike."""
    torch.manual_seed(0)
    model = models.build("mobilenetv2", seed=0, width_mult=0.35, input_size=32)
    x = torch.randn(4, 3, 32, 32)
    y = torch.randint(0, 10, (4,))

    def loss_fn(out):
        return nn.functional.cross_entropy(out, y)

    truth = {"elementwise": 0.3, "forward": 0.9}

    def extra(d, seen) -> float:
        if d.decision != "regen":
            return 0.0
        g = _regen_of(d, seen)
        return truth[g.kind] * g.fwd_s * max(g.saves, 1)

    prof = _profile_timed(monkeypatch, model, (x,), loss_fn, extra)
    kinds = {r.kind for r in prof.regens}
    assert kinds == {"elementwise", "forward"}
    assert any(r.chain for r in prof.regens if r.kind == "elementwise")  # BatchNorm -> ReLU6
    for r in prof.regens:
        assert r.scale == pytest.approx(truth[r.kind], rel=1e-6)
        assert r.regen_cost() == pytest.approx(truth[r.kind] * r.fwd_s * max(r.saves, 1))
