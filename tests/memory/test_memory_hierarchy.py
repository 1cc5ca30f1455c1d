"""Tiling, L1/L2/L3 placement, transfers and the latency estimate on hand-made graphs."""

from __future__ import annotations

import dataclasses

import pytest

from edgetrain.devices import get_target
from edgetrain.devices.soc import MemoryTier, SoCTarget
from edgetrain.errors import BudgetError, ConfigError
from edgetrain.graph.ir import Node, TensorInfo, TensorKind, TrainGraph
from edgetrain.memory import (
    Gemm,
    estimate_latency,
    lifetimes,
    node_gemms,
    place_hierarchy,
    tile_gemm,
)
from edgetrain.memory.cost_model import ACCEL_JOB_OVERHEAD_CYCLES, accel_gemm_cycles

K = TensorKind


def _soc(l1: int, l2: int, l3: int, writable: bool = True, array=(12, 4)) -> SoCTarget:
    return SoCTarget(
        name="toy",
        tiers=(
            MemoryTier("L1", l1, 8.0, 1),
            MemoryTier("L2", l2, 4.0, 10),
            MemoryTier("L3", l3, 1.0, 30, writable=writable),
        ),
        cores=8,
        fpus=4,
        freq_hz=100e6,
        gemm_array=array,
        core_flop_per_cycle=2.0,
        dma_bytes_per_cycle={"l3_l2": 1.0, "l2_l1": 8.0},
        sources={"all": "test"},
    )


def _graph() -> TrainGraph:
    """x (read once) and h (written once, read once) beside a weight read four times."""
    t = {
        "x": TensorInfo("x", K.INPUT, (10,), "float32", 40),
        "w": TensorInfo("w", K.FROZEN_WEIGHT, (10,), "float32", 40, True),
        "h": TensorInfo("h", K.ACTIVATION, (10,), "float32", 40),
        "a": TensorInfo("a", K.ACTIVATION, (1,), "float32", 4),
        "b": TensorInfo("b", K.ACTIVATION, (1,), "float32", 4),
        "c": TensorInfo("c", K.ACTIVATION, (1,), "float32", 4),
    }
    n = [
        Node("n0", "aten.mul.Tensor", ("x", "w"), ("h",), 0, False, "forward", None),
        Node("n1", "aten.sum.default", ("w",), ("a",), 0, False, "forward", None),
        Node("n2", "aten.sum.default", ("w",), ("b",), 0, False, "forward", None),
        Node("n3", "aten.mul.Tensor", ("h", "w"), ("c",), 0, False, "forward", None),
    ]
    return TrainGraph(nodes=n, tensors=t, meta={"outputs": ["a", "b", "c"]})


def test_everything_fits_in_l2() -> None:
    g = _graph()
    plan = place_hierarchy(g, lifetimes(g), _soc(64, 4096, 4096))
    assert plan.transfers["l3_l2_bytes"] == 0 and not plan.spilled
    assert plan.tier_peaks["L2"] == 40 + 40 + 40  # x, w, h at step 0 (later: w, h + scalars)
    # every non-view node streams its operands L2 -> L1 once
    assert plan.transfers["l2_l1_bytes"] == (40 + 40 + 40) + (40 + 4) + (40 + 4) + (40 + 40 + 4)


def test_spills_the_tensor_with_fewest_accesses_per_byte() -> None:
    g = _graph()
    # L2 116 B, staging = min(L1, L2 // 2) = 16 B -> 100 B for tensors; step 0 needs 120
    plan = place_hierarchy(g, lifetimes(g), _soc(16, 116, 4096))
    assert plan.spilled == ["x"]  # 1 access, vs h (2) and w (4)
    assert plan.tier_of["x"] == "L3" and plan.tier_of["w"] == "L2"
    assert plan.transfers["l3_l2_bytes"] == 40  # n0 reads x once from L3
    assert plan.tier_peaks["L3"] == 40
    assert plan.tier_peaks["L2"] <= 116 and plan.staging_bytes == 16


def test_l3_primary_places_all_tensors_in_l3() -> None:
    g = _graph()
    plan = place_hierarchy(g, lifetimes(g), _soc(16, 4096, 4096), placement="l3-primary")
    assert set(plan.tier_of.values()) == {"L3"}
    # each node reads its inputs and writes its outputs through L2
    assert plan.transfers["l3_l2_bytes"] == 120 + 44 + 44 + 84
    with pytest.raises(ConfigError, match="placement"):
        place_hierarchy(g, lifetimes(g), _soc(16, 4096, 4096), placement="nowhere")


