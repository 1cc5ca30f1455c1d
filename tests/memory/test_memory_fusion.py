"""LoRA fusion, dynamic-peak reports and DMA buffering in the cost model."""

from __future__ import annotations

import pytest

from edgetrain.devices import get_target
from edgetrain.memory import estimate_latency, lifetimes, live_bytes, place_hierarchy
from edgetrain.memory.fusion import FUSED_OP, fuse_lora, lora_modules
from edgetrain.memory.peak import peak_report
from tiny_models import captured

PULP = get_target("pulp")


@pytest.fixture(scope="module")
def lora():
    return captured("lora-1", "sgd")[1]


def _valid_order(graph) -> None:
    """Every tensor a node reads is a graph input or written by an earlier node."""
    produced = {
        n for n, t in graph.tensors.items() if t.persistent or t.kind.value in ("input", "label")
    }
    for node in graph.nodes:
        for t in node.inputs:
            assert t in produced, (node.name, t)
        produced.update(node.outputs)
        for t in node.outputs:
            assert t in graph.tensors, (node.name, t)


def test_fusion_keeps_flops_and_removes_full_size_intermediates(lora):
    fused = fuse_lora(lora)
    mods = lora_modules(lora)
    assert mods and all(m.startswith("encoder.1.") for m in mods)
    assert fused.flops() == lora.flops()
    for phase in ("forward", "loss", "backward", "update"):
        assert fused.flops(phase) == lora.flops(phase)
    chains = [n for n in fused.nodes if n.op == FUSED_OP]
    # one forward chain per LoRA linear; backward ones unless skipped
    assert {n.module for n in chains if n.phase == "forward"} == set(mods)
    assert "fusion_skipped" not in fused.meta
    assert len(fused.nodes) < len(lora.nodes)
    for node in chains:
        spec = fused.meta["fused"][node.name]
        assert spec["gemms"] and spec["elided_bytes"] > 0
    _valid_order(fused)
    # the input graph is untouched
    assert not any(n.op == FUSED_OP for n in lora.nodes)


def test_fused_traffic_is_lower_and_lifetimes_valid(lora):
    fused = fuse_lora(lora)
    plain = place_hierarchy(lora, lifetimes(lora), PULP, placement="l3-primary")
    chain = place_hierarchy(fused, lifetimes(fused), PULP, placement="l3-primary")
    assert chain.transfers["l3_l2_bytes"] < plain.transfers["l3_l2_bytes"]
    assert chain.transfers["l2_l1_bytes"] < plain.transfers["l2_l1_bytes"]
    lat_plain = estimate_latency(lora, plain, PULP)
    lat_fused = estimate_latency(fused, chain, PULP)
    assert lat_fused.cycles_accelerated < lat_plain.cycles_accelerated
    assert lat_fused.flops == lat_plain.flops


def test_graph_without_lora_is_unchanged():
    _, ft = captured("ft-1", "sgd")
    out = fuse_lora(ft)
    assert out.nodes == ft.nodes and out.tensors == ft.tensors and out.meta["fused"] == {}


def test_peak_report_composition_matches_live_sum(lora):
    bufs = lifetimes(lora)
    rep = peak_report(lora, bufs)
    dyn = [b for b in bufs if b.kind_name not in ("weight", "frozen_weight", "input", "label")]
    profile = live_bytes(dyn, len(lora.nodes))
    assert rep.live_bytes == profile.max() == sum(rep.by_kind.values())
    assert sum(rep.by_phase_produced.values()) == rep.live_bytes
    assert rep.node == lora.nodes[rep.time].name
    assert not set(rep.by_kind) & {"weight", "frozen_weight", "input"}
    assert rep.to_json()["largest"][0][2] == max(
        b.size for b in dyn if b.lower <= rep.time < b.upper
    )


def test_single_buffering_adds_dma_to_compute(lora):
    plan = place_hierarchy(lora, lifetimes(lora), PULP, placement="l3-primary")
    single = estimate_latency(lora, plan, PULP)
    double = estimate_latency(lora, plan, PULP, double_buffering=True)
    assert double.cycles_cores < single.cycles_cores
    dma = sum(
        l21 / PULP.dma_bytes_per_cycle["l2_l1"] + l32 / PULP.dma_bytes_per_cycle["l3_l2"]
        for l32, l21 in plan.node_traffic.values()
    )
    # single-buffered = sum of compute + sum of DMA; double-buffered hides the smaller part
    assert single.cycles_cores == pytest.approx(sum(c.cores_cycles for c in single.nodes), rel=1e-9)
    assert single.cycles_cores - double.cycles_cores <= dma + 1e-6
    faster = estimate_latency(lora, plan, PULP, core_gemm_flop_per_cycle=8.0)
    assert faster.cycles_cores < single.cycles_cores
    assert faster.cycles_accelerated == pytest.approx(single.cycles_accelerated)
