"""benchmarks/mdldroid.py --quick runs and prints every section's table."""

from __future__ import annotations

import math

import pytest

from bench_loader import load_benchmark


def test_mdldroid_benchmark_quick(capsys):
    mod = load_benchmark("mdldroid")
    mod.main(["--quick"])
    out = capsys.readouterr().out
    for title in (
        "Accuracy (%)",
        "Simulated time (s) per iteration",
        "Energy variance",
        "Ceiling",
        "Latency overhead due to busy condition",
        "Eq. 5 scheduler latency f(T_a, T_b)",
        "Chain vs Central numerics",
        "Eq. 8 threshold vs the best reachable return",
        "episodes to convergence",
        "Fig. 8b paired by seed",
        "Chain vs Tree / Ring over DQN seeds [0, 1]",
        "Fig. 8a: Chain-scheduler training time",
        "Speed-up",
        "trade-off",
        "against every valid schedule",
        "Energy per device by part",
    ):
        assert title in out
    # Chain - Central accuracy difference for N = 3 is printed as 0; peaks 2 vs 3 copies
    acc_row = next(r for r in out.splitlines() if r.startswith("| 3 |"))
    cells = [c.strip() for c in acc_row.split("|")]
    assert cells[5] == "0" and cells[6] == "0"
    assert cells[11] == "2" and cells[12] == "3"
    # the latency-optimal reference is never slower than Tree or Ring (eq. 5 columns)
    sched_row = next(r for r in out.splitlines() if r.startswith("| 4 |") and "." in r)
    opt_vs_tree, opt_vs_ring = (float(c) for c in sched_row.split("|")[8:10])
    assert opt_vs_tree >= 0 and opt_vs_ring >= 0
    # the DQN-seeds summary: one row per N plus the mean-of-N and pooled rows, each
    # cell "median [min, max]" with min <= median <= max
    lines = out.splitlines()
    start = next(i for i, r in enumerate(lines) if "over DQN seeds [0, 1]" in r)
    seeds_rows = lines[start + 3 : start + 6]
    assert [r.split("|")[1].strip() for r in seeds_rows] == ["4", "mean of N", "pooled"]
    for cell in seeds_rows[0].split("|")[2:5]:
        med, rest = cell.strip().split(" [")
        lo, hi = rest.rstrip("]").split(", ")
        assert float(lo) <= float(med) <= float(hi)
    # Fig. 8a: TDGE, TDGE-GREEDY and DGE spend a positive number of steps and CPU seconds
    start = next(i for i, r in enumerate(lines) if "Fig. 8a" in r)
    fig8a = [c.strip() for c in lines[start + 3].split("|")]
    assert fig8a[1] == "3"
    assert all(float(c.split("±")[0]) > 0 for c in fig8a[2:8])
    # the threshold table: T lies below the exact best return on every row
    lines = out.splitlines()
    start = next(i for i, r in enumerate(lines) if "Eq. 8 threshold vs" in r)
    rows = []
    for r in lines[start + 3 :]:
        if not r.startswith("|"):
            break
        rows.append(r)
    assert len(rows) == 5  # N = 3 (k = 0, 1) and N = 4 (k = 0, 1, 2)
    for r in rows:
        best_minus_t = float(r.split("|")[5])
        assert best_minus_t > 0
    # busy overhead: a busy device only delays, so Tree's and Ring's overhead over their own
    # all-free schedule is >= 0; on the common base the latency-optimal Opt has the least
    start = next(i for i, r in enumerate(lines) if "Latency overhead due to busy" in r)
    oh = [c.strip() for c in lines[start + 3].split("|")]
    assert oh[1] == "4"
    assert float(oh[3]) >= 0 and float(oh[4]) >= 0
    assert float(oh[12]) >= -1e-6 and float(oh[13]) >= -1e-6
    # eq. 5's f: the synchronous Ring is never faster than the latency-optimal Opt, and
    # Ring's f is at least the pipelined ring-order chain's
    start = next(i for i, r in enumerate(lines) if "Eq. 5 scheduler latency" in r)
    f = [c.strip() for c in lines[start + 3].split("|")]
    assert f[1] == "4"
    chain_f, tree_f, ring_f, ringp_f, opt_f = (float(x) for x in f[2:7])
    assert opt_f <= min(chain_f, tree_f, ring_f) + 1e-6 and ring_f >= ringp_f - 1e-6
    # evar: the least variance of any schedule is never above Chain's, Tree's or Ring's
    start = next(i for i, r in enumerate(lines) if "against every valid schedule" in r)
    ev = [c.strip() for c in lines[start + 3].split("|")]
    assert ev[1] == "3"
    chain_v, tree_v, ring_v, min_v, minf_v = (float(x) for x in ev[3:8])
    assert min_v <= min(chain_v, tree_v, ring_v) + 1e-9 and min_v <= minf_v + 1e-9
    # numerics: float64 messages are bit-identical to Central (0 elements differ, same accuracy)
    start = next(i for i, r in enumerate(lines) if "Chain vs Central numerics" in r)
    nm = [c.strip() for c in lines[start + 3].split("|")]
    assert nm[1] == "3"
    assert int(nm[8]) == 0 and float(nm[9]) == 0 and float(nm[11]) == 0
    assert float(nm[12]) == 0


