"""Checkpoints of local runs and ``edgetrain run --resume``: a resumed run ends as one never
interrupted; a resume that cannot train leaves the run directory as it was."""

from __future__ import annotations

import json

import pytest
import torch

from cli_runner import run_cli
from edgetrain.config import parse_config
from edgetrain.engine.local import read_run_config, resume_local, run_local
from edgetrain.errors import BudgetError, ConfigError, ModelError
from edgetrain.runs import load_state


class Crash(Exception):
    """Stands for the process dying after an epoch."""


def _cfg(tmp_path, name="r", epochs=4, **train):
    return parse_config(
        {
            "name": name,
            "seed": 3,
            "output_root": str(tmp_path),
            "model": {"name": "lenet"},
            "data": {"name": "basicmotions", "test_fraction": 0.25},
            "train": {
                "epochs": epochs,
                "batch_size": 8,
                "lr": 0.003,
                "optimizer": "adam",
                "schedule": "cosine",
                **train,
            },
        }
    )


def _crash_after(epoch):
    def on_epoch(m):
        if m.epoch == epoch:
            raise Crash

    return on_epoch


def _rows(run_dir, kind=None):
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if kind is None or r.get("event") == kind]


def _same_weights(a, b):
    sa, sb = load_state(a / "model.safetensors"), load_state(b / "model.safetensors")
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k


def _losses(result):
    return [(m.train_loss, m.test_loss, m.test_accuracy, m.lr) for m in result.history]


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    return run_local(_cfg(tmp_path_factory.mktemp("whole"), "whole"))


def test_a_resumed_run_ends_with_the_uninterrupted_runs_metrics_and_weights(tmp_path, whole):
    with pytest.raises(Crash):
        run_local(_cfg(tmp_path), on_epoch=_crash_after(2))
    run_dir = tmp_path / "r"
    assert [p.name for p in (run_dir / "checkpoints").iterdir()] == ["epoch-0002"]
    resumed = resume_local(run_dir)
    assert resumed.run_dir == run_dir
    assert _losses(resumed) == _losses(whole)  # Adam's moments, cosine step, batch order
    _same_weights(run_dir, whole.run_dir)
    assert [r["epoch"] for r in _rows(run_dir, "epoch")] == [1, 2, 3, 4]
    (event,) = _rows(run_dir, "resume")
    assert event == {"event": "resume", "after_epoch": 2, "budget": None}
    result = json.loads((run_dir / "result.json").read_text())
    assert result["resumed_after_epoch"] == 2 and result["epochs"] == 4
    config = json.loads((run_dir / "config.json").read_text())
    assert config["command"] == "run" and config["resumed"] == [{"after_epoch": 2, "budget": None}]
    assert [p.name for p in (run_dir / "checkpoints").iterdir()] == ["epoch-0004"]


def test_epochs_after_the_checkpoint_are_trained_again_and_logged_once(tmp_path, whole):
    """checkpoint_every 2: a crash after epoch 3 resumes from 2; epoch 3's record, and a
    torn last line, are dropped and epoch 3 is trained again to the same numbers."""
    with pytest.raises(Crash):
        run_local(_cfg(tmp_path, checkpoint_every=2), on_epoch=_crash_after(3))
    run_dir = tmp_path / "r"
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write('{"event": "epo')  # a write the crash cut short
    resumed = resume_local(run_dir)
    assert _losses(resumed) == _losses(whole)
    _same_weights(run_dir, whole.run_dir)
    assert [r["epoch"] for r in _rows(run_dir, "epoch")] == [1, 2, 3, 4]


