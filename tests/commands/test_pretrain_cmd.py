import json

import pytest
from typer.testing import CliRunner

from edgetrain.cli import app, main
from edgetrain.runs import load_state

runner = CliRunner()
TINY = ["--model-opt", "embed_dim=16", "--model-opt", "mlp_dim=16"]


def test_pretrain_json_is_one_object_and_writes_card(tmp_path):
    args = [
        "pretrain",
        "--model",
        "cct2",
        "--data",
        "digits",
        "--data-opt",
        "digits=[0,1,2]",
        *TINY,
        "--epochs",
        "1",
        "--limit",
        "60",
        "--output",
        str(tmp_path),
        "--name",
        "src",
        "--json",
    ]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert {"accuracy", "trained_param_bytes", "step_time_ms", "run_dir"} <= set(out)
    assert out["run_dir"] == str(tmp_path / "src")
    assert 0.0 <= out["accuracy"] <= 1.0 and out["step_time_ms"] > 0
    card = json.loads((tmp_path / "src" / "card.json").read_text())
    assert card["classes"] == ["0", "1", "2"] and card["model_options"]["embed_dim"] == 16
    weights = load_state(tmp_path / "src" / "model.safetensors")
    assert out["trained_param_bytes"] == sum(4 * v.numel() for v in weights.values())


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--data-opt", "digits"], "expected KEY=VALUE"),
        (["--data-opt", "colour=red"], "has no option colour"),
        (["--groups", "1,x"], "comma-separated integers"),
        (["--groups", "1"], "records no subjects"),
    ],
)
def test_pretrain_user_errors_exit_2_with_a_message(tmp_path, capsys, extra, message):
    with pytest.raises(SystemExit) as exc:
        main(["pretrain", "--model", "cct2", "--data", "digits", *extra, "--output", str(tmp_path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
