"""benchmarks/plan_coverage.py: the ALBERT fleet's constrained clients get plans."""

from __future__ import annotations

import json
from pathlib import Path

from bench_loader import load_benchmark

ROOT = Path(__file__).resolve().parents[2]


def test_albert_fleet_clients_below_m_g_get_a_recompute_plan(capsys):
    """ALBERT's one shared layer is planned per call: recompute reaches below M_G, so some
    of the 70 clients under M_G get a plan (before round 19: none of them, at any bucket)."""
    mod = load_benchmark("plan_coverage")
    cfg = str(ROOT / "examples" / "federated-bbc-albert.yaml")
    assert mod.main(["--configs", cfg, "--strategies", "recompute", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["model"] == "albert-small" and row["clients"] == 100
    assert row["below_m_g"] == 70
    assert 0 < row["planned"] <= row["below_m_g"]
    assert row["least_feasible_fraction"] is not None and row["least_feasible_fraction"] < 1
    assert 0 < row["buckets_feasible"] <= row["buckets"] == 19
