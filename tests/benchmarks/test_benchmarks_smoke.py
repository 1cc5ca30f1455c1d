"""The benchmark scripts without a test elsewhere run and print their tables."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(script: str, *args: str) -> str:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=True,
    )
    return out.stdout


def test_foundation_quick_prints_zoo_fleet_and_demo():
    text = _run("foundation.py", "--quick")
    assert re.search(r"cct2\s+283,723\s+280,000\s+\+1\.3%", text)
    assert "memory mix over 2,000 generated devices" in text
    acc = float(re.search(r"test accuracy=([0-9.]+)", text).group(1))
    assert acc > 2 / 7  # one epoch on held-out subjects, 7 classes


def test_traindeeploy_costs_prints_every_strategy_beside_the_paper():
    text = _run("traindeeploy_costs.py")
    for strategy in ["full", "lp", "ft-1", "lora-1", "ft-2", "lora-2"]:
        assert re.search(rf"^\s+{re.escape(strategy)}\s+\d", text, re.M), strategy
    ratio = float(re.search(r"trained_ft2_over_lora2: fused ([0-9.]+)", text).group(1))
    assert 13 < ratio < 17  # TrainDeeploy: about 15x
    gap = float(re.search(r"max_flops_gap: fused ([0-9.]+)", text).group(1))
    assert gap < 0.15  # FLOPs within 15 % of Table I


def test_budget_run_quick_trains_under_the_plan_exactly():
    text = _run("budget_run.py", "--quick", "--resume-check")
    rows = {m.group(1): m.group(0).split() for m in re.finditer(
        r"^(none|recompute|hybrid)\s.*$", text, re.M)}  # fmt: skip
    assert set(rows) == {"none", "recompute", "hybrid"}
    for method in ("recompute", "hybrid"):
        assert float(rows[method][2]) <= 1.0  # measured peak within the budget
        assert rows[method][4] == "yes"  # bit-identical to the unplanned run
        assert rows[method][3] == rows["none"][3]
        assert float(rows[method][9]) > 0  # a checkpoint was written (MB)
        assert rows[method][10] == "same"  # stopped, resumed: the whole run's numbers


def test_regen_kinds_quick_times_every_group_against_its_price():
    import json

    out = json.loads(_run("regen_kinds.py", "--quick", "--json"))
    rows = {r["group"]: r for r in out["rows"]}
    # tiny MobileNetV2: BatchNorm from statistics, its ReLU6 chains, clamps in place,
    # convolutions again, and all of them at once
    assert {"bn-stats", "bn-chain", "clamp-inplace", "forward:Conv2d", "all"} <= set(rows)
    for g in ("bn-stats", "bn-chain", "clamp-inplace"):
        assert rows[g]["kinds"] == ["elementwise"]
        assert len(rows[g]["profile_factor"]) == 1  # one factor per kind
    assert rows["forward:Conv2d"]["kinds"] == ["forward"]
    assert rows["bn-stats"]["profile_factor"] == rows["clamp-inplace"]["profile_factor"]
    for r in rows.values():
        assert r["timed_set"] >= 1 and r["isolated_price_ms"] > 0
        assert len(r["in_step_ms"]) == len(r["ratio"]) == out["repeats"]
        price = r["isolated_price_ms"]  # JSON rounds ms to 0.01 / 0.001, ratios to 0.001
        want = r["in_step_ms"][0] / price
        assert r["ratio"][0] == pytest.approx(want, rel=0.01, abs=0.006 / price + 0.001)


def test_recompute_bn_quick_is_exact_both_ways():
    import json

    out = json.loads(_run("recompute_bn.py", "--quick", "--json"))
    assert out["bit_identical"] == {"stats": True, "kernel": True}
    assert out["units"] == 17
    assert len(out["extra_ms"]["stats"]) == len(out["extra_ms"]["kernel"]) == out["rounds"]


def test_text_init_quick_runs_each_setting_on_the_tasks_split():
    import json

    out = json.loads(_run("text_init.py", "--quick", "--json"))
    assert [(r["word_vectors"], r["clip"]) for r in out["runs"]] == [
        ("random", 0.0), ("random", 1.0), ("ppmi", 0.0), ("ppmi", 1.0)
    ]  # fmt: skip
    for r in out["runs"]:
        assert [c["step"] for c in r["curve"]] == [2, 4, 6]
        assert all(0.0 <= c["test_accuracy"] <= 1.0 for c in r["curve"])
        assert (
            r["min_accuracy"] <= r["mean_accuracy"] <= max(c["test_accuracy"] for c in r["curve"])
        )
    # the same seed and setting train the same model
    again = json.loads(_run("text_init.py", "--quick", "--json", "--word-vectors", "ppmi",
                            "--clip", "1.0"))  # fmt: skip
    assert again["runs"][0]["curve"] == out["runs"][3]["curve"]
    with pytest.raises(subprocess.CalledProcessError):
        _run("text_init.py", "--quick", "--word-vectors", "glove")
