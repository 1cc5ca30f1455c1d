"""The three aggregation schemes of MDLdroid §3.2 on plain tensor dicts.

Each device contributes a *delta* (its local model minus the global model it
started from, i.e. -η·Σ of its gradients), as a ``{name: tensor}`` dict. A
scheme reduces the N deltas to one along a :class:`Schedule` and reports how
many model copies each device held at its peak, the memory quantity of Fig. 11a.

- :class:`CentralSGD` (eq. 1): a master receives all N-1 other deltas and
  averages them; it holds N copies at once.
- :class:`NeighborSGD` (eq. 2 applied pair by pair): each pair averages its two
  deltas with equal weight. Along a chain the early contributions are halved
  again and again, so the result is *not* the mean (Fig. 3's accuracy loss).
- :class:`ChainSGD` (eq. 3): each message carries (Δw, θ); a pair computes
  W(j,i) = (θi·Δwi + θj·Δwj)/(θi + θj) and θ'i = θi + θj with θ starting at 1.
  θ counts the contributions already folded in, so the final aggregate is the
  exact mean and Σθ = N is conserved; no device holds more than two copies.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from edgetrain.decentralized.schedule import Schedule, star_schedule
from edgetrain.errors import ConfigError

Delta = dict[str, torch.Tensor]


@dataclass(frozen=True)
class Message:
    """What travels in one pair aggregation: the delta and its weight θ."""

    delta: Delta
    theta: float = 1.0


@dataclass
class ReduceResult:
    """The aggregate delta at the root, the root's θ and per-device peak copies."""

    aggregate: Delta
    theta: float
    root: int
    peak_copies: dict[int, int] = field(default_factory=dict)


def pair_aggregate(receiver: Message, sender: Message) -> Message:
    """Eq. 3: θ-weighted average of two messages; θ of the result is θi + θj."""
    ti, tj = float(receiver.theta), float(sender.theta)
    if ti <= 0 or tj <= 0:
        raise ConfigError(f"θ must be positive, got receiver θ={ti}, sender θ={tj}")
    total = ti + tj
    out = {
        k: (v * ti + sender.delta[k].to(v.dtype) * tj) / total if v.is_floating_point() else v
        for k, v in receiver.delta.items()
    }
    return Message(out, total)


def _check(deltas: Mapping[int, Delta], schedule: Schedule) -> None:
    if set(deltas) != set(schedule.devices):
        raise ConfigError(
            f"deltas are for devices {sorted(deltas)} but the schedule covers "
            f"{sorted(schedule.devices)}"
        )
    keys = None
    for d, delta in deltas.items():
        if keys is None:
            keys = set(delta)
        elif set(delta) != keys:
            raise ConfigError(f"device {d}'s delta has different parameter names than the others")


class Aggregator:
    """Reduce per-device deltas along a schedule. Subclasses set ``name``."""

    name = "base"

    def reduce(self, deltas: Mapping[int, Delta], schedule: Schedule) -> ReduceResult:
        raise NotImplementedError


class ChainSGD(Aggregator):
    """Pair aggregation with θ weights (eq. 3): exact mean, two copies at most."""

    name = "chain"

    def reduce(self, deltas: Mapping[int, Delta], schedule: Schedule) -> ReduceResult:
        _check(deltas, schedule)
        held = {d: Message(dict(deltas[d]), 1.0) for d in schedule.devices}
        peak = dict.fromkeys(schedule.devices, 1)
        for p in schedule.pairs:
            held[p.receiver] = pair_aggregate(held[p.receiver], held.pop(p.sender))
            peak[p.receiver] = max(peak[p.receiver], 2)  # own + incoming
        root = schedule.root
        return ReduceResult(held[root].delta, held[root].theta, root, peak)


class NeighborSGD(Aggregator):
    """Unweighted pair averaging (eq. 2 with m = 1): the baseline θ repairs."""

    name = "neighbor"

    def reduce(self, deltas: Mapping[int, Delta], schedule: Schedule) -> ReduceResult:
        _check(deltas, schedule)
        held = {d: Message(dict(deltas[d]), 1.0) for d in schedule.devices}
        peak = dict.fromkeys(schedule.devices, 1)
        for p in schedule.pairs:
            a, b = held[p.receiver], held.pop(p.sender)
            merged = pair_aggregate(Message(a.delta, 1.0), Message(b.delta, 1.0))
            held[p.receiver] = Message(merged.delta, a.theta + b.theta)
            peak[p.receiver] = max(peak[p.receiver], 2)
        root = schedule.root
        return ReduceResult(held[root].delta, held[root].theta, root, peak)


class CentralSGD(Aggregator):
    """Eq. 1: a master (the schedule's root) receives every delta and averages.

    The schedule's order is ignored except for its root, which becomes the
    master; the master holds all N copies at once.
    """

    name = "central"

    def reduce(self, deltas: Mapping[int, Delta], schedule: Schedule) -> ReduceResult:
        _check(deltas, schedule)
        master = schedule.root
        star = star_schedule(schedule.devices, master)
        n = len(star.devices)
        first = deltas[master]
        agg = {
            k: torch.stack([deltas[d][k].to(v.dtype) for d in star.devices]).mean(0)
            if v.is_floating_point()
            else v
            for k, v in first.items()
        }
        peak = dict.fromkeys(star.devices, 1)
        peak[master] = n
        return ReduceResult(agg, float(n), master, peak)


AGGREGATORS: dict[str, type[Aggregator]] = {
    "chain": ChainSGD,
    "neighbor": NeighborSGD,
    "central": CentralSGD,
}


def make_aggregator(name: str) -> Aggregator:
    """Aggregator by name; unknown names raise :class:`ConfigError`."""
    try:
        return AGGREGATORS[name]()
    except KeyError:
        raise ConfigError(
            f"unknown aggregation {name!r}; choose one of {', '.join(AGGREGATORS)}"
        ) from None
