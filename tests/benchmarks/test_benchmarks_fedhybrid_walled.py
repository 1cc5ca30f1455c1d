"""benchmarks/fedhybrid_walled.py: one run's per-class accuracy against another's, split by
the share of each class the walled phones hold."""

import json
import shutil

import numpy as np
import pytest

from bench_loader import load_benchmark
from fed_small import tiny_compare


@pytest.fixture(scope="module")
def oracle_run(tmp_path_factory):
    """Random and Oort-Oracle on the 8-phone fleet, 3 rounds of 4 local steps (enough for
    the two to differ class by class)."""
    tmp = tmp_path_factory.mktemp("walled")
    _, run_dir = tiny_compare(tmp, "random,oort-oracle", rounds=3, local_steps=4)
    return run_dir


def _records(run):
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def test_the_split_is_computed_from_the_runs_own_fleet_partition_and_metrics(oracle_run, capsys):
    from edgetrain.config import parse_config
    from edgetrain.federated import FederatedConfig
    from edgetrain.federated.environment import build_environment

    mod = load_benchmark("fedhybrid_walled")
    base, other = oracle_run / "random", oracle_run / "oort-oracle"
    assert mod.main(["--pair", str(base), str(other), "--window", "2-3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    (row,) = out["rows"]

    cfg = json.loads((oracle_run / "config.json").read_text())
    env = build_environment(parse_config(cfg, schema=FederatedConfig))
    y = env.train.y.numpy()
    walled = np.flatnonzero(env.hard_limits < env.m_g)
    assert 0 < len(walled) < len(env.fleet)  # the tiny fleet has phones on both sides of M_G
    held = np.concatenate([y[env.parts[c]] for c in walled])
    share = np.bincount(held, minlength=10) / np.bincount(y, minlength=10)
    assert row["class_share"] == pytest.approx(share.tolist())
    assert row["walled_phones"] == len(walled)
    assert row["walled_sample_share"] == pytest.approx(len(held) / len(y))

    rb, ro = ([r for r in _records(run) if r["round"] >= 2] for run in (base, other))
    gain = 100 * (np.mean([r["class_accuracy"] for r in ro], 0) - np.mean(
        [r["class_accuracy"] for r in rb], 0))  # fmt: skip
    assert row["class_gain"] == pytest.approx(gain.tolist())
    heavy = sorted(range(10), key=lambda c: (-share[c], c))[:5]
    assert row["heavy_classes"] == sorted(heavy)
    rest = [c for c in range(10) if c not in heavy]
    assert row["gain_heavy"] == pytest.approx(gain[heavy].mean())
    assert row["gain_other"] == pytest.approx(gain[rest].mean())
    acc = [np.mean([r["accuracy"] for r in rs]) for rs in (rb, ro)]
    assert row["gain"] == pytest.approx(100 * (acc[1] - acc[0]))
    assert abs(row["gain_heavy"] - row["gain_other"]) > 1  # the runs differ class by class
    for run, got in zip((base, other), row["heavy_exposure"], strict=True):
        recs = _records(run)  # rounds 1..3: what each run learnt from up to the window's end
        seen = np.sum([r["aggregated_labels"] for r in recs], axis=0)
        assert got == pytest.approx(seen[heavy].sum() / seen.sum())
    assert out["median"]["gain"] == {"median": pytest.approx(row["gain"]),
                                     "above_zero": int(row["gain"] > 0),
                                     "below_zero": int(row["gain"] < 0),
                                     "sign_p": 1.0}  # fmt: skip

    # the table prints the same row
    assert mod.main(["--pair", str(base), str(other), "--window", "2-3"]) == 0
    text = capsys.readouterr().out
    assert f"{row['gain_heavy']:+.1f}" in text and f"{row['gain_other']:+.1f}" in text


def test_a_pair_from_different_fleets_or_missing_rounds_is_refused(oracle_run, tmp_path, capsys):
    mod = load_benchmark("fedhybrid_walled")
    other = tmp_path / "other"
    shutil.copytree(oracle_run / "oort-oracle", other)
    cfg = json.loads((oracle_run / "config.json").read_text())
    cfg["seed"] = cfg["seed"] + 1
    (other / "config.json").write_text(json.dumps(cfg))
    assert mod.main(["--pair", str(oracle_run / "random"), str(other), "--window", "2-3"]) == 2
    err = capsys.readouterr().err
    assert "differ in seed" in err and "a pair must share" in err

    same = oracle_run / "oort-oracle"
    assert mod.main(["--pair", str(oracle_run / "random"), str(same), "--window", "1-4"]) == 2
    assert "rounds 1-4 are not all evaluated" in capsys.readouterr().err

    assert mod.main(["--pair", str(tmp_path), str(same)]) == 2
    assert "no config.json" in capsys.readouterr().err

    with pytest.raises(SystemExit) as e:  # argparse's exit, with fedhybrid_seeds' message
        mod.main(["--pair", str(oracle_run / "random"), str(same), "--window", "3-2"])
    assert e.value.code == 2
    assert "expected FIRST-LAST rounds" in capsys.readouterr().err


def test_versus_tests_two_sets_of_pairs_by_rank_sum(oracle_run, tmp_path, capsys):
    from scipy.stats import mannwhitneyu

    mod = load_benchmark("fedhybrid_walled")
    base, other = oracle_run / "random", oracle_run / "oort-oracle"
    pair = ["--pair", str(base), str(other), "--window", "2-3"]
    assert mod.main([*pair, "--json"]) == 0
    mine = json.loads(capsys.readouterr().out)
    # another set: three made-up pairs, each gain 10 points above this pair's
    rows = [{k: mine["rows"][0][k] + 10 + i for k in mod.GAINS} for i in range(3)]
    theirs = tmp_path / "theirs.json"
    theirs.write_text(json.dumps({"rows": rows}))
    assert mod.main([*pair, "--versus", str(theirs), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)["versus"]
    for k in mod.GAINS:
        want = mannwhitneyu([mine["rows"][0][k]], [r[k] for r in rows]).pvalue
        assert got[k] == {"median": pytest.approx(rows[1][k]), "pairs": 3,
                          "rank_sum_p": pytest.approx(want)}  # fmt: skip
    assert mod.main([*pair, "--versus", str(theirs)]) == 0
    assert "two-sided rank-sum p" in capsys.readouterr().out

    for text in ("not json", json.dumps({"rows": []}), json.dumps({"rows": [{"gain": 1}]})):
        theirs.write_text(text)
        assert mod.main([*pair, "--versus", str(theirs)]) == 2
        assert "not an output of this script's --json" in capsys.readouterr().err