def test_paired_exploration_table_counts_and_sign_test(capsys):
    """Seed by seed: DGE's r over TDGE's, TDGE sooner on 3, later on 1, tied on 1; the
    one-sided sign test over the 4 untied seeds is P(X >= 3) = 5/16."""
    mod = load_benchmark("mdldroid")
    per_seed = {
        ("eq8", 8, "tdge"): [10, 20, 30, 40, 50],
        ("eq8", 8, "dge"): [20, 40, 60, 20, 50],
    }
    mod._paired_exploration_table([8], 5, ("eq8",), ("tdge", "dge"), per_seed)
    row = next(r for r in capsys.readouterr().out.splitlines() if "DGE / TDGE" in r)
    cells = [c.strip() for c in row.split("|")]
    assert cells[5] == "3 / 1 / 1"
    assert cells[6] == "0.312"
    assert cells[4].startswith("2.00 ")


def _bench():
    return load_benchmark("mdldroid")


def test_drift_measures():
    """Client drift, label TV, gradient dissimilarity and the two-sided sign test on
    values worked out by hand."""
    import torch

    mod = _bench()
    a = {"w": torch.tensor([1.0, 0.0]), "b": torch.tensor([0.0])}
    b = {"w": torch.tensor([-1.0, 0.0]), "b": torch.tensor([2.0])}
    drift, step = mod.drift_of({0: a, 1: b})
    # mean (0, 0 | 1): both devices lie sqrt(1 + 1) from it; the mean moved by 1
    assert drift == pytest.approx(2**0.5) and step == pytest.approx(1.0)
    assert mod.drift_of({0: a, 1: a}) == (0.0, 1.0)
    y = torch.tensor([0, 1, 2, 0, 1, 2])
    assert mod.label_tv([(None, y), (None, y)], 3) == 0.0
    # disjoint halves of a 2-class pool: each device is 0.5 from the 50/50 mix
    assert mod.label_tv([(None, torch.tensor([0, 0])), (None, torch.tensor([1, 1]))], 2) == 0.5
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    x = torch.randn(8, 4)
    y8 = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    assert mod.gradient_dissimilarity(model, [(x, y8)] * 3) == pytest.approx(1.0)
    # two halves of one set: B² >= 1 (mean of squares >= square of the mean)
    assert mod.gradient_dissimilarity(model, [(x[:4], y8[:4]), (x[4:], y8[4:])]) >= 1.0
    # 8 higher, 12 lower: two-sided p = 2 * P(X <= 8 | 20, 1/2) = 0.503
    assert mod.sign_test_p(8, 12) == pytest.approx(0.5034, abs=1e-4)
    assert mod.sign_test_p(0, 0) == 1.0 and mod.sign_test_p(10, 0) == pytest.approx(2 / 1024)


def test_calibration_finds_the_temperature_and_removes_the_confidence_level():
    """The calibrated loss is the least cross-entropy over temperatures: never above the
    loss at T = 1; logits scaled by 2 are twice as over-confident (T doubles) and reach the
    same calibrated loss; the correlation helper on hand values."""
    import torch
    import torch.nn.functional as F

    mod = _bench()
    torch.manual_seed(0)
    y = torch.randint(0, 4, (400,))
    logits = torch.randn(400, 4) + 1.5 * F.one_hot(y, 4)
    conf, t, nll = mod.calibration(logits, y)
    assert nll <= float(F.cross_entropy(logits.double(), y)) + 1e-12
    assert 0.25 < conf < 1.0
    conf2, t2, nll2 = mod.calibration(2 * logits, y)
    assert t2 == pytest.approx(2 * t, rel=0.01) and nll2 == pytest.approx(nll, abs=1e-4)
    assert conf2 > conf
    assert mod._corr([1.0, 2.0, 3.0], [2.0, 4.0, 6.0]) == pytest.approx(1.0)
    assert mod._corr([1.0, 2.0, 3.0], [3.0, 2.0, 1.0]) == pytest.approx(-1.0)
    assert math.isnan(mod._corr([1.0, 2.0], [1.0, 2.0]))


def test_drift_section_on_synthetic(capsys):
    """The drift section runs on any subject-labelled sensor set; the split by label is
    the more heterogeneous one (label TV, B²)."""
    import torch

    from edgetrain import data

    torch.set_num_threads(1)
    ds = data.synthetic_sensor(480, channels=3, length=32, classes=4, seed=0, subjects=4, noise=0.3)
    mod = _bench()
    mod.drift_section(ds, ["base", "label"], [1, 2], 1, [0])
    out = capsys.readouterr().out
    lines = out.splitlines()
    start = next(i for i, r in enumerate(lines) if "Heterogeneity of the splits" in r)
    het = {r.split("|")[1].strip(): r.split("|") for r in lines[start + 3 : start + 5]}
    assert float(het["label"][4]) > float(het["base"][4])
    assert float(het["label"][5]) > float(het["base"][5])
    start = next(i for i, r in enumerate(lines) if r.startswith("## Aggregations per epoch"))
    end = next(i for i, r in enumerate(lines) if r.startswith("## Where the test loss moves"))
    rows = [r.split("|") for r in lines[start + 3 : end] if r.startswith("| base | ")]
    assert [c[2].strip() for c in rows] == ["1", "2"]
    assert rows[0][6].strip() == "0/0/1"  # k = 1 paired with itself
    assert rows[0][4].strip() == "0"  # no diverged run
    cal = [r.split("|") for r in lines[end + 3 :] if r.startswith("| base | ")]
    assert [c[2].strip() for c in cal] == ["1", "2"]
    assert cal[0][4].strip() == "+0.0000" and cal[0][8].strip() == "0/0/1"
    assert cal[0][9].strip() == "–"  # no correlation of a run with itself
    assert 0.0 < float(cal[1][3]) <= 1.0 and float(cal[1][5]) >= 0.25
