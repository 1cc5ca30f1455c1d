"""``edgetrain plan``: the issue's command line on CCT-2, table, plot and shortfall error."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from edgetrain.cli import app, main


def test_plan_json_cct2_lora2(tmp_path) -> None:
    png = tmp_path / "timeline.png"
    result = CliRunner().invoke(
        app,
        [
            "plan",
            "--model",
            "cct2",
            "--strategy",
            "lora-2",
            "--batch",
            "1",
            "--target",
            "pulp",
            "--optimizer",
            "sgd",
            "--json",
            "--plot",
            str(png),
        ],
    )
    assert result.exit_code == 0, result.output
    d = json.loads(result.stdout)
    # TrainDeeploy Table I: LoRA-2 trains ~0.05 MB and needs ~104 MFLOPs per step
    assert 0.04e6 < d["trainable_bytes"] < 0.07e6
    assert 0.85 * 104e6 < d["flops_train"] < 1.15 * 104e6
    assert d["lower_bound_bytes"] <= d["arena_bytes"] <= 1.01 * d["lower_bound_bytes"]
    assert d["dynamic_peak_bytes"] < d["arena_bytes"]
    assert d["tiers"]["L2"]["capacity_bytes"] == 2 * 1024 * 1024
    assert {"l3_l2_bytes", "l2_l1_bytes"} <= set(d["transfers"])
    assert d["latency_ms"]["accelerated"] < d["latency_ms"]["cores"]
    assert d["flop_per_cycle"] > 0
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_plan_table(tmp_path) -> None:
    result = CliRunner().invoke(app, ["plan", "--model", "ds-cnn", "--strategy", "lp"])
    assert result.exit_code == 0, result.output
    assert "dynamic peak" in result.stdout and "latency" in result.stdout


def test_plan_shortfall_error(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["plan", "--model", "alexnet", "--strategy", "full", "--target", "stm32"])
    assert exc.value.code == 2
    assert "short by" in capsys.readouterr().err
