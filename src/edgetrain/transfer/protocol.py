"""The few-shot fine-tuning protocol of TrainDeeploy §VI-A1, as plain data.

"Each model is trained for 100 epochs using SGD with a batch size of 8, an initial
learning rate of 0.01, and cosine annealing down to 0.0005 ... Final accuracy is
reported as the average over the last five epochs, and each few-shot experiment is
repeated 30 times" (TrainDeeploy §VI-A1). :data:`PAPER` holds exactly those values;
shorter settings (for 2-core machines and tests) change only ``epochs``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

from edgetrain.errors import ConfigError

OPTIMIZERS = ("sgd", "sgd-momentum", "adam")
SCHEDULES = ("cosine", "constant")


@dataclass(frozen=True)
class Protocol:
    """How one fine-tuning run trains and how its accuracy is read off.

    ``average_last`` epochs at the end are evaluated and averaged into the reported
    accuracy; ``eval_every`` additionally evaluates every n-th epoch (0: only the
    averaged ones — evaluation is most of the cost of a 50-shot epoch).
    """

    epochs: int = 100
    batch_size: int = 8
    lr: float = 0.01
    final_lr: float = 0.0005
    schedule: Literal["cosine", "constant"] = "cosine"
    optimizer: Literal["sgd", "sgd-momentum", "adam"] = "sgd"
    momentum: float = 0.9
    weight_decay: float = 0.0
    average_last: int = 5
    eval_every: int = 0

    def __post_init__(self) -> None:
        problems = []
        if self.epochs < 1:
            problems.append(f"epochs must be >= 1 (got {self.epochs})")
        if self.batch_size < 1:
            problems.append(f"batch size must be >= 1 (got {self.batch_size})")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            problems.append(f"lr must be a positive number (got {self.lr})")
        if not (self.final_lr >= 0 and math.isfinite(self.final_lr)):
            problems.append(f"final lr must be >= 0 (got {self.final_lr})")
        if self.schedule not in SCHEDULES:
            problems.append(
                f"schedule must be one of {', '.join(SCHEDULES)} (got {self.schedule!r})"
            )
        if self.optimizer not in OPTIMIZERS:
            problems.append(
                f"optimizer must be one of {', '.join(OPTIMIZERS)} (got {self.optimizer!r})"
            )
        if self.average_last < 1:
            problems.append(f"average_last must be >= 1 (got {self.average_last})")
        if self.eval_every < 0:
            problems.append(f"eval_every must be >= 0 (got {self.eval_every})")
        if problems:
            raise ConfigError("invalid fine-tuning protocol: " + "; ".join(problems))

    def evaluates(self, epoch: int) -> bool:
        """Whether ``epoch`` (1-based) is evaluated on the test set."""
        if epoch > self.epochs - min(self.average_last, self.epochs):
            return True
        return self.eval_every > 0 and epoch % self.eval_every == 0

    def with_(self, **changes: Any) -> Protocol:
        return replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Protocol:
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(
                f"unknown protocol field(s) {unknown}; accepted: {', '.join(sorted(known))}"
            )
        return cls(**dict(data))


PAPER = Protocol()
"""TrainDeeploy §VI-A1: 100 epochs, SGD, batch 8, lr 0.01 cosine to 0.0005, last-5 mean."""


def final_accuracy(history: Sequence[Mapping[str, Any]], average_last: int = 5) -> float:
    """Mean test accuracy over the last ``average_last`` epochs (all must be evaluated)."""
    if not history:
        raise ConfigError("no epochs were trained, so there is no accuracy to report")
    tail = list(history)[-average_last:]
    values = [h.get("test_accuracy") for h in tail]
    if any(v is None for v in values):
        missing = [h["epoch"] for h in tail if h.get("test_accuracy") is None]
        raise ConfigError(f"epochs {missing} were not evaluated; cannot average the last epochs")
    return float(sum(values) / len(values))


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof=1; 0.0 for a single value)."""
    if not values:
        raise ConfigError("mean_std needs at least one value")
    n = len(values)
    mean = sum(values) / n
    if n == 1:
        return float(mean), 0.0
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return float(mean), float(math.sqrt(var))
