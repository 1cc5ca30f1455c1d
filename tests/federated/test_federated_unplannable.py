"""``federated.unplannable``: a client whose check-in budget no server-side plan fits is
offered to the selector ("dispatch", killed above physical memory) or left out ("exclude")."""

import pytest

from edgetrain.errors import ConfigError
from edgetrain.federated import FederatedServer, build_environment
from edgetrain.federated.server import make_plan_service
from fed_small import small_fleet_config

# M_G at the 60th percentile of the fleet's memory: two clients (budgets 0.22 and 0.28 of M_G)
# sit below the recompute planner's floor on this plan model
MEM = {"m_g": "share:0.6"}


@pytest.fixture(scope="module")
def env():
    return build_environment(small_fleet_config(memory=MEM))


@pytest.fixture(scope="module")
def plans(env):
    return make_plan_service(env)


def _unplannable(env, plans, tech):
    return {
        c
        for c, b in enumerate(env.budgets)
        if b < env.m_g and not plans.plan_for(tech, b / env.m_g, env.memory_class(c)).feasible
    }


def _selected(recs):
    return {c for r in recs for c in r["selected"]}


def test_exclude_keeps_clients_no_plan_fits_out_of_every_round(plans):
    base = build_environment(
        small_fleet_config(memory=MEM, federated={"rounds": 6, "unplannable": "dispatch"})
    )
    excl = build_environment(small_fleet_config(memory=MEM, federated={"rounds": 6}))
    bad = _unplannable(base, plans, "recompute")
    assert bad, "the set-up must leave some client below the recompute floor"
    # dispatch (the rule through round 32): Random selection over every client picks them
    disp = FederatedServer(base, "fedhybrid-noselector-nocompress", "fedavg", None, plans)
    recs = disp.run(6)
    assert _selected(recs) & bad
    # exclude (the default): the same method never selects them, and each round still fills its cohort
    for method in ("fedhybrid-noselector-nocompress", "fedhybrid-nocompress"):
        srv = FederatedServer(excl, method, "fedavg", None, plans)
        assert set(range(len(excl.fleet))) - set(srv._checkin.candidates()) == bad
        recs = srv.run(6)
        assert not (_selected(recs) & bad)
        assert all(r["n_selected"] == 5 for r in recs)  # int(1.3 x 4)
    # FedHybrid's hybrid planner fits both (compression goes below recompute's floor)
    fh = FederatedServer(excl, "fedhybrid", "fedavg", None, plans)
    assert set(fh._checkin.candidates()) == set(range(len(excl.fleet))) - _unplannable(
        excl, plans, "hybrid"
    )


@pytest.mark.parametrize(
    "method", ["random", "oort", "oort-oracle", "fedhybrid-nooptimizer", "oort+recompute"]
)
def test_exclude_applies_only_where_the_server_makes_the_plans(method, plans):
    env = build_environment(small_fleet_config(memory=MEM, federated={"unplannable": "exclude"}))
    assert FederatedServer(env, method, "fedavg", None, plans)._checkin.eligible is None


def test_a_fleet_no_plan_fits_is_one_clear_error():
    env = build_environment(
        small_fleet_config(memory={"m_g": "4000GB"}, federated={"unplannable": "exclude"})
    )
    with pytest.raises(ConfigError, match="unplannable: exclude leaves no client.*dispatch"):
        FederatedServer(env, "fedhybrid", "fedavg")


def test_microbatch_gives_the_clients_no_plan_fits_melons_plan(plans):
    """``unplannable: microbatch``: the same selections as ``dispatch`` (every client is
    offered), but a client below the technique's floor trains under Melon's micro-batched
    plan from the server instead of unplanned, so fewer rounds end in a kill."""
    fed = {"rounds": 6, "unplannable": "dispatch"}
    disp = build_environment(small_fleet_config(memory=MEM, federated=fed))
    mb = build_environment(
        small_fleet_config(memory=MEM, federated={**fed, "unplannable": "microbatch"})
    )
    method = "fedhybrid-noselector-nocompress"
    bad = _unplannable(disp, plans, "recompute")
    d = FederatedServer(disp, method, "fedavg", None, plans)
    m = FederatedServer(mb, method, "fedavg", None, plans)
    assert m._checkin.eligible is None
    rd, rm = d.run(6), m.run(6)
    assert [r["selected"] for r in rd] == [r["selected"] for r in rm]
    assert _selected(rd) & bad
    kills = [sum(r["outcomes"]["killed"] for r in recs) for recs in (rd, rm)]
    assert kills[0] > kills[1]
    melon = [o for k, o in plans.table.items() if o.strategy == "melon" and o.feasible]
    assert melon and all(o.micro_batches >= 1 for o in melon)


def test_exclude_is_the_default():
    assert small_fleet_config().federated.unplannable == "exclude"


def test_a_bad_value_names_the_accepted_ones():
    with pytest.raises(ConfigError, match="unplannable"):
        small_fleet_config(federated={"unplannable": "drop"})
