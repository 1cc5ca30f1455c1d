"""``edgetrain federate``: a single run and --compare with --json, and a user error."""

import json

import yaml
from typer.testing import CliRunner

from edgetrain.cli import app
from fed_small import SMALL_FLEET

CFG = json.loads(json.dumps(SMALL_FLEET))  # smaller still: the command runs twice
CFG.update(name="cli", seed=2, data={"max_samples": 400}, fleet={"clients": 8})
CFG["federated"].update(rounds=2, clients_per_round=3, local_steps=1)
CFG["memory"]["bucket"] = 0.2


def test_federate_json_and_compare(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(CFG))
    r = CliRunner().invoke(
        app,
        [
            "federate",
            str(path),
            "--output-root",
            str(tmp_path / "runs"),
            "--json",
            "--selector",
            "oort",
            "--aggregator",
            "fedprox",
        ],  # fmt: skip
    )
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["method"] == "oort" and out["aggregator"] == "fedprox" and out["rounds"] == 2
    run = tmp_path / "runs" / "cli"
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [x["round"] for x in rows] == [1, 2]
    for key in ("sim_time_s", "accuracy", "loss", "selected", "participation", "plan_decisions"):
        assert key in rows[0]
    assert "simulated" in (run / "report.html").read_text()

    r = CliRunner().invoke(
        app,
        [
            "federate",
            str(path),
            "--output-root",
            str(tmp_path / "runs"),
            "--json",
            "--compare",
            "--rounds",
            "2",
        ],  # fmt: skip
    )
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    methods = [x["method"] for x in rows]
    assert methods == ["random", "oort", "fedhybrid", "heterofl", "oort+recompute",
                       "oort+swap", "oort+compress"]  # fmt: skip
    rnd = rows[0]
    assert rnd["speedup_vs_random"] == 1.0 and rnd["rounds"] == 2
    assert "skipped" in rows[3]  # heterofl needs a width_mult model; lenet has none
    for x in rows:
        if "skipped" not in x:
            assert set(x) >= {"final_accuracy", "time_to_target_s", "speedup_vs_random", "wall_s"}


def test_federate_bad_selector_is_a_user_error(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(CFG))
    r = CliRunner().invoke(app, ["federate", str(path), "--selector", "fastest"])
    assert r.exit_code != 0
    assert "accepted" in str(r.exception) or "accepted" in r.output


def test_compare_runs_the_chosen_methods_with_random_first(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(CFG))
    argv = ["federate", str(path), "--output-root", str(tmp_path / "runs"), "--json",
            "--compare", "--rounds", "2", "--methods", "oort-oracle,oort,oort"]  # fmt: skip
    r = CliRunner().invoke(app, argv)
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert [x["method"] for x in rows] == ["random", "oort-oracle", "oort"]
    report = next((tmp_path / "runs").glob("cli-compare*")) / "report.html"
    assert "oort-oracle" in report.read_text()


def test_methods_errors_name_the_value_and_the_accepted(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(CFG))
    for extra, expected in (
        (["--compare", "--methods", "oort,fastest"], "unknown 'fastest'; accepted: random, oort"),
        (["--compare", "--methods", " , "], "empty list"),
        (["--methods", "oort"], "add --compare, or use --selector"),
    ):
        root = ["--output-root", str(tmp_path / "runs")]
        r = CliRunner().invoke(app, ["federate", str(path), *root, *extra])
        assert r.exit_code != 0
        assert expected in str(r.exception) + r.output
    assert not (tmp_path / "runs").exists()  # refused before a run directory is made
