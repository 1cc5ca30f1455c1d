"""benchmarks/fedhybrid_curves.py: a gain at equal rounds read window by window against
BASE's accuracy there, and the rounds each run takes to reach fractions of BASE's best."""

import json
import math

import pytest

from bench_loader import load_benchmark
from fed_small import tiny_compare

CFG = {"seed": 3, "data": {"name": "d"}, "fleet": {"clients": 4}, "partition": {"alpha": 0.1},
       "memory": {"m_g": 1}, "model": {"name": "m"}, "federated": {"rounds": 30}}  # fmt: skip


def _run(path, acc, cfg=CFG, dt=2.0):
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(cfg))
    recs = [{"round": t + 1, "accuracy": a, "sim_time_s": dt * (t + 1)} for t, a in enumerate(acc)]
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def _rise(n, shift, top):
    """A linear rise from 0.1 to ``top`` over 20 rounds, started ``shift`` rounds early, then flat."""
    return [min(top, 0.1 + (top - 0.1) * max(0, t + shift) / 20) for t in range(n)]


def test_a_curve_shifted_early_leads_while_both_rise_and_trails_at_its_lower_plateau(
    tmp_path, capsys
):
    mod = load_benchmark("fedhybrid_curves")
    base = _run(tmp_path / "b", _rise(30, 0, 0.6))
    other = _run(tmp_path / "o", _rise(30, 8, 0.55), dt=1.0)  # 8 rounds ahead, half-length rounds
    assert mod.main(["--pair", str(base), str(other), "--size", "10", "--smooth", "1",
                     "--levels", "0.5,0.9,1", "--json"]) == 0  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    (row,) = out["rows"]
    assert row["rounds"] == 30 and row["base_best"] == pytest.approx(0.6)
    w = {x["window"]: x for x in row["windows"]}
    assert list(w) == ["1-10", "11-20", "21-30"]
    b, o = _rise(30, 0, 0.6), _rise(30, 8, 0.55)
    for lo in (1, 11, 21):
        mb, mo = sum(b[lo - 1 : lo + 9]) / 10, sum(o[lo - 1 : lo + 9]) / 10
        assert w[f"{lo}-{lo + 9}"]["gain"] == pytest.approx(100 * (mo - mb))
        assert w[f"{lo}-{lo + 9}"]["base"] == pytest.approx(mb)
    assert w["1-10"]["gain"] > 5 and w["21-30"]["gain"] < 0  # ahead early, below at the end
    half, ninety, full = row["reach"]
    # BASE reaches 0.3 at 0.1 + 0.5 t / 20 >= 0.3: t = 8 (round 9); OTHER at t + 8 >= 8.8: round 2
    assert half["rounds"] == [9, 2] and half["rounds_ratio"] == pytest.approx(4.5)
    assert half["sim_time_s"] == [18.0, 2.0] and half["time_ratio"] == pytest.approx(9.0)
    # in round 9 (BASE at 0.3) OTHER is at 0.1 + 0.45 * 16 / 20 = 0.46
    assert half["gain_at_base"] == pytest.approx(16.0)
    assert ninety["rounds"][1] is not None and ninety["rounds_ratio"] > 1
    assert full["rounds"] == [21, None] and full["rounds_ratio"] == 0.0  # OTHER never gets there
    assert full["gain_at_base"] == pytest.approx(100 * (0.55 - 0.6))  # OTHER's plateau below
    med = out["median"]
    assert med["pairs"] == 1 and med["levels"][2]["other_reached"] == 0
    assert med["levels"][0]["gain_at_base"]["median"] == pytest.approx(16.0)
    # --absolute: the levels are accuracies; 0.3 is the half of BASE's best above
    assert mod.main(["--pair", str(base), str(other), "--smooth", "1", "--absolute",
                     "--levels", "0.3,0.58", "--json"]) == 0  # fmt: skip
    abs_half, abs_top = json.loads(capsys.readouterr().out)["rows"][0]["reach"]
    assert abs_half["rounds"] == [9, 2] and abs_half["accuracy"] == 0.3
    assert abs_top["rounds"] == [21, None]  # 0.1 + 0.5 t / 20 >= 0.58 from t = 20 (round 21)
    # the pair swapped: only OTHER reaches 0.58, an infinite ratio, null in strict JSON
    assert mod.main(["--pair", str(other), str(base), "--smooth", "1", "--absolute",
                     "--levels", "0.58", "--json"]) == 0  # fmt: skip
    text = capsys.readouterr().out
    assert "Infinity" not in text
    (swapped,) = json.loads(text)["rows"][0]["reach"]
    assert swapped["rounds"] == [None, 21] and swapped["rounds_ratio"] is None
    assert math.isinf(mod.compare_pair(other, base, 10, (0.58,), 1, absolute=True)["reach"][0][
        "rounds_ratio"])  # fmt: skip


