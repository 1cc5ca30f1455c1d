"""Schedulers: turn the devices' resource reports into a chain-reduce schedule.

All schedulers share one interface, ``schedule(statuses) -> Schedule``. Ring and
Tree are the resource-agnostic baselines of MDLdroid §4.2 (Ring-Allreduce's
ring, Tree-Allreduce's binomial reverse tree); the DQN Chain scheduler lives in
:mod:`edgetrain.decentralized.chain_scheduler`. :class:`EarliestPairScheduler`
is not in the paper: it is the *latency-optimal reference* that bounds how much
time any scheduler can save under the simulated clock, used by the benchmark to
tell a weak scheduler from a small attainable gap.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence

from edgetrain.decentralized.resources import DeviceStatus
from edgetrain.decentralized.schedule import Pair, Schedule
from edgetrain.errors import ConfigError


class Scheduler:
    """Base: ``schedule`` orders the pair aggregations for one iteration."""

    name = "base"

    def schedule(self, statuses: Sequence[DeviceStatus]) -> Schedule:
        raise NotImplementedError


def _devices(statuses: Sequence[DeviceStatus]) -> list[int]:
    if not statuses:
        raise ConfigError("cannot schedule zero devices; at least one must be connected")
    return [s.device for s in statuses]


class RingScheduler(Scheduler):
    """d0 -> d1 -> ... -> d(N-1): every device aggregates at most once (best
    energy balance), N-1 strictly sequential whole-model pairs (worst latency).

    ``synchronous=True`` (default) models the ring as the collective it stands for
    in MDLdroid §3.3 (Ring-Allreduce; the paper's reference [28] is actually Li et
    al.'s Parameter Server, OSDI'14, which describes no ring): a Ring-Allreduce step
    has *every* member sending to its successor at once (Patarasuk & Yuan, JPDC
    69(2), 2009; Horovod, Sergeev & Del Balso 2018), so the ring cannot start before
    its last member is ready and a busy device delays the whole reduce by its full
    busy time. That is the paper's own reading of the Ring-scheduler: eq. 5's "worse
    case is T_a + T_b in which the scheduled sequence is linear and no concurrent
    overlap", and §3.3's "worse case represents as a ring structure of
    Ring-scheduler". ``synchronous=False`` is the dependency-driven chain in ring
    order (the model before round 5), in which the devices ahead of a busy device
    keep passing the aggregate on while it is busy.
    """

    name = "ring"

    def __init__(self, synchronous: bool = True) -> None:
        self.synchronous = bool(synchronous)

    def schedule(self, statuses: Sequence[DeviceStatus]) -> Schedule:
        devs = _devices(statuses)
        return Schedule(
            tuple(devs),
            tuple(Pair(devs[i], devs[i + 1]) for i in range(len(devs) - 1)),
            synchronous=self.synchronous,
        )


class TreeScheduler(Scheduler):
    """Binomial reverse tree: in round r device i+2^r sends to i for i ≡ 0 mod
    2^(r+1); ⌈log2 N⌉ rounds, the root aggregates ⌈log2 N⌉ times.

    This is the reduction of Tree-Allreduce as MDLdroid's [37] (Shi et al., gTop-k
    S-SGD, 2019) runs it: point-to-point send/receive pairs, round 1 0 ← 1, 2 ← 3, …,
    round 2 0 ← 2, 4 ← 6, … — no collective barrier, so a pair starts when its two
    devices are free (the default, non-synchronous schedule)."""

    name = "tree"

    def schedule(self, statuses: Sequence[DeviceStatus]) -> Schedule:
        devs = _devices(statuses)
        n = len(devs)
        pairs = []
        for r in range(math.ceil(math.log2(n)) if n > 1 else 0):
            s = 1 << r
            for i in range(0, n, 2 * s):
                if i + s < n:
                    pairs.append(Pair(devs[i + s], devs[i]))
        return Schedule(tuple(devs), tuple(pairs))


class EarliestPairScheduler(Scheduler):
    """Latency-optimal reference (not in the paper): repeatedly pair the two devices
    that become available first; the earlier one sends, the later one receives and is
    available one transfer later.

    With every transfer taking the same time c, the reduce is a merge tree whose node
    finishes at max(children) + c, and merging the two earliest items first minimises
    the finishing time of the root (Golumbic, "Combinatorial merging", IEEE Trans.
    Computers C-25(11), 1976). It therefore gives the least eq.-5 time any chain
    schedule can reach under :func:`~edgetrain.decentralized.costs.simulate_iteration`
    (whose transfers all run at the one link rate), ignoring energy balance entirely.
    Availability: ``ready_s`` per device (training time) plus ``busy_s`` if busy.
    """

    name = "earliest-pair"

    def __init__(
        self, busy_s: float, transfer_s: float, ready_s: Mapping[int, float] | None = None
    ) -> None:
        if busy_s < 0 or transfer_s <= 0:
            raise ConfigError(
                f"busy_s must be >= 0 and transfer_s > 0, got {busy_s} and {transfer_s}"
            )
        self.busy_s, self.transfer_s = float(busy_s), float(transfer_s)
        self.ready_s = dict(ready_s or {})

    def schedule(self, statuses: Sequence[DeviceStatus]) -> Schedule:
        devs = _devices(statuses)
        heap = [
            (self.ready_s.get(s.device, 0.0) + (self.busy_s if s.busy else 0.0), i, s.device)
            for i, s in enumerate(statuses)
        ]
        heapq.heapify(heap)
        pairs = []
        while len(heap) > 1:
            a, _, sender = heapq.heappop(heap)
            b, i, receiver = heapq.heappop(heap)
            pairs.append(Pair(sender, receiver))
            heapq.heappush(heap, (max(a, b) + self.transfer_s, i, receiver))
        return Schedule(tuple(devs), tuple(pairs))
