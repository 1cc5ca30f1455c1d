"""TrainGraph: one training step as a static list of typed tensors and operators.

The IR is plain data (JSON round-trips, no tensors) so the memory planner, the
budget predictor and the C backend can consume it without PyTorch tracing
machinery. Node order is execution order; tensor names are unique.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any


class TensorKind(str, enum.Enum):
    """The role a tensor plays in a training step."""

    INPUT = "input"
    LABEL = "label"
    WEIGHT = "weight"  # trainable parameter
    FROZEN_WEIGHT = "frozen_weight"
    ACTIVATION = "activation"  # forward value (saved for backward or not)
    GRADIENT = "gradient"  # gradient of a weight or of an activation
    OPTIMIZER_STATE = "optimizer_state"
    TEMPORARY = "temporary"  # loss scalar, scratch, update temporaries


PERSISTENT_KINDS = frozenset(
    {TensorKind.WEIGHT, TensorKind.FROZEN_WEIGHT, TensorKind.OPTIMIZER_STATE}
)
PHASES = ("forward", "loss", "backward", "update")


@dataclass(frozen=True)
class TensorInfo:
    """One tensor: name, role, shape, dtype and storage size in bytes."""

    name: str
    kind: TensorKind
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    persistent: bool = False  # lives before and after the step (weights, optimizer state)

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["kind"] = self.kind.value
        d["shape"] = list(self.shape)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TensorInfo:
        return cls(
            name=d["name"],
            kind=TensorKind(d["kind"]),
            shape=tuple(int(s) for s in d["shape"]),
            dtype=d["dtype"],
            nbytes=int(d["nbytes"]),
            persistent=bool(d.get("persistent", False)),
        )


@dataclass(frozen=True)
class Node:
    """One operator application.

    ``aliases`` names the input whose storage the output shares: set for view
    ops (``t``, ``view``, ``transpose``...) and for in-place ops (``sub_`` in an
    SGD update writes into the weight), so a memory planner gives it no storage.
    """

    name: str
    op: str  # aten overload, e.g. "aten.mm.default"
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    flops: int
    is_layout: bool
    phase: str  # "forward" | "loss" | "backward" | "update"
    module: str | None  # qualified nn.Module name ("" = the root module); None if unknown
    aliases: str | None = None
    args_repr: str = ""

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["inputs"] = list(self.inputs)
        d["outputs"] = list(self.outputs)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Node:
        return cls(
            name=d["name"],
            op=d["op"],
            inputs=tuple(d["inputs"]),
            outputs=tuple(d["outputs"]),
            flops=int(d["flops"]),
            is_layout=bool(d["is_layout"]),
            phase=d["phase"],
            module=d.get("module"),
            aliases=d.get("aliases"),
            args_repr=d.get("args_repr", ""),
        )


@dataclass
class TrainGraph:
    """A captured training step.

    ``step`` (not serialised) holds the executable :class:`~edgetrain.graph.capture.CapturedStep`
    when the graph came from :func:`~edgetrain.graph.capture`; graphs read back
    from JSON have none.
    """

    nodes: list[Node]
    tensors: dict[str, TensorInfo]
    meta: dict = field(default_factory=dict)
    step: Any = field(default=None, repr=False, compare=False)

    def flops(self, phase: str | None = None) -> int:
        """Total FLOPs, or those of one phase ("forward", "loss", "backward", "update")."""
        if phase is not None and phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r}; use one of {PHASES}")
        return sum(n.flops for n in self.nodes if phase is None or n.phase == phase)

    def tensors_of(self, kind: TensorKind) -> list[TensorInfo]:
        """All tensors of ``kind``, in name-insertion order."""
        kind = TensorKind(kind)
        return [t for t in self.tensors.values() if t.kind == kind]

    def bytes_of(self, kind: TensorKind) -> int:
        """Storage of all tensors of ``kind`` that own storage (views and in-place results excluded)."""
        aliased = {o for n in self.nodes if n.aliases is not None for o in n.outputs}
        return sum(t.nbytes for t in self.tensors_of(kind) if t.name not in aliased)

    def producers(self) -> dict[str, int]:
        """Tensor name -> index of the node that writes it."""
        return {o: i for i, n in enumerate(self.nodes) for o in n.outputs}

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 1,
            "meta": self.meta,
            "tensors": [t.to_json() for t in self.tensors.values()],
            "nodes": [n.to_json() for n in self.nodes],
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TrainGraph:
        tensors = [TensorInfo.from_json(t) for t in d["tensors"]]
        return cls(
            nodes=[Node.from_json(n) for n in d["nodes"]],
            tensors={t.name: t for t in tensors},
            meta=dict(d.get("meta", {})),
        )