def test_medians_and_sign_tests_over_pairs(tmp_path, capsys):
    mod = load_benchmark("fedhybrid_curves")
    args = []
    for i, shift in enumerate((2, 4, 6, -3)):
        cfg = CFG | {"seed": i}
        b = _run(tmp_path / f"b{i}", _rise(20, 0, 0.6), cfg)
        o = _run(tmp_path / f"o{i}", _rise(20, shift, 0.6), cfg)
        args += ["--pair", str(b), str(o)]
    assert mod.main([*args, "--size", "20", "--levels", "0.5", "--smooth", "1", "--json"]) == 0
    med = json.loads(capsys.readouterr().out)["median"]
    (win,) = med["windows"]
    assert win["above_zero"] == 3 and win["below_zero"] == 1
    assert win["sign_p"] == pytest.approx(0.625)  # 2 * P(X >= 3), X ~ Bin(4, 1/2)
    (lv,) = med["levels"]
    # BASE at round 9 (t = 8); OTHER at t = 8 - shift: rounds 7, 5, 3, 12
    ratios = sorted([9 / 7, 9 / 5, 9 / 3, 9 / 12])
    assert lv["rounds_ratio"]["median"] == pytest.approx((ratios[1] + ratios[2]) / 2)
    assert lv["rounds_ratio"]["above_one"] == 3 and lv["rounds_ratio"]["below_one"] == 1
    assert lv["base_reached"] == lv["other_reached"] == 4


