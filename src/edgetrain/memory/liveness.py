"""Tensor lifetimes over a training graph and the allocation lower bound.

Time is the node index in execution order. A buffer is live on ``[lower, upper)``
(upper exclusive), the convention of MiniMalloc's CSV format, so two buffers may
share addresses exactly when their intervals do not intersect. Views and in-place
ops own no storage: their reads extend the lifetime of the tensor they alias.
Persistent tensors (weights, frozen weights, optimizer state) live for the whole
step, because they exist before it starts and must survive it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgetrain.errors import DataError

# Kinds whose values exist outside the step (TrainDeeploy Fig. 6 excludes these
# from the "dynamic" peak: "excluding the fixed 1.12 MB weights and input").
STATIC_KINDS = frozenset({"weight", "frozen_weight", "input", "label", "optimizer_state"})


@dataclass(frozen=True)
class Buffer:
    """One allocation request: ``size`` bytes live on ``[lower, upper)``."""

    id: int | str
    lower: int
    upper: int
    size: int
    name: str = ""
    kind: Any = None  # edgetrain.graph.ir.TensorKind (a str enum) or None for CSV problems

    def __post_init__(self) -> None:
        if self.upper <= self.lower:
            raise DataError(
                f"buffer {self.id!r}: lifetime [{self.lower}, {self.upper}) is empty; "
                "upper must be greater than lower (upper is exclusive)"
            )
        if self.size < 0:
            raise DataError(f"buffer {self.id!r}: size {self.size} is negative; expected >= 0")

    @property
    def kind_name(self) -> str:
        """The kind as a plain string ("activation", ...), or "" when unknown."""
        if self.kind is None:
            return ""
        return str(getattr(self.kind, "value", self.kind))

    def overlaps(self, other: Buffer) -> bool:
        """True when the two lifetimes intersect (they then may not share bytes)."""
        return self.lower < other.upper and other.lower < self.upper


def storage_root(aliases: dict[str, str], name: str) -> str:
    """The tensor owning ``name``'s storage, following view aliases (bounded: a cycle cannot hang)."""
    seen = 0
    while name in aliases and seen < 10_000:
        name = aliases[name]
        seen += 1
    return name


def tensor_names(value: Any) -> set[str]:
    """Tensor names in ``meta["outputs"]``: a name, or lists / nested dicts of names."""
    if isinstance(value, str):
        return {value}
    if isinstance(value, dict):
        return set().union(*(tensor_names(v) for v in value.values())) if value else set()
    if isinstance(value, (list, tuple, set)):
        return set().union(*(tensor_names(v) for v in value)) if value else set()
    return set()


def lifetimes(graph: Any) -> list[Buffer]:
    """Buffers (one per storage-owning tensor) of ``graph`` with node indices as time.

    * a tensor produced by node ``i`` and last read by node ``j`` lives on ``[i, j + 1)``;
    * graph inputs/labels (produced by no node) are live from 0;
    * persistent tensors live on ``[0, len(nodes))``;
    * an output of a view-like or in-place node (``node.aliases`` set) owns no storage:
      its reads extend the lifetime of the tensor it aliases;
    * a tensor nobody reads lives one step, except the step's results, which must
      survive it (live to the end): the tensors named in ``graph.meta["outputs"]``
      or, for a graph without that record, everything the ``update`` phase writes.
      Update scratch (e.g. ``lr * grad`` before an in-place ``sub_``) dies after use.
    """
    nodes = list(graph.nodes)
    tensors = graph.tensors
    n = max(len(nodes), 1)
    aliases: dict[str, str] = {}
    for node in nodes:
        if node.aliases is not None:
            for out in node.outputs:
                if out != node.aliases:
                    aliases[out] = node.aliases
    outputs = tensor_names(graph.meta.get("outputs", ()) if isinstance(graph.meta, dict) else ())

    lower: dict[str, int] = {}
    upper: dict[str, int] = {}
    phase_of: dict[str, str] = {}

    def touch(name: str, t: int) -> None:
        root = storage_root(aliases, name)
        if root not in lower:
            lower[root] = 0  # read before any node wrote it: a graph input
        upper[root] = max(upper.get(root, 0), t + 1)

    for t, node in enumerate(nodes):
        for out in node.outputs:
            root = storage_root(aliases, out)
            if root not in lower:
                lower[root] = t
                phase_of[root] = node.phase
            upper[root] = max(upper.get(root, 0), t + 1)
            if out in outputs:
                upper[root] = n
        for inp in node.inputs:
            touch(inp, t)

    buffers: list[Buffer] = []
    for name, info in tensors.items():
        if name in aliases:
            continue
        if info.persistent:
            lo, hi = 0, n
        elif name in lower:
            lo, hi = lower[name], upper[name]
            if name in outputs or (not outputs and phase_of.get(name) == "update"):
                hi = n
        else:
            continue  # declared but never produced nor read: no storage needed
        buffers.append(
            Buffer(
                id=len(buffers),
                lower=lo,
                upper=max(hi, lo + 1),
                size=int(info.nbytes),
                name=name,
                kind=info.kind,
            )
        )
    return buffers


def live_bytes(buffers: Sequence[Buffer], horizon: int | None = None) -> np.ndarray:
    """Sum of live sizes at every time step ``0..horizon-1`` (lifetimes must be >= 0)."""
    hi = max((b.upper for b in buffers), default=0) if horizon is None else horizon
    delta = np.zeros(hi + 1, dtype=np.int64)
    for b in buffers:
        if b.lower < hi:
            delta[max(b.lower, 0)] += b.size
            delta[min(b.upper, hi)] -= b.size
    return np.cumsum(delta)[:hi]


def lower_bound(buffers: Iterable[Buffer]) -> int:
    """Largest sum of live bytes at any time: no arena can be smaller than this.

    A sweep over the sorted interval ends; at equal times ends come before starts
    because ``upper`` is exclusive. O(n log n).
    """
    bufs = list(buffers)
    if not bufs:
        return 0
    times = np.fromiter((t for b in bufs for t in (b.lower, b.upper)), dtype=np.int64)
    sizes = np.fromiter((s for b in bufs for s in (b.size, -b.size)), dtype=np.int64)
    order = np.lexsort((sizes, times))  # by time, then negative (ends) first
    return int(max(0, np.cumsum(sizes[order]).max()))
