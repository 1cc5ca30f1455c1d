"""`edgetrain chain` end to end on the shipped watch data (2 devices, 1 epoch)."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from edgetrain.cli import app, main


def test_chain_command_json_and_run_dir(tmp_path):
    torch.set_num_threads(1)
    res = CliRunner().invoke(
        app,
        [
            "chain",
            "--devices",
            "2",
            "--scheduler",
            "chain",
            "--aggregation",
            "chain",
            "--model",
            "lenet",
            "--data",
            "watch",
            "--seed",
            "0",
            "--epochs",
            "1",
            "--runs-root",
            str(tmp_path),
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    for key in ("accuracy", "sim_time_s", "energy_variance", "peak_model_copies", "run_dir"):
        assert key in out
    assert out["peak_model_copies"] == 2 and out["sum_theta_ok"] is True
    assert 0.0 <= out["accuracy"] <= 100.0 and out["sim_time_s"] > 0
    run = tmp_path / "chain-chain-chain-n2-s0"
    assert out["run_dir"] == str(run)
    rec = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])
    assert {"accuracy", "sim_time_s", "energy_j", "peak_model_copies", "schedule"} <= set(rec)
    assert rec["dqn"]["tie_swaps"] in (0, 1)  # N = 2: at most one swap (who sends)
    assert json.loads((run / "config.json").read_text())["tie_break"] == "eq4"
    assert (run / "report.html").exists()


def test_chain_command_rejects_bad_scheduler(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["chain", "--scheduler", "star", "--json"])
    assert exc.value.code == 2
    assert "scheduler 'star' is not one of chain, ring, tree" in capsys.readouterr().err


def test_chain_command_rejects_bad_executor(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["chain", "--executor", "dask", "--json"])
    assert exc.value.code == 2
    assert "--executor 'dask' is not one of inprocess, ray" in capsys.readouterr().err


def test_chain_command_rejects_bad_wire(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["chain", "--wire", "float16", "--json"])
    assert exc.value.code == 2
    assert "wire 'float16' is not one of float32, float64" in capsys.readouterr().err


def test_chain_command_rejects_bad_exploration(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["chain", "--exploration", "boltzmann", "--json"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "exploration 'boltzmann' is not one of" in err and "tdge-greedy" in err


def test_chain_command_rejects_bad_tie_break(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["chain", "--tie-break", "coin", "--json"])
    assert exc.value.code == 2
    assert "tie_break 'coin' is not one of eq4, none" in capsys.readouterr().err
