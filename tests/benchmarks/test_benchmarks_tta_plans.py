"""benchmarks/fedhybrid_tta.py --plans: the planner results kept per task.

``benchmarks/plans/<task>.json`` pins FedHybrid's plans so that a seed's rows reproduce across
processes (why and how made: benchmarks/plans/README.md).
"""

import json
from pathlib import Path

import pytest

from bench_loader import load_benchmark

# the hybrid planner's floor (the smallest fraction of M_G a plan fits) and the seeds whose
# Table 4 fleet-wide plans were kept: BERT-small's floor is 0.30 (round 33), MobileNetV2's 0.10,
# ALBERT-small's 0.30 (its one shared layer planned per call since round 19)
PINNED_TASKS = {"bbc-albert": (0.3, 5), "bbc-bert": (0.3, 5), "mnist": (0.1, 10)}


@pytest.fixture(scope="module")
def tta():
    return load_benchmark("fedhybrid_tta")


def test_pinned_plans_resolve_per_task(tta, tmp_path):
    for task in PINNED_TASKS:
        kept = tta.PINNED_PLANS / f"{task}.json"
        assert kept.is_file()
        assert tta.plans_file("pinned", task, False) == str(kept)
    # the quick scale plans a smaller model on another grid: always a fresh profile
    assert tta.plans_file("pinned", "bbc-bert", True) is None
    assert tta.plans_file("fresh", "bbc-bert", False) is None
    for task in tta.TASKS:  # a task without a kept file profiles afresh
        if not (tta.PINNED_PLANS / f"{task}.json").is_file():
            assert tta.plans_file("pinned", task, False) is None
    own = str(tmp_path / "mine.json")
    assert tta.plans_file(own, "mnist", False) == own


@pytest.mark.parametrize("task", sorted(PINNED_TASKS))
def test_pinned_plans_cover_every_fedhybrid_bucket(tta, task):
    """A kept file holds a hybrid and a recompute plan for every bucket below M_G and a
    fleet-wide plan per Table 4 baseline for each benchmarked seed, so FedHybrid, its
    compression ablation and the baselines plan nothing afresh in any seed's run."""
    import torch

    from edgetrain import models
    from edgetrain.federated.plans import PlanService, profiles_path

    path = tta.plans_file("pinned", task, False)
    assert path is not None, task
    cfg = tta.task_config(False, "fedprox", 0, plans=path, task=task)
    mc = cfg.memory
    # the plan model and batch shape the kept profiles were measured on (built, not profiled)
    model = models.build(mc.plan_model.name, seed=0, **mc.plan_model.options)
    x = models.example_input(model, mc.plan_batch, torch.Generator().manual_seed(0))
    y = torch.zeros(mc.plan_batch, dtype=torch.long)
    service = PlanService(model, x, y, mc.plan_model.name, bucket=mc.bucket)
    rows = json.loads(Path(path).read_text())
    assert service.load_file(mc.plans) == len(rows)
    if profiles_path(path).is_file():  # round 41 on: the measurement behind the rows
        assert set(service._profiles) == {"hybrid", "compress"}
    assert {r["model"] for r in rows} == {mc.plan_model.name}
    n = int(round(1.0 / mc.bucket))
    for strategy in ("hybrid", "recompute"):
        for j in range(1, n):
            assert (strategy, round(j * mc.bucket, 6)) in service.table, (strategy, j)
    floor, seeds = PINNED_TASKS[task]
    hybrid = {f: o for (s, f), o in service.table.items() if s == "hybrid"}
    below = round(floor - mc.bucket, 6)
    assert not hybrid[below].feasible and hybrid[floor].feasible
    assert all(o.overhead_factor >= 1.0 for o in hybrid.values())
    for baseline in ("melon", "capuchin", "gact"):
        assert sum(s == baseline for s, _ in service.table) == seeds, baseline
    assert service.planner_calls == 0  # loading plans nothing


def test_dump_config_writes_the_task_as_a_federate_yaml(tta, tmp_path, capsys):
    """--dump-config writes the config the benchmark would run (flags applied, the task's kept
    plans named), which `edgetrain federate` loads back to the same config."""
    from edgetrain.config import load_config
    from edgetrain.federated import FederatedConfig

    path = tmp_path / "proxy.yaml"
    argv = ["--aggregators", "fedprox", "--seed", "3", "--overcommit", "1.0", "--rounds", "7"]
    assert tta.main([*argv, "--dump-config", str(path)]) == 0
    assert f"wrote {path}" in capsys.readouterr().out
    cfg = load_config(path, schema=FederatedConfig)
    want = tta.task_config(
        False, "fedprox", 3, 7, semantics={"overcommit": 1.0},
        plans=tta.plans_file("pinned", "mnist", False),
    )  # fmt: skip
    assert cfg == want
    assert cfg.seed == 3 and cfg.federated.overcommit == 1.0 and cfg.federated.rounds == 7
    assert cfg.memory.plans == str(tta.PINNED_PLANS / "mnist.json")
    assert cfg.model.name == "lenet"
