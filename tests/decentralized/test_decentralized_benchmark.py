"""benchmarks/mdldroid.py --quick runs and prints every section's table."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "mdldroid.py"


def test_mdldroid_benchmark_quick(capsys):
    spec = importlib.util.spec_from_file_location("mdldroid_bench", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.main(["--quick"])
    out = capsys.readouterr().out
    for title in (
        "Accuracy (%)",
        "Simulated time (s) per iteration",
        "Energy variance",
        "Ceiling",
        "episodes to convergence",
        "Speed-up",
        "trade-off",
    ):
        assert title in out
    # Chain - Central accuracy difference for N = 3 is printed as 0; peaks 2 vs 3 copies
    acc_row = next(r for r in out.splitlines() if r.startswith("| 3 |"))
    cells = [c.strip() for c in acc_row.split("|")]
    assert cells[5] == "0"
    assert cells[7] == "2" and cells[8] == "3"
    # the latency-optimal reference is never slower than Tree or Ring (eq. 5 columns)
    sched_row = next(r for r in out.splitlines() if r.startswith("| 4 |") and "." in r)
    opt_vs_tree, opt_vs_ring = (float(c) for c in sched_row.split("|")[8:10])
    assert opt_vs_tree >= 0 and opt_vs_ring >= 0
