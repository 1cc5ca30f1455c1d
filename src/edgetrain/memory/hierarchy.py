"""Placing a training step on an L1/L2/L3 memory hierarchy.

TrainDeeploy §IV: "By default, L1 stores active tiles, while L2 holds weights,
inputs, activations, and gradients; when the L2 budget is exceeded, tensors spill to
L3." We follow that literally:

* **L1** holds only the active tiles of the running node (GEMMs and convolutions
  tiled by :mod:`edgetrain.memory.tiling`, double-buffered; other ops streamed in
  double-buffered chunks). Its peak is the largest working set.
* **L2** holds every tensor for its whole lifetime unless spilled; the L2 arena is
  planned with :func:`edgetrain.memory.allocate`. When anything spills, part of L2
  is reserved as a staging window for tiles on their way between L3 and L1, sized
  like L1 (one L1 working set in flight while the previous one drains).
* **L3** receives the spilled tensors. Every access to a spilled tensor crosses
  L3<->L2: its producer writes it once and every consumer reads it once. The spill
  policy is greedy on the overloaded steps: repeatedly spill the live tensor with
  the fewest accesses per byte of overload it relieves (accesses / steps of overload
  it covers), which keeps the L3<->L2 traffic low, like Belady-style register
  spilling. A tier marked ``writable=False`` (flash) accepts frozen weights only.

Traffic is counted per training step: L3<->L2 bytes from spilled tensors, L2<->L1
bytes from the tiles (re-reads included). Views own no storage and move nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgetrain.errors import BudgetError, ConfigError
from edgetrain.memory.allocator import Allocation, allocate
from edgetrain.memory.liveness import Buffer
from edgetrain.memory.tiling import Gemm, Tile, node_gemms, tile_gemm

ELEM_BYTES = 4  # FP32 everywhere (TrainDeeploy §V-A: "all computations ... in FP32")


@dataclass
class HierarchyPlan:
    """Where each tensor lives, each tier's peak and the bytes moved per step."""

    tier_of: dict[str, str]  # tensor name -> tier name ("L2", "L3")
    tier_peaks: dict[str, int]  # tier name -> peak bytes
    tier_capacities: dict[str, int]
    transfers: dict[str, int]  # "l3_l2_bytes", "l2_l1_bytes"
    tiles: dict[str, list[Tile]]  # node name -> tiles of its GEMMs
    node_traffic: dict[str, tuple[int, int]]  # node name -> (l3_l2 bytes, l2_l1 bytes)
    staging_bytes: int = 0
    spilled: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "tiers": {
                name: {"capacity_bytes": self.tier_capacities[name], "peak_bytes": peak}
                for name, peak in self.tier_peaks.items()
            },
            "transfers": dict(self.transfers),
            "staging_bytes": self.staging_bytes,
            "spilled_tensors": len(self.spilled),
        }


def _is_view(node: Any) -> bool:
    return node.aliases is not None


def _access_counts(graph: Any, buffers: Sequence[Buffer]) -> dict[str, tuple[int, int]]:
    """(writes, reads) per storage-owning tensor, counting accesses through views."""
    root: dict[str, str] = {}
    for node in graph.nodes:
        if node.aliases is not None:
            for out in node.outputs:
                if out != node.aliases:
                    root[out] = root.get(node.aliases, node.aliases)
    counts = {b.name: [0, 0] for b in buffers}
    for node in graph.nodes:
        if _is_view(node):
            continue
        for t in set(node.inputs):
            r = root.get(t, t)
            if r in counts:
                counts[r][1] += 1
        for t in node.outputs:
            r = root.get(t, t)
            if r in counts:
                counts[r][0] += 1
    return {k: (w, r) for k, (w, r) in counts.items()}


def fused_gemms(spec: dict) -> list[Gemm]:
    """The GEMMs of a fused chain recorded by :func:`edgetrain.memory.fusion.fuse_lora`."""
    return [Gemm(int(g["batch"]), int(g["m"]), int(g["n"]), int(g["k"])) for g in spec["gemms"]]


