"""``edgetrain federate``: a single run and --compare with --json, and a user error."""

import json
from pathlib import Path

import pytest
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


def test_federate_runs_held_classes_with_partial_work(tmp_path):
    """Data only low-memory phones hold, FedProx's partial work: from the command, every
    round's metrics carry the per-class accuracy and the partial updates."""
    cfg = json.loads(json.dumps(CFG))
    cfg["partition"] = {"low_memory_classes": 2}
    cfg["federated"].update(partial_work=True, rounds=2)
    path = tmp_path / "h.yaml"
    path.write_text(yaml.safe_dump(cfg))
    r = CliRunner().invoke(
        app, ["federate", str(path), "--output-root", str(tmp_path / "runs"), "--json"]
    )
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in (tmp_path / "runs" / "cli" / "metrics.jsonl").open()]
    from edgetrain.config import load_config
    from edgetrain.federated import FederatedConfig, build_environment

    a, b = build_environment(load_config(path, schema=FederatedConfig)).low_memory_classes
    ca = rows[-1]["class_accuracy"]
    assert json.loads(r.stdout)["held_class_accuracy"] == pytest.approx((ca[a] + ca[b]) / 2)
    for row in rows:
        assert len(row["class_accuracy"]) == 10 and "partial" in row and "partial_share" in row
    report = (tmp_path / "runs" / "cli" / "report.html").read_text()
    assert "Test accuracy per class, final round" in report
    assert report.count("*</th>") == 2 and "partition.low_memory_classes" in report
    cfg["partition"] = {"low_memory_classes": 12}
    path.write_text(yaml.safe_dump(cfg))
    r = CliRunner().invoke(
        app, ["federate", str(path), "--output-root", str(tmp_path / "bad"), "--json"]
    )
    said = str(r.exception) + r.output
    assert r.exit_code != 0 and "low_memory_classes" in said and "at most 9" in said
    assert not (tmp_path / "bad").exists()  # refused before a run directory is made


def test_every_federated_example_config_is_valid():
    from pathlib import Path

    from edgetrain.config import load_config
    from edgetrain.federated import FederatedConfig, build_environment

    root = Path(__file__).resolve().parents[2] / "examples"
    paths = sorted(root.glob("federated-*.yaml"))
    assert len(paths) >= 6
    for p in paths:
        cfg = load_config(p, schema=FederatedConfig)
        assert cfg.name == p.stem
    low = load_config(root / "federated-mnist-lowmem.yaml", schema=FederatedConfig)
    env = build_environment(low)
    y = env.train.y.numpy()
    wall = env.hard_limits < env.m_g
    assert len(env.low_memory_classes) == 2 and low.federated.partial_work
    held = [c for c, part in enumerate(env.parts) if set(y[part]) & set(env.low_memory_classes)]
    assert held and all(wall[c] for c in held)
    ex = load_config(root / "federated-mnist-lowmem-explore.yaml", schema=FederatedConfig)
    assert (ex.federated.fedhybrid_stat, ex.federated.fedhybrid_explore) == ("samples", "samples")
    assert ex.partition.low_memory_classes == 2 and ex.federated.local_epochs is None
    assert ex.federated.overcommit == 1.0
    fig17 = load_config(root / "federated-mnist-fig17.yaml", schema=FederatedConfig)
    assert fig17.federated.overcommit == 1.0 and fig17.partition.low_memory_classes in (None, 0)
    assert fig17.federated.method == "fedhybrid" and fig17.federated.local_steps == 5


def test_the_overcommit_examples_are_the_benchmarks_settings(monkeypatch):
    """examples/federated-mnist-lowmem-wait.yaml and federated-mnist-fig17.yaml are
    fedhybrid_tta.py's MNIST task with ``--overcommit 1.0`` (the first with
    ``--low-memory-classes 2``) on the kept plans, field for field, so the command
    reproduces the benchmark's rows (round 43's figures quoted in their headers);
    federated-bbc-bert-wait.yaml is its BBC News / BERT task with ``--overcommit 1.0
    --unplannable microbatch`` (round 45)."""
    from pathlib import Path

    from bench_loader import load_benchmark
    from edgetrain.config import load_config
    from edgetrain.federated import FederatedConfig

    root = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(root)  # the example names its plans file from the repository root
    tta = load_benchmark("fedhybrid_tta")
    wait = {"overcommit": 1.0, "method": "fedhybrid"}
    cases = (
        ("federated-mnist-lowmem-wait", "mnist", 2, wait),
        ("federated-mnist-fig17", "mnist", 0, wait),
        ("federated-bbc-bert-wait", "bbc-bert", 0, {**wait, "unplannable": "microbatch"}),
    )
    for name, task, held, sem in cases:
        ex = load_config(root / f"examples/{name}.yaml", schema=FederatedConfig)
        bench = tta.task_config(
            False, "fedprox", 0, semantics=sem, task=task,
            plans=tta.plans_file("pinned", task, False), low_memory_classes=held,
        )  # fmt: skip
        a, b = ex.model_dump(), bench.model_dump()
        assert Path(a["memory"].pop("plans")).resolve() == Path(b["memory"].pop("plans")).resolve()
        a.pop("name"), b.pop("name")
        assert a == b, name
        # each example states its round rule, not only matches the benchmark's
        assert ex.federated.overcommit == 1.0, name
        assert ex.federated.unplannable == sem.get("unplannable", "exclude"), name


