"""Table 4 baselines as one fleet-wide configuration: Melon, Capuchin, GACT plan rules."""

import json

import numpy as np
import pytest

from edgetrain.engine.budget import IoContentionModel, minimum_budget, plan, simulate
from edgetrain.errors import ConfigError
from edgetrain.federated import FederatedServer, build_environment
from edgetrain.federated import baselines as bl
from edgetrain.federated.baselines import (
    capuchin_plan,
    gact_plan,
    measure_micro_batches,
    melon_plan,
    uniform_fraction,
    uniform_plan,
)
from edgetrain.federated.plans import ON_DEVICE_PLAN_SLOWDOWN
from edgetrain.federated.server import make_plan_service
from edgetrain.runs import RunDir
from edgetrain.sim.clock import client_cost
from fed_small import small_fleet_config, tiny_plan_service


@pytest.fixture(scope="module")
def service():
    return tiny_plan_service(4)


def _unplanned(prof):
    return int(simulate(prof, {}).max(initial=0))


def test_uniform_fraction_is_the_fleets_smallest_budget():
    assert uniform_fraction([3.0, 1.2345, 5.0], 2.0) == 0.617  # floored to 0.1 % of M_G
    assert uniform_fraction(np.array([4.0, 6.0]), 2.0) == 2.0


def test_micro_batch_cost_is_measured_per_divisor(service):
    eff = measure_micro_batches(service.model, service.inputs, service.targets, repeats=1)
    assert sorted(eff) == [1, 2, 4] and eff[1] == 1.0  # divisors of the profiled batch 4
    assert all(v >= 1.0 for v in eff.values())


def test_melon_micro_batches_when_recompute_alone_cannot_fit(service):
    prof = service.profile("recompute")
    u = _unplanned(prof)
    lo = minimum_budget(prof, "recompute") / u
    # below recompute's minimum: only 2 micro-batches (half the activations) make it fit
    out, cpu = melon_plan(prof, 0.9 * lo, {1: 1.0, 2: 1.3})
    assert out.feasible and out.micro_batches == 2 and cpu > 0 and out.plan_s == cpu
    assert out.demand_fraction <= 0.9 * lo + 1e-9 and out.fraction == 0.9 * lo
    ref = plan(prof, int(2 * 0.9 * lo * u), "recompute")
    step = 3.0 * sum(prof.item_s)
    assert out.overhead_factor == pytest.approx(1.3 * (1 + ref.predicted_overhead_s / step))
    # where recompute fits, a costly micro-batch loses to it; a free one wins (two halves
    # of the footprint fit 0.5 with no recomputation at all)
    one, _ = melon_plan(prof, 0.5, {1: 1.0, 2: 50.0})
    assert one.micro_batches == 1 and 1.0 < one.overhead_factor < 50.0
    free, _ = melon_plan(prof, 0.5, {1: 1.0, 2: 1.0})
    assert free.micro_batches == 2 and free.overhead_factor == 1.0 and free.demand == 0.5


