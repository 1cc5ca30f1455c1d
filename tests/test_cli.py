import json

import pytest
from typer.testing import CliRunner

from edgetrain import __version__
from edgetrain.cli import app, main

runner = CliRunner()


def test_version_and_help():
    res = runner.invoke(app, ["--version"])
    assert res.exit_code == 0 and res.stdout.strip() == f"edgetrain {__version__}"
    res = runner.invoke(app, ["--help"])
    assert res.exit_code == 0
    for cmd in ["models", "data", "devices", "demo", "run"]:
        assert cmd in res.stdout


def test_user_error_is_one_message_without_traceback(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  optimizer: lion\n")
    with pytest.raises(SystemExit) as exc:
        main(["run", str(bad)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "train.optimizer" in err and "Traceback" not in err


@pytest.mark.parametrize("cmd", ["models", "data", "devices"])
def test_catalog_json_is_valid(cmd):
    res = runner.invoke(app, [cmd, "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    assert isinstance(rows, list) and rows
    assert all("name" in r for r in rows)
