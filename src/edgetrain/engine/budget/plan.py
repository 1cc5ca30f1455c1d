"""``ExecutionPlan``: the per-unit keep / recompute / compress / swap decisions (JSON, versioned)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from edgetrain.errors import ConfigError

# 2 adds the "regen" decision; 3 adds "mask" and chained regen; 4 adds "alias"; older
# plans are still read
PLAN_VERSION = 4
READABLE_VERSIONS = (1, 2, 3, 4)
DECISIONS = ("keep", "recompute", "compress", "swap", "regen", "mask", "alias")


@dataclass
class UnitDecision:
    name: str  # qualified nn.Module name ("" is the whole model)
    # one of DECISIONS; "regen": consumers of this leaf's output drop their copy and
    # regenerate it from the leaf's own saved input in backward (or, with ``chain``,
    # from the chain head's saved input through every leaf of the chain); "mask": the
    # ReLU-family leaf holds its saved tensor as an exact 1-bit range mask; "alias": the
    # Hardtanh-family leaf saves its output (which the next op saves anyway) instead of
    # its input, exact (inside a compressed or swapped unit: the 1-bit mask)
    decision: str
    codec: str | None = None  # for "compress": mix | int8 | int4
    saved_bytes: int = 0  # bytes the unit saves when kept
    held_bytes: int = 0  # bytes it holds under this decision (predicted)
    cost_s: float = 0.0  # predicted purge + regain time (eq. 5 denominator)
    mps: float | None = None  # MPS (eq. 5) at the moment it was chosen
    chain: list[str] | None = None  # regen only: leaves from head to this one (tail)

    def __post_init__(self) -> None:
        if self.decision not in DECISIONS:
            raise ConfigError(
                f"unit {self.name!r}: decision {self.decision!r}; expected one of {DECISIONS}"
            )


@dataclass
class ExecutionPlan:
    method: str
    budget_bytes: int
    unplanned_peak_bytes: int  # predicted saved-tensor peak of the "none" plan
    predicted_peak_bytes: int
    predicted_overhead_s: float
    units: list[UnitDecision]
    meta: dict[str, Any] = field(default_factory=dict)
    version: int = PLAN_VERSION

    def decision_counts(self) -> dict[str, int]:
        counts = {d: 0 for d in DECISIONS}
        for u in self.units:
            counts[u.decision] += 1
        return counts

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ExecutionPlan:
        if d.get("version") not in READABLE_VERSIONS:
            raise ConfigError(
                f"execution plan version {d.get('version')!r}; this edgetrain reads versions "
                f"{', '.join(map(str, READABLE_VERSIONS))}"
            )
        d = dict(d)
        units = [UnitDecision(**u) for u in d.pop("units")]
        return cls(units=units, **d)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=2))

    @classmethod
    def load(cls, path: str | Path) -> ExecutionPlan:
        try:
            return cls.from_json(json.loads(Path(path).read_text()))
        except (OSError, json.JSONDecodeError, TypeError) as exc:
            raise ConfigError(f"cannot read execution plan {path}: {exc}") from exc
