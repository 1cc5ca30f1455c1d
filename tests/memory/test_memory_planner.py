"""plan_training on real captured zoo graphs (small models, to keep the suite fast)."""

from __future__ import annotations

import pytest

from edgetrain.errors import BudgetError
from edgetrain.memory import check_allocation, plan_training, plot_timeline


@pytest.fixture(scope="module")
def ds_cnn_plan():
    return plan_training("ds-cnn", "ft-1", batch=1, target="pulp")


def test_plan_fields_and_consistency(ds_cnn_plan) -> None:
    d = ds_cnn_plan.to_json()
    for key in (
        "params",
        "trainable_params",
        "trainable_bytes",
        "flops_forward",
        "flops_train",
        "lower_bound_bytes",
        "arena_bytes",
        "dynamic_peak_bytes",
        "tiers",
        "transfers",
        "latency_ms",
        "flop_per_cycle",
    ):
        assert key in d
    assert d["trainable_bytes"] == 4 * d["trainable_params"] < 4 * d["params"]
    assert d["flops_train"] > d["flops_forward"] > 0
    assert d["lower_bound_bytes"] <= d["arena_bytes"] <= 1.01 * d["lower_bound_bytes"]
    assert 0 < d["dynamic_peak_bytes"] < d["arena_bytes"]
    assert set(d["tiers"]) == {"L1", "L2", "L3"}
    assert d["tiers"]["L1"]["peak_bytes"] <= d["tiers"]["L1"]["capacity_bytes"] == 128 * 1024
    assert d["transfers"]["l2_l1_bytes"] > 0
    assert 0 < d["latency_ms"]["accelerated"] < d["latency_ms"]["cores"]
    check_allocation(ds_cnn_plan.buffers, ds_cnn_plan.allocation.offsets)


def test_timeline_plot(ds_cnn_plan, tmp_path) -> None:
    series = ds_cnn_plan.timeline()
    assert {"activation", "gradient"} <= set(series)
    assert max(sum(v[t] for v in series.values()) for t in range(ds_cnn_plan.nodes)) == (
        ds_cnn_plan.allocation.lower_bound_bytes
    )
    out = tmp_path / "t.png"
    plot_timeline(ds_cnn_plan, str(out))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_deep_ae_arena_is_proven_optimal() -> None:
    # batch 2: BatchNorm cannot train on a single sample
    plan = plan_training("deep-ae", "full", batch=2, target="pulp", time_limit_s=5.0)
    assert plan.allocation.optimal
    assert plan.allocation.arena_bytes >= plan.allocation.lower_bound_bytes


def test_model_that_cannot_fit_reports_shortfall() -> None:
    with pytest.raises(BudgetError, match=r"short by [\d,]+ bytes"):
        plan_training("alexnet", "full", batch=1, target="stm32")
