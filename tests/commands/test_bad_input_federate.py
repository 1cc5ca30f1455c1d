"""``edgetrain federate --resume`` on damaged, foreign or missing run directories.

Each case damages a copy of one finished 2-round run, resumes it through the command line
and checks: exit status 2, one error naming the file or field and what is expected, no
traceback, and every file of the run directory byte for byte as it was.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from cli_runner import run_cli
from edgetrain.cli import main
from edgetrain.runs import load_state, read_metadata, save_state
from fed_small import SMALL_FLEET

CFG = json.loads(json.dumps(SMALL_FLEET))
CFG.update(name="cli", seed=2, data={"max_samples": 400}, fleet={"clients": 8})
CFG["federated"].update(rounds=2, clients_per_round=3, local_steps=1)
CFG["memory"]["bucket"] = 0.2


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def write_cfg(path: Path, **changes) -> Path:
    cfg = json.loads(json.dumps(CFG))
    cfg.update(changes)
    path.write_text(yaml.safe_dump(cfg))
    return path


def _finished_run(base: Path, *extra: str) -> tuple[Path, Path]:
    """A finished 2-round run of the module's config under ``base``: (config file, output root)."""
    cfg = write_cfg(base / "c.yaml")
    root = base / "runs"
    try:
        main(["federate", str(cfg), "--output-root", str(root), *extra, "--json"])
    except SystemExit as exc:
        assert exc.code in (0, None)
    return cfg, root


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> tuple[Path, Path]:
    """A 2-round oort run (config file, output root) made once for the module."""
    cfg, root = _finished_run(tmp_path_factory.mktemp("fed"), "--selector", "oort")
    assert [
        json.loads(x)["round"] for x in (root / "cli" / "metrics.jsonl").read_text().splitlines()
    ] == [1, 2]
    return cfg, root


@pytest.fixture
def run_copy(finished, tmp_path) -> tuple[Path, Path]:
    cfg, root = finished
    shutil.copytree(root, tmp_path / "runs")
    return cfg, tmp_path / "runs"


def _resume(cfg: Path, root: Path, capsys, *extra: str) -> tuple[int, str]:
    args = ["federate", str(cfg), "--output-root", str(root), "--resume", "--selector", "oort"]
    return run_cli([*args, "--rounds", "3", "--json", *extra], capsys)


def _torn_round_2(run: Path) -> None:  # round 2's line cut mid-write (no newline)
    text = (run / "metrics.jsonl").read_text()
    (run / "metrics.jsonl").write_text(text[: len(text) - 200])


def _set_state(run: Path, text: str, round_: str | None = None) -> None:
    """Replace the round state kept in the checkpoint's metadata."""
    ck = run / "checkpoint" / "global.safetensors"
    meta = read_metadata(ck)
    save_state(ck, load_state(ck), {"round": round_ or meta["round"], "state": text})


def _old_layout(run: Path, edit=lambda text: text) -> None:
    """The checkpoint as earlier versions wrote it: checkpoint/state.json next to a
    global.safetensors holding only the tensors and {"round": N}."""
    ck = run / "checkpoint"
    meta = read_metadata(ck / "global.safetensors")
    (ck / "state.json").write_text(edit(meta["state"]))
    save_state(ck / "global.safetensors", load_state(ck / "global.safetensors"), {"round": "2"})


