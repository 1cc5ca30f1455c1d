"""Local-search refinement of hybrid's greedy plan (:mod:`edgetrain.engine.budget.refine`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from edgetrain.engine.budget import minimum_budget, plan, plan_candidates, profile_model
from edgetrain.engine.budget.alloc import plan_states
from edgetrain.engine.budget.plan import ExecutionPlan
from edgetrain.engine.budget.planner import (
    _candidates,
    _clash,
    _Ctx,
    _overhead,
    _simulator,
    simulate,
)
from edgetrain.engine.budget.refine import _Space, refine
from edgetrain.engine.budget.runner import codecs_for
from edgetrain.engine.budget.swap import IoContentionModel

sys.path.insert(0, str(Path(__file__).parent))
from test_budget_scope import synthetic_profile  # noqa: E402

from tiny_models import TinyCCT, batch  # noqa: E402

_PROF: dict = {}


def tiny_profile():
    """TinyCCT b4 (regen and mask candidates), with the allocation timeline; once."""
    if "p" not in _PROF:
        model = TinyCCT(seed=0)
        x, y = batch(4)
        _PROF["p"] = profile_model(
            model, (x,), lambda out: nn.functional.cross_entropy(out, y),
            codecs=codecs_for("hybrid"), alloc_timeline=True, in_situ_steps=0, repeats=1,
        )  # fmt: skip
    return _PROF["p"]


def _lowest_greedy(prof, budget, scope):
    found = _candidates(prof, budget, "hybrid", IoContentionModel(), scope, refine=False)
    over, p, _ = min(found, key=lambda f: f[0])
    return over, plan_states(prof, p)


def _exclusions_hold(prof, states):
    space = _Space(prof, "hybrid", _Ctx(prof, IoContentionModel()))
    on = [f for f in space.fine if states.get(f.state_key, ("keep",))[0] != "keep"]
    for i, f in enumerate(on):
        assert not any(_clash(f, g) for g in on[i + 1 :]), f.state_key
        owner = space.owner.get(f.state_key)
        assert owner is None or states.get(owner, ("keep",))[0] != "recompute", f.state_key


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frac=st.floats(0.0, 1.0), scope=st.sampled_from(["saved", "all"]))
def test_refined_plan_fits_and_is_never_predicted_slower(frac, scope):
    prof = tiny_profile()
    sim = _simulator(scope)
    unplanned = int(sim(prof, {}).max())
    least = minimum_budget(prof, "hybrid", scope=scope)
    budget = int(least + frac * (unplanned - least))
    over, start = _lowest_greedy(prof, budget, scope)
    ctx = _Ctx(prof, IoContentionModel())
    got, stats = refine(prof, budget, start, ctx, sim)
    assert int(sim(prof, got).max()) <= budget
    assert stats["after"] == pytest.approx(_overhead(prof, got, ctx))
    assert stats["after"] <= over * (1 + 1e-12)
    _exclusions_hold(prof, got)
    # plan(): the refined candidate enters the choice; never predicted above greedy's
    greedy = plan(prof, budget, "hybrid", scope=scope, refine=False)
    p = plan(prof, budget, "hybrid", scope=scope, refine=True)
    assert p.predicted_peak_bytes <= budget
    assert int(sim(prof, plan_states(prof, p)).max()) == p.predicted_peak_bytes
    assert p.predicted_overhead_s <= greedy.predicted_overhead_s * (1 + 1e-9)
    back = ExecutionPlan.from_json(json.loads(json.dumps(p.to_json())))
    assert back.to_json() == p.to_json()


def test_refine_drops_decisions_that_are_not_needed():
    """Every unit recomputed under the unplanned peak: all of it can go back to keep."""
    prof = synthetic_profile(with_alloc=True)
    budget = int(simulate(prof, {}).max())
    start = {u.name: ("recompute", None) for u in prof.units}
    ctx = _Ctx(prof, IoContentionModel())
    got, stats = refine(prof, budget, start, ctx, simulate)
    assert all(s[0] == "keep" for s in got.values())
    assert stats["after"] == 0.0 and stats["before"] > 0.0 and stats["drops"] == len(start)


def test_refine_exchanges_an_expensive_decision_for_cheaper_ones():
    """At 90% of the synthetic profile's unplanned peak the walks that recompute a unit
    (cost 10.5 ms) are refined to a plan of fine decisions only (0.8 ms): an exchange,
    since no single decision can be dropped without breaking the budget."""
    prof = synthetic_profile(with_alloc=True)
    budget = int(0.9 * simulate(prof, {}).max())
    found = _candidates(prof, budget, "hybrid", IoContentionModel(), "saved", refine=False)
    worst = max(found, key=lambda f: f[0])
    start = plan_states(prof, worst[1])
    ctx = _Ctx(prof, IoContentionModel())
    got, stats = refine(prof, budget, start, ctx, simulate)
    assert stats["exchanges"] >= 1
    assert stats["after"] < 0.5 * worst[0]
    assert int(simulate(prof, got).max()) <= budget


def test_refine_rejects_a_plan_that_does_not_fit():
    prof = synthetic_profile()
    with pytest.raises(ValueError, match="fits the budget"):
        refine(prof, 1, {}, _Ctx(prof, IoContentionModel()), simulate)


def test_the_default_refines_under_both_scopes():
    """``refine=None`` (default): the refined candidates are among the choices under scope
    "saved" as under "all" (round 18: the refined plan ran 0.973 of the greedy one at
    MobileNetV2 b32 saved 0.25, and was the greedy plan itself at 0.5), and a refined
    choice is never predicted above the greedy one."""
    prof = synthetic_profile(with_alloc=True)
    moved = 0
    for frac in (0.9, 0.7, 0.5, 0.3):
        budget = int(frac * simulate(prof, {}).max())
        default = plan(prof, budget, "hybrid")
        assert json.dumps(default.to_json()) == json.dumps(
            plan(prof, budget, "hybrid", refine=True).to_json()
        )
        greedy = plan(prof, budget, "hybrid", refine=False)
        assert default.predicted_overhead_s <= greedy.predicted_overhead_s + 1e-12
        moved += default.predicted_overhead_s < greedy.predicted_overhead_s
    assert moved >= 1  # the search lowered at least one of the four
    b_all = int(0.3 * _simulator("all")(prof, {}).max())
    refined = plan_candidates(prof, b_all, "hybrid", scope="all")
    greedy = plan_candidates(prof, b_all, "hybrid", scope="all", refine=False)
    assert min(p.predicted_overhead_s for p in refined) < min(
        p.predicted_overhead_s for p in greedy
    )


def test_plan_service_plans_greedy_unless_asked_to_refine():
    """FedHybrid's plan service keeps the greedy walks by default (the local search made
    plan generation about 10x slower); ``PlanService(refine=True)`` turns the search on.
    Each equals ``plan()``'s with the same ``refine`` on the same profile."""
    sys.path.insert(0, str(Path(__file__).parents[2]))
    from edgetrain.federated.plans import PlanService
    from fed_small import tiny_plan_service

    svc = tiny_plan_service(2)
    prof = svc.profile("hybrid")
    greedy = svc.make_plan("hybrid", 0.2)
    unplanned = int(simulate(prof, {}).max())
    want = plan(prof, max(1, int(0.2 * unplanned)), "hybrid", refine=False)
    assert greedy.plan_json == want.to_json()
    on = PlanService(svc.model, svc.inputs, svc.targets, "mobilenetv2", repeats=1, refine=True)
    on._profiles["hybrid"] = prof
    refined = on.make_plan("hybrid", 0.2)
    assert (
        refined.plan_json
        == plan(prof, max(1, int(0.2 * unplanned)), "hybrid", refine=True).to_json()
    )
    # the search is never predicted above the walk it starts from (strictly below in
    # most profiles; which plans the walks make depends on the profile's timings)
    assert refined.feasible and refined.overhead_factor <= greedy.overhead_factor


def test_a_capped_refinement_still_fits():
    prof = synthetic_profile(with_alloc=True)
    budget = int(0.9 * simulate(prof, {}).max())
    start = {u.name: ("recompute", None) for u in prof.units}
    got, stats = refine(prof, budget, start, _Ctx(prof, IoContentionModel()), simulate, max_sims=3)
    assert stats["capped"] and stats["sims"] == 3
    assert int(simulate(prof, got).max()) <= budget and stats["after"] <= stats["before"]


def test_exact_refinement_adds_no_compression():
    """From every unit recomputed at 50% of the synthetic profile's peak, the free search
    compresses units (cheaper there) and the exact one does not."""
    prof = synthetic_profile(with_alloc=True)
    budget = int(0.5 * simulate(prof, {}).max())
    start = {u.name: ("recompute", None) for u in prof.units}
    ctx = _Ctx(prof, IoContentionModel())
    free, _ = refine(prof, budget, start, ctx, simulate)
    exact, stats = refine(prof, budget, start, ctx, simulate, exact=True)
    assert any(s[0] == "compress" for s in free.values())
    assert not any(s[0] == "compress" for s in exact.values())
    assert int(simulate(prof, exact).max()) <= budget and stats["after"] <= stats["before"]
