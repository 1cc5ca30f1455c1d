"""benchmarks/fedhybrid_tta.py runs at tiny scale and prints the Table 3/4 layout as JSON."""

import json

import pytest

from bench_loader import load_benchmark


def test_tta_benchmark_quick(capsys):
    mod = load_benchmark("fedhybrid_tta")
    argv = ["--quick", "--aggregators", "fedprox", "--no-scale", "--json", "--extend", "1.5",
            "--methods", "random,oort,fedhybrid"]  # fmt: skip
    assert mod.main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    rows = out["tables"]["fedprox"]
    assert [r["method"] for r in rows][:3] == ["random", "oort", "fedhybrid"]
    assert rows[0]["speedup_vs_random"] == 1.0
    target = rows[0]["target_accuracy"]
    assert target == rows[0]["best_accuracy"]
    for r in rows:
        if "skipped" in r:
            continue
        assert 0.0 <= r["final_accuracy"] <= 1.0
        reached = r["best_accuracy"] >= target
        assert (r["time_to_target_s"] is not None) == reached
        # below the target a method may run on (up to 1.5 x 3 rounds) while its simulated
        # time is below Random's
        assert r["rounds"] == 3 or (r["rounds"] == 4 and r["method"] != "random")
        parts = r["participation"]  # [selected, completed] per memory class
        assert sum(v[0] for v in parts.values()) >= 4 * 3
        assert all(0 <= v[1] <= v[0] for v in parts.values())
        assert r["regenerations"] >= 0 and r["compressed_clients"] >= 0
        e = r["exposure"]  # counted up to the target (every round when not reached)
        assert 1 <= e["rounds"] <= r["rounds"]
        assert 0 <= e["planned_aggregated"] <= e["planned"] + e["pressure"]
        assert e["regenerations"] <= r["regenerations"]
        # the selector's reach: every aggregated client was selected
        assert 1 <= e["distinct_aggregated"] <= e["distinct_selected"]
        assert 0.0 < e["top_decile_share"] <= 1.0
        # repeats need two rounds up to the target; some data was trained on
        assert e["repeat_share"] is None or 0.0 <= e["repeat_share"] <= 1.0
        assert 0.0 < e["data_coverage"] <= 1.0
    assert [r["method"] for r in rows] == ["random", "oort", "fedhybrid"]
    abl = [r["method"] for r in out["ablations"]["fedprox"]]
    assert abl == ["random", "fedhybrid", "fedhybrid-noselector", "fedhybrid-nooptimizer",
                   "fedhybrid-nocompress", "fedhybrid-nopredictor"]  # fmt: skip


def test_tta_benchmark_scale_flags_conflict(capsys):
    mod = load_benchmark("fedhybrid_tta")
    with pytest.raises(SystemExit) as e:
        mod.main(["--scale-only", "--no-scale"])
    assert e.value.code == 2
    assert "--scale-only and --no-scale exclude each other" in capsys.readouterr().err