def node_l2_l1_traffic(
    node: Any, tensors: dict, l1_bytes: int, fused: dict | None = None
) -> tuple[int, list[Tile]]:
    """Bytes a node moves between L2 and L1, and the tiles of its GEMMs.

    ``fused`` is the node's chain spec when it is a fused LoRA linear: its GEMMs
    stream their operands tile by tile as usual, but partial results stay in the
    L1 output tile (RedMulE accumulates ``Z = Y + X W``), so each output of the
    chain is written once, and the LoRA scale is applied to B (read + write of an
    r x d_out matrix) instead of to a full-size product.
    """
    if _is_view(node):
        return 0, []
    if fused is not None:
        tiles = [tile_gemm(g, l1_bytes, ELEM_BYTES) for g in fused_gemms(fused)]
        streamed = sum(
            t.l2_l1_bytes - ELEM_BYTES * t.gemm.batch * t.gemm.m * t.gemm.n for t in tiles
        )
        written = sum(tensors[t].nbytes for t in node.outputs if t in tensors)
        bias = sum(int(g.get("bias_bytes", 0)) for g in fused["gemms"])
        fold = 2 * ELEM_BYTES * int(fused.get("fold_elems", 0))
        return streamed + written + bias + fold, tiles
    gemms = node_gemms(node, tensors)
    if gemms:
        tiles = [tile_gemm(g, l1_bytes, ELEM_BYTES) for g in gemms]
        extra = 0
        # bias of addmm/baddbmm and other non-matrix operands stream once
        for t in node.inputs[: max(0, len(node.inputs) - 2)]:
            if t in tensors and node.op.split(".")[1] in ("addmm", "baddbmm"):
                extra += tensors[t].nbytes
        return sum(t.l2_l1_bytes for t in tiles) + extra, tiles
    moved = sum(tensors[t].nbytes for t in set(node.inputs) if t in tensors)
    moved += sum(tensors[t].nbytes for t in node.outputs if t in tensors)
    return moved, []


PLACEMENTS = ("spill", "l3-primary")


