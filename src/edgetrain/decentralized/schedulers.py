"""Schedulers: turn the devices' resource reports into a chain-reduce schedule.

All schedulers share one interface, ``schedule(statuses) -> Schedule``. Ring and
Tree are the resource-agnostic baselines of MDLdroid §4.2 (Ring-Allreduce's
ring, Tree-Allreduce's binomial reverse tree); the DQN Chain scheduler lives in
:mod:`edgetrain.decentralized.chain_scheduler`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

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
    energy balance), N-1 strictly sequential pairs (worst latency)."""

    name = "ring"

    def schedule(self, statuses: Sequence[DeviceStatus]) -> Schedule:
        devs = _devices(statuses)
        return Schedule(
            tuple(devs), tuple(Pair(devs[i], devs[i + 1]) for i in range(len(devs) - 1))
        )


class TreeScheduler(Scheduler):
    """Binomial reverse tree: in round r device i+2^r sends to i for i ≡ 0 mod
    2^(r+1); ⌈log2 N⌉ rounds, the root aggregates ⌈log2 N⌉ times."""

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