def test_an_epoch_the_crash_kept_from_metrics_comes_back_from_the_checkpoint(tmp_path, whole):
    with pytest.raises(Crash):
        run_local(_cfg(tmp_path), on_epoch=_crash_after(2))
    run_dir = tmp_path / "r"
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    (run_dir / "metrics.jsonl").write_text("\n".join(lines[:-1]) + "\n")  # epoch 2's lost
    resume_local(run_dir)
    assert [r["epoch"] for r in _rows(run_dir, "epoch")] == [1, 2, 3, 4]
    assert _rows(run_dir, "epoch")[1]["test_loss"] == whole.history[1].test_loss


def test_a_budgeted_run_resumes_bit_for_bit_under_a_recompute_plan(tmp_path):
    """Stopped in epoch 2 of a recompute plan and resumed: the losses and weights of
    the unplanned run (recomputation is exact); plans keep their numbering."""

    def cfg(root, name, budget):
        d = {
            "name": name,
            "seed": 0,
            "output_root": str(root),
            "model": {"name": "mobilenetv2", "options": {"width_mult": 0.35}},
            "data": {"name": "digits", "test_fraction": 0.25, "max_samples": 480},
            "train": {"epochs": 2, "batch_size": 32, "lr": 0.002, "optimizer": "adam"},
        }
        if budget:
            d["budget"] = {"limit": 0.5, "method": "recompute"}
        return parse_config(d)

    plain = run_local(cfg(tmp_path, "plain", False))
    with pytest.raises(Crash):
        run_local(cfg(tmp_path, "b", True), on_step=_crash_in_epoch_2)
    run_dir = tmp_path / "b"
    resumed = resume_local(run_dir)
    assert _losses(resumed) == _losses(plain)
    _same_weights(run_dir, plain.run_dir)
    plans = _rows(run_dir, "plan")
    assert [(p["plan"], p["epoch"], p["reason"]) for p in plans] == [
        (0, 0, "start"),
        (1, 1, "resume"),
    ]
    assert sorted(p.name for p in run_dir.glob("plan-*.json")) == ["plan-0.json", "plan-1.json"]
    assert [r["epoch"] for r in _rows(run_dir, "budget")] == [1, 2]
    assert resumed.extra["budget"]["within_budget"]


def test_a_run_a_budget_stopped_resumes_under_another_budget(tmp_path):
    """The BudgetError names the way on; the resume trains the remaining epochs."""
    cfg = parse_config(
        {
            "name": "s",
            "seed": 0,
            "output_root": str(tmp_path),
            "model": {"name": "mobilenetv2", "options": {"width_mult": 0.35}},
            "data": {"name": "digits", "test_fraction": 0.25, "max_samples": 480},
            "train": {"epochs": 3, "batch_size": 32, "lr": 0.002, "optimizer": "adam"},
            "budget": {"limit": 0.5, "method": "recompute"},
        }
    )
    with pytest.raises(Crash):
        run_local(cfg, on_epoch=_crash_after(1))
    run_dir = tmp_path / "s"
    before = {f: (run_dir / f).read_text() for f in ("config.json", "metrics.jsonl")}
    with pytest.raises(BudgetError, match="after epoch 1: budget.limit '1kB'"):
        resume_local(run_dir, budget="1kB")
    # nothing trained: the directory is as it was, and resumes as before
    assert {f: (run_dir / f).read_text() for f in before} == before
    r = resume_local(run_dir, budget="0.45", budget_method="hybrid")
    assert [m.epoch for m in r.history] == [1, 2, 3] and r.extra["resumed_after_epoch"] == 1
    assert read_run_config(run_dir).budget.limit == "0.45"
    assert [p["method"] for p in _rows(run_dir, "plan")] == ["recompute", "hybrid"]