def test_who_trained_per_window_from_the_aggregated_clients_and_labels(tmp_path, capsys):
    mod = load_benchmark("fedhybrid_curves")
    base = _run(tmp_path / "b", [0.1, 0.2, 0.3, 0.4])
    other = _run(tmp_path / "o", [0.1, 0.3, 0.4, 0.5])
    recs = [json.loads(x) for x in (other / "metrics.jsonl").read_text().splitlines()]
    # round 1: clients 1, 2 with 10 + 10 samples of two classes; round 2: clients 2, 3 with
    # 40 samples, 3:1 over two classes; rounds 3-4 aggregate nobody
    recs[0] |= {"aggregated": [1, 2], "aggregated_labels": [10, 10] + [0] * 8}
    recs[1] |= {"aggregated": [2, 3], "aggregated_labels": [30] + [0] * 8 + [10]}
    recs[2] |= {"aggregated": [], "aggregated_labels": [0] * 10}
    (other / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    cells = mod.cohorts(recs, 4)
    assert cells[0] == {"classes": 2.0, "samples": 10.0, "repeat": None}
    assert cells[1] == pytest.approx({"classes": 1 / (0.75**2 + 0.25**2), "samples": 20.0,
                                      "repeat": 0.5})  # fmt: skip
    assert cells[2] is None and cells[3] is None
    assert mod.main(["--pair", str(base), str(other), "--size", "2", "--json"]) == 0
    w1, w2 = json.loads(capsys.readouterr().out)["rows"][0]["windows"]
    assert w1["classes"] == [None, pytest.approx((2.0 + 1.6) / 2)]  # BASE has no such fields
    assert w1["samples"] == [None, 15.0] and w1["repeat"] == [None, 0.5]
    assert w2["classes"] == [None, None]
    assert mod.main(["--pair", str(base), str(other), "--size", "2"]) == 0
    assert "who trained" in capsys.readouterr().out  # printed where a run has the fields


def test_reach_ratio_and_moving_mean():
    mod = load_benchmark("fedhybrid_curves")
    assert mod.reach_ratio(10, 5) == 2.0
    assert mod.reach_ratio(10, None) == 0.0
    assert math.isinf(mod.reach_ratio(None, 5))
    assert mod.reach_ratio(None, None) is None
    assert mod.moving_mean([1.0, 3.0, 5.0, 7.0], 2) == [1.0, 2.0, 4.0, 6.0]
    assert mod.first_reach([0.1, 0.5, 0.4, 0.6], 0.45) == 2
    assert mod.first_reach([0.1, 0.2], 0.45) is None


def test_bad_input_is_one_error_naming_what_was_wrong(tmp_path, capsys):
    mod = load_benchmark("fedhybrid_curves")
    base = _run(tmp_path / "b", _rise(20, 0, 0.6))
    other_seed = _run(tmp_path / "o", _rise(20, 0, 0.6), CFG | {"seed": 4})
    assert mod.main(["--pair", str(base), str(other_seed)]) == 2
    assert "differ in seed" in capsys.readouterr().err
    short = _run(tmp_path / "s", _rise(12, 0, 0.6))
    assert mod.main(["--pair", str(base), str(short), "--rounds", "20"]) == 2
    assert "12 rounds in metrics.jsonl, fewer than 20" in capsys.readouterr().err
    assert mod.main(["--pair", str(base), str(short), "--size", "15"]) == 2
    assert "fewer than one window (--size 15)" in capsys.readouterr().err
    gap = tmp_path / "g"
    _run(gap, _rise(20, 0, 0.6))
    recs = [json.loads(x) for x in (gap / "metrics.jsonl").read_text().splitlines()]
    recs[4]["accuracy"] = None  # an unevaluated round
    (gap / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert mod.main(["--pair", str(base), str(gap)]) == 2
    assert "rounds 5 have no test accuracy" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        mod.main(["--pair", str(base), str(base), "--levels", "0.5,1.5"])
    assert "expected comma-separated fractions" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        mod.main(["--pair", str(base), str(base), "--size", "0"])
    assert "--size 0: expected a whole number of rounds >= 1" in capsys.readouterr().err


def test_reads_real_run_directories_and_prints_the_table(tmp_path, capsys):
    mod = load_benchmark("fedhybrid_curves")
    _, run_dir = tiny_compare(tmp_path, "random,oort", rounds=3, local_steps=2)
    pair = ["--pair", str(run_dir / "random"), str(run_dir / "oort")]
    assert mod.main([*pair, "--size", "1", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    recs = {
        m: [json.loads(x) for x in (run_dir / m / "metrics.jsonl").read_text().splitlines()]
        for m in ("random", "oort")
    }
    assert row["rounds"] == min(len(recs["random"]), len(recs["oort"]))
    assert row["windows"][0]["gain"] == pytest.approx(
        100 * (recs["oort"][0]["accuracy"] - recs["random"][0]["accuracy"])
    )
    agg = recs["oort"][0]
    if agg["aggregated"]:
        labels = agg["aggregated_labels"]
        assert row["windows"][0]["samples"][1] == pytest.approx(
            sum(labels) / len(agg["aggregated"])
        )
    assert mod.main([*pair, "--size", "1"]) == 0
    text = capsys.readouterr().out
    assert "OTHER - BASE by window" in text and "BASE / OTHER reached" in text
    assert "who trained" in text
