"""``edgetrain alloc``: MiniMalloc CSV in, arena figures and offsets out."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from edgetrain.cli import app, main

PROBLEM = "id,lower,upper,size\nb1,0,3,4\nb2,3,9,4\nb3,0,9,4\nb4,9,21,4\nb5,0,21,4\n"


def test_alloc_json_and_out(tmp_path) -> None:
    src = tmp_path / "input.12.csv"
    src.write_text(PROBLEM)
    out = tmp_path / "output.12.csv"
    result = CliRunner().invoke(app, ["alloc", str(src), "--json", "--out", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["arena_bytes"] == 12 and data["lower_bound_bytes"] == 12
    assert data["buffers"] == 5 and data["optimal"] is True and data["seconds"] >= 0
    rows = [r.split(",") for r in out.read_text().splitlines()]
    assert rows[0] == ["id", "lower", "upper", "size", "offset"]
    offsets = {r[0]: int(r[4]) for r in rows[1:]}
    assert offsets["b5"] == 0 and max(offsets.values()) + 4 == 12


def test_alloc_table(tmp_path) -> None:
    src = tmp_path / "p.csv"
    src.write_text(PROBLEM)
    result = CliRunner().invoke(app, ["alloc", str(src)])
    assert result.exit_code == 0
    assert "arena 12 B" in result.stdout and "optimal" in result.stdout


def test_alloc_malformed_csv_is_a_clean_error(tmp_path, capsys) -> None:
    src = tmp_path / "bad.csv"
    src.write_text("id,begin_,upper,size\n")
    with pytest.raises(SystemExit) as exc:
        main(["alloc", str(src)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "bad.csv:1" in err and "id,lower,upper,size" in err