def test_bad_resumes_are_one_clear_error_each(tmp_path, whole):
    with pytest.raises(ConfigError, match="does not exist or is not a directory"):
        resume_local(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"not a run directory \(no config.json\)"):
        resume_local(tmp_path / "empty")
    chain = tmp_path / "chain"
    chain.mkdir()
    (chain / "config.json").write_text(json.dumps({"command": "chain", "devices": 3}))
    with pytest.raises(ConfigError, match="made by `edgetrain chain`"):
        resume_local(chain)
    (chain / "config.json").write_text('{"command": "ru')
    with pytest.raises(ConfigError, match="is not readable JSON"):
        resume_local(chain)
    (chain / "config.json").write_text('{"command": "run"}')
    with pytest.raises(ConfigError, match="has no 'config' object"):
        resume_local(chain)
    with pytest.raises(ConfigError, match="nothing to resume"):
        resume_local(whole.run_dir)
    run_local(_cfg(tmp_path, "nock", epochs=1, checkpoint_every=0))
    with pytest.raises(ConfigError, match="holds no complete checkpoint"):
        resume_local(tmp_path / "nock")


def test_a_damaged_checkpoint_is_named_and_changes_nothing(tmp_path):
    with pytest.raises(Crash):
        run_local(_cfg(tmp_path), on_epoch=_crash_after(2))
    run_dir = tmp_path / "r"
    before = {f: (run_dir / f).read_text() for f in ("config.json", "metrics.jsonl")}
    tensors = run_dir / "checkpoints" / "epoch-0002" / "state.safetensors"
    tensors.write_bytes(tensors.read_bytes()[:100])
    with pytest.raises(ModelError, match="state.safetensors is not a readable safetensors"):
        resume_local(run_dir)
    assert {f: (run_dir / f).read_text() for f in before} == before


def test_edgetrain_run_resume(tmp_path, capsys, whole):
    with pytest.raises(Crash):
        run_local(_cfg(tmp_path), on_epoch=_crash_after(2))
    run_dir = tmp_path / "r"
    code, err = run_cli(["run", "--resume", str(run_dir), "--json"], capsys)
    assert code == 0, err
    result = json.loads((run_dir / "result.json").read_text())
    assert result["accuracy"] == whole.test_accuracy and result["resumed_after_epoch"] == 2
    code, err = run_cli(["run", "--resume", str(run_dir)], capsys)
    assert code == 2 and "nothing to resume" in err
    code, err = run_cli(["run", "examples/local-watch.yaml", "--resume", str(run_dir)], capsys)
    assert code == 2 and "do not combine it with a CONFIG file" in err
    code, err = run_cli(["run"], capsys)
    assert code == 2 and "needs a CONFIG file" in err


def test_ctrl_c_in_edgetrain_run_names_the_checkpoint_and_the_run_resumes(
    tmp_path, capsys, monkeypatch, whole
):
    import edgetrain.engine.local as local

    real = local.train_classifier

    def ctrl_c_after_epoch_2(*args, on_epoch=None, **kwargs):
        def stop(m):
            on_epoch(m)
            if m.epoch == 2:
                raise KeyboardInterrupt

        return real(*args, on_epoch=stop, **kwargs)

    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"name: r\noutput_root: {tmp_path}\nseed: 3\nmodel: {{name: lenet}}\n"
        "data: {name: basicmotions, test_fraction: 0.25}\n"
        "train: {epochs: 4, batch_size: 8, lr: 0.003, optimizer: adam, schedule: cosine}\n"
    )
    with monkeypatch.context() as m:
        m.setattr(local, "train_classifier", ctrl_c_after_epoch_2)
        code, err = run_cli(["run", str(cfg), "--json"], capsys)  # --json: no progress bar
    run_dir = tmp_path / "r"
    assert code == 130
    assert err.strip() == f"interrupted; the last checkpoint (epoch 2) is in {run_dir}"
    code, err = run_cli(["run", "--resume", str(run_dir)], capsys)
    assert code == 0, err
    _same_weights(run_dir, whole.run_dir)
    assert [r["test_loss"] for r in _rows(run_dir, "epoch")] == [m.test_loss for m in whole.history]


