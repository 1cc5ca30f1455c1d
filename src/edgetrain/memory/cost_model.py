"""Analytical latency model of a training step on an SoC target (an ESTIMATE).

Nothing here is measured: cycles come from operation counts, the target profile
(:mod:`edgetrain.devices`) and the constants below, each with its source. The
model exists to compare strategies and targets the way TrainDeeploy's Fig. 5 does,
not to predict a silicon run to the cycle.

Per node, with ``dma = l2_l1_bytes / dma_l2_l1 + l3_l2_bytes / dma_l3_l2``:

    cycles(node) = compute_cycles + dma            (single buffering, the default)
    cycles(node) = max(compute_cycles, dma)        (double buffering)

The TrainDeeploy paper does not say that transfers overlap compute. Deeploy, which
it extends, generates single- or double-buffered tiling code, double buffering
being opt-in (``--doublebuffer`` in Deeploy's network generation and test runners;
``SingleBufferingTilingCodeGeneration`` / ``DoubleBufferingTilingCodeGeneration``
in its TilingExtension). So the default here serialises DMA and compute; pass
``double_buffering=True`` for the overlapped bound.

*Cluster cores.* A GEMM/convolution runs at ``CORE_GEMM_FLOP_PER_CYCLE`` (the
cluster's sustained rate for a generic, not autotuned FP32 matrix-multiply kernel,
see the constant), capped by the FPUs' peak (``fpus x core_flop_per_cycle``).
Other ops are element loops: each core issues ``INSTR_PER_ELEMENT`` instructions
per output element, and the shared FPUs execute ``FP_OPS_PER_ELEMENT`` FP
operations per element, whichever binds.

*GEMM accelerator* (RedMulE, a rows x cols array of FP FMAs, TrainDeeploy §V-B).
A GEMM is cut into ``ceil(M/rows) x ceil(N/cols)`` output blocks; each block
streams K operands through the array in ``K`` cycles plus a pipeline fill of
``rows + ACCEL_PIPELINE_STAGES`` cycles; the cores program each job in
``ACCEL_JOB_OVERHEAD_CYCLES``. The problem is transposed (C^T = B^T A^T) when that
pads less. Small, skinny GEMMs (LoRA's rank-4 products) therefore use the array
poorly, as the paper observes for LoRA in Fig. 5.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from edgetrain.memory.hierarchy import fused_gemms
from edgetrain.memory.tiling import Gemm, node_gemms, op_base

# Sustained FP32 GEMM rate of the 8 cluster cores running a generic ("one-size-fits-
# all") matrix-multiply kernel. PULP-TrainLib (Nadalini et al., SAMOS 2022, abstract):
# autotuned kernels "improve MAC/clk by up to 2.4x compared to 'one-size-fits-all'
# matrix multiplication, achieving up to 4.39 MAC/clk" on an 8-core PULP cluster, so
# the generic kernel sustains 4.39 / 2.4 = 1.83 MAC/clk = 3.66 FLOP/cycle. That rate
# is bound by the cores' load/store instructions (0.23 MAC per core per cycle), not by
# FPUs, so it holds on TrainDeeploy's 4 shared FPUs (3.66 < 4 x 2 FLOP peak).
# TrainDeeploy's kernels are not PULP-TrainLib's: §VI-C credits PULP-TrainLib's higher
# 5.6 FLOP/cycle (Table II, L1-resident Deep-AE) to "its highly optimized computational
# primitives" -- the figure this model used before, which undercounted core latency.
CORE_GEMM_FLOP_PER_CYCLE = 2.0 * 4.39 / 2.4
# Kept for reference / comparison: the autotuned PULP-TrainLib rate (TrainDeeploy Table II).
PULP_TRAINLIB_FLOP_PER_CYCLE = 5.6

# RedMulE: "a 12x4 systolic array of FPUs with a three-stage pipeline"
# (TrainDeeploy §V-B; Tortorella et al., RedMulE, DATE 2022 / FGCS 2023).
ACCEL_PIPELINE_STAGES = 3

# Assumption (documented, not from a paper): programming one RedMulE job through its
# memory-mapped registers and synchronising with the cores costs ~100 cycles
# (tens of register writes + event-unit wait on the RISC-V cluster).
ACCEL_JOB_OVERHEAD_CYCLES = 100

# Assumptions for element loops on RV32IMFCXpulp (post-increment loads/stores and
# hardware loops, PULP ISA): ~3 instructions per element (load, op, store);
# transcendental functions (exp/tanh/erf/log/sqrt/div) take ~20 FP operations via
# software polynomial approximations; reductions touch each input once.
INSTR_PER_ELEMENT = 3
FP_OPS_PER_ELEMENT = 1
TRANSCENDENTAL_FP_OPS = 20
TRANSCENDENTAL_OPS = frozenset(
    {
        "exp",
        "tanh",
        "erf",
        "log",
        "sqrt",
        "rsqrt",
        "div",
        "gelu",
        "gelu_backward",
        "_softmax",
        "_softmax_backward_data",
        "_log_softmax",
        "_log_softmax_backward_data",
        "sigmoid",
        "pow",
        "native_layer_norm",
        "native_layer_norm_backward",
        "tanh_backward",
        "sigmoid_backward",
    }
)


@dataclass
class NodeCost:
    """Cycles of one node on the cores and with the accelerator."""

    name: str
    op: str
    cores_cycles: float
    accel_cycles: float
    on_accelerator: bool


@dataclass
class LatencyEstimate:
    """Step latency on the cluster cores alone and with the GEMM accelerator (estimate)."""

    cycles_cores: float
    cycles_accelerated: float
    freq_hz: float
    flops: int
    nodes: list[NodeCost] = field(default_factory=list)
    assumptions: dict[str, Any] = field(default_factory=dict)

    @property
    def ms_cores(self) -> float:
        return 1e3 * self.cycles_cores / self.freq_hz

    @property
    def ms_accelerated(self) -> float:
        return 1e3 * self.cycles_accelerated / self.freq_hz

    @property
    def flop_per_cycle(self) -> float:
        """Training FLOPs per cycle with the accelerator (cores alone if none)."""
        return self.flops / self.cycles_accelerated if self.cycles_accelerated else 0.0

    @property
    def flop_per_cycle_cores(self) -> float:
        return self.flops / self.cycles_cores if self.cycles_cores else 0.0


def accel_gemm_cycles(g: Gemm, rows: int, cols: int) -> float:
    """Cycles of one batched GEMM on a rows x cols FMA array (see module docstring)."""

    def blocks(m: int, n: int) -> int:
        return math.ceil(m / rows) * math.ceil(n / cols)

    nblocks = min(blocks(g.m, g.n), blocks(g.n, g.m))
    per_job = nblocks * (g.k + rows + ACCEL_PIPELINE_STAGES) + ACCEL_JOB_OVERHEAD_CYCLES
    return float(g.batch * per_job)


def _elements(names: tuple[str, ...], tensors: dict) -> int:
    return sum(
        math.prod(tensors[t].shape) if tensors[t].shape else 1 for t in names if t in tensors
    )


def estimate_latency(
    graph: Any,
    plan: Any,
    target: Any,
    *,
    core_gemm_flop_per_cycle: float = CORE_GEMM_FLOP_PER_CYCLE,
    double_buffering: bool = False,
) -> LatencyEstimate:
    """Estimated cycles of one training step on ``target`` (see module docstring).

    ``plan`` is the :class:`~edgetrain.memory.hierarchy.HierarchyPlan` giving each
    node's traffic; without a GEMM array the "accelerated" figure equals the cores'.
    ``core_gemm_flop_per_cycle`` overrides the cores' GEMM rate (e.g.
    ``PULP_TRAINLIB_FLOP_PER_CYCLE`` for autotuned kernels); fused LoRA chains
    (``graph.meta["fused"]``) are costed from their recorded GEMMs.
    ``double_buffering`` overlaps each node's DMA with its compute (module docstring).
    """
    tensors = graph.tensors
    core_peak = target.fpus * target.core_flop_per_cycle
    core_gemm_rate = min(core_gemm_flop_per_cycle, core_peak)
    fused = graph.meta.get("fused", {}) if isinstance(graph.meta, dict) else {}
    dma_l2_l1 = float(target.dma_bytes_per_cycle.get("l2_l1", math.inf))
    dma_l3_l2 = float(target.dma_bytes_per_cycle.get("l3_l2", math.inf))
    array = target.gemm_array
    total_cores = 0.0
    total_accel = 0.0
    costs: list[NodeCost] = []
    for node in graph.nodes:
        l3_l2, l2_l1 = plan.node_traffic.get(node.name, (0, 0))
        dma = l2_l1 / dma_l2_l1 + l3_l2 / dma_l3_l2
        if node.aliases is not None:  # a view: no data moves, no compute
            costs.append(NodeCost(node.name, node.op, 0.0, 0.0, False))
            continue
        spec = fused.get(node.name)
        gemms = fused_gemms(spec) if spec is not None else node_gemms(node, tensors)
        if gemms:
            flops = node.flops or sum(2 * g.macs for g in gemms)
            compute_cores = flops / core_gemm_rate
            compute_accel = (
                sum(accel_gemm_cycles(g, *array) for g in gemms) if array else compute_cores
            )
            if spec is not None:  # the LoRA scale folded into B: an r x d_out loop on the cores
                fold = int(spec.get("fold_elems", 0))
                fold_cycles = max(fold * INSTR_PER_ELEMENT / target.cores, fold / target.fpus)
                compute_cores += fold_cycles
                compute_accel += fold_cycles
        else:
            base = op_base(node.op)
            elems = max(_elements(node.outputs, tensors), _elements(node.inputs, tensors))
            fp_ops = TRANSCENDENTAL_FP_OPS if base in TRANSCENDENTAL_OPS else FP_OPS_PER_ELEMENT
            compute_cores = max(
                elems * INSTR_PER_ELEMENT / target.cores, elems * fp_ops / target.fpus
            )
            compute_accel = compute_cores
        if double_buffering:
            cores_cycles = max(compute_cores, dma)
            accel_cycles = max(compute_accel, dma)
        else:
            cores_cycles = compute_cores + dma
            accel_cycles = compute_accel + dma
        total_cores += cores_cycles
        total_accel += accel_cycles
        costs.append(
            NodeCost(node.name, node.op, cores_cycles, accel_cycles, bool(gemms and array))
        )
    return LatencyEstimate(
        cycles_cores=total_cores,
        cycles_accelerated=total_accel,
        freq_hz=float(target.freq_hz),
        flops=int(graph.flops()),
        nodes=costs,
        assumptions={
            "estimate": True,
            "core_gemm_flop_per_cycle": core_gemm_rate,
            "double_buffering": double_buffering,
            "accel_pipeline_stages": ACCEL_PIPELINE_STAGES,
            "accel_job_overhead_cycles": ACCEL_JOB_OVERHEAD_CYCLES,
            "instr_per_element": INSTR_PER_ELEMENT,
            "transcendental_fp_ops": TRANSCENDENTAL_FP_OPS,
            "dma_bytes_per_cycle": dict(target.dma_bytes_per_cycle),
        },
    )
