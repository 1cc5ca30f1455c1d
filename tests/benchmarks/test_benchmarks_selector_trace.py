"""benchmarks/fedhybrid_selector_trace.py: Fig. 17's selector ablation read apart (round 39)."""

import json

import numpy as np
import pytest

from bench_loader import load_benchmark


@pytest.fixture(scope="module")
def trace_mod():
    return load_benchmark("fedhybrid_selector_trace")


def test_trace_counts_repeats_coverage_and_skew_by_hand(trace_mod):
    """Three clients holding labels (2, 0), (0, 2), (2, 2); round 1 aggregates 0 and 1, round
    2 aggregates 0 and 2 (one of two repeated), round 3 reaches the target."""
    labels = np.array([[2, 0], [0, 2], [2, 2]], dtype=float)
    recs = [
        {"sim_time_s": 10.0, "accuracy": 0.2, "aggregated": [0, 1], "aggregated_labels": [2, 2]},
        {"sim_time_s": 20.0, "accuracy": 0.3, "aggregated": [0, 2], "aggregated_labels": [4, 2]},
        {"sim_time_s": 30.0, "accuracy": 0.5, "aggregated": [0], "aggregated_labels": [2, 0]},
        {"sim_time_s": 40.0, "accuracy": 0.4, "aggregated": [1], "aggregated_labels": [0, 2]},
    ]
    t = trace_mod.trace(recs, labels, target=0.5, horizon=4)
    assert t["rounds_to_target"] == 3 and t["s_per_round"] == pytest.approx(10.0)
    assert t["repeat"] == pytest.approx((1 / 2 + 1) / 2)
    assert t["coverage"] == pytest.approx(1.0)  # every client aggregated by round 3
    assert t["covered_skew"] == pytest.approx(0.0)
    # cohort skews against the split's (0.5, 0.5): 0, 1/6, 1/2
    assert t["cohort_skew"] == pytest.approx((0 + 1 / 6 + 1 / 2) / 3)
    assert t["cohort_classes"] == pytest.approx(
        (2.0 + trace_mod.effective_classes(np.array([4.0, 2.0])) + 1.0) / 3
    )
    assert t["mean_acc"] == pytest.approx(0.35)
    # never reaching the target: every round counts, rounds_to_target None
    t = trace_mod.trace(recs, labels, target=0.9, horizon=2)
    assert t["rounds_to_target"] is None and t["mean_acc"] == pytest.approx(0.25)


def test_trace_quick_prints_one_row_per_method(trace_mod, capsys):
    assert trace_mod.main(["--quick", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out["rows"]) == ["random", "fedhybrid", "fedhybrid-noselector"]
    assert out["rows"]["random"]["speedup_vs_random"] == 1.0
    for r in out["rows"].values():
        assert r["repeat"] is None or 0.0 <= r["repeat"] <= 1.0
        assert 0.0 < r["coverage"] <= 1.0 and 0.0 <= r["mean_acc"] <= 1.0
        assert 1.0 <= r["cohort_classes"] <= 10.0


def test_trace_takes_the_ucb_constant(trace_mod, capsys):
    """``--ucb-c`` reaches the run's config (round 39 traced FedScale's 0.1); without it the
    config's default, CUCB's 1.5, is used."""
    assert trace_mod.main(["--quick", "--json", "--rounds", "2", "--ucb-c", "0.1"]) == 0
    assert json.loads(capsys.readouterr().out)["ucb_c"] == 0.1
    assert trace_mod.main(["--quick", "--json", "--rounds", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["ucb_c"] == 1.5