def test_tta_benchmark_oort_settings(capsys):
    """--oort KEY=VALUE reaches every Oort-selected method and is recorded; a bad key or
    value is refused with what is accepted."""
    mod = load_benchmark("fedhybrid_tta")
    base = ["--quick", "--aggregators", "fedprox", "--no-scale", "--no-ablations", "--json",
            "--methods", "random,oort"]  # fmt: skip
    assert mod.main(base) == 0
    plain = json.loads(capsys.readouterr().out)
    assert "oort" not in plain["semantics"]
    assert mod.main(base + ["--oort", "exploit_draw=top", "--oort", "exploration_factor=0"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["semantics"]["oort"] == {"exploit_draw": "top", "exploration_factor": 0.0}

    def rows(o):  # everything a row says but its wall time
        return {
            r["method"]: {k: v for k, v in r.items() if k != "wall_s"}
            for r in o["tables"]["fedprox"]
        }

    assert rows(out)["random"] == rows(plain)["random"]
    assert rows(out)["oort"] != rows(plain)["oort"]
    for bad, msg in (
        ("foo=1", "KEY one of exploration_factor"),
        ("round_penalty=-1", "round_penalty"),
    ):
        with pytest.raises(SystemExit) as e:
            mod.main(base + ["--oort", bad])
        assert e.value.code == 2 and msg in capsys.readouterr().err


def _rows_recs(accs: dict[str, list[float]]):
    rows = [
        {"method": m, "final_accuracy": a[-1], "best_accuracy": max(a)} for m, a in accs.items()
    ]
    recs = {m: [{"accuracy": x} for x in a] for m, a in accs.items()}
    return rows, recs


def test_oracle_summary_is_fig1_on_the_fleet():
    mod = load_benchmark("fedhybrid_tta")
    rows, recs = _rows_recs({
        "random": [0.1] * 8,
        "oort": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.6],
        "fedhybrid": [0.1, 0.3, 0.5, 0.6, 0.6, 0.7, 0.8, 0.75],
        "oort-oracle": [0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.7, 0.9],  # one extended round
    })  # fmt: skip
    out = mod.oracle_summary(rows, recs)
    assert out["common_rounds"] == 8 and out["last_rounds"] == 1
    assert out["final"]["wall_points"] == pytest.approx(30.0)  # 0.9 - 0.6
    assert out["final"]["fedhybrid_vs_oort_points"] == pytest.approx(15.0)
    assert out["final"]["fedhybrid_vs_oracle_points"] == pytest.approx(-15.0)
    assert out["best"]["wall_points"] == pytest.approx(20.0)  # 0.9 - 0.7
    # the last eighth of the 8 common rounds: round 8 alone, not the oracle's extra round
    assert out["last_mean"]["wall_points"] == pytest.approx(10.0)
    assert out["last_mean"]["fedhybrid_vs_oracle_points"] == pytest.approx(5.0)
    assert "selector_points" not in out["final"]
    rows3, recs3 = _rows_recs({
        "random": [0.1] * 8, "oort": [0.5] * 8, "fedhybrid": [0.6] * 8,
        "oort-oracle": [0.55] * 8, "fedhybrid-oracle": [0.52] * 7 + [0.65],
    })  # fmt: skip
    sel = mod.oracle_summary(rows3, recs3)
    assert sel["final"]["selector_points"] == pytest.approx(10.0)  # 0.65 - 0.55
    assert sel["last_mean"]["selector_points"] == pytest.approx(10.0)
    assert sel["best"]["wall_points"] == pytest.approx(5.0)
    rows2, recs2 = _rows_recs({"random": [0.1], "oort": [0.2], "fedhybrid": [0.3]})
    assert mod.oracle_summary(rows2, recs2) is None  # no oracle row, no block


def test_tta_benchmark_prints_the_oracle_block(capsys):
    mod = load_benchmark("fedhybrid_tta")
    argv = ["--quick", "--aggregators", "fedprox", "--no-scale", "--no-ablations",
            "--methods", "random,oort,fedhybrid,oort-oracle,fedhybrid-oracle"]  # fmt: skip
    assert mod.main(argv) == 0
    text = capsys.readouterr().out
    assert "the memory wall = Oort-Oracle - Oort" in text
    assert "FedHybrid-Oracle - Oort-Oracle (the selectors, no wall)" in text
    assert "oort-oracle" in text and "final round" in text


def test_held_summary_splits_the_accuracy_by_who_holds_the_class():
    mod = load_benchmark("fedhybrid_tta")
    ca = lambda a, b: [a, a, b, b]  # noqa: E731 -- classes 2 and 3 held
    recs = {
        "oort": [{"class_accuracy": ca(0.8, 0.0)}] * 8,
        "fedhybrid": [{"class_accuracy": ca(0.9, 0.1)}] * 7 + [{"class_accuracy": ca(0.7, 0.5)}],
    }
    out = mod.held_summary(recs, (2, 3))
    assert out["classes"] == [2, 3] and out["last_rounds"] == 1
    assert out["oort"] == {"final_held": 0.0, "final_other": 0.8, "last_held": 0.0,
                           "last_other": 0.8}  # fmt: skip
    assert out["fedhybrid"]["final_held"] == pytest.approx(0.5)
    assert out["fedhybrid"]["final_other"] == pytest.approx(0.7)
    assert mod.held_summary(recs, ()) is None


def test_tta_benchmark_prints_the_held_block(capsys):
    mod = load_benchmark("fedhybrid_tta")
    argv = ["--quick", "--aggregators", "fedprox", "--no-scale", "--no-ablations",
            "--methods", "random,oort,fedhybrid", "--low-memory-classes", "2",
            "--partial-work", "--json"]  # fmt: skip
    assert mod.main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    held = out["held"]["fedprox"]
    assert len(held["classes"]) == 2
    assert {"random", "oort", "fedhybrid"} <= set(held)
    assert out["semantics"]["partial_work"] is True
