"""budget_overhead.versus_baselines: hybrid paired against every baseline that fits."""

from __future__ import annotations

import pytest

from bench_loader import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("budget_overhead")


def _row(method, ratios, within=True, plan=None):
    return {"method": method, "feasible": True, "round_ratios": ratios,
            "within_budget": within, "plan": plan}  # fmt: skip


def test_pairs_per_round_and_skips_what_does_not_fit(bench):
    h = [1.00, 1.02, 1.01, 1.03, 1.00, 1.02, 1.01]
    rows = [
        _row("none", [1.0] * 7),
        _row("hybrid", h, plan=[["a", "regen"]]),
        _row("recompute", h, plan=[["a", "regen"]]),  # the same plan: an A/A pair
        _row("compress", [x * 1.2 for x in h], plan=[["a", "compress"]]),
        _row("ckpt-all", [x * 1.3 for x in h]),
        _row("mincut", [0.9] * 7, within=False),  # faster, but over the budget
    ]
    vb = bench.versus_baselines(rows)
    assert set(vb["vs"]) == {"recompute", "compress", "ckpt-all"}
    assert vb["does_not_fit"] == ["mincut"]
    assert vb["vs"]["compress"]["median"] == pytest.approx(1 / 1.2)
    assert vb["vs"]["compress"]["verdict"] == "below"
    assert vb["vs"]["ckpt-all"]["median"] == pytest.approx(1 / 1.3)
    assert vb["vs"]["recompute"] == {**vb["vs"]["recompute"], "median": 1.0, "same_plan": True}
    assert vb["vs"]["recompute"]["verdict"] == "level"
    assert "same_plan" not in vb["vs"]["ckpt-all"]
    assert not vb["below_every"] and vb["not_above_every"]


def test_one_baseline_above_breaks_both_verdicts(bench):
    h = [1.10, 1.11, 1.12, 1.10, 1.11, 1.12, 1.10]
    rows = [_row("hybrid", h), _row("mincut-matched", [x / 1.05 for x in h])]
    vb = bench.versus_baselines(rows)
    assert vb["vs"]["mincut-matched"]["verdict"] == "above"
    assert not vb["below_every"] and not vb["not_above_every"]


def test_below_every_and_nothing_to_compare(bench):
    h = [1.0] * 7
    rows = [_row("hybrid", h), _row("swap", [2.0] * 7), _row("ckpt-all", [1.3] * 7)]
    assert bench.versus_baselines(rows)["below_every"]
    assert bench.versus_baselines([_row("hybrid", h)]) == {
        "vs": {},
        "does_not_fit": [],
        "below_every": False,
        "not_above_every": False,
    }
    assert bench.versus_baselines([_row("recompute", h)]) is None
