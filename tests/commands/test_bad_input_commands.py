"""Bad options of ``budget``, ``plan``, ``alloc``, ``chain`` and ``pretrain``: one error line,
exit status 2, no traceback, checked before any expensive work, and no file touched."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_runner import run_cli_flat as run_cli


@pytest.fixture
def afile(tmp_path) -> Path:
    """A regular file where a folder is expected (an output path that cannot be created)."""
    path = tmp_path / "afile"
    path.write_text("keep me\n")
    return path


@pytest.fixture
def no_profiling(monkeypatch):
    """Fail the test if the budget command gets as far as building the model."""
    import edgetrain.commands.budget as budget

    def boom(*a, **k):
        raise AssertionError("the model was built before the bad option was reported")

    monkeypatch.setattr(budget, "zoo_task", boom)


@pytest.mark.parametrize(
    "value, expected",
    [
        ("1.5", "--budget '1.5': a plain number above 1 is a count of bytes and must be whole"),
        ("300XB", "budget '300XB' not understood; give a fraction in (0, 1]"),
        ("-1", "budget '-1' not understood"),
        ("0", "budget '0': a fraction must be > 0"),
    ],
)
def test_budget_value_is_checked_before_profiling(value, expected, no_profiling, capsys):
    code, err = run_cli(["budget", "--model", "lenet", "--budget", value], capsys)
    assert code == 2 and expected in err and "Traceback" not in err


def test_budget_plan_out_in_a_missing_folder_is_reported_before_profiling(
    afile, no_profiling, capsys
):
    code, err = run_cli(["budget", "--model", "lenet", "--plan-out", str(afile / "p.json")], capsys)
    assert code == 2 and f"--plan-out {afile / 'p.json'}: folder {afile}" in err
    assert afile.read_text() == "keep me\n"


@pytest.mark.parametrize("cmd", [["budget", "--model", "lenet"], ["plan", "--model", "lenet"]])
def test_negative_seed_is_a_usage_error(cmd, no_profiling, capsys):
    code, err = run_cli([*cmd, "--seed", "-1"], capsys)
    assert code == 2 and "Invalid value for '--seed'" in err and "Traceback" not in err


def test_plan_plot_path_is_checked_before_planning(afile, capsys, monkeypatch):
    import edgetrain.memory as memory

    monkeypatch.setattr(memory, "plan_training", lambda *a, **k: pytest.fail("planned"))
    code, err = run_cli(["plan", "--model", "lenet", "--plot", str(afile / "x.png")], capsys)
    assert code == 2 and "--plot" in err and "is not a directory" in err
    assert "Traceback" not in err and afile.read_text() == "keep me\n"


def test_alloc_bad_paths_and_time_limit(tmp_path, afile, capsys):
    csv = tmp_path / "p.csv"
    csv.write_text("id,lower,upper,size\n0,0,2,10\n1,1,3,20\n")
    code, err = run_cli(["alloc", str(csv), "--out", str(afile / "o.csv")], capsys)
    assert code == 2 and "--out" in err and "is not a directory" in err
    code, err = run_cli(["alloc", str(csv), "--out", str(tmp_path)], capsys)
    assert code == 2 and "is a directory; give a file path" in err
    code, err = run_cli(["alloc", str(tmp_path)], capsys)
    assert code == 2 and f"{tmp_path} is a directory; expected a MiniMalloc CSV file" in err
    code, err = run_cli(["alloc", str(csv), "--time-limit", "-1"], capsys)
    assert code == 2 and "Invalid value for '--time-limit'" in err
    assert afile.read_text() == "keep me\n"
    assert csv.read_text() == "id,lower,upper,size\n0,0,2,10\n1,1,3,20\n"


def test_chain_negative_seed_is_a_usage_error_not_a_traceback(tmp_path, capsys):
    code, err = run_cli(["chain", "--seed", "-1", "--runs-root", str(tmp_path)], capsys)
    assert code == 2 and "Invalid value for '--seed'" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_chain_runs_root_that_is_a_file(afile, capsys):
    code, err = run_cli(["chain", "--runs-root", str(afile / "runs"), "--json"], capsys)
    assert code == 2 and "Traceback" not in err
    assert f"cannot create run directory {afile / 'runs'}" in err
    assert afile.read_text() == "keep me\n"


def test_chain_init_model_that_is_a_run_directory_says_so(tmp_path, capsys):
    run = tmp_path / "pre"
    run.mkdir()
    (run / "model.safetensors").write_bytes(b"")
    code, err = run_cli(
        ["chain", "--init-model", str(run), "--runs-root", str(tmp_path / "r"), "--json"], capsys
    )
    assert code == 2
    assert f"{run} is a directory; expected a .safetensors file such as {run}/model" in err


def test_pretrain_zero_learning_rate_and_unwritable_output(afile, capsys):
    args = ["pretrain", "--model", "lenet", "--data", "watch", "--epochs", "1", "--limit", "16"]
    code, err = run_cli([*args, "--lr", "0", "--output", str(afile.parent)], capsys)
    assert code == 2 and "--lr 0.0: the learning rate must be > 0" in err
    assert [p.name for p in afile.parent.iterdir()] == ["afile"]
    code, err = run_cli([*args, "--output", str(afile / "runs")], capsys)
    assert code == 2 and "Traceback" not in err
    assert f"cannot create run directory {afile / 'runs'}" in err


def test_pretrain_unknown_optimizer_leaves_no_run_directory(tmp_path, capsys):
    args = ["pretrain", "--model", "lenet", "--data", "watch", "--epochs", "1", "--limit", "16"]
    code, err = run_cli([*args, "--optimizer", "lion", "--output", str(tmp_path / "r")], capsys)
    assert code == 2 and "--optimizer 'lion': unknown optimizer; accepted: sgd" in err
    assert not (tmp_path / "r").exists()  # before: r/pretrain-lenet-watch/config.json