def test_progress_view_shows_plan_buckets_and_rounds():
    import io

    from rich.console import Console
    from rich.progress import Progress

    from edgetrain.commands.federate import _ProgressView

    bar = Progress(console=Console(file=io.StringIO()))
    view = _ProgressView(bar)
    for j in range(4):
        view({"event": "plans", "method": "fedhybrid", "strategy": "hybrid", "done": j, "total": 3})
    for r, goal in ((1, 2), (2, 2), (3, None)):  # round 3: --compare's extension
        ev = {"event": "round", "method": "oort", "round": r, "rounds": goal,
              "accuracy": 0.5 if r < 3 else None, "sim_time_s": 10.0 * r}  # fmt: skip
        view(ev)
    plans_task, rounds_task = bar.tasks
    assert (plans_task.description, plans_task.completed, plans_task.total) == (
        "hybrid plans",
        3,
        3,
    )
    assert (rounds_task.description, rounds_task.completed, rounds_task.total) == (
        "oort rounds",
        3,
        3,
    )
    assert rounds_task.fields["status"].startswith("accuracy -, 30 s simulated (past the rounds")


def test_progress_view_prints_lines_when_stderr_is_not_a_terminal(capsys):
    from edgetrain.commands.federate import _ProgressView

    view = _ProgressView(None)  # stderr to a file or pipe: one line per strategy and round
    for j in range(3):
        view({"event": "plans", "method": "fedhybrid", "strategy": "hybrid", "done": j, "total": 2})
    view({"event": "round", "method": "fedhybrid", "round": 1, "rounds": 50,
          "accuracy": 0.25, "sim_time_s": 12.4})  # fmt: skip
    view({"event": "round", "method": "fedhybrid", "round": 51, "rounds": None,
          "accuracy": 0.5, "sim_time_s": 1234.0})  # fmt: skip
    lines = capsys.readouterr().err.splitlines()
    assert lines == [  # the last one is longer than 80 columns and still one line
        "hybrid plans: 2 budget buckets",
        "fedhybrid round 1/50: accuracy 0.2500, 12 s simulated",
        "fedhybrid round 51/51: accuracy 0.5000, 1234 s simulated (past the rounds: below "
        "Random's best)",
    ]


def test_seed_option_runs_as_the_config_with_that_seed(tmp_path):
    """--seed N is the config with ``seed: N``: same fleet, partition, picks and accuracy,
    recorded in the run's config.json; a resumed run must keep it."""
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(CFG))  # seed 2
    reseeded = tmp_path / "c5.yaml"
    reseeded.write_text(yaml.safe_dump({**CFG, "seed": 5}))
    base = ["--output-root", str(tmp_path / "runs"), "--json", "--selector", "random",
            "--rounds", "2"]  # fmt: skip

    def run(cfg_path, *extra):
        r = CliRunner().invoke(app, ["federate", str(cfg_path), *base, *extra])
        assert r.exit_code == 0, r.output
        out = json.loads(r.stdout)
        lines = (Path(out["run_dir"]) / "metrics.jsonl").read_text().splitlines()
        saved = json.loads((Path(out["run_dir"]) / "config.json").read_text())
        recs = [json.loads(x) for x in lines]
        return [(x["selected"], x["accuracy"]) for x in recs], saved["seed"]

    by_option, seed = run(path, "--seed", "5")
    by_file, _ = run(reseeded)
    own, own_seed = run(path)
    assert seed == 5 and own_seed == 2
    assert by_option == by_file
    assert [s for s, _ in by_option] != [s for s, _ in own]

    r = CliRunner().invoke(app, ["federate", str(path), "--seed", "-1"])
    assert r.exit_code != 0 and "-1" in r.output
    r = CliRunner().invoke(
        app, ["federate", str(path), *base[:2], "--resume", "--seed", "7", "--rounds", "3"]
    )
    assert r.exit_code != 0  # runs/cli is the first run above, made with --seed 5
    assert "(seed: run 5, now 7)" in str(r.exception)
