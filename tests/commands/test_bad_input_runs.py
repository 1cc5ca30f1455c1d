"""Run directories on failure and interruption: ``chain`` makes its directory only after its
inputs load, ``pretrain --name`` refuses a taken name as ``chain --name`` does, and Ctrl-C is
one line with exit status 130 naming the last checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from cli_runner import run_cli_flat as run_cli

CHAIN = ["chain", "--devices", "2", "--epochs", "1", "--json"]


@pytest.fixture
def foreign_model(tmp_path) -> Path:
    """A readable safetensors file that is not a LeNet (loading it into one fails)."""
    path = tmp_path / "other.safetensors"
    save_file({"fc.weight": torch.zeros(3, 3)}, str(path))
    return path


def test_chain_init_model_that_does_not_fit_leaves_no_run_directory(
    foreign_model, tmp_path, capsys
):
    root = tmp_path / "runs"
    for extra in ([], ["--name", "mine"]):
        args = [*CHAIN, "--init-model", str(foreign_model), "--runs-root", str(root), *extra]
        code, err = run_cli(args, capsys)
        assert code == 2 and "Traceback" not in err, err
        assert "checkpoint does not match the model" in err
        # before: runs/chain-chain-chain-n2-s0/ (empty) or runs/mine/ was left behind
        assert not root.exists() or list(root.iterdir()) == []


def test_chain_data_failure_leaves_no_run_directory(tmp_path, capsys, monkeypatch):
    import edgetrain.decentralized.trainer as trainer
    from edgetrain.errors import DataError

    def no_data(*a, **k):
        raise DataError("the watch data could not be read (test)")

    monkeypatch.setattr(trainer, "build_fleet", no_data)
    root = tmp_path / "runs"
    code, err = run_cli([*CHAIN, "--runs-root", str(root), "--name", "mine"], capsys)
    assert code == 2 and "the watch data could not be read (test)" in err
    assert not (root / "mine").exists()


def test_chain_unusable_runs_root_is_reported_before_the_data_loads(tmp_path, capsys, monkeypatch):
    import edgetrain.decentralized.trainer as trainer

    def boom(*a, **k):
        raise AssertionError("the data was loaded before the bad --runs-root was reported")

    monkeypatch.setattr(trainer, "build_fleet", boom)
    afile = tmp_path / "afile"
    afile.write_text("keep me\n")
    code, err = run_cli([*CHAIN, "--runs-root", str(afile / "runs")], capsys)
    assert code == 2 and f"cannot create run directory {afile / 'runs'}" in err
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "config.json").write_text("{}")
    code, err = run_cli([*CHAIN, "--runs-root", str(tmp_path), "--name", "taken"], capsys)
    assert code == 2 and "already exists and is not empty; choose another --name" in err
    assert afile.read_text() == "keep me\n"
    assert (tmp_path / "taken" / "config.json").read_text() == "{}"


PRETRAIN = ["pretrain", "--model", "lenet", "--data", "watch", "--epochs", "1", "--limit", "16"]


def test_pretrain_name_of_an_existing_run_is_refused_as_chain_does(tmp_path, capsys, monkeypatch):
    import edgetrain.transfer.session as session

    def boom(*a, **k):
        raise AssertionError("pretrain trained although its --name was taken")

    monkeypatch.setattr(session, "pretrain", boom)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "model.safetensors").write_bytes(b"earlier run")
    code, err = run_cli([*PRETRAIN, "--output", str(tmp_path), "--name", "mine"], capsys)
    assert code == 2 and "Traceback" not in err
    assert f"run directory {tmp_path / 'mine'} already exists and is not empty" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]  # before: mine-2 was made
    assert (tmp_path / "mine" / "model.safetensors").read_bytes() == b"earlier run"
    # chain says the same of the same directory
    code, chain_err = run_cli([*CHAIN, "--runs-root", str(tmp_path), "--name", "mine"], capsys)
    assert code == 2 and err.split(";")[0] == chain_err.split(";")[0]
    code, err = run_cli([*PRETRAIN, "--output", str(tmp_path), "--name", "../up"], capsys)
    assert code == 2 and "run name '../up' is not accepted" in err


def test_pretrain_name_that_is_free_is_used_as_given(tmp_path, capsys):
    (tmp_path / "empty").mkdir()  # an empty directory is free (as for chain --name)
    args = [*PRETRAIN, "--output", str(tmp_path), "--name", "empty", "--json"]
    code, err = run_cli(args, capsys)
    assert code == 0, err
    assert (tmp_path / "empty" / "model.safetensors").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]


# -- Ctrl-C ---------------------------------------------------------------------------------


def _fed_cfg(path: Path, rounds: int) -> Path:
    import yaml

    from fed_small import SMALL_FLEET

    cfg = json.loads(json.dumps(SMALL_FLEET))
    cfg.update(name="cli", seed=2, data={"max_samples": 400}, fleet={"clients": 8})
    cfg["federated"].update(rounds=rounds, clients_per_round=3, local_steps=1)
    cfg["memory"]["bucket"] = 0.2
    path.write_text(yaml.safe_dump(cfg))
    return path


def _metrics(run: Path) -> list[dict]:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in rows]


def test_ctrl_c_names_the_last_checkpoint_and_the_run_resumes(tmp_path, capsys, monkeypatch):
    from edgetrain.federated.server import FederatedServer

    cfg = _fed_cfg(tmp_path / "c.yaml", 3)
    args = ["federate", str(cfg), "--selector", "random", "--json"]
    code, err = run_cli([*args, "--output-root", str(tmp_path / "whole")], capsys)
    assert code == 0, err
    real_round = FederatedServer.run_round

    def ctrl_c_in_round_3(self):
        if self.round == 2:
            raise KeyboardInterrupt
        return real_round(self)

    with monkeypatch.context() as m:
        m.setattr(FederatedServer, "run_round", ctrl_c_in_round_3)
        code, err = run_cli([*args, "--output-root", str(tmp_path / "runs")], capsys)
    run = tmp_path / "runs" / "cli"
    assert code == 130
    assert err == f"interrupted; the last checkpoint (round 2) is in {run}"  # the whole stderr
    code, err = run_cli([*args, "--output-root", str(tmp_path / "runs"), "--resume"], capsys)
    assert code == 0, err
    assert _metrics(run) == _metrics(tmp_path / "whole" / "cli")


def test_ctrl_c_without_a_checkpoint_is_one_word(tmp_path, capsys, monkeypatch):
    import edgetrain.commands.chain as chain
    from edgetrain.runs import note_checkpoint

    note_checkpoint(tmp_path, "round 9")  # left by an earlier command in this process

    def ctrl_c(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(chain, "run_chain", ctrl_c)
    code, err = run_cli([*CHAIN, "--runs-root", str(tmp_path / "runs")], capsys)
    assert (code, err) == (130, "interrupted")


def test_a_real_sigint_is_one_line_and_status_130(tmp_path):
    """SIGINT to the command line in a child process, as a terminal's Ctrl-C sends it."""
    import os
    import signal
    import subprocess
    import sys
    import time

    cfg = _fed_cfg(tmp_path / "c.yaml", 100000)
    root = tmp_path / "runs"
    proc = subprocess.Popen(
        [sys.executable, "-m", "edgetrain.cli", "federate", str(cfg), "--selector", "random"]
        + ["--output-root", str(root), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # a child that hangs is stopped with SIGABRT below: faulthandler then prints
        # every thread's stack into ``err``, so a failure says where it hung
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1"},
        # as a terminal starts it: SIGINT at its default.  A test run started in the
        # background of a non-interactive shell (``make test &``) ignores SIGINT, the child
        # inherits that, Python keeps it and so does the command: Ctrl-C is not the
        # shell's to send there.  That made this test hang twice in round 15 (the child
        # ran on, stack in log_metrics), never in the foreground.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    metrics = root / "cli" / "metrics.jsonl"
    deadline = time.monotonic() + 120
    started = False
    while time.monotonic() < deadline and proc.poll() is None:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 2:
            started = True
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        out, err = proc.communicate()
        raise AssertionError(
            f"no exit 120 s after SIGINT (2 rounds written before it: {started}); "
            f"the child's stacks:\n{err}"
        ) from None
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    line = err.strip().splitlines()[-1]
    assert line.startswith("interrupted; the last checkpoint (round ") and line.endswith(
        f") is in {root / 'cli'}"
    ), err
    done = int(line.split("(round ")[1].split(")")[0])
    assert done >= 1 and out == ""


def test_ctrl_c_while_the_command_loads_is_one_word_too(tmp_path):
    """SIGINT while torch and the command modules are imported (the first seconds of every
    command): before, a KeyboardInterrupt traceback from inside the import."""
    import subprocess
    import sys

    child = (
        "import builtins, os, signal\n"
        "real = builtins.__import__\n"
        "def imp(name, *a, **k):\n"
        "    if name == 'torch':\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "    return real(name, *a, **k)\n"
        "builtins.__import__ = imp\n"
        "from edgetrain.cli import main\n"
        "main(['--version'])\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", child], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert (res.returncode, res.stderr, res.stdout) == (130, "interrupted\n", "")


def test_finetune_name_of_an_existing_run_is_refused_as_pretrain_does(tmp_path, capsys):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "result.json").write_text("{}")
    args = ["finetune", "--from", str(tmp_path / "no-such-source"), "--data", "digits",
            "--output", str(tmp_path), "--name", "mine"]  # fmt: skip
    code, err = run_cli(args, capsys)
    assert code == 2 and "Traceback" not in err
    assert f"run directory {tmp_path / 'mine'} already exists and is not empty" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]  # before: mine-2
    assert (tmp_path / "mine" / "result.json").read_text() == "{}"
