"""The two benchmarks run end to end in --quick mode and report sane figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench_loader import load_benchmark
from edgetrain.errors import ConfigError


def test_codec_benchmark_quick(capsys):
    assert load_benchmark("codec").main(["--quick", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert set(res["summary"]) == {"mobilenetv2", "cct2", "bert-small"}
    for row in res["rows"]:
        if "mix_ratio" in row:
            assert row["mix_err"] <= row["eb"]
            assert row["mix_ratio"] > row["int8_ratio"]  # entropy stage beats plain int8


def test_budget_overhead_benchmark_quick(capsys, tmp_path):
    mod = load_benchmark("budget_overhead")
    argv = ["--quick", "--json", "--out", str(tmp_path), "--methods", "recompute,hybrid"]
    assert mod.main([*argv, "--budgets", "0.4", "--rounds", "2"]) == 0
    res = json.loads(capsys.readouterr().out)
    (model,) = res
    assert Path(model["png"]).stat().st_size > 0
    rows = {(r["budget"], r["method"]): r for r in model["rows"]}
    # --methods restricts the planners; the compiled pair and ckpt-all always come along
    methods = {"recompute", "hybrid", "ckpt-all", "mincut", "mincut-free"}
    assert {m for b, m in rows if b is not None} == methods
    assert set(model["min_feasible_frac"]) == {"recompute", "hybrid"}
    # the profiler's heap was given back before timing (glibc: a positive byte count)
    assert model["heap_released_bytes"] >= 0
    for (budget, method), r in rows.items():
        if budget is None or not r.get("feasible"):
            continue
        # every entry, compiled ones included, ran in the same interleaved rounds;
        # the ratio is the median over rounds
        assert len(r["round_ratios"]) == 2, (budget, method)
        assert min(r["round_ratios"]) <= r["ratio"] <= max(r["round_ratios"])
        # page faults per timed step, this entry's and the unplanned step's (medians)
        assert r["minflt"] >= 0 and r["none_minflt"] >= 0
        if method in ("recompute", "hybrid"):
            assert r["within_budget"]
        if method == "recompute":
            assert r["grad_err"] == 0.0
    for budget in (0.4,):
        mc, free = rows[(budget, "mincut")], rows[(budget, "mincut-free")]
        assert mc["feasible"] and free["feasible"], (mc, free)
        assert (mc["activation_memory_budget"], free["activation_memory_budget"]) == (budget, 1.0)
        # compiled once, in the warm-up step: no compile time inside the timed steps
        assert mc["recompiles"] == free["recompiles"] == 0
        assert mc["compiles"] >= 1 and free["compiles"] >= 1
        # same graph, so the same gradients up to float reassociation
        assert mc["grad_err"] < 1e-4 and free["grad_err"] < 1e-4
        assert len(mc["round_vs_free"]) == len(mc["round_ratios"])
        assert min(mc["round_vs_free"]) <= mc["vs_free"] <= max(mc["round_vs_free"])
    # a budget below 1.0 never makes the min-cut partitioner save more than at 1.0
    assert rows[(0.4, "mincut-free")]["measured_peak"] >= rows[(0.4, "mincut")]["measured_peak"]
    # the planners are paired with min-cut in the same rounds
    for method in ("recompute", "hybrid"):
        r = rows[(0.4, method)]
        if not r.get("feasible"):
            continue
        assert len(r["round_vs_mincut"]) == 2 and r["vs_mincut"]["rounds"] == 2
        assert r["vs_mincut"]["min"] == min(r["round_vs_mincut"])
        assert r["steps_vs_mincut"]["rounds"] == 2  # --quick: 1 repeat per round
    # what min-cut's forward saves for its backward: bytes per op, largest first
    saved = rows[(0.4, "mincut")]["saved_for_backward"]
    sizes = [b for _, b in saved.values()]
    assert sizes and sizes == sorted(sizes, reverse=True) and all(n >= 1 for n, _ in saved.values())
    assert sum(rows[(0.4, "mincut")]["backward_ops"].values()) > 0
    # every allocation of one untimed step: at least what its saved tensors held
    budget = rows[(0.4, "hybrid")]["budget_bytes"]
    for m in ("recompute", "hybrid", "mincut", "mincut-free"):
        r = rows[(0.4, m)]
        if not r["feasible"]:  # recompute: below its minimum budget here
            assert "alloc_peak_bytes" not in r
            continue
        assert r["alloc_peak_bytes"] >= r["alloc_step_saved_peak"] > 0, m
        assert r["alloc_peak_over_budget"] == pytest.approx(r["alloc_peak_bytes"] / budget)
    # ckpt-all ran in the same rounds (wrapped for its own steps only: the compiled entries
    # did not recompile), with its saved-tensor and all-allocation peaks against the budget
    ck, hyb = rows[(0.4, "ckpt-all")], rows[(0.4, "hybrid")]
    assert ck["alloc_peak_bytes"] > ck["measured_peak"] > 0
    assert ck["peak_over_budget"] == pytest.approx(ck["measured_peak"] / budget)
    assert ck["measured_peak_frac"] == pytest.approx(
        ck["measured_peak"] / model["unplanned_peak_bytes"]
    )
    assert ck["alloc_peak_over_budget"] == pytest.approx(ck["alloc_peak_bytes"] / budget)
    assert ck["units"] >= 1 and ck["grad_err"] < 1e-6  # recomputation: the same gradients
    # paired: per round, hybrid / ckpt-all is the ratio of their ratios to the same none
    assert len(hyb["round_vs_ckpt_all"]) == 2 and hyb["vs_ckpt_all"]["rounds"] == 2
    for pair, h, c in zip(hyb["round_vs_ckpt_all"], hyb["round_ratios"], ck["round_ratios"],
                          strict=True):  # fmt: skip
        assert pair == pytest.approx(h / c)
    assert hyb["steps_vs_ckpt_all"]["rounds"] == 2  # --quick: 1 repeat per round
    assert "vs_ckpt_all" not in ck and "vs_ckpt_all" not in rows[(0.4, "mincut")]


def test_budget_overhead_mincut_matched(capsys, tmp_path):
    """``--mincut-matched`` searches min-cut's setting for the same all-allocation memory
    and times it paired with the planners (the search itself: ``search_setting`` tests)."""
    mod = load_benchmark("budget_overhead")
    argv = ["--quick", "--json", "--out", str(tmp_path), "--methods", "hybrid", "--no-ckpt-all"]
    assert mod.main([*argv, "--budgets", "0.9", "--rounds", "1", "--mincut-matched"]) == 0
    (model,) = json.loads(capsys.readouterr().out)
    rows = {(r["budget"], r["method"]): r for r in model["rows"]}
    assert set(rows) == {(0.9, m) for m in ("hybrid", "mincut", "mincut-free", "mincut-matched")}
    budget = rows[(0.9, "hybrid")]["budget_bytes"]
    for r in rows.values():
        assert r["alloc_peak_bytes"] >= r["alloc_step_saved_peak"] > 0
    # the matched min-cut: the search's target is the budget, or hybrid's own
    # all-allocation peak where that is higher; the chosen setting is the largest that fits
    # (or, if none fits, the one with the lowest peak), and its re-measured peak is the same
    mm, hyb = rows[(0.9, "mincut-matched")], rows[(0.9, "hybrid")]
    match = mm["match"]
    assert match["target_bytes"] == max(budget, hyb["alloc_peak_bytes"])
    tried = {t["activation_memory_budget"]: t for t in match["tried"]}
    assert tried[0.9]["alloc_peak_bytes"] == rows[(0.9, "mincut")]["alloc_peak_bytes"]
    assert all(
        t["fits"] == (t["alloc_peak_bytes"] <= match["target_bytes"]) for t in tried.values()
    )
    chosen = tried[match["chosen"]]
    assert mm["activation_memory_budget"] == match["chosen"]
    assert mm["alloc_peak_bytes"] == chosen["alloc_peak_bytes"]
    if match["reached"]:
        assert match["chosen"] == max(f for f, t in tried.items() if t["fits"])
    else:
        assert chosen["alloc_peak_bytes"] == min(t["alloc_peak_bytes"] for t in tried.values())
    assert mm["recompiles"] == 0 and mm["grad_err"] < 1e-4
    v = hyb["vs_mincut_matched"]
    assert v["rounds"] == 1 and v["min"] == min(hyb["round_vs_mincut_matched"])


def test_alloc_peak_bytes_counts_every_allocation_and_frees_within_the_call():
    mod = load_benchmark("budget_overhead")
    import torch

    held = torch.ones(4_000_000)  # allocated before the call: neither counted nor freed

    def fn():
        a = torch.ones(1_000_000)  # 4 MB
        b = torch.ones(500_000)  # 2 MB: running sum 6 MB, the peak
        del a
        c = torch.ones(250_000)  # 1 MB after 4 MB came back: 3 MB
        del b, c
        held.mul_(2)  # in place: no allocation

    assert mod.alloc_peak_bytes(fn) == 6_000_000


@settings(max_examples=60, deadline=None)
@given(
    a=st.integers(0, 1000),
    b=st.integers(1, 1000),
    target=st.integers(0, 2000),
    hi=st.sampled_from([0.25, 0.5, 0.9]),
    steps=st.integers(1, 4),
)
def test_search_setting_on_a_rising_peak(a, b, target, hi, steps):
    """Peak rising with the setting (less recomputation, more held): the search returns
    a fitting setting within hi / 2**steps of the largest one that fits, or says that
    none fits and returns the lowest peak it tried."""
    search = load_benchmark("budget_overhead").search_setting
    out = search(lambda f: (a + b * f, 0), target, hi, steps)
    peaks = {t["activation_memory_budget"]: t["alloc_peak_bytes"] for t in out["tried"]}
    assert len(peaks) == len(out["tried"])  # no setting tried twice
    assert all(t["fits"] == (t["alloc_peak_bytes"] <= target) for t in out["tried"])
    if a > target:  # not even the most recomputation fits
        assert not out["reached"]
        assert peaks[out["chosen"]] == min(peaks.values()) == a
        return
    assert out["reached"] and peaks[out["chosen"]] <= target
    best = min(hi, (target - a) / b)  # the largest fitting setting
    assert out["chosen"] <= best + 1e-9
    assert best - out["chosen"] <= hi / 2**steps + 1e-3


def test_search_setting_on_a_u_shaped_peak():
    """A backward that recomputes everything holds it all again: the peak falls, then
    rises with the setting.  The search still finds the fitting band, or the lowest peak."""
    search = load_benchmark("budget_overhead").search_setting

    def peak(f):  # lowest (100) at 0.04
        return int(100 + 1e5 * (f - 0.04) ** 2), 0

    out = search(peak, 105, 0.25, 3)  # fits for |f - 0.04| <= 0.0071
    assert out["reached"] and peak(out["chosen"])[0] <= 105
    out = search(peak, 99, 0.25, 3)  # nothing fits: the lowest try, refined near 0.04
    assert not out["reached"]
    assert abs(out["chosen"] - 0.04) < 0.02 and out["chosen"] > 0.0


def test_budget_overhead_mincut_matched_needs_mincut(tmp_path):
    mod = load_benchmark("budget_overhead")
    with pytest.raises(ConfigError, match="--mincut-matched needs the min-cut entries"):
        mod.main(["--quick", "--out", str(tmp_path), "--no-mincut", "--mincut-matched"])


def test_budget_overhead_rounds_at(capsys, tmp_path):
    """``--rounds`` applies to every budget unless ``--rounds-at`` names some."""
    mod = load_benchmark("budget_overhead")
    argv = ["--quick", "--json", "--out", str(tmp_path), "--no-mincut", "--methods", "recompute"]
    for extra, want in (([], [2, 2]), (["--rounds-at", "0.7"], [1, 2])):
        assert mod.main([*argv, "--rounds", "2", *extra]) == 0
        (model,) = json.loads(capsys.readouterr().out)
        rows = [r for r in model["rows"] if r["method"] == "recompute"]
        assert [r["budget"] for r in rows] == [0.9, 0.7]
        assert [len(r["round_ratios"]) for r in rows] == want, extra
        assert {r["method"] for r in model["rows"]} == {"recompute", "ckpt-all"}


def test_budget_overhead_rejects_unknown_method(tmp_path):
    mod = load_benchmark("budget_overhead")
    with pytest.raises(ConfigError, match="expected a comma-separated subset of recompute"):
        mod.main(["--quick", "--out", str(tmp_path), "--methods", "hybrid,mincutt"])


def test_budget_overhead_fresh_process_per_budget(capsys, tmp_path):
    """``--fresh-process`` runs each budget in a child process and merges the rows."""
    mod = load_benchmark("budget_overhead")
    argv = ["--quick", "--json", "--out", str(tmp_path), "--no-mincut", "--methods", "recompute"]
    assert mod.main([*argv, "--fresh-process"]) == 0
    (model,) = json.loads(capsys.readouterr().out)
    assert [(r["budget"], r["method"]) for r in model["rows"]] == [
        (0.9, "recompute"),
        (0.9, "ckpt-all"),  # in every child's rounds
        (0.7, "recompute"),
        (0.7, "ckpt-all"),
    ]
    assert len(model["child_peak_rss_bytes"]) == 2
    assert model["peak_rss_bytes"] == max(model["child_peak_rss_bytes"]) > 0
    assert all(r["within_budget"] for r in model["rows"] if r["method"] == "recompute")
    # the children appended their rows as they measured them
    lines = (tmp_path / "rows_ds-cnn.jsonl").read_text().splitlines()
    assert [json.loads(x)["budget"] for x in lines] == [0.9, 0.9, 0.7, 0.7]


def test_budget_overhead_profiles_repeat_budgets_in_fresh_processes(capsys, tmp_path):
    """``--profiles K`` measures every budget K times, each in its own child (own profile),
    tags the rows with their profile and summarises the ratios over profiles."""
    mod = load_benchmark("budget_overhead")
    argv = ["--quick", "--json", "--out", str(tmp_path), "--no-mincut", "--methods", "recompute"]
    assert mod.main([*argv, "--budgets", "0.9", "--profiles", "2", "--no-ckpt-all"]) == 0
    (model,) = json.loads(capsys.readouterr().out)
    rows = [r for r in model["rows"] if r["method"] == "recompute"]
    assert [(r["budget"], r["profile"]) for r in rows] == [(0.9, 0), (0.9, 1)]
    assert len(model["child_peak_rss_bytes"]) == 2
    (summ,) = model["by_profile"]
    assert (summ["budget"], summ["method"], summ["profiles"]) == (0.9, "recompute", [0, 1])
    assert summ["ratios"] == [r["ratio"] for r in rows]
    assert summ["median_ratio"] == pytest.approx(sum(summ["ratios"]) / 2)
    assert summ["peak_over_budget"] == [r["peak_over_budget"] for r in rows]
    with pytest.raises(ConfigError, match="--profiles 0"):
        mod.main([*argv, "--profiles", "0"])


def test_strip_options_drops_values_and_flags():
    mod = load_benchmark("budget_overhead")
    argv = ["--quick", "--models", "a:1", "--budgets=0.5", "--repeats", "3", "--json", "--x"]
    assert mod._strip_options(argv, ("--models", "--budgets"), ("--json", "--quick")) == ["--x"]


def test_budget_overhead_paired_and_aa_rows(capsys, tmp_path):
    """``--aa`` adds the A/A control and plain PyTorch; every planner row gets its ratio
    interval, and hybrid its paired ratio to recompute (same rounds, order statistics)."""
    mod = load_benchmark("budget_overhead")
    argv = ["--quick", "--json", "--out", str(tmp_path), "--no-mincut", "--no-ckpt-all"]
    assert mod.main([*argv, "--methods", "recompute,hybrid", "--aa", "--rounds", "3",
                     "--budgets", "0.9"]) == 0  # fmt: skip
    (model,) = json.loads(capsys.readouterr().out)
    rows = {r["method"]: r for r in model["rows"]}
    assert set(rows) == {"bare", "none-fast", "aa", "recompute", "hybrid"}
    assert rows["bare"]["measured_peak"] is None  # plain PyTorch: nothing measured
    assert rows["none-fast"]["measured_peak"] is None  # unaccounted executor
    assert rows["aa"]["measured_peak"] == model["unplanned_peak_bytes"]  # the empty plan
    for r in rows.values():
        v = r["vs_none"]
        assert v["rounds"] == 3 and v["lo"] <= v["median"] == r["ratio"] <= v["hi"]
        assert v["verdict"] == "level"  # 3 rounds never give a 90 % verdict
        assert r["steps_vs_none"]["rounds"] == 3  # --quick: 1 repeat per round
    vr = rows["hybrid"]["vs_recompute"]
    assert rows["hybrid"]["steps_vs_recompute"]["rounds"] == 3
    # the candidates the tie-break chose from: the chosen plan first
    assert rows["hybrid"]["candidates"][0]["predicted_overhead_s"] == pytest.approx(
        rows["hybrid"]["predicted_overhead_s"]
    )
    assert len(rows["hybrid"]["round_vs_recompute"]) == 3
    assert min(rows["hybrid"]["round_vs_recompute"]) == vr["min"] <= vr["median"] <= vr["max"]
    assert all("vs_recompute" not in rows[m] for m in ("bare", "none-fast", "aa", "recompute"))
    same = [u[0] for u in rows["hybrid"]["plan"]] == [u[0] for u in rows["recompute"]["plan"]]
    assert rows["hybrid"]["same_plan_as_recompute"] == (
        same and rows["hybrid"]["plan"] == rows["recompute"]["plan"]
    )


def test_only_kind_keeps_the_other_decisions():
    mod = load_benchmark("budget_overhead")
    from edgetrain.engine.budget.plan import ExecutionPlan, UnitDecision

    units = [
        UnitDecision("a", "recompute", saved_bytes=10, held_bytes=2, cost_s=0.5),
        UnitDecision("b", "compress", codec="mix", saved_bytes=8, held_bytes=1, cost_s=0.25),
        UnitDecision("c", "regen", saved_bytes=4, held_bytes=0, cost_s=0.125, chain=["b", "c"]),
        UnitDecision("d", "keep", saved_bytes=3, held_bytes=3),
    ]
    p = ExecutionPlan("hybrid", 20, 25, 6, 0.875, units)
    q = mod.only_kind(p, "compress")
    assert [(u.name, u.decision, u.codec, u.chain, u.held_bytes) for u in q.units] == [
        ("a", "keep", None, None, 10),
        ("b", "compress", "mix", None, 1),
        ("c", "keep", None, None, 4),
        ("d", "keep", None, None, 3),
    ]
    assert q.method == "hybrid-only-compress" and q.predicted_overhead_s == 0.25
    assert p.units[0].decision == "recompute"  # the full plan is untouched


def test_budget_overhead_by_kind(capsys, tmp_path):
    """``--by-kind`` times hybrid's plan split by decision kind in the same rounds: the
    parts' decisions partition hybrid's, each part has its measured overhead, and each is
    paired with ckpt-all like hybrid is."""
    mod = load_benchmark("budget_overhead")
    argv = ["--quick", "--json", "--out", str(tmp_path), "--no-mincut", "--methods", "hybrid"]
    assert mod.main([*argv, "--budgets", "0.4", "--rounds", "1", "--by-kind"]) == 0
    (model,) = json.loads(capsys.readouterr().out)
    rows = {r["method"]: r for r in model["rows"]}
    hyb = rows["hybrid"]
    kinds = {k for k, v in hyb["decisions"].items() if v and k != "keep"}
    assert len(kinds) >= 2  # the quick model's hybrid plan mixes kinds at 0.4
    assert set(rows) == {"hybrid", "ckpt-all"} | {f"hybrid-only-{k}" for k in kinds}
    parts = []
    for k in kinds:
        r = rows[f"hybrid-only-{k}"]
        assert {d for _, d in r["plan"]} == {k}
        parts += r["plan"]
        by_kind = hyb["predicted_by_kind"]
        want = by_kind.get(k, 0.0) + (by_kind.get("leafrc", 0.0) if k == "recompute" else 0.0)
        assert r["predicted_overhead_s"] == pytest.approx(want)
        # one round: overhead = (ratio - 1) x the same unplanned median, for every entry
        assert r["overhead_s"] * (hyb["ratio"] - 1) == pytest.approx(
            hyb["overhead_s"] * (r["ratio"] - 1), rel=1e-6, abs=1e-12
        )
        assert r["vs_ckpt_all"]["rounds"] == 1
        if k in ("recompute", "regen", "mask"):  # exact decisions
            assert r["grad_err"] == 0.0
        assert r["alloc_peak_bytes"] >= r["alloc_step_saved_peak"] > 0
    assert sorted(map(tuple, parts)) == sorted(map(tuple, hyb["plan"]))


def test_budget_alloc_model_benchmark_quick(capsys):
    """The all-allocation model's own benchmark: measured peaks within the budget, and
    the unplanned step predicted to the byte (its residual is measured on that step)."""
    assert load_benchmark("budget_alloc_model").main(["--quick", "--json"]) == 0
    (res,) = json.loads(capsys.readouterr().out)
    rows = res["rows"]
    assert rows[0]["method"] == "none" and rows[0]["error"] == 0
    planned = [r for r in rows if r["budget"] is not None]
    assert {r["budget"] for r in planned} == {"0.8", "min"}
    for r in planned:
        assert r["feasible"], r
        # the plan depends on the profiled timings, so name all of it when it is over
        # (round 24: one CI run's plan at the minimum held more than the budget)
        assert r["within_budget"], (
            f"{r['budget']}: held {r['held']:,} B > budget {r['budget_bytes']:,} "
            f"(predicted {r['predicted']:,}, torch-visible {r['measured']:,}, "
            f"seen {r['seen']:,}); {r['decisions']}; states {r['states']}"
        )
        assert r["measured"] <= r["budget_bytes"]
        assert -0.10 <= r["error"] <= 0.0, r  # over-prediction only, and by < 10 %
