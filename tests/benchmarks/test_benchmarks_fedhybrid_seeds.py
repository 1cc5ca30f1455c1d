"""benchmarks/fedhybrid_seeds.py: the seed table over fedhybrid_tta.py JSON files."""

import json

import pytest

from bench_loader import load_benchmark
from fed_small import tiny_compare


def _run(seed, fh, oort, oracle_final, fh_time, oort_time, held=None):
    rows = [
        {"method": "random", "target_accuracy": 0.7, "speedup_vs_random": 1.0,
         "final_accuracy": 0.7, "time_to_target_s": 100.0},
        {"method": "oort", "speedup_vs_random": 100.0 / oort_time if oort_time else None,
         "final_accuracy": oort, "time_to_target_s": oort_time},
        {"method": "fedhybrid", "speedup_vs_random": 100.0 / fh_time,
         "final_accuracy": fh, "time_to_target_s": fh_time},
        {"method": "heterofl", "skipped": "no width"},
    ]  # fmt: skip
    run = {
        "seed": seed,
        "tables": {"fedprox": rows},
        "oracle": {"fedprox": {
            "final": {"wall_points": 100 * (oracle_final - oort)},
            "last_mean": {"wall_points": 1.0, "fedhybrid_vs_oort_points": 100 * (fh - oort),
                          "fedhybrid_vs_oracle_points": 0.0},
        }},
    }  # fmt: skip
    if held is not None:
        run["held"] = {"fedprox": {"classes": [4, 5], "last_rounds": 5, **held}}
    return run


def _write_runs(tmp_path, stem, runs):
    """Each run as ``STEM_sI.json`` (I = its place, the seed the file name gives); the paths."""
    files = []
    for i, run in enumerate(runs):
        p = tmp_path / f"{stem}_s{i}.json"
        p.write_text(json.dumps(run))
        files.append(str(p))
    return files


