"""The selector interface: what every client-selection strategy sees and returns.

Like Flower's strategies, a selector is a small object with two overridable steps:
``select`` (pick ``k`` client ids for a round from what the server knows at check-in)
and ``update`` (learn from the round's feedback). Selectors hold only plain data (arrays,
dicts) and a NumPy generator, so ``state_dict`` / ``load_state_dict`` round-trip through
JSON for checkpoints.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class CheckIn:
    """What clients report when they check in (FedHybrid §4.2 "heartbeat"), as arrays.

    ``memory_budget`` is M_i (the predicted budget, bytes); ``step_time_s`` is the sum of
    the model's operator times on the device for one training step (eq. 3's denominator);
    ``est_duration_s`` is the round time the server expects from the device profile
    (compute + communication, no memory effects — what Oort's system utility knows).
    """

    n_samples: np.ndarray
    memory_budget: np.ndarray
    step_time_s: np.ndarray
    est_duration_s: np.ndarray
    m_g: float  # memory to train the model without any saving technique (bytes)
    # which clients the selector may pick (None: all); the server leaves out clients that
    # cannot run the round's task (``federated.unplannable: exclude``)
    eligible: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.n_samples)

    def candidates(self) -> np.ndarray:
        """Ids of the clients the selector may pick, ascending."""
        if self.eligible is None:
            return np.arange(len(self.n_samples))
        return np.flatnonzero(self.eligible)

    def is_eligible(self, cid: int) -> bool:
        return self.eligible is None or bool(self.eligible[cid])


@dataclass(frozen=True)
class Feedback:
    """One selected client's report after a round."""

    cid: int
    success: bool  # completed in time (an update was aggregated)
    duration_s: float  # simulated round time (inf if it was killed)
    loss_sq_mean: float  # mean of per-sample training loss squared (nan if no update)
    n_samples: int
    # trained, but reported after the round had closed on its first k reports; FedScale's
    # round_completion_handler "assign[s] avg reward to explored, but not ran workers":
    # the selector credits it with the mean utility of the round's aggregated clients
    straggler: bool = False


class Selector(ABC):
    """Base class: a seeded generator plus the two steps."""

    name = "base"

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    @abstractmethod
    def select(self, round_idx: int, checkin: CheckIn, k: int) -> list[int]:
        """Ids of the ``k`` clients to train in round ``round_idx`` (1-based)."""

    def update(self, round_idx: int, feedback: Sequence[Feedback]) -> None:  # noqa: B027
        """Learn from the round's reports (default: nothing to learn)."""

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]
