"""Where a training step's memory peak happens, and what is live there.

TrainDeeploy Fig. 6a reports the *dynamic* peak: "activations and gradients but
excluding the fixed 1.12 MB weights and input". :func:`peak_report` finds the node
at which the sum of live dynamic buffers is largest and breaks the live bytes down
by kind, by module and by tensor, so a difference between strategies can be traced
to the tensors that cause it (e.g. FT's weight gradients held until the update).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgetrain.memory.liveness import STATIC_KINDS, Buffer, live_bytes


@dataclass
class PeakReport:
    """The time step of the largest live sum and its composition."""

    time: int
    node: str
    phase: str
    module: str | None
    live_bytes: int
    by_kind: dict[str, int]
    by_phase_produced: dict[str, int]
    largest: list[tuple[str, str, int]] = field(default_factory=list)  # (tensor, kind, bytes)

    def to_json(self) -> dict[str, Any]:
        return {
            "time": self.time,
            "node": self.node,
            "phase": self.phase,
            "module": self.module,
            "live_bytes": self.live_bytes,
            "by_kind": dict(self.by_kind),
            "by_phase_produced": dict(self.by_phase_produced),
            "largest": [list(t) for t in self.largest],
        }


def peak_report(
    graph: Any, buffers: Sequence[Buffer], *, dynamic_only: bool = True, top: int = 8
) -> PeakReport:
    """Composition of the peak of ``buffers`` (the dynamic ones by default) over ``graph``.

    The peak of live sums is the allocation lower bound; the allocated arena can be
    larger (fragmentation), never smaller.
    """
    bufs = [b for b in buffers if not dynamic_only or b.kind_name not in STATIC_KINDS]
    nodes = list(graph.nodes)
    horizon = max(len(nodes), 1)
    profile = live_bytes(bufs, horizon) if bufs else np.zeros(horizon, dtype=np.int64)
    t = int(np.argmax(profile))
    live = [b for b in bufs if b.lower <= t < b.upper]
    producer = {o: n.phase for n in nodes for o in n.outputs}
    by_kind: dict[str, int] = {}
    by_phase: dict[str, int] = {}
    for b in live:
        by_kind[b.kind_name] = by_kind.get(b.kind_name, 0) + b.size
        ph = producer.get(b.name, "input")
        by_phase[ph] = by_phase.get(ph, 0) + b.size
    node = nodes[t] if nodes else None
    largest = sorted(live, key=lambda b: -b.size)[:top]
    return PeakReport(
        time=t,
        node=node.name if node else "",
        phase=node.phase if node else "",
        module=node.module if node else None,
        live_bytes=int(profile[t]) if len(profile) else 0,
        by_kind=by_kind,
        by_phase_produced=by_phase,
        largest=[(b.name, b.kind_name, b.size) for b in largest],
    )
