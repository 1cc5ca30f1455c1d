"""FedHybrid Fig. 1's Oort-Oracle: the same selector and fleet, with no device out of memory."""

import pytest

from edgetrain.federated import FederatedServer, build_environment
from edgetrain.federated.methods import METHODS
from fed_small import small_fleet_config


@pytest.fixture(scope="module")
def env():
    return build_environment(small_fleet_config())


def test_the_oracle_is_oort_without_the_memory_wall():
    spec, oort = METHODS["oort-oracle"], METHODS["oort"]
    assert spec.oracle and not oort.oracle
    assert (spec.selector, spec.technique) == (oort.selector, oort.technique)


def test_no_client_of_the_oracle_is_killed_or_under_page_reclaim(env):
    practical = FederatedServer(env, "oort", "fedavg", None, None)
    oracle = FederatedServer(env, "oort-oracle", "fedavg", None, None)
    killed = 0
    for cid in range(len(env.fleet)):
        a, b = practical._client_round(1, cid), oracle._client_round(1, cid)
        assert b.outcome in ("fit", "dropped", "late") and b.pressure == 1.0 and b.pages == 0
        assert b.plan is None
        killed += a.outcome == "killed"
        if a.outcome == "fit":  # a client that fits anyway costs the same in both
            assert b.cost.total_s == pytest.approx(a.cost.total_s)
    assert killed > 0  # the small fleet has phones the memory wall stops


def test_the_oracle_runs_oorts_selector_on_the_same_seed(env):
    rec_p = FederatedServer(env, "oort", "fedavg", None, None).run(1)
    rec_o = FederatedServer(env, "oort-oracle", "fedavg", None, None).run(2)
    # round 1 draws before any feedback, so both select the same clients
    assert rec_o[0]["selected"] == rec_p[0]["selected"]
    for r in rec_o:
        assert r["outcomes"]["killed"] == 0 and r["outcomes"]["pressure"] == 0
    assert rec_p[0]["outcomes"]["killed"] + rec_p[0]["outcomes"]["pressure"] > 0


def test_fedhybrids_oracle_sees_every_device_fit(env):
    spec = METHODS["fedhybrid-oracle"]
    assert spec.oracle and (spec.selector, spec.technique) == ("fedhybrid", "none")
    real = FederatedServer(env, "fedhybrid", "fedavg", None, None)
    oracle = FederatedServer(env, "fedhybrid-oracle", "fedavg", None, None)
    assert (real._checkin.memory_budget < env.m_g).any()  # the fleet has constrained phones
    assert (oracle._checkin.memory_budget >= env.m_g).all()  # MemStat (eq. 1) is 1 for all
    big = env.budgets >= env.m_g
    assert (oracle._checkin.memory_budget[big] == env.budgets[big]).all()
    for r in oracle.run(2):
        assert r["outcomes"]["killed"] == 0 and r["outcomes"]["pressure"] == 0
        assert r["outcomes"]["planned"] == 0


def test_fedhybrid_with_oorts_selector_plans_what_oort_would_lose(env):
    """``fedhybrid-oortselector`` (round 31): Oort's selector, FedHybrid's plans. Round 1
    draws before any feedback, so it selects exactly Oort's clients; where Oort's are killed
    or under page reclaim, its are planned and none is killed below physical memory."""
    spec = METHODS["fedhybrid-oortselector"]
    assert (spec.selector, spec.technique) == ("oort", "hybrid") and not spec.oracle
    assert spec.regenerate and spec.predictor and spec.optimizer
    rec_p = FederatedServer(env, "oort", "fedavg", None, None).run(1)[0]
    srv = FederatedServer(env, "fedhybrid-oortselector", "fedavg", None, None)
    assert srv.selector.name == "oort"
    rec = srv.run(1)[0]
    assert rec["selected"] == rec_p["selected"]
    assert rec["outcomes"]["planned"] > 0 and rec_p["outcomes"]["planned"] == 0
    lost = rec_p["outcomes"]["killed"] + rec_p["outcomes"]["pressure"]
    assert rec["outcomes"]["killed"] + rec["outcomes"]["pressure"] < lost
