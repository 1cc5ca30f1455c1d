"""The two benchmarks run end to end in --quick mode and report sane figures."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(
        f"bench_{name}", ROOT / "benchmarks" / f"{name}.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_codec_benchmark_quick(capsys):
    assert _load("codec").main(["--quick", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert set(res["summary"]) == {"mobilenetv2", "cct2", "bert-small"}
    for row in res["rows"]:
        if "mix_ratio" in row:
            assert row["mix_err"] <= row["eb"]
            assert row["mix_ratio"] > row["int8_ratio"]  # entropy stage beats plain int8


def test_budget_overhead_benchmark_quick(capsys, tmp_path):
    mod = _load("budget_overhead")
    argv = ["--quick", "--no-mincut", "--json", "--out", str(tmp_path), "--rounds", "2"]
    assert mod.main([*argv, "--rounds-at", "0.7"]) == 0
    res = json.loads(capsys.readouterr().out)
    (model,) = res
    assert Path(model["png"]).stat().st_size > 0
    feasible = [r for r in model["rows"] if r.get("feasible") and r["method"] != "ckpt-all"]
    assert feasible
    for r in feasible:
        assert r["within_budget"]
        if r["method"] in ("recompute", "swap"):
            assert r["grad_err"] == 0.0
        # --rounds 2 applies to the 0.7 row only; its ratio is the median over rounds
        assert len(r["round_ratios"]) == (2 if r["budget"] == 0.7 else 1)
        assert min(r["round_ratios"]) <= r["ratio"] <= max(r["round_ratios"])
