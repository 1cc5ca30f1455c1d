"""A whole training run under a memory budget (``edgetrain run`` with a ``budget`` section)."""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from cli_runner import run_cli
from edgetrain.config import parse_config
from edgetrain.engine.budget.plan import ExecutionPlan
from edgetrain.engine.budget.predictor import MemorySample, samples_to_json
from edgetrain.engine.budget.train import BudgetSpec, sample_steps, trace_sampler
from edgetrain.engine.local import run_local
from edgetrain.errors import BudgetError, ConfigError
from edgetrain.runs import load_state, read_metadata

# a small MobileNetV2 (BatchNorm, ReLU6, residuals) on 480 of the shipped 8x8 digits
# (data.max_samples): 12 steps of 32 an epoch, a 15.6 MB unplanned saved-tensor peak


def _cfg(tmp_path, name="b", budget=None, epochs=2):
    d = {
        "name": name,
        "seed": 0,
        "output_root": str(tmp_path),
        "model": {"name": "mobilenetv2", "options": {"width_mult": 0.35}},
        "data": {"name": "digits", "test_fraction": 0.25, "max_samples": 480},
        "train": {"epochs": epochs, "batch_size": 32, "lr": 0.002, "optimizer": "adam"},
    }
    if budget is not None:
        d["budget"] = budget
    return parse_config(d)


def _events(run_dir, kind):
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r.get("event") == kind]


@pytest.fixture(scope="module")
def unplanned(tmp_path_factory):
    return run_local(_cfg(tmp_path_factory.mktemp("none"), "none"))


def _trace(path, avail_by_epoch, faults_by_epoch, per_epoch=8, kills_by_epoch=None):
    rows, faults, kills = [], 0, 0
    rows.append(MemorySample(0.0, avail_by_epoch[0], 1_000_000, "zram", 1.0, 0, 0))
    for e, avail in enumerate(avail_by_epoch):
        for i in range(per_epoch):
            faults += faults_by_epoch[e] // per_epoch
            if kills_by_epoch is not None and i == 0:
                kills += kills_by_epoch[e]
            rows.append(
                MemorySample(float(len(rows)), avail, 1_000_000, "zram", 1.0, faults, kills)
            )
    path.write_text(json.dumps(samples_to_json(rows)))
    return str(path)


def test_a_recompute_plan_trains_bit_for_bit_as_the_unplanned_run(tmp_path, unplanned):
    r = run_local(_cfg(tmp_path, budget={"limit": 0.5, "method": "recompute"}))
    # keep / recompute / regen are exact: every loss and accuracy, and the weights, equal
    assert [m.train_loss for m in r.history] == [m.train_loss for m in unplanned.history]
    assert [m.test_loss for m in r.history] == [m.test_loss for m in unplanned.history]
    a, b = (
        load_state(r.run_dir / "model.safetensors"),
        load_state(unplanned.run_dir / "model.safetensors"),
    )
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    (p,) = _events(r.run_dir, "plan")
    assert p["reason"] == "start" and p["decisions"]["recompute"] + p["decisions"]["regen"] > 0
    assert p["budget_bytes"] == int(0.5 * p["unplanned_peak_bytes"])
    plan = ExecutionPlan.load(r.run_dir / p["plan_file"])
    assert plan.decision_counts() == p["decisions"]
    epochs = _events(r.run_dir, "budget")
    assert [e["epoch"] for e in epochs] == [1, 2]
    for e in epochs:  # measured during the epoch's first real step
        assert 0 < e["measured_peak_bytes"] <= e["budget_bytes"] and e["within_budget"]
        assert e["measured_peak_bytes"] < 0.55 * p["unplanned_peak_bytes"]
    summary = json.loads((r.run_dir / "result.json").read_text())["budget"]
    assert summary["within_budget"] and summary["plans"] == 1
    assert summary["peak_to_budget"] <= 1.0


def test_the_regeneration_rule_replans_at_the_predicted_budget(tmp_path):
    # epoch 1: 20 MB headroom (M_safe = 20 - 2 x 1 MB), few faults; epoch 2: 9 MB and 10x
    # the faults -> the rule fires after epoch 2, the window shrinks, the plan is made again
    trace = _trace(tmp_path / "t.json", [20_000_000, 9_000_000, 9_000_000], [800, 8000, 8000])
    r = run_local(_cfg(tmp_path, budget={"predictor": trace}, epochs=3))
    plans, epochs = _events(r.run_dir, "plan"), _events(r.run_dir, "budget")
    assert [p["reason"] for p in plans] == [
        "start",
        "regeneration rule (page faults or low-memory kills)",
    ]
    assert plans[0]["budget_bytes"] == 18_000_000  # no limit: the prediction alone
    assert plans[0]["decisions"]["keep"] == sum(plans[0]["decisions"].values())  # fits unplanned
    assert plans[1]["epoch"] == 2 and plans[1]["budget_bytes"] == 7_000_000
    assert [e["regeneration_rule"] for e in epochs] == [False, True, False]
    assert [e["window"] for e in epochs] == [8, 7, 7]
    assert epochs[2]["plan"] == 1 and epochs[2]["budget_bytes"] == 7_000_000
    assert all(e["within_budget"] for e in epochs)
    assert epochs[2]["measured_peak_bytes"] <= 7_000_000


