"""FedProx's partial work (``federated.partial_work``): a client still training when the
round closes sends the local steps it finished and is aggregated (Li et al., MLSys 2020)."""

from dataclasses import replace

import pytest

from edgetrain.federated import FederatedServer, build_environment
from edgetrain.federated.server import ClientRound
from edgetrain.sim.clock import ClientCost
from fed_small import small_fleet_config


@pytest.fixture(scope="module")
def env():
    return build_environment(small_fleet_config(federated={"local_steps": 10}))


def _cr(cid, outcome, cost):
    return ClientRound(cid, outcome, 1.0, 1.0, 1.0, cost, None)


def test_partial_steps_hand_computed(env):
    srv = FederatedServer(env, "random", "fedavg", None, None)
    rounds = [
        _cr(0, "fit", ClientCost(1.0, 8.0, 1.0, 0.0, 1.0)),  # reported by the close (10 s)
        _cr(1, "fit", ClientCost(1.0, 20.0, 1.0, 0.0, 1.0)),  # 8 of 20 s trained: 4 of 10
        _cr(2, "planned", ClientCost(1.0, 20.0, 1.0, 0.0, 1.0, 4.0)),  # 4 s set-up: 4/16 -> 2
        _cr(3, "late", ClientCost(1.0, 90.0, 1.0, 0.0, 1.0)),  # past the deadline: 8/90 -> 0
        _cr(4, "late", ClientCost(1.0, 30.0, 1.0, 0.0, 1.0)),  # 8/30 of 10 -> 2
        _cr(5, "killed", None),
        _cr(6, "dropped", None),
        _cr(7, "pressure", ClientCost(6.0, 10.0, 5.0, 5.0, 1.0)),  # transfers alone pass 10 s
    ]
    out = srv._partial_steps(rounds, first={0}, close_s=10.0)
    assert out == {1: (4, 0.4), 2: (2, 0.2), 4: (2, 0.2)}
    late = srv._partial_steps(rounds, first={0, 1}, close_s=31.9)
    assert 2 not in late and late[4] == (9, 0.9)  # 2 reported by 22 s; 4 trained 29.9 of 30


def test_partial_work_aggregates_stragglers_on_the_same_clock(env):
    plain = FederatedServer(env, "random", "fedavg", None, None).run(4)
    on_env = replace(env, config=small_fleet_config(
        federated={"local_steps": 10, "partial_work": True}))  # fmt: skip
    part = FederatedServer(on_env, "random", "fedavg", None, None).run(4)
    assert all(r["partial"] == 0 and r["partial_share"] is None for r in plain)
    # round 1 selects before any feedback: same clients, same close, more updates
    a, b = plain[0], part[0]
    assert a["selected"] == b["selected"]
    assert b["round_time_s"] == pytest.approx(a["round_time_s"])
    assert b["n_aggregated"] == a["n_aggregated"] + b["partial"]
    assert sum(r["partial"] for r in part) > 0
    for r in part:
        if r["partial"]:
            assert 0.0 < r["partial_share"] <= 1.0
        assert r["n_aggregated"] <= r["n_selected"]
    # round 1: a partial client stops at the close, so it spends no more than a full one
    assert b["energy_j"] <= a["energy_j"] + 1e-9
