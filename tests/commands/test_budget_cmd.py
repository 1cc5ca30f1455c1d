"""``edgetrain budget`` end to end on a small zoo model."""

from __future__ import annotations

import json

import pytest

from edgetrain.cli import main


def _run(capsys, *args: str) -> tuple[int, str, str]:
    code = 0
    try:
        main(["budget", *args])
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_budget_json_fields(capsys, tmp_path):
    plan_path = tmp_path / "plan.json"
    code, out, _ = _run(
        capsys, "--model", "ds-cnn", "--batch", "4", "--budget", "0.7", "--method", "hybrid",
        "--repeats", "1", "--json", "--plan-out", str(plan_path),
    )  # fmt: skip
    assert code == 0
    row = json.loads(out)
    for key in (
        "budget_bytes", "unplanned_peak_bytes", "measured_peak_bytes", "predicted_peak_bytes",
        "step_time_ratio", "decisions", "max_abs_grad_error",
    ):  # fmt: skip
        assert key in row
    assert row["budget_bytes"] == int(0.7 * row["unplanned_peak_bytes"])
    assert row["measured_peak_bytes"] <= row["predicted_peak_bytes"] <= row["budget_bytes"]
    assert sum(row["decisions"].values()) == row["units"]
    assert row["decisions"]["keep"] < row["units"]
    assert set(row["decisions"]) >= {"keep", "recompute", "compress", "regen", "mask", "alias"}
    assert json.loads(plan_path.read_text())["version"] == 4
    # per timed step, median, for each plan timed: the unplanned step and the method's
    assert set(row["page_faults"]) == {"none", "hybrid"}
    assert all(isinstance(v, int | float) and v >= 0 for v in row["page_faults"].values())


def test_budget_recompute_is_exact_and_table_output(capsys):
    code, out, _ = _run(
        capsys, "--model", "ds-cnn", "--batch", "4", "--budget", "0.9", "--method", "recompute",
        "--repeats", "1",
    )  # fmt: skip
    assert code == 0
    assert "max_abs_grad_error" in out and "measured_peak_bytes" in out


@pytest.mark.parametrize(
    "args,msg",
    [
        (["--budget", "0.01"], "minimum feasible budget"),
        (["--method", "magic"], "--method"),
        (["--budget", "lots"], "not understood"),
    ],
)
def test_budget_user_errors(capsys, args, msg):
    code, out, err = _run(capsys, "--model", "ds-cnn", "--batch", "2", "--repeats", "1", *args)
    assert code == 2 and out == ""
    assert msg in err.replace("\n", " ")


# -- --scope all: the budget over every allocation of the step ------------------------
def test_cli_scope_all_json(capsys):
    code, out, _ = _run(
        capsys, "--model", "ds-cnn", "--batch", "4", "--budget", "0.8", "--method", "hybrid",
        "--repeats", "1", "--scope", "all", "--json",
    )  # fmt: skip
    assert code == 0
    row = json.loads(out)
    assert row["budget_scope"] == "all"
    assert row["budget_bytes"] == int(0.8 * row["unplanned_alloc_peak_bytes"])
    assert row["predicted_alloc_peak_bytes"] <= row["budget_bytes"]
    assert row["measured_alloc_peak_bytes"] <= row["budget_bytes"]
    assert row["within_budget"] is True
    for key in ("measured_peak_bytes", "predicted_peak_bytes", "step_time_ratio", "decisions"):
        assert key in row


def test_cli_bad_scope(capsys):
    code, out, err = _run(capsys, "--model", "ds-cnn", "--batch", "2", "--scope", "everything")
    assert code == 2 and out == ""
    assert "--scope" in err


def test_budget_profile_file_is_written_once_and_reused(capsys, tmp_path):
    # the first run profiles and writes the file; a second run with another method and
    # scope reads it (no op timed again) and plans the same as a fresh profile would
    prof = tmp_path / "ds-cnn-b4.profile.json"
    base = ["--model", "ds-cnn", "--batch", "4", "--repeats", "1", "--json", "--profile", str(prof)]
    code, out, _ = _run(capsys, *base, "--budget", "0.7", "--method", "hybrid")
    assert code == 0 and prof.exists()
    first = json.loads(out)
    assert first["profile"]["reused"] is False and first["within_budget"]
    written = prof.read_bytes()
    code, out, _ = _run(capsys, *base, "--budget", "0.6", "--method", "compress", "--scope", "all")
    assert code == 0
    second = json.loads(out)
    assert second["profile"]["reused"] is True and second["within_budget"]
    assert second["budget_scope"] == "all" and second["decisions"]["compress"] > 0
    assert prof.read_bytes() == written  # read, not rewritten
    code, _, err = _run(capsys, *base[:3], "8", *base[4:], "--budget", "0.7")
    assert code != 0 and "measured for another setting" in err and "inputs: file" in err
    assert prof.read_bytes() == written


def test_budget_corrupt_profile_is_refused_and_kept(capsys, tmp_path):
    prof = tmp_path / "p.json"
    prof.write_text("{half a profi")
    code, _, err = _run(capsys, "--model", "ds-cnn", "--batch", "2", "--repeats", "1",
                        "--profile", str(prof))  # fmt: skip
    assert code != 0 and "is not valid JSON" in err and "remove it to profile again" in err
    assert prof.read_text() == "{half a profi"
