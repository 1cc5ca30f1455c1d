"""Round 6: the Fig. 17 mechanism checks and the exposure counts the benchmark prints."""

from dataclasses import replace

import pytest

from edgetrain.federated.api import exposure
from edgetrain.federated.methods import METHODS


@pytest.mark.parametrize("component", ["nooptimizer", "nocompress", "nopredictor"])
def test_mechanism_checks_are_the_ablations_under_random_selection(component):
    ablation = METHODS[f"fedhybrid-{component}"]
    check = METHODS[f"fedhybrid-noselector-{component}"]
    assert ablation.selector == "fedhybrid"
    # the same component removed, only the selector differs (Random, as in -noselector)
    assert check == replace(ablation, selector="random")
    assert METHODS["fedhybrid-noselector"] == replace(METHODS["fedhybrid"], selector="random")


def _rec(t, planned, pressure, killed, agg, regen=0, comp=0):
    return {
        "sim_time_s": t,
        "outcomes": {"fit": 1, "planned": planned, "pressure": pressure, "killed": killed,
                     "late": 0},
        "planned_aggregated": agg,
        "regenerations": regen,
        "compressed_clients": comp,
    }  # fmt: skip


def test_exposure_counts_rounds_up_to_the_target_time():
    recs = [_rec(10.0, 2, 1, 0, 1), _rec(20.0, 1, 0, 2, 1, regen=1), _rec(30.0, 5, 5, 5, 5, 1, 3)]
    e = exposure(recs, 20.0)
    assert e == {"planned": 3, "pressure": 1, "killed": 2, "late": 0, "planned_aggregated": 2,
                 "regenerations": 1, "compressed_clients": 0, "rounds": 2,
                 "compress_planned": 0, "budget_over": 0, "budget_err_pct": None,
                 "distinct_selected": 0, "distinct_aggregated": None,
                 "top_decile_share": None, "repeat_share": None,
                 "data_coverage": None}  # fmt: skip
    # target never reached: the whole run counts
    assert exposure(recs, None)["rounds"] == 3
    assert exposure(recs, None)["planned"] == 8 and exposure(recs, None)["compressed_clients"] == 3
    # records from before round 6 (no planned_aggregated field) count as 0
    old = [{k: v for k, v in recs[0].items() if k != "planned_aggregated"}]
    assert exposure(old, None)["planned_aggregated"] == 0


def test_exposure_counts_the_selectors_reach():
    """Distinct clients selected and aggregated up to the target time, and the share of the
    aggregated updates from the most-aggregated tenth: client 0 aggregated 3 times, 1-9
    once each -> 3 of 12 updates."""
    recs = [
        dict(_rec(10.0, 0, 0, 0, 0), selected=[0, 1, 2, 3, 4, 10], aggregated=[0, 1, 2, 3, 4]),
        dict(_rec(20.0, 0, 0, 0, 0), selected=[0, 5, 6, 7, 11], aggregated=[0, 5, 6, 7]),
        dict(_rec(30.0, 0, 0, 0, 0), selected=[0, 8, 9], aggregated=[0, 8, 9]),
        dict(_rec(40.0, 0, 0, 0, 0), selected=[12, 13], aggregated=[12, 13]),
    ]
    e = exposure(recs, 30.0)
    assert (e["distinct_selected"], e["distinct_aggregated"]) == (12, 10)
    assert e["top_decile_share"] == pytest.approx(3 / 12)
    assert exposure(recs, None)["distinct_aggregated"] == 12
    # records without the field (before round 34): unknown, not zero
    assert exposure([_rec(10.0, 0, 0, 0, 0)], None)["distinct_aggregated"] is None


def test_exposure_counts_repeats_and_the_data_the_aggregated_clients_hold():
    """repeat_share: round 2 repeats 1 of its 4 aggregated clients, round 3 1 of 3 ->
    (1/4 + 1/3) / 2 up to the target; data_coverage: clients 0-9 hold 10 samples each and
    client 12 holds 50, of 150 in all."""
    recs = [
        dict(_rec(10.0, 0, 0, 0, 0), selected=[0, 1, 2, 3, 4], aggregated=[0, 1, 2, 3, 4]),
        dict(_rec(20.0, 0, 0, 0, 0), selected=[0, 5, 6, 7], aggregated=[0, 5, 6, 7]),
        dict(_rec(30.0, 0, 0, 0, 0), selected=[0, 8, 9], aggregated=[0, 8, 9]),
        dict(_rec(40.0, 0, 0, 0, 0), selected=[12], aggregated=[12]),
    ]
    n = [10] * 10 + [0, 0, 50]
    e = exposure(recs, 30.0, n)
    assert e["repeat_share"] == pytest.approx((1 / 4 + 1 / 3) / 2)
    assert e["data_coverage"] == pytest.approx(100 / 150)
    full = exposure(recs, None, n)
    assert full["repeat_share"] == pytest.approx((1 / 4 + 1 / 3 + 0) / 3)
    assert full["data_coverage"] == pytest.approx(1.0)
    # the same rounds again: every aggregated client repeats
    assert exposure(recs[:1] * 3, None, n)["repeat_share"] == pytest.approx(1.0)
    # without the clients' sample counts the coverage is unknown, not zero
    assert exposure(recs, None)["data_coverage"] is None