def test_shortfall_is_reported_in_bytes() -> None:
    g = _graph()
    with pytest.raises(BudgetError, match="short by 30 bytes"):
        place_hierarchy(g, lifetimes(g), _soc(16, 116, 10))  # x (40 B) cannot fit 10 B of L3
    # flash-like L3 takes frozen weights only: spilling w (40 B) is enough here
    plan = place_hierarchy(g, lifetimes(g), _soc(16, 116, 4096, writable=False))
    assert plan.spilled == ["w"]
    with pytest.raises(BudgetError, match="short by"):
        place_hierarchy(g, lifetimes(g), _soc(16, 60, 4096, writable=False))


def test_tile_fits_l1_and_counts_rereads() -> None:
    g = Gemm(1, 64, 64, 64)
    whole = tile_gemm(g, 128 * 1024)
    assert (whole.tm, whole.tn, whole.tk) == (64, 64, 64)
    assert whole.l2_l1_bytes == 4 * 3 * 64 * 64  # A, B and C move exactly once
    small = tile_gemm(g, 8 * 1024)
    assert small.working_set_bytes <= 8 * 1024
    expected = 4 * (64 * 64 * -(-64 // small.tn) + 64 * 64 * -(-64 // small.tm) + 64 * 64)
    assert small.l2_l1_bytes == expected > whole.l2_l1_bytes


def _conv_graph() -> TrainGraph:
    t = {
        "x": TensorInfo("x", K.INPUT, (2, 3, 8, 8), "float32", 2 * 3 * 64 * 4),
        "w": TensorInfo("w", K.WEIGHT, (16, 3, 3, 3), "float32", 16 * 27 * 4, True),
        "y": TensorInfo("y", K.ACTIVATION, (2, 16, 8, 8), "float32", 2 * 16 * 64 * 4),
        "dx": TensorInfo("dx", K.GRADIENT, (2, 3, 8, 8), "float32", 2 * 3 * 64 * 4),
        "dw": TensorInfo("dw", K.GRADIENT, (16, 3, 3, 3), "float32", 16 * 27 * 4),
    }
    macs = 2 * 16 * 64 * 27
    n = [
        Node(
            "conv", "aten.convolution.default", ("x", "w"), ("y",), 2 * macs, False, "forward", "c"
        ),
        Node(
            "convb",
            "aten.convolution_backward.default",
            ("y", "x", "w"),
            ("dx", "dw"),
            4 * macs,
            False,
            "backward",
            "c",
        ),
    ]
    return TrainGraph(nodes=n, tensors=t, meta={"outputs": ["dx", "dw"]})


def test_convolutions_lower_to_gemms() -> None:
    g = _conv_graph()
    fwd = node_gemms(g.nodes[0], g.tensors)
    assert fwd == [Gemm(1, 16, 128, 27)]
    bwd = node_gemms(g.nodes[1], g.tensors)
    assert [x.macs for x in bwd] == [fwd[0].macs, fwd[0].macs]  # dL/dX and dL/dW
    assert 2 * sum(x.macs for x in fwd + bwd) == g.flops()


def test_accelerator_cycles_and_latency() -> None:
    assert accel_gemm_cycles(Gemm(1, 12, 4, 10), 12, 4) == 10 + 12 + 3 + ACCEL_JOB_OVERHEAD_CYCLES
    assert accel_gemm_cycles(Gemm(1, 4, 12, 10), 12, 4) == accel_gemm_cycles(
        Gemm(1, 12, 4, 10), 12, 4
    )
    g = _conv_graph()
    soc = _soc(128 * 1024, 1 << 20, 1 << 24)
    plan = place_hierarchy(g, lifetimes(g), soc)
    est = estimate_latency(g, plan, soc)
    assert est.cycles_accelerated < est.cycles_cores
    assert est.flop_per_cycle == pytest.approx(g.flops() / est.cycles_accelerated)
    assert est.ms_cores == pytest.approx(1e3 * est.cycles_cores / 100e6)
    no_array = estimate_latency(g, plan, dataclasses.replace(soc, gemm_array=None))
    assert no_array.cycles_accelerated == no_array.cycles_cores


def test_pulp_target_from_the_catalogue_is_usable() -> None:
    pulp = get_target("pulp")
    g = _conv_graph()
    plan = place_hierarchy(g, lifetimes(g), pulp)
    assert plan.tier_capacities == {"L1": 128 * 1024, "L2": 2 * 1024 * 1024, "L3": 32 * 1024 * 1024}
