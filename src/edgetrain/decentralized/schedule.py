"""Aggregation schedules: who sends its model to whom, and in which order.

A chain reduce over N devices is N-1 *pair aggregations*. In each pair the
sender hands its (gradient, θ) message to the receiver and leaves the reduce;
the receiver keeps aggregating. The device left at the end (the *root*) holds
the global aggregate, which the broadcast then spreads (MDLdroid §3.2,
Algorithm 1). A schedule is only the order of the pairs; pairs that touch
disjoint devices can run at the same time, so :meth:`Schedule.rounds` groups
them into concurrent rounds by dependency (Fig. 4, "several disjoint pairs per
round").
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from edgetrain.errors import ConfigError


@dataclass(frozen=True)
class Pair:
    """One pair aggregation: ``sender`` sends its message to ``receiver``."""

    sender: int
    receiver: int


@dataclass(frozen=True)
class Schedule:
    """An ordered chain-reduce over ``devices``; validated on construction.

    ``synchronous``: the reduce is a *collective* that starts only when every device
    in it is ready (a barrier before the first pair), as a Ring-Allreduce is: every
    member takes part in its first step (Patarasuk & Yuan, "Bandwidth optimal
    all-reduce algorithms for clusters of workstations", JPDC 69(2), 2009). False
    (default): dependency-driven, a pair starts when its two devices are free
    (Algorithm 1: a device sends as soon as it has trained and the MA named its partner).
    """

    devices: tuple[int, ...]
    pairs: tuple[Pair, ...]
    synchronous: bool = False

    def __post_init__(self) -> None:
        validate_pairs(self.devices, self.pairs)

    @classmethod
    def of(cls, devices: Iterable[int], pairs: Iterable[tuple[int, int] | Pair]) -> Schedule:
        """Build from plain ``(sender, receiver)`` tuples."""
        ps = tuple(p if isinstance(p, Pair) else Pair(int(p[0]), int(p[1])) for p in pairs)
        return cls(tuple(int(d) for d in devices), ps)

    @property
    def root(self) -> int:
        """The device that holds the global aggregate after the last pair."""
        senders = {p.sender for p in self.pairs}
        (root,) = [d for d in self.devices if d not in senders]
        return root

    def rounds(self) -> list[list[Pair]]:
        """Group pairs into concurrent rounds: a pair runs one round after the
        latest round that touched either of its devices."""
        last: dict[int, int] = {}
        out: list[list[Pair]] = []
        for p in self.pairs:
            r = max(last.get(p.sender, -1), last.get(p.receiver, -1)) + 1
            last[p.sender] = last[p.receiver] = r
            if r == len(out):
                out.append([])
            out[r].append(p)
        return out

    def receive_counts(self) -> dict[int, int]:
        """How many messages each device aggregates (the energy-balance count)."""
        counts = dict.fromkeys(self.devices, 0)
        for p in self.pairs:
            counts[p.receiver] += 1
        return counts

    def to_json(self) -> list[list[int]]:
        return [[p.sender, p.receiver] for p in self.pairs]


def validate_pairs(devices: Sequence[int], pairs: Sequence[Pair]) -> None:
    """Raise :class:`ConfigError` unless ``pairs`` is a chain reduce of ``devices``.

    Valid means: N-1 pairs, every device except one sends exactly once, and no
    device sends or receives after it has sent (its contribution would then be
    lost or counted twice).
    """
    devs = list(devices)
    if len(set(devs)) != len(devs) or not devs:
        raise ConfigError(f"schedule devices must be distinct and non-empty, got {devs}")
    if len(pairs) != len(devs) - 1:
        raise ConfigError(
            f"a chain reduce over {len(devs)} devices needs {len(devs) - 1} pairs, got {len(pairs)}"
        )
    gone: set[int] = set()
    known = set(devs)
    for k, p in enumerate(pairs):
        if p.sender not in known or p.receiver not in known:
            raise ConfigError(f"pair {k} ({p.sender}->{p.receiver}) names a device not in {devs}")
        if p.sender == p.receiver:
            raise ConfigError(f"pair {k} sends device {p.sender} to itself")
        if p.sender in gone or p.receiver in gone:
            raise ConfigError(
                f"pair {k} ({p.sender}->{p.receiver}) uses a device that already sent its model"
            )
        gone.add(p.sender)


def all_schedules(devices: Sequence[int]) -> Iterator[Schedule]:
    """Every valid chain reduce of ``devices``, each once: N!·(N−1)! of them (with k
    devices still holding a model, any of the k sends to any other of the k−1).

    Small N only (12 at N = 3, 144 at N = 4, 2,880 at N = 5): the exhaustive
    reference a learned scheduler is checked against."""
    devs = tuple(int(d) for d in devices)
    if len(set(devs)) != len(devs) or not devs:
        raise ConfigError(f"schedule devices must be distinct and non-empty, got {list(devs)}")

    def rec(alive: tuple[int, ...], pairs: tuple[Pair, ...]) -> Iterator[tuple[Pair, ...]]:
        if len(alive) == 1:
            yield pairs
            return
        for s in alive:
            rest = tuple(d for d in alive if d != s)
            for r in rest:
                yield from rec(rest, (*pairs, Pair(s, r)))

    for pairs in rec(devs, ()):
        yield Schedule(devs, pairs)


def star_schedule(devices: Sequence[int], master: int) -> Schedule:
    """Every device sends to ``master`` (the CentralSGD / FL master-slave layout)."""
    return Schedule.of(devices, [(d, master) for d in devices if d != master])
