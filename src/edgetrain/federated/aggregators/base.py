"""The aggregator interface: combine client states into the next global state.

An aggregator also tells clients how to train (``proximal_mu``: FedProx's proximal term;
0 for the others). Server-side optimizer state (FedYogi's moments) is plain tensors, so
checkpoints are safetensors.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence

import torch

State = dict[str, torch.Tensor]


def weighted_mean(
    global_state: Mapping[str, torch.Tensor], updates: Sequence[tuple[State, float]]
) -> State:
    """Sample-weighted mean of the float tensors; other tensors keep the global value.

    Tensors a client did not train (HeteroFL submodels hold a slice) count, per element,
    only for the clients that hold that element: a client's state may be smaller than the
    global tensor along any dimension and then covers its leading slice.
    """
    if not updates:
        return {k: v.clone() for k, v in global_state.items()}
    out: State = {}
    for key, g in global_state.items():
        if not g.is_floating_point():
            out[key] = g.clone()
            continue
        num = torch.zeros_like(g, dtype=torch.float64)
        den = torch.zeros_like(g, dtype=torch.float64)
        for state, w in updates:
            t = state[key]
            sl = tuple(slice(0, s) for s in t.shape)
            num[sl] += float(w) * t.to(torch.float64)
            den[sl] += float(w)
        mean = torch.where(den > 0, num / den.clamp_min(1e-300), g.to(torch.float64))
        out[key] = mean.to(g.dtype)
    return out


class Aggregator(ABC):
    name = "base"
    proximal_mu = 0.0

    @abstractmethod
    def aggregate(self, global_state: State, updates: Sequence[tuple[State, float]]) -> State:
        """The next global state from ``(client state, weight)`` pairs."""

    def state_tensors(self) -> State:
        """Server-optimizer tensors to checkpoint (none by default)."""
        return {}

    def load_state_tensors(self, tensors: Mapping[str, torch.Tensor]) -> None:  # noqa: B027
        """Restore what :meth:`state_tensors` returned."""
