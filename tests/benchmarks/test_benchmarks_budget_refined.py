"""benchmarks/budget_overhead.py --refined-entry: hybrid's plan with the local search on
and off, timed in the same rounds and paired with hybrid's own plan."""

from __future__ import annotations

import json
import statistics

import pytest

from bench_loader import load_benchmark

VARIANTS = {"hybrid-refined", "hybrid-greedy"}


def test_refined_entry_pairs_the_other_plan_with_hybrid(capsys, tmp_path):
    """At 0.4 of the quick model the local search changes hybrid's saved-scope plan (in
    one profile: greedy 4 recomputed blocks, refined 3 plus fine decisions), so exactly
    one variant is added -- the one hybrid's plan is not -- and it is paired with hybrid
    per round."""
    mod = load_benchmark("budget_overhead")
    argv = ["--quick", "--json", "--out", str(tmp_path), "--no-mincut", "--methods", "hybrid"]
    assert mod.main([*argv, "--budgets", "0.4", "--rounds", "2", "--refined-entry"]) == 0
    (model,) = json.loads(capsys.readouterr().out)
    rows = {r["method"]: r for r in model["rows"]}
    (variant,) = VARIANTS & set(rows)
    hyb, alt = rows["hybrid"], rows[variant]
    assert sorted(map(tuple, alt["plan"])) != sorted(map(tuple, hyb["plan"]))
    # the refined plan is never predicted above the greedy one, and here it is below
    refined, greedy = (alt, hyb) if variant == "hybrid-refined" else (hyb, alt)
    assert refined["predicted_overhead_s"] < greedy["predicted_overhead_s"]
    assert alt["within_budget"]
    # which decisions the plan takes depends on the profile's timings: exact unless it
    # compresses, and then within the codec's error (at most a few 1e-2 on the zoo)
    if any(decision == "compress" for _, decision in alt["plan"]):
        assert alt["grad_err"] < 0.1
    else:
        assert alt["grad_err"] == 0.0
    v = alt["vs_hybrid"]
    assert v["rounds"] == 2 and len(alt["round_vs_hybrid"]) == 2
    assert v["median"] == pytest.approx(statistics.median(alt["round_vs_hybrid"]))
    assert alt["steps_vs_hybrid"]["rounds"] == 2  # --quick: 1 repeat per round
    # each round: (variant / none) / (hybrid / none) = variant / hybrid, same steps
    for a, h, r in zip(
        alt["round_ratios"], hyb["round_ratios"], alt["round_vs_hybrid"], strict=True
    ):
        assert a / h == pytest.approx(r, rel=1e-9)
    assert alt["vs_ckpt_all"]["rounds"] == 2  # paired with the baselines like hybrid
    assert "vs_hybrid" not in hyb


def test_without_the_flag_no_variant_is_timed(capsys, tmp_path):
    mod = load_benchmark("budget_overhead")
    argv = ["--quick", "--json", "--out", str(tmp_path), "--no-mincut", "--methods", "hybrid"]
    assert mod.main([*argv, "--budgets", "0.4", "--rounds", "1"]) == 0
    (model,) = json.loads(capsys.readouterr().out)
    assert {r["method"] for r in model["rows"]} == {"hybrid", "ckpt-all"}
    assert not any("vs_hybrid" in r for r in model["rows"])