def test_capuchin_picks_the_higher_saving_per_second(service):
    prof = service.profile("recompute")  # hybrid's profile, which "swap" plans on too
    io = IoContentionModel()
    u = _unplanned(prof)
    # below what recompute alone can reach: Capuchin must swap some units
    f = 0.9 * minimum_budget(prof, "recompute") / u
    out, _ = capuchin_plan(prof, f, io)
    assert out.feasible and out.demand_fraction <= f + 1e-9
    assert set(out.decisions) == {"keep", "recompute", "compress", "swap"}
    assert out.decisions["compress"] == 0 and out.decisions["swap"] > 0
    # the overhead is the sum of the chosen techniques' costs (eq. 5 denominators)
    step = 3.0 * sum(prof.item_s)
    bound = sum(
        max(x.rc_compute(), io.write_s(x.float_bytes) + io.read_s(x.float_bytes))
        for x in prof.units
    )
    assert 1.0 < out.overhead_factor <= 1.0 + bound / step + 1e-9
    # the first pick is the unit alive at the unplanned peak whose memory saving per
    # second is highest, by its better technique (a recomputed block may later be swapped)
    light, _ = capuchin_plan(prof, 0.97, io)
    assert 1 <= light.decisions["recompute"] + light.decisions["swap"] < len(prof.units)
    bl_states = {x.name: ("keep", None) for x in prof.units}
    bl._greedy_uniform(prof, int(0.97 * u), bl_states, _capuchin_options(io))
    states = {k: v[0] for k, v in bl_states.items() if v[0] != "keep"}
    at = int(simulate(prof, {}).argmax())
    live = [x for x in prof.units if x.calls == 1 and x.step <= at <= 2 * prof.n_steps - 1 - x.step]

    def scores(x):
        rc = (x.saved_bytes - sum(x.inputs.values())) / max(x.rc_compute(), 1e-9)
        sw = x.float_bytes / (io.write_s(x.float_bytes) + io.read_s(x.float_bytes))
        return rc, sw

    top = max(live, key=lambda x: max(scores(x)))
    rc, sw = scores(top)
    assert states[top.name] in (("recompute", "swap") if rc >= sw else ("swap",))
    assert sum(1 for d in states.values() if d != "keep") == (
        light.decisions["recompute"] + light.decisions["swap"]
    )
    # below what it can reach, its most saving state runs, its demand above the target
    low, _ = capuchin_plan(prof, 1e-4, io)
    assert low.feasible and low.demand_fraction > 1e-4
    assert low.decisions["keep"] <= light.decisions["keep"]


def _capuchin_options(io):
    """The option rule of capuchin_plan, restated: keep -> recompute / swap by bytes
    freed per second; a recomputed unit -> swap by the transient it bounds."""

    def options(x, s):
        if x.calls != 1 or s[0] not in ("keep", "recompute"):
            return []
        sw_s = io.write_s(x.float_bytes) + io.read_s(x.float_bytes)
        if s[0] == "recompute":
            gain = x.saved_bytes - x.leaf_max_bytes
            return [(gain / sw_s, ("swap", None))] if x.float_bytes > 0 and gain > 0 else []
        out = []
        rc_saved = x.saved_bytes - sum(x.inputs.values())
        if rc_saved > 0:
            out.append((rc_saved / max(x.rc_compute(), 1e-9), ("recompute", None)))
        if x.float_bytes > 0:
            out.append((x.float_bytes / sw_s, ("swap", None)))
        return out

    return options


def test_gact_compresses_every_layer_and_steps_bits_down(service):
    prof = service.profile("compress")
    loose, _ = gact_plan(prof, 1.0)
    n_float = sum(1 for x in prof.units if x.float_bytes > 0)
    assert loose.decisions["compress"] == n_float  # every layer, even with memory to spare
    assert set(loose.compress_share) == {"int8"} and loose.overhead_factor > 1.0
    # below what int8 everywhere holds (0.217 of the unplanned peak on this profile since
    # round 25 modelled a compressed unit's ReLU6s as masks; 0.25 had been below it)
    frac = 0.9 * loose.demand_fraction
    tight, _ = gact_plan(prof, frac)
    assert tight.feasible and tight.demand_fraction <= frac + 1e-9
    assert "int4" in tight.compress_share and tight.overhead_factor > 1.0
    total = sum(x.saved_bytes for x in prof.units)
    assert sum(tight.compress_share.values()) == pytest.approx(
        sum(x.saved_bytes for x in prof.units if x.float_bytes > 0) / total, abs=1e-5
    )
    low, _ = gact_plan(prof, 1e-4)  # every layer at int4 where int4 saves: the most it can
    assert low.feasible and low.demand_fraction > 1e-4
    assert low.compress_share.get("int4", 0.0) >= tight.compress_share["int4"]


def _cfg(**fed):
    return small_fleet_config(federated={"rounds": 2, **fed})