def test_a_plan_that_no_longer_fits_the_prediction_is_replaced_and_the_limit_still_caps(
    tmp_path,
):
    # the faults stay level (the rule never fires) but the headroom falls below the plan
    trace = _trace(tmp_path / "t.json", [40_000_000, 9_000_000], [800, 800])
    r = run_local(_cfg(tmp_path, budget={"limit": 0.8, "predictor": trace}))
    plans = _events(r.run_dir, "plan")
    assert plans[0]["budget_bytes"] == int(0.8 * plans[0]["unplanned_peak_bytes"])  # limit
    assert plans[1]["reason"] == "the plan no longer fits the predicted budget"
    assert plans[1]["budget_bytes"] == 7_000_000
    assert all(e["within_budget"] for e in _events(r.run_dir, "budget"))


def test_low_memory_kills_fire_the_rule(tmp_path):
    trace = _trace(
        tmp_path / "t.json", [20_000_000] * 2, [800, 800], kills_by_epoch=[0, 4]
    )  # 4 kills > TP2 = 3
    r = run_local(_cfg(tmp_path, budget={"predictor": trace}))
    assert [e["regeneration_rule"] for e in _events(r.run_dir, "budget")] == [False, True]
    assert len(_events(r.run_dir, "plan")) == 2


def test_a_budget_that_falls_below_every_plan_keeps_the_trained_epochs(tmp_path):
    trace = _trace(tmp_path / "t.json", [20_000_000, 2_500_000], [800, 800])
    with pytest.raises(BudgetError) as info:
        run_local(_cfg(tmp_path, budget={"predictor": trace}))
    msg = str(info.value)
    assert "after epoch 2" in msg and "M_pred" in msg and "500,000 B" in msg
    assert "smallest plan method 'hybrid' reaches" in msg and "model.safetensors" in msg
    assert "`edgetrain run --resume" in msg and "continues from epoch-0002" in msg
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert [e["epoch"] for e in _events(run_dir, "epoch")] == [1, 2]
    assert read_metadata(run_dir / "model.safetensors")["epochs_done"] == "2"
    assert not (run_dir / "result.json").exists()


def test_a_limit_below_every_plan_trains_nothing_and_leaves_no_run_directory(tmp_path):
    with pytest.raises(BudgetError, match=r"before the first epoch: budget.limit 0.05 .* "
                       r"'recompute' reaches .*use budget.method hybrid"):  # fmt: skip
        run_local(_cfg(tmp_path, budget={"limit": 0.05, "method": "recompute"}))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("budget", "says"),
    [
        ({"method": "hybrid"}, "give budget.limit"),
        ({"limit": "0.5x"}, "not understood"),
        ({"limit": 2.5}, "must be whole"),
        ({"limit": 0}, "must be > 0"),
        ({"limit": 0.5, "method": "fast"}, "budget.method"),
        ({"limit": 0.5, "scope": "heap"}, "budget.scope"),
        ({"limit": 0.5, "samples_per_epoch": 0}, "samples_per_epoch"),
        ({"limit": 0.5, "profile_repeats": 0}, "profile_repeats"),
        ({"limit": 0.5, "in_situ_steps": -1}, "in_situ_steps"),
        ({"limit": 0.5, "predictor": "/no/such/trace.json"}, "no file"),
    ],
)
def test_a_bad_budget_section_is_one_config_error(tmp_path, budget, says):
    with pytest.raises(ConfigError, match=says):
        _cfg(tmp_path, budget=budget)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("not json", "is not a JSON list"),
        ("[]", "holds no samples"),
        ('[{"t": 0}]', "is not a JSON list"),
        (
            '[{"t": 0, "mem_available_bytes": 1, "watermark_high_bytes": 0, '
            '"swap_kind": "tape", "weight": 1.0}]',
            "swap_kind 'tape'",
        ),
    ],
)
def test_a_malformed_trace_is_one_config_error(tmp_path, text, says):
    (tmp_path / "t.json").write_text(text)
    with pytest.raises(ConfigError, match=says):
        trace_sampler(tmp_path / "t.json")


def test_a_trace_replays_in_order_then_repeats_its_last_sample(tmp_path):
    path = _trace(tmp_path / "t.json", [5, 6], [0, 0], per_epoch=1)
    nxt = trace_sampler(path)
    assert [nxt().mem_available_bytes for _ in range(5)] == [5, 5, 6, 6, 6]