def _budget_cfg(root, name, budget, epochs=2):
    return parse_config(
        {
            "name": name,
            "seed": 0,
            "output_root": str(root),
            "model": {"name": "mobilenetv2", "options": {"width_mult": 0.35}},
            "data": {"name": "digits", "test_fraction": 0.25, "max_samples": 480},
            "train": {"epochs": epochs, "batch_size": 32, "lr": 0.002, "optimizer": "adam"},
            "budget": budget,
        }
    )


def _crash_in_epoch_2(done, total):  # its first step: epoch 1 is wholly logged
    if done == total // 2 + 1:
        raise Crash


def _crashed(root, name, budget):
    """The run directory of a 2-epoch budgeted run that died in epoch 2."""
    with pytest.raises(Crash):
        run_local(_budget_cfg(root, name, budget), on_step=_crash_in_epoch_2)
    return root / name


def test_a_resume_plans_from_the_runs_own_profile(tmp_path):
    """The first session writes profile.json; the resume reads it (no op timed again) and,
    at the same budget, makes the same plan; a resume under a method the file does not
    serve profiles again, says why, and leaves the file as it was."""
    run_dir = _crashed(tmp_path, "p", {"limit": 0.4, "method": "compress"})
    saved = (run_dir / "profile.json").read_bytes()
    resumed = resume_local(run_dir)
    first, again = _rows(run_dir, "plan")
    assert first["profile"]["reused"] is False and again["profile"]["reused"] is True
    assert again["profile"]["path"] == str(run_dir / "profile.json")
    p0, p1 = (json.loads((run_dir / f"plan-{i}.json").read_text()) for i in (0, 1))
    assert p1 == p0 and first["decisions"]["compress"] > 0
    assert (run_dir / "profile.json").read_bytes() == saved
    assert resumed.extra["budget"]["profile"]["reused"] is True

    # another method: compress needs the int8 / int4 codecs, which a recompute profile lacks
    run_dir = _crashed(tmp_path, "q", {"limit": 0.4, "method": "recompute"})
    saved = (run_dir / "profile.json").read_bytes()
    resume_local(run_dir, budget_method="compress")
    again = _rows(run_dir, "plan")[-1]
    assert again["method"] == "compress" and again["profile"]["reused"] is False
    assert "codecs" in again["profile"]["why"]
    assert (run_dir / "profile.json").read_bytes() == saved


def test_runs_sharing_a_profile_file_resume_to_the_same_bits(tmp_path):
    """budget.profile: the first run measures and writes it, the others read it; a run
    that crashed and resumed under a lossy (compress) plan then ends with the losses and
    weights of the uninterrupted run, since both planned from the same measurements."""
    shared = tmp_path / "mnv2.profile.json"
    budget = {"limit": 0.4, "method": "compress", "profile": str(shared)}
    whole = run_local(_budget_cfg(tmp_path, "w", budget))
    assert shared.is_file() and _rows(whole.run_dir, "plan")[0]["profile"]["reused"] is False
    saved = shared.read_bytes()
    resumed = resume_local(_crashed(tmp_path, "c", budget))
    assert [r["profile"]["reused"] for r in _rows(tmp_path / "c", "plan")] == [True, True]
    assert _losses(resumed) == _losses(whole)
    _same_weights(tmp_path / "c", whole.run_dir)
    assert shared.read_bytes() == saved
    assert not (tmp_path / "c" / "profile.json").exists()  # the shared file took its place

    # a file measured for another setting is refused, named, and kept
    other = parse_config({**_budget_cfg(tmp_path, "s", budget).model_dump(), "seed": 1})
    with pytest.raises(ConfigError, match=r"seed: file 0, this run 1.*another budget.profile"):
        run_local(other)
    assert shared.read_bytes() == saved
    assert not (tmp_path / "s").exists()  # nothing trained: no run directory left behind
    with pytest.raises(ConfigError, match="budget.profile .*is a directory"):
        _budget_cfg(tmp_path, "d", {**budget, "profile": str(tmp_path)})