def test_the_seed_table_is_the_median_of_the_per_seed_figures(tmp_path, capsys):
    mod = load_benchmark("fedhybrid_seeds")
    h = lambda a, b: {"final_held": a, "final_other": b, "last_held": a, "last_other": b}  # noqa: E731
    runs = [
        _run(0, 0.80, 0.70, 0.72, 10.0, 50.0, {"fedhybrid": h(0.4, 0.8), "oort": h(0.0, 0.8)}),
        _run(1, 0.75, 0.74, 0.74, 20.0, None, {"fedhybrid": h(0.2, 0.7), "oort": h(0.0, 0.9)}),
        _run(2, 0.78, 0.70, 0.70, 25.0, 30.0, {"fedhybrid": h(0.3, 0.6), "oort": h(0.1, 0.7)}),
    ]
    files = _write_runs(tmp_path, "x", runs)
    assert mod.main([*files, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    med = out["median"]
    assert out["seeds"] == 3
    assert med["fedhybrid_vs_random"] == pytest.approx(5.0)  # 10, 5, 4
    # 5.0 and 1.2; seed 1's Oort never reached the target: counted apart, not in the median
    assert med["fedhybrid_vs_oort"] == pytest.approx(3.1) and med["oort_missed"] == 1
    assert med["final_points"] == pytest.approx(8.0)  # +10, +1, +8
    assert med["final_5_points"] == 2 and med["fedhybrid_5x_random"] == 2
    assert med["fedhybrid_2x_oort"] == 2  # seed 0 (5.0x) and seed 1 (Oort never got there)
    assert med["wall_final_points"] == pytest.approx(0.0)  # +2, 0, 0
    assert med["held_last"] == {"fedhybrid": pytest.approx(0.3), "oort": pytest.approx(0.0)}
    assert mod.main(files) == 0
    text = capsys.readouterr().out
    assert "median" in text and "only low-memory phones hold" in text


def test_a_file_that_is_not_a_run_is_one_clear_error(tmp_path, capsys):
    mod = load_benchmark("fedhybrid_seeds")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert mod.main([str(bad)]) == 2
    assert "not a readable fedhybrid_tta.py JSON file" in capsys.readouterr().err
    other = tmp_path / "y.json"
    other.write_text(json.dumps({"tables": {"fedyogi": []}}))
    assert mod.main([str(other)]) == 2
    assert "no 'fedprox' table; it has ['fedyogi']" in capsys.readouterr().err


def test_method_compares_another_method_from_the_curves(tmp_path, capsys):
    """``--method`` puts another method in FedHybrid's column: its speedups and final points
    from the table, its last-eighth points against Oort from the curves (16 rounds: the
    last 2)."""
    mod = load_benchmark("fedhybrid_seeds")
    run = _run(0, 0.80, 0.70, 0.72, 10.0, 50.0)
    run["tables"]["fedprox"].append(
        {"method": "fedhybrid-oortselector", "speedup_vs_random": 4.0, "final_accuracy": 0.76,
         "time_to_target_s": 25.0}
    )  # fmt: skip
    flat = lambda a, last: [[float(i), a] for i in range(14)] + [[14.0, last], [15.0, last]]  # noqa: E731
    run["curves"] = {"fedprox": {"oort": flat(0.5, 0.70), "oort-oracle": flat(0.5, 0.75),
                                 "fedhybrid-oortselector": flat(0.9, 0.76)}}  # fmt: skip
    p = tmp_path / "r_s0.json"
    p.write_text(json.dumps(run))
    assert mod.main([str(p), "--method", "fedhybrid-oortselector", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["rows"][0]
    assert row["method"] == "fedhybrid-oortselector"
    assert row["fedhybrid_vs_random"] == 4.0 and row["fedhybrid_vs_oort"] == pytest.approx(2.0)
    assert row["final_points"] == pytest.approx(6.0)
    assert row["last_points"] == pytest.approx(6.0)  # rounds 15-16: 0.76 - 0.70
    assert row["vs_oracle_last_points"] == pytest.approx(1.0)
    assert mod.main([str(p), "--method", "heterofl-x"]) == 2
    assert "did not run 'heterofl-x'" in capsys.readouterr().err


def test_fig17_ablations_are_summarised_over_seeds(tmp_path, capsys):
    """Each ablation's time to target and seconds per round over its reference's (FedHybrid's;
    without the selector's for the -noselector-* checks), median over seeds; a variant that
    never reaches the target counts as slower and stays out of the time median."""
    mod = load_benchmark("fedhybrid_seeds")

    def abl(name, t, sim, rounds=10):
        return {"method": name, "time_to_target_s": t, "sim_time_s": sim, "rounds": rounds}

    runs = []
    for seed, (nopred, noopt) in enumerate([(120.0, 90.0), (None, 110.0), (100.0, 130.0)]):
        run = _run(seed, 0.80, 0.70, 0.72, 10.0, 50.0)
        run["ablations"] = {"fedprox": [
            abl("random", 500.0, 900.0), abl("fedhybrid", 100.0, 200.0),
            abl("fedhybrid-nopredictor", nopred, 300.0),
            abl("fedhybrid-noselector", 200.0, 400.0),
            abl("fedhybrid-noselector-nooptimizer", noopt * 4, 800.0, rounds=20),
        ]}  # fmt: skip
        runs.append(run)
    files = _write_runs(tmp_path, "a", runs)
    assert mod.main([*files, "--json"]) == 0
    a = json.loads(capsys.readouterr().out)["ablations"]
    pred = a["fedhybrid-nopredictor"]
    assert pred["time_ratio"] == pytest.approx(1.1)  # 1.2 and 1.0; seed 1 never reached it
    assert pred["round_ratio"] == pytest.approx(1.5)  # 30 s against 20 s per round
    assert (pred["slower"], pred["slower_5pct"], pred["missed"]) == (2, 2, 1)
    opt = a["fedhybrid-noselector-nooptimizer"]  # against fedhybrid-noselector's 200 s
    assert opt["time_ratio"] == pytest.approx(2.2)  # 1.8, 2.2, 2.6
    assert opt["round_ratio"] == pytest.approx(1.0)  # 40 s per round against 40 s
    assert opt["slower"] == 3 and a["fedhybrid-noselector"]["time_ratio"] == pytest.approx(2.0)
    assert mod.main(files) == 0
    assert "fedhybrid-nopredictor" in capsys.readouterr().out


def test_table4_lead_and_windows_over_seeds(tmp_path, capsys):
    """Table 4: the fastest of Oort + Melon / Capuchin / GACT over FedHybrid's time to
    target (a seed where none of them reaches it is counted as ahead and left out of the
    median); ``--window A-B``: FedHybrid - Oort over rounds A..B from the curves, None
    where a run stopped before B."""
    mod = load_benchmark("fedhybrid_seeds")
    runs = []
    for seed, (t4, n) in enumerate([((30.0, 20.0, None), 12), ((None, None, None), 12),
                                    ((5.0, 40.0, 50.0), 8)]):  # fmt: skip
        run = _run(seed, 0.80, 0.70, 0.72, 10.0, 50.0)
        for name, t in zip(mod.TABLE4, t4, strict=True):
            run["tables"]["fedprox"].append(
                {"method": name, "speedup_vs_random": None if t is None else 100.0 / t,
                 "final_accuracy": 0.7, "time_to_target_s": t}
            )  # fmt: skip
        # FedHybrid 0.5 then 0.9 from round 9; Oort 0.6 throughout
        run["curves"] = {"fedprox": {
            "fedhybrid": [[float(i), 0.5 if i < 8 else 0.9] for i in range(n)],
            "oort": [[float(i), 0.6] for i in range(n)],
        }}  # fmt: skip
        runs.append(run)
    files = _write_runs(tmp_path, "t", runs)
    args = [*files, "--window", "1-4", "--window", "9-12"]
    assert mod.main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows, med = out["rows"], out["median"]
    assert [r["table4_vs_fastest"] for r in rows] == [pytest.approx(2.0), None, pytest.approx(0.5)]
    assert med["table4_vs_fastest"] == pytest.approx(1.25)  # 2.0 and 0.5
    # ahead on seed 0, and on seed 1 (none of them got there)
    assert (med["table4_ahead"], med["table4_seeds"]) == (2, 3)
    assert [r["window_points"]["1-4"] for r in rows] == [pytest.approx(-10.0)] * 3
    assert [r["window_points"]["9-12"] for r in rows][:2] == [pytest.approx(30.0)] * 2
    assert rows[2]["window_points"]["9-12"] is None  # seed 2 stopped at round 8
    assert med["window_points"]["9-12"] == pytest.approx(30.0)
    assert (med["window_5_points"]["9-12"], med["window_seeds"]["9-12"]) == (2, 2)
    assert mod.main(args) == 0
    text = capsys.readouterr().out
    assert "ahead on 2 of 3 (per seed: 2.00 / - / 0.50)" in text
    assert "rounds 9-12: fedhybrid - Oort +30.0 points in the median of 2 seeds" in text


@pytest.mark.parametrize("bad", ["80", "80-71", "0-5", "a-b", "-3"])
def test_a_malformed_window_is_one_clear_error(bad, tmp_path, capsys):
    mod = load_benchmark("fedhybrid_seeds")
    p = tmp_path / "w_s0.json"
    p.write_text(json.dumps(_run(0, 0.8, 0.7, 0.72, 10.0, 50.0)))
    with pytest.raises(SystemExit) as e:
        mod.main([str(p), "--window", bad])
    assert e.value.code == 2
    assert "expected FIRST-LAST rounds, 1-based, e.g. 71-80" in capsys.readouterr().err


def test_fig17_over_equal_rounds_reads_the_curves(tmp_path, capsys):
    """Simulated time over equal rounds: each curve's time at the last round both ran, over
    the reference's (the ablation ran 6 rounds, FedHybrid 4: read at round 4)."""
    mod = load_benchmark("fedhybrid_seeds")
    run = _run(0, 0.80, 0.70, 0.72, 10.0, 50.0)
    run["ablations"] = {"fedprox": [
        {"method": "fedhybrid", "time_to_target_s": 100.0, "sim_time_s": 40.0, "rounds": 4},
        {"method": "fedhybrid-nocompress", "time_to_target_s": 90.0, "sim_time_s": 90.0,
         "rounds": 6},
    ]}  # fmt: skip
    run["curves"] = {"fedprox": {
        "fedhybrid": [[10.0 * (i + 1), 0.5] for i in range(4)],
        "fedhybrid-nocompress": [[12.0 * (i + 1), 0.5] for i in range(6)],
    }}  # fmt: skip
    p = tmp_path / "e_s0.json"
    p.write_text(json.dumps(run))
    assert mod.main([str(p), "--json"]) == 0
    a = json.loads(capsys.readouterr().out)["ablations"]["fedhybrid-nocompress"]
    assert a["equal_rounds_ratio"] == pytest.approx(48.0 / 40.0)
    assert a["round_ratio"] == pytest.approx(1.5)  # 15 s against 10 s per round
    assert a["time_ratio"] == pytest.approx(0.9) and a["equal_rounds_slower"] == 1


def test_equal_simulated_time_reads_the_last_eighth_of_the_common_time(tmp_path, capsys):
    """Fig. 15's axis: both runs read over the last eighth of the time both reached (here
    FedHybrid's 16 s: [14, 16]); a run with no round ending there counts the accuracy it
    holds at 16 s (seed 1's Oort: its round ending at 9 s)."""
    mod = load_benchmark("fedhybrid_seeds")
    runs = []
    for seed, oort in enumerate([
        [[4.0 * (i + 1), 0.6 if i == 3 else 0.5] for i in range(8)],  # rounds end 4, 8, ..., 32 s
        [[9.0 * (i + 1), 0.55] for i in range(4)],  # 9, 18, 27, 36 s
    ]):  # fmt: skip
        run = _run(seed, 0.80, 0.70, 0.72, 10.0, 50.0)
        run["curves"] = {"fedprox": {
            "fedhybrid": [[float(i + 1), 0.9 if i >= 11 else 0.2] for i in range(16)],
            "oort": oort,
        }}  # fmt: skip
        runs.append(run)
    files = _write_runs(tmp_path, "q", runs)
    assert mod.main([*files, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = out["rows"]
    # seed 0: FedHybrid's 14, 15, 16 s rounds at 0.9, Oort's 16 s round at 0.6
    assert rows[0]["equal_time_points"] == pytest.approx(30.0)
    assert rows[0]["equal_time"] == {"points": pytest.approx(30.0), "time_s": 16.0,
                                     "rounds": 16, "ref_rounds": 4}  # fmt: skip
    assert rows[1]["equal_time_points"] == pytest.approx(35.0)  # 0.55 held since 9 s
    # the oracle block's readings stay the oracle block's where the curves are read too
    assert [r["vs_oracle_last_points"] for r in rows] == [0.0, 0.0]
    assert rows[1]["equal_time"]["ref_rounds"] == 1
    assert out["median"]["equal_time_points"] == pytest.approx(32.5)
    assert out["median"]["equal_time_5_points"] == 2
    assert mod.main(files) == 0
    text = capsys.readouterr().out
    assert "fedhybrid - Oort +32.5 points in the median (>= +5 on 2 of 2" in text
    assert "rounds by then, per seed: 16:4 / 16:1)" in text


def test_a_federate_compare_run_directory_is_read_as_one_seed(tmp_path, capsys):
    """The README's examples are tabled from their own run directories: the seed from the
    config, the figures from summary.json, the windows from each method's metrics.jsonl."""
    summary, run_dir = tiny_compare(tmp_path, "random,oort,fedhybrid")

    mod = load_benchmark("fedhybrid_seeds")
    # the run directory itself, or the folder that holds it
    for arg in (run_dir, tmp_path / "runs"):
        assert mod.main([str(arg), "--json", "--window", "1-2"]) == 0
        row = json.loads(capsys.readouterr().out)["rows"][0]
        assert row["seed"] == 2
        assert row["fedhybrid_vs_random"] == summary["fedhybrid"]["speedup_vs_random"]
        assert row["oort_vs_random"] == summary["oort"]["speedup_vs_random"]

        def acc(m):
            lines = (run_dir / m / "metrics.jsonl").read_text().splitlines()
            return [json.loads(x)["accuracy"] for x in lines]

        fh, oo = acc("fedhybrid"), acc("oort")
        want = 100 * ((fh[0] + fh[1]) / 2 - (oo[0] + oo[1]) / 2)
        assert row["window_points"]["1-2"] == pytest.approx(want)
        recs = [
            json.loads(x) for x in (run_dir / "random" / "metrics.jsonl").read_text().splitlines()
        ]
        killed = sum(x["outcomes"]["killed"] for x in recs) / len(recs)
        ran_out = sum(x["round_time_s"] == pytest.approx(x["deadline_s"]) for x in recs)
        assert row["failures"]["random"] == {
            "killed_per_round": pytest.approx(killed),
            "deadline_share": pytest.approx(ran_out / len(recs)),
        }
        rnd = json.loads((run_dir / "summary.json").read_text())[0]
        assert row["round_s"]["random"] == pytest.approx(rnd["sim_time_s"] / rnd["rounds"])

    # a folder with no run directory, and one whose method lost its metrics
    (tmp_path / "empty").mkdir()
    assert mod.main([str(tmp_path / "empty")]) == 2
    assert "expected one 'edgetrain federate --compare' run directory" in capsys.readouterr().err
    (run_dir / "oort" / "metrics.jsonl").unlink()
    assert mod.main([str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "not a complete --compare run directory" in err and "metrics.jsonl" in err


def test_compare_runs_of_one_seed_and_config_are_merged(tmp_path, capsys):
    """Table 4's baselines and Fig. 17's ablations run beside the seed table's methods
    later: directories of one config and seed are one seed, a method they share must agree,
    and runs of another seed stay apart."""
    import shutil

    mod = load_benchmark("fedhybrid_seeds")
    first, a = tiny_compare(tmp_path, "random,oort,fedhybrid", "a")
    second, b = tiny_compare(
        tmp_path, "random,oort+recompute,fedhybrid-nopredictor,oort-oracle", "b"
    )
    c = tmp_path / "c"  # the same runs recorded under another seed
    shutil.copytree(a, c)
    cfg = json.loads((c / "config.json").read_text())
    (c / "config.json").write_text(json.dumps({**cfg, "seed": 3}))
    assert mod.main([str(a), str(b), str(c), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["seed"] for r in out["rows"]] == [2, 3]
    row = out["rows"][0]
    assert row["fedhybrid_vs_random"] == first["fedhybrid"]["speedup_vs_random"]
    # Table 4 reads the baseline from the second directory, Fig. 17 its ablation
    t_base, t_fh = (
        second["oort+recompute"]["time_to_target_s"],
        first["fedhybrid"]["time_to_target_s"],
    )
    assert "table4_missed" in row and "table4_missed" not in out["rows"][1]
    want = t_base / t_fh if (t_base and t_fh) else None
    assert row["table4_vs_fastest"] == (pytest.approx(want) if want else None)
    abl = out["ablations"]["fedhybrid-nopredictor"]
    assert abl["seeds"] == 1
    fh = next(r for r in json.loads((a / "summary.json").read_text()) if r["method"] == "fedhybrid")
    nop = next(
        r
        for r in json.loads((b / "summary.json").read_text())
        if r["method"] == "fedhybrid-nopredictor"
    )
    want = (nop["sim_time_s"] / nop["rounds"]) / (fh["sim_time_s"] / fh["rounds"])
    assert abl["round_ratio"] == pytest.approx(want)
    # the memory wall: Oort-Oracle from the second directory against Oort from the first
    want = 100 * (second["oort-oracle"]["final_accuracy"] - first["oort"]["final_accuracy"])
    assert row["wall_final_points"] == pytest.approx(want)
    assert set(row["round_s"]) == {"random", "oort", "fedhybrid", "oort+recompute",
                                   "fedhybrid-nopredictor", "oort-oracle"}  # fmt: skip

    # a shared method that differs is one error naming both directories
    bad = tmp_path / "bad"
    shutil.copytree(b, bad)
    rows = json.loads((bad / "summary.json").read_text())
    rows[0]["final_accuracy"] += 0.01
    (bad / "summary.json").write_text(json.dumps(rows))
    assert mod.main([str(a), str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(a) in err and str(bad) in err and "'random'" in err and "differ" in err
    # the method compared must be in the merged seed, named by its directories
    assert mod.main([str(b), "--method", "fedhybrid"]) == 2
    assert f"{b} did not run 'fedhybrid'" in capsys.readouterr().err


def test_the_speedup_splits_into_rounds_and_round_length(tmp_path, capsys):
    """Random needs 3 rounds of 33.3 s to its best, FedHybrid 4 rounds of 5 s: 5x Random is
    0.75 x as many rounds times 6.67 x shorter rounds; Oort never gets there."""
    mod = load_benchmark("fedhybrid_seeds")
    run = _run(0, 0.75, 0.6, 0.6, 20.0, None)
    run["curves"] = {"fedprox": {
        "random": [[40.0, 0.3], [80.0, 0.5], [100.0, 0.7]],
        "fedhybrid": [[5.0, 0.2], [10.0, 0.4], [15.0, 0.6], [20.0, 0.7]],
        "oort": [[50.0, 0.3], [120.0, 0.6]],
    }}  # fmt: skip
    files = _write_runs(tmp_path, "d", [run])
    assert mod.main([*files, "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["rows"][0]
    assert row["rounds_to_target"] == {"random": 3, "fedhybrid": 4}
    assert row["rounds_ratio"] == pytest.approx(0.75)
    assert row["round_length_ratio"] == pytest.approx(100 / 3 / 5)
    assert row["rounds_ratio"] * row["round_length_ratio"] == pytest.approx(
        row["fedhybrid_vs_random"]
    )
    assert mod.main(files) == 0
    assert "0.75 x 6.67 in the median" in capsys.readouterr().out
