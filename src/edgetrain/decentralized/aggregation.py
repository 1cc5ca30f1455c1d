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

Precision. The mean is exact in real arithmetic; in floating point the chain and the
master round differently, and SGD amplifies a last-bit difference of one iteration into
a visibly different model a few epochs later (measured: ``benchmarks/mdldroid.py
--sections numerics``). Every pair and the master therefore compute in float64 and
round once. With float32 messages (default, what a float32 model sends) the chain rounds
once per pair into a float32 mean W. With float64 messages (``wire="float64"``: twice the
bytes per reduce transfer, counted by the clock) a message carries the θ-weighted *sum*
S = θ·W instead of the mean (:func:`pair_sum`: S' = Sᵢ + Sⱼ, no division on the way) and
the root divides once, S/θ, as the master does: the float64 sums of float32 deltas are
exact whenever an element's N deltas span at most ~25 binades, and then the chain's
aggregate *is* the master's float64-accumulated mean, bit for bit, round-half ties
included (round 5 carried W in float64 and missed 106 of 734,677 LeNet elements at
N = 8: a tie the chain's divisions by 2…8 had moved by 1e-16).

Why the float32 wire cannot be made exact for free: the exact sum of two float32 values
needs up to 25 significant bits (more when their exponents differ), so a partial
aggregate that is to be rounded only once at the root needs more than the 32 bits of a
float32 message. A compensated (hi, lo) pair or a Kahan term is a second full tensor,
i.e. the float64 wire's bytes; there is no exact variant at float32's bytes.
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


# Precision of the (Δw, θ) messages that travel between devices in a chain reduce.
WIRE_DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "float64": torch.float64}
# Pair and central arithmetic run in float64 and round once into the message's dtype:
# a θ-weighted mean of float32 values is then rounded to float32 once per pair instead
# of after each of its multiply, add and divide (in float64 the products of float32
# values with integer θ ≤ 2^29 are exact; the sum and division round at 2^-53).
COMPUTE_DTYPE = torch.float64


def wire_dtype(name: str) -> torch.dtype:
    """The torch dtype of a message precision name; unknown names raise ConfigError."""
    try:
        return WIRE_DTYPES[name]
    except KeyError:
        raise ConfigError(
            f"unknown wire precision {name!r}; choose one of {', '.join(WIRE_DTYPES)}"
        ) from None


def pair_aggregate(receiver: Message, sender: Message) -> Message:
    """Eq. 3: θ-weighted average of two messages; θ of the result is θi + θj.

    Computed in float64 and rounded once into the receiver's dtype (the wire dtype)."""
    ti, tj = float(receiver.theta), float(sender.theta)
    if ti <= 0 or tj <= 0:
        raise ConfigError(f"θ must be positive, got receiver θ={ti}, sender θ={tj}")
    total = ti + tj
    cd = COMPUTE_DTYPE
    out = {
        k: ((v.to(cd) * ti + sender.delta[k].to(cd) * tj) / total).to(v.dtype)
        if v.is_floating_point()
        else v
        for k, v in receiver.delta.items()
    }
    return Message(out, total)


def carries_sum(wire: str) -> bool:
    """Whether messages at this precision carry the θ-weighted sum θ·W (float64: exact,
    divided once at the root) rather than the mean W (float32: rounded per pair)."""
    return wire_dtype(wire) == torch.float64


def pair_sum(receiver: Message, sender: Message) -> Message:
    """Eq. 3 on θ-weighted sums: S' = Sᵢ + Sⱼ, θ' = θᵢ + θⱼ (S = θ·W, so S'/θ' is eq. 3's
    W(j,i)). Added in float64 and kept in the receiver's dtype; exact when the float64
    sum is (see the module docstring)."""
    ti, tj = float(receiver.theta), float(sender.theta)
    if ti <= 0 or tj <= 0:
        raise ConfigError(f"θ must be positive, got receiver θ={ti}, sender θ={tj}")
    cd = COMPUTE_DTYPE
    out = {
        k: (v.to(cd) + sender.delta[k].to(cd)).to(v.dtype) if v.is_floating_point() else v
        for k, v in receiver.delta.items()
    }
    return Message(out, ti + tj)


def mean_of_sum(msg: Message) -> Delta:
    """The root's aggregate from a θ-weighted sum message: S/θ in float64, one division
    (like the central master's), kept in the message's dtype."""
    th = float(msg.theta)
    if th <= 0:
        raise ConfigError(f"θ must be positive, got {th}")
    return {
        k: (v.to(COMPUTE_DTYPE) / th).to(v.dtype) if v.is_floating_point() else v
        for k, v in msg.delta.items()
    }


def to_wire(delta: Delta, dtype: torch.dtype) -> Delta:
    """A delta as it is sent: floating tensors at least as wide as the wire dtype (a
    wire never narrows a wider model's tensors), others unchanged."""
    return {
        k: v.to(torch.promote_types(v.dtype, dtype)) if v.is_floating_point() else v
        for k, v in delta.items()
    }


def from_wire(delta: Delta, like: Delta) -> Delta:
    """Cast an aggregate back to the dtypes of ``like`` (end of the reduce)."""
    return {k: v.to(like[k].dtype) for k, v in delta.items()}


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
    """Pair aggregation with θ weights (eq. 3): exact mean, two copies at most.

    ``wire``: the precision of the messages between devices. ``"float32"`` (default)
    sends the model's own float32 deltas and partial aggregates, each pair rounding
    once into float32, so the result equals the central mean up to a few float32
    roundings. ``"float64"`` sends θ-weighted partial *sums* in float64 (twice the bytes
    per transfer, and two float64 copies in memory), divides once at the root and casts
    back: the result then equals the float64-accumulated central mean to the last bit
    whenever the float64 sums are exact (see the module docstring).
    """

    name = "chain"
    weighted = True

    def __init__(self, wire: str = "float32") -> None:
        self.wire = wire
        self.dtype = wire_dtype(wire)
        self.summed = self.weighted and carries_sum(wire)

    def reduce(self, deltas: Mapping[int, Delta], schedule: Schedule) -> ReduceResult:
        _check(deltas, schedule)
        held = {d: Message(to_wire(deltas[d], self.dtype), 1.0) for d in schedule.devices}
        peak = dict.fromkeys(schedule.devices, 1)
        for p in schedule.pairs:
            a, b = held[p.receiver], held.pop(p.sender)
            if self.summed:
                held[p.receiver] = pair_sum(a, b)
            elif self.weighted:
                held[p.receiver] = pair_aggregate(a, b)
            else:
                merged = pair_aggregate(Message(a.delta, 1.0), Message(b.delta, 1.0))
                held[p.receiver] = Message(merged.delta, a.theta + b.theta)
            peak[p.receiver] = max(peak[p.receiver], 2)  # own + incoming
        root = schedule.root
        top = held[root]
        agg = from_wire(mean_of_sum(top) if self.summed else top.delta, deltas[root])
        return ReduceResult(agg, top.theta, root, peak)


class NeighborSGD(ChainSGD):
    """Unweighted pair averaging (eq. 2 with m = 1): the baseline θ repairs."""

    name = "neighbor"
    weighted = False


class CentralSGD(Aggregator):
    """Eq. 1: a master (the schedule's root) receives every delta and averages.

    ``accumulate``: ``"float64"`` (default) sums the float32 copies in float64 and
    rounds once (the received bytes are unchanged: float32 deltas); ``"float32"`` is
    torch's float32 mean, kept as a control that only the summation order differs.

    The schedule's order is ignored except for its root, which becomes the
    master; the master holds all N copies at once.
    """

    name = "central"

    def __init__(self, accumulate: str = "float64") -> None:
        self.accumulate = accumulate
        self.dtype = wire_dtype(accumulate)

    def reduce(self, deltas: Mapping[int, Delta], schedule: Schedule) -> ReduceResult:
        _check(deltas, schedule)
        master = schedule.root
        star = star_schedule(schedule.devices, master)
        n = len(star.devices)
        first = deltas[master]
        # the master holds float32 copies and accumulates in float64, rounding once:
        # the correctly rounded mean whenever the float64 sum is exact
        agg = {
            k: torch.stack([deltas[d][k].to(self.dtype) for d in star.devices])
            .sum(0)
            .div(n)
            .to(v.dtype)
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


def make_aggregator(name: str, wire: str = "float32") -> Aggregator:
    """Aggregator by name; unknown names raise :class:`ConfigError`. ``wire`` is the
    message precision of the pair-wise schemes (chain, neighbor); the central master
    always receives float32 deltas and accumulates them in float64."""
    wire_dtype(wire)
    try:
        cls = AGGREGATORS[name]
    except KeyError:
        raise ConfigError(
            f"unknown aggregation {name!r}; choose one of {', '.join(AGGREGATORS)}"
        ) from None
    return cls(wire) if issubclass(cls, ChainSGD) else cls()
