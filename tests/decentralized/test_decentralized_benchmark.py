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
        "Simulated time per iteration",
        "episodes to convergence",
        "Speed-up",
        "trade-off",
    ):
        assert title in out
    # Chain - Central accuracy difference for N = 3 is printed as 0
    acc_row = next(r for r in out.splitlines() if r.startswith("| 3 |"))
    assert acc_row.split("|")[5].strip() == "0"
    assert acc_row.split("|")[6].strip() == "2" and acc_row.split("|")[7].strip() == "3"