DAMAGE = {
    "checkpoint state not JSON": (
        lambda run: _set_state(run, "not json{"),
        ["checkpoint state the metadata of", "global.safetensors is not valid JSON"],
    ),
    "checkpoint state without fields": (
        lambda run: _set_state(run, "{}"),
        ["bad field(s) round (missing)", "expected round, sim_time_s, method"],
    ),
    "checkpoint state of another round than the file": (
        lambda run: _set_state(
            run, read_metadata(run / "checkpoint" / "global.safetensors")["state"], "1"
        ),
        ["its metadata says round 1 and its state round 2"],
    ),
    "earlier layout: state.json not JSON": (
        lambda run: _old_layout(run, lambda _: "not json{"),
        ["checkpoint state", "state.json is not valid JSON"],
    ),
    "earlier layout: state.json without fields": (
        lambda run: _old_layout(run, lambda _: "{}"),
        ["bad field(s) round (missing)", "expected round, sim_time_s, method"],
    ),
    "global.safetensors truncated": (
        lambda run: (run / "checkpoint" / "global.safetensors").write_bytes(
            (run / "checkpoint" / "global.safetensors").read_bytes()[:1000]
        ),
        ["global.safetensors is not a readable safetensors file"],
    ),
    "metrics.jsonl garbage line": (
        lambda run: (run / "metrics.jsonl").open("a").write("garbage line\n"),
        ["metrics.jsonl line 3 is not valid JSON"],
    ),
    "metrics.jsonl cut inside the checkpoint's round": (
        _torn_round_2,
        ["does not hold one record per round up to the checkpoint's round 2", "missing: 2"],
    ),
    "checkpoint removed, metrics kept": (
        lambda run: shutil.rmtree(run / "checkpoint"),
        ["has metrics for 2 round(s) but no checkpoint", "without --resume"],
    ),
    "earlier layout: state.json and global.safetensors from different rounds": (
        lambda run: _old_layout(run, lambda t: t.replace('"round": 2', '"round": 1')),
        ["holds round 2 but", "state.json round 1", "cannot be continued exactly"],
    ),
    "config.json not JSON": (
        lambda run: (run / "config.json").write_text("{"),
        ["config.json is not valid JSON"],
    ),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_resume_of_a_damaged_run_is_one_error_and_changes_nothing(case, run_copy, capsys):
    cfg, root = run_copy
    damage, expected = DAMAGE[case]
    damage(root / "cli")
    before = snapshot(root)
    code, err = _resume(cfg, root, capsys)
    assert code == 2, err
    assert "Traceback" not in err and err.startswith("error:")
    for text in expected:
        assert text in " ".join(err.split()), err
    assert snapshot(root) == before


def test_resume_with_another_config_names_the_fields_and_keeps_config_json(run_copy, capsys):
    cfg, root = run_copy
    other = write_cfg(cfg.parent.parent / "other.yaml", seed=5)
    before = snapshot(root)
    code, err = _resume(other, root, capsys)
    assert code == 2 and "Traceback" not in err
    flat = " ".join(err.split())
    assert "seed: run 2, now 5" in flat and "only federated.rounds" in flat
    assert snapshot(root) == before  # config.json was rewritten before the check


def test_resume_with_another_model_is_refused_before_anything_is_built(run_copy, capsys):
    cfg, root = run_copy
    other = write_cfg(cfg.parent.parent / "other.yaml", model={"name": "alexnet"})
    before = snapshot(root)
    code, err = _resume(other, root, capsys)
    assert code == 2 and "model.name: run 'lenet', now 'alexnet'" in " ".join(err.split())
    assert snapshot(root) == before


def test_resume_with_another_method_keeps_the_run(run_copy, capsys):
    cfg, root = run_copy
    before = snapshot(root)
    code, err = _resume(cfg, root, capsys, "--selector", "random")
    assert code == 2 and "is for oort/fedavg, not random/fedavg" in " ".join(err.split())
    assert snapshot(root) == before


def test_resume_of_a_missing_run_directory_is_an_error_not_a_new_run(tmp_path, capsys):
    cfg = write_cfg(tmp_path / "c.yaml")
    code, err = _resume(cfg, tmp_path / "runs", capsys)
    assert code == 2 and "--resume: no run directory" in " ".join(err.split())
    assert not (tmp_path / "runs").exists()


def test_a_record_torn_after_the_checkpoint_is_dropped_and_the_run_continues(run_copy, capsys):
    cfg, root = run_copy
    with open(root / "cli" / "metrics.jsonl", "a") as f:
        f.write('{"round": 3, "accur')  # round 3 crashed mid-write, before its checkpoint
    code, err = _resume(cfg, root, capsys)
    assert code == 0, err
    rows = [json.loads(x) for x in (root / "cli" / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == [1, 2, 3]


def test_a_run_directory_of_the_earlier_layout_is_continued(run_copy, capsys):
    cfg, root = run_copy
    _old_layout(root / "cli")
    code, err = _resume(cfg, root, capsys)
    assert code == 0, err
    rows = [json.loads(x) for x in (root / "cli" / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == [1, 2, 3]
    assert not (root / "cli" / "checkpoint" / "state.json").exists()  # one checkpoint file


def test_a_config_that_cannot_be_built_leaves_no_run_directory(tmp_path, capsys):
    cfg = write_cfg(tmp_path / "c.yaml", model={"name": "resnet9000"})
    code, err = run_cli(["federate", str(cfg), "--output-root", str(tmp_path / "runs")], capsys)
    assert code == 2 and "unknown model 'resnet9000'; accepted names: lenet" in err
    assert not (tmp_path / "runs").exists()  # before: runs/cli/config.json, next run cli-2


def test_an_output_root_that_is_a_file_is_one_error(tmp_path, capsys):
    cfg = write_cfg(tmp_path / "c.yaml")
    (tmp_path / "afile").write_text("x")
    code, err = run_cli(["federate", str(cfg), "--output-root", str(tmp_path / "afile")], capsys)
    assert code == 2 and "Traceback" not in err
    assert "cannot create run directory" in " ".join(err.split())
    assert (tmp_path / "afile").read_text() == "x"


@pytest.fixture(scope="module")
def finished_hybrid(tmp_path_factory) -> tuple[Path, Path]:
    """A 2-round FedHybrid run (its plans.json is loaded again on resume)."""
    cfg, root = _finished_run(tmp_path_factory.mktemp("fedh"))
    assert json.loads((root / "cli" / "plans.json").read_text())
    return cfg, root


@pytest.mark.parametrize(
    "text, expected",
    [
        ("not json", "plans.json is not valid JSON"),
        ('[{"a": 1}]', "plans.json: row 0 lacks strategy, fraction, feasible, overhead_factor"),
    ],
)
def test_resume_with_a_damaged_plans_file(finished_hybrid, tmp_path, capsys, text, expected):
    cfg, root = finished_hybrid
    shutil.copytree(root, tmp_path / "runs")
    root = tmp_path / "runs"
    (root / "cli" / "plans.json").write_text(text)
    before = snapshot(root)
    code, err = run_cli(
        ["federate", str(cfg), "--output-root", str(root), "--resume", "--rounds", "3"], capsys
    )
    assert code == 2 and "Traceback" not in err and expected in " ".join(err.split())
    assert snapshot(root) == before


def test_a_rejected_memory_plans_file_leaves_no_config_behind(tmp_path, capsys):
    (tmp_path / "p.json").write_text("not json")
    cfg = json.loads(json.dumps(CFG))
    cfg["memory"]["plans"] = str(tmp_path / "p.json")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    args = ["federate", str(tmp_path / "c.yaml"), "--output-root", str(tmp_path / "runs")]
    code, err = run_cli(args, capsys)
    assert code == 2 and "memory.plans:" in err and "is not JSON" in err
    # an empty directory is reused by the next run; a config.json in it pushed that run to cli-2
    assert [p for p in (tmp_path / "runs").rglob("*") if p.is_file()] == []
