import json

import pytest
from typer.testing import CliRunner

from edgetrain.cli import app, main

runner = CliRunner()


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = tmp_path_factory.mktemp("ft")
    res = runner.invoke(
        app,
        [
            "pretrain",
            "--model",
            "cct2",
            "--data",
            "digits",
            "--data-opt",
            "digits=[0,1,2]",
            "--model-opt",
            "embed_dim=16",
            "--model-opt",
            "mlp_dim=16",
            "--epochs",
            "1",
            "--limit",
            "60",
            "--output",
            str(root),
            "--name",
            "src",
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    return root


def _finetune(root, *extra):
    return [
        "finetune",
        "--from",
        str(root / "src"),
        "--strategy",
        "lora-1",
        "--data",
        "digits",
        "--data-opt",
        "digits=[3,4,5]",
        "--shots",
        "4",
        "--epochs",
        "3",
        "--average-last",
        "2",
        "--test-size",
        "30",
        "--no-plan",
        "--output",
        str(root),
        *extra,
    ]


def test_finetune_json_then_resume_of_a_finished_run_gives_the_same_result(source):
    res = runner.invoke(app, [*_finetune(source, "--name", "ft", "--json")])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert {"accuracy", "trained_param_bytes", "step_time_ms", "run_dir"} <= set(out)
    assert out["strategy"] == "lora-1" and out["train_samples"] == 12 and out["test_samples"] == 30
    # lora-1 on embed 16 / mlp 16: 6 adapted Linears x r=4 x (16+16) + head 16x3+3
    assert out["trained_params"] == 6 * 4 * 32 + 51
    assert out["trained_param_bytes"] == 4 * out["trained_params"]
    again = runner.invoke(app, ["finetune", "--resume", out["run_dir"], "--json"])
    assert again.exit_code == 0, again.output
    resumed = json.loads(again.stdout)
    assert resumed["accuracy"] == out["accuracy"] and resumed["resumed_from_epoch"] == 3
    # the frozen prefix (tokenizer + block 0 + frozen q/k/v bases of block 1) was cached
    assert out["prefix_cache"]["used"] and len(out["prefix_cache"]["cut"]) == 5
    plain = runner.invoke(
        app, [*_finetune(source, "--name", "ft-plain", "--no-cache-prefix", "--json")]
    )
    assert plain.exit_code == 0, plain.output
    plain_out = json.loads(plain.stdout)
    assert plain_out["prefix_cache"]["used"] is False
    assert plain_out["accuracy"] == out["accuracy"]


def test_finetune_table_output_has_the_report_line(source):
    res = runner.invoke(app, [*_finetune(source, "--name", "ft-table", "--strategy", "lp")])
    assert res.exit_code == 0, res.output
    assert "lp: accuracy" in res.stdout and "trained parameter bytes" in res.stdout
    assert "batch-1 step" in res.stdout and "run directory:" in res.stdout
    assert "frozen-prefix cache" in res.stdout and "ops cached once" in res.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["finetune", "--resume", "nowhere", "--from", "x"], "do not combine"),
        (["finetune", "--data", "digits"], "needs --from"),
        (["finetune", "--resume", "nowhere"], "not a fine-tune run directory"),
        (["finetune", "--from", "nowhere", "--data", "digits"], "no such run directory"),
    ],
)
def test_finetune_user_errors_exit_2(capsys, args, message):
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_finetune_bad_strategy_and_shots_are_named(source, capsys):
    with pytest.raises(SystemExit):
        main(_finetune(source, "--strategy", "lora"))
    assert "needs a block count" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(_finetune(source, "--shots", "500"))
    assert "500-shot sampling needs at least 500 samples" in capsys.readouterr().err