@given(st.integers(0, 500), st.integers(1, 64))
def test_the_predictor_samples_min_k_steps_spread_over_the_epoch(steps, k):
    at = sample_steps(steps, k)
    assert len(at) == min(k, steps)
    assert all(0 <= s < steps for s in at)
    if steps:
        assert steps - 1 in at


def test_the_python_spec_checks_what_the_config_checks():
    with pytest.raises(ConfigError, match="budget.measure"):
        BudgetSpec(limit=0.5, measure="sometimes")
    assert BudgetSpec(limit="300MB").method == "hybrid"


def test_edgetrain_run_budget_option(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"name: cli\noutput_root: {tmp_path}\n"
        "model: {name: mobilenetv2, options: {width_mult: 0.35}}\n"
        "data: {name: digits}\ntrain: {epochs: 1, batch_size: 32}\n"
    )
    code, _ = run_cli(["run", str(cfg), "--budget", "4MB", "--json"], capsys)
    assert code == 0
    result = json.loads((tmp_path / "cli" / "result.json").read_text())
    b = result["budget"]
    assert b["budget_bytes"] == 4_000_000 and b["within_budget"]
    assert 0 < b["measured_peak_bytes"] <= 4_000_000 and b["method"] == "hybrid"
    code, err = run_cli(["run", str(cfg), "--budget-method", "fast"], capsys)
    assert code == 2 and "budget.method" in err


def test_scope_all_measures_every_allocation_of_the_run_within_its_budget(tmp_path, unplanned):
    r = run_local(_cfg(tmp_path, budget={"limit": 0.6, "scope": "all"}))
    (p,) = _events(r.run_dir, "plan")
    assert p["scope"] == "all" and p["decisions"]["compress"] == 0
    for e in _events(r.run_dir, "budget"):  # one extra untimed step a epoch, state restored
        assert e["scope"] == "all" and 0 < e["measured_peak_bytes"] <= e["budget_bytes"]
    # the measuring steps leave weights and RNG alone: the run equals the unplanned one
    assert [m.test_loss for m in r.history] == [m.test_loss for m in unplanned.history]


def test_train_classifier_takes_the_stepper_on_any_model_and_tensors():
    from torch import nn

    from edgetrain.engine.budget.train import BudgetedTraining
    from edgetrain.engine.trainer import train_classifier

    def fit(stepper):
        torch.manual_seed(0)
        net = nn.Sequential(
            nn.Linear(16, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
            nn.Linear(64, 3),
        )  # fmt: skip
        g = torch.Generator().manual_seed(1)
        x, y = torch.randn(96, 16, generator=g), torch.randint(0, 3, (96,), generator=g)
        hist = train_classifier(
            net, x, y, x[:32], y[:32], epochs=2, batch_size=16, lr=0.01,
            generator=torch.Generator().manual_seed(2), stepper=stepper,
        )  # fmt: skip
        return hist, net

    rows: list[dict] = []
    stepper = BudgetedTraining(BudgetSpec(limit=0.8, method="recompute"), log=rows.append)
    (h1, n1), (h0, n0) = fit(stepper), fit(None)
    assert [m.train_loss for m in h1] == [m.train_loss for m in h0]
    s1, s0 = n1.state_dict(), n0.state_dict()
    assert all(torch.equal(s1[k], s0[k]) for k in s0)
    assert "forward" not in vars(n1[2])  # the plan's wrappers are off after the run
    assert [r["event"] for r in rows] == ["plan", "budget", "budget"]
    assert all(r["within_budget"] for r in rows[1:])
    assert sum(stepper.plan.decision_counts().values()) > stepper.plan.decision_counts()["keep"]


def test_the_live_linux_predictor_caps_nothing_on_a_roomy_machine(tmp_path):
    pytest.importorskip("resource")
    r = run_local(_cfg(tmp_path, budget={"limit": 0.5, "predictor": "linux"}, epochs=1))
    (p,) = _events(r.run_dir, "plan")
    (e,) = _events(r.run_dir, "budget")
    # this machine's M_pred (GBs) is far above half of a 15.6 MB step: the limit decides
    assert p["predicted_budget_bytes"] > p["budget_bytes"] == int(0.5 * p["unplanned_peak_bytes"])
    assert e["page_faults"] >= 0 and e["window"] == 8 and not e["regeneration_rule"]
    assert e["within_budget"]


def test_measure_every_step(tmp_path, unplanned):
    r = run_local(
        _cfg(tmp_path, budget={"limit": 0.5, "method": "recompute", "measure": "every"}, epochs=1)
    )
    (e,) = _events(r.run_dir, "budget")
    assert e["measured_steps"] == 12  # ceil(360 / 32): every step went through the accountant
    assert e["within_budget"] and r.history[0].train_loss == unplanned.history[0].train_loss