def test_server_applies_one_plan_to_every_client_and_charges_device_planning(tmp_path):
    env = build_environment(_cfg(deadline_s=1e6))
    plans = make_plan_service(env)
    srv = FederatedServer(env, "oort+swap", "fedavg", RunDir.create("u", tmp_path), plans)
    assert srv.uniform_target == uniform_fraction(env.budgets, env.m_g)
    rich = int(np.argmax(env.budgets))
    assert env.budgets[rich] > env.m_g  # needs no plan at all
    f = env.config.federated
    base = client_cost(
        env.fleet[rich], samples=f.local_steps * f.batch_size,
        flops_per_sample=env.flops_per_sample, model_bytes=env.model_bytes,
    ).compute_s  # fmt: skip
    c = srv._client_round(1, rich)
    assert c.plan is srv.uniform_plan and c.plan.strategy == "capuchin"
    assert c.outcome == "planned" and c.overhead == c.plan.overhead_factor > 1.0
    # the plan's own cost and 9 x its planner time, on a client with memory to spare
    assert c.cost.compute_s == pytest.approx(
        base * c.overhead * c.pressure + ON_DEVICE_PLAN_SLOWDOWN * c.plan.plan_s, rel=1e-6
    )
    rows = json.loads((tmp_path / "u" / "plans.json").read_text())
    assert any(r["strategy"] == "capuchin" for r in rows)  # kept for resume
    # the earlier rule: the server fits a swap plan only to clients below M_G
    old = FederatedServer(build_environment(_cfg(baseline_plans="per_client", deadline_s=1e6)),
                          "oort+swap", "fedavg", None, plans)  # fmt: skip
    assert old.uniform_plan is None
    o = old._client_round(1, rich)
    assert o.plan is None and o.outcome == "fit" and o.cost.compute_s < c.cost.compute_s
    # "once": the client generates the plan on its first round only
    once = FederatedServer(build_environment(_cfg(baseline_plan_charge="once", deadline_s=1e6)),
                           "oort+compress", "fedavg", None, plans)  # fmt: skip
    a, b = once._client_round(1, rich), once._client_round(2, rich)
    assert once.uniform_plan.strategy == "gact" and once.client_mem[rich].local_plan
    extra = ON_DEVICE_PLAN_SLOWDOWN * once.uniform_plan.plan_s
    assert a.cost.compute_s == pytest.approx(base * a.overhead * a.pressure + extra, rel=1e-6)
    assert b.cost.compute_s == pytest.approx(base * b.overhead * b.pressure, rel=1e-6)


def test_uniform_plan_is_memoised_and_rejects_unknown_technique(service):
    a = uniform_plan(service, "compress", 0.4)
    assert uniform_plan(service, "compress", 0.4) is a
    with pytest.raises(ConfigError, match="uniform baseline"):
        uniform_plan(service, "hybrid", 0.4)


def test_uniform_baseline_resumes_with_the_same_plan(tmp_path):
    env = build_environment(_cfg())
    plans = make_plan_service(env)
    full = FederatedServer(env, "oort+compress", "fedavg", RunDir.create("a", tmp_path), plans)
    recs = full.run(2)
    assert all(r["compressed_clients"] == r["n_aggregated"] for r in recs)  # GACT: everyone
    rd = RunDir.create("b", tmp_path)
    FederatedServer(env, "oort+compress", "fedavg", rd, plans).run(2, stop_after=1)
    fresh = make_plan_service(env)  # a new process: the plan comes back from plans.json
    resumed = FederatedServer(env, "oort+compress", "fedavg", rd, fresh)
    assert resumed.resume() and resumed.uniform_plan.plan_s == full.uniform_plan.plan_s
    strip = [{k: v for k, v in r.items() if k != "wall_s"} for r in resumed.run(2)]
    assert strip == [{k: v for k, v in r.items() if k != "wall_s"} for r in recs]