def place_hierarchy(
    graph: Any,
    buffers: Sequence[Buffer],
    target: Any,
    *,
    placement: str = "spill",
    time_limit_s: float = 0.1,
    allocation: Allocation | None = None,
) -> HierarchyPlan:
    """Tier of every buffer, tier peaks and per-step transfers on ``target``.

    ``allocation`` (an :class:`Allocation` of all ``buffers``) is reused for L2 when
    nothing spills, so the L2 peak matches the caller's arena.
    ``placement="spill"`` (default) keeps tensors in L2 while they fit and spills
    the rest (module docstring). ``placement="l3-primary"`` is TrainDeeploy's CCT
    deployment (§V-B: "L3 serves as the primary storage, with tensors staged through
    L2 and tiled into L1 at runtime"): every tensor the last tier accepts lives there
    and each node stages its operands through L2.

    Raises :class:`BudgetError` naming the shortfall in bytes when the step cannot
    fit even with everything spillable in the last tier.
    """
    tiers = list(target.tiers)
    l1 = tiers[0]
    l2 = tiers[1] if len(tiers) > 1 else tiers[0]
    l3 = tiers[2] if len(tiers) > 2 else None
    tensors = graph.tensors
    nodes = list(graph.nodes)
    horizon = max(len(nodes), 1)

    tiles: dict[str, list[Tile]] = {}
    node_l2_l1: dict[str, int] = {}
    l1_peak = 0
    fused_specs = graph.meta.get("fused", {}) if isinstance(graph.meta, dict) else {}
    for node in nodes:
        moved, node_tiles = node_l2_l1_traffic(
            node, tensors, l1.capacity_bytes, fused_specs.get(node.name)
        )
        node_l2_l1[node.name] = moved
        if node_tiles:
            tiles[node.name] = node_tiles
            l1_peak = max(l1_peak, max(t.working_set_bytes for t in node_tiles))
        elif moved:
            l1_peak = max(l1_peak, min(l1.capacity_bytes, moved * 2))

    counts = _access_counts(graph, buffers)
    sizes = np.array([b.size for b in buffers], dtype=np.int64)
    lows = np.array([b.lower for b in buffers], dtype=np.int64)
    ups = np.array([b.upper for b in buffers], dtype=np.int64)
    accesses = np.array([max(1, sum(counts.get(b.name, (0, 1)))) for b in buffers], dtype=float)
    writable_l3 = l3 is not None and getattr(l3, "writable", True)
    spillable = np.array(
        [
            l3 is not None and (writable_l3 or b.kind_name == "frozen_weight") and b.size > 0
            for b in buffers
        ],
        dtype=bool,
    )
    in_l2 = np.ones(len(buffers), dtype=bool)

    def live(mask: np.ndarray) -> np.ndarray:
        delta = np.zeros(horizon + 1, dtype=np.int64)
        np.add.at(delta, lows[mask], sizes[mask])
        np.add.at(delta, np.minimum(ups[mask], horizon), -sizes[mask])
        return np.cumsum(delta)[:horizon]

    if placement not in PLACEMENTS:
        raise ConfigError(f"unknown placement {placement!r}; use one of {list(PLACEMENTS)}")
    staging = 0
    budget = l2.capacity_bytes
    if placement == "l3-primary" and l3 is not None:
        in_l2 = ~spillable
        operand = [
            sum(tensors[t].nbytes for t in set(n.inputs) | set(n.outputs) if t in tensors)
            for n in nodes
            if not _is_view(n)
        ]
        staging = min(max(operand, default=0), l2.capacity_bytes)
        budget = l2.capacity_bytes - staging
    elif len(buffers) and live(in_l2).max() > budget and l3 is not None:
        staging = min(l1.capacity_bytes, l2.capacity_bytes // 2)
        budget = l2.capacity_bytes - staging

    if allocation is not None and in_l2.all():
        l2_alloc = allocation  # the caller's plan of all buffers, reused as is
    else:
        l2_alloc = allocate(
            [b for b, keep in zip(buffers, in_l2, strict=True) if keep], time_limit_s=time_limit_s
        )
    while l2_alloc.arena_bytes > budget:
        profile = live(in_l2)
        # overloaded steps: where the live set exceeds the budget (or, when the
        # arena is above the bound, the steps closest to the budget)
        threshold = min(budget, int(profile.max()) - 1)
        over = profile > threshold
        prefix = np.concatenate(([0], np.cumsum(over)))
        cover = prefix[np.minimum(ups, horizon)] - prefix[np.minimum(lows, horizon)]
        cand = in_l2 & spillable & (cover > 0)
        if not cand.any():
            need = l2_alloc.arena_bytes - budget
            raise BudgetError(
                f"the training step needs {l2_alloc.arena_bytes:,} bytes in {l2.name} but only "
                f"{budget:,} are available and nothing more can spill to "
                f"{l3.name if l3 else 'a lower tier'}: short by {need:,} bytes"
            )
        score = np.where(cand, accesses / np.maximum(cover * sizes, 1), np.inf)
        in_l2[int(np.argmin(score))] = False
        if live(in_l2).max() <= budget:
            l2_alloc = allocate(
                [b for b, keep in zip(buffers, in_l2, strict=True) if keep],
                time_limit_s=time_limit_s,
            )

    spilled = [b for b, keep in zip(buffers, in_l2, strict=True) if not keep]
    l3_peak = 0
    if spilled:
        l3_alloc = allocate(spilled, time_limit_s=time_limit_s)
        l3_peak = l3_alloc.arena_bytes
        if l3 is not None and l3_peak > l3.capacity_bytes:
            raise BudgetError(
                f"the training step does not fit {target.name}: {l3.name} would need "
                f"{l3_peak:,} bytes for spilled tensors but has {l3.capacity_bytes:,}; "
                f"short by {l3_peak - l3.capacity_bytes:,} bytes"
            )

    spilled_names = {b.name for b in spilled}
    node_l3_l2: dict[str, int] = {}
    root: dict[str, str] = {}
    for node in nodes:
        if node.aliases is not None:
            for out in node.outputs:
                if out != node.aliases:
                    root[out] = root.get(node.aliases, node.aliases)
    for node in nodes:
        if _is_view(node):
            node_l3_l2[node.name] = 0
            continue
        touched = {root.get(t, t) for t in node.inputs} | {root.get(t, t) for t in node.outputs}
        node_l3_l2[node.name] = sum(tensors[t].nbytes for t in touched if t in spilled_names)

    tier_of = (
        {
            b.name: (l2.name if keep else l3.name)
            for b, keep in zip(buffers, in_l2, strict=True)
            if b.name
        }
        if l3 is not None
        else {b.name: l2.name for b in buffers}
    )
    peaks = {l1.name: int(min(l1_peak, l1.capacity_bytes)), l2.name: l2_alloc.arena_bytes + staging}
    caps = {l1.name: l1.capacity_bytes, l2.name: l2.capacity_bytes}
    if l3 is not None:
        peaks[l3.name] = l3_peak
        caps[l3.name] = l3.capacity_bytes
    return HierarchyPlan(
        tier_of=tier_of,
        tier_peaks=peaks,
        tier_capacities=caps,
        transfers={
            "l3_l2_bytes": int(sum(node_l3_l2.values())),
            "l2_l1_bytes": int(sum(node_l2_l1.values())),
        },
        tiles=tiles,
        node_traffic={n.name: (node_l3_l2[n.name], node_l2_l1[n.name]) for n in nodes},
        staging_bytes=staging,
        spilled=sorted(spilled_names),
    )
