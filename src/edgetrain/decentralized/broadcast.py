"""Resource-aware binomial-tree broadcast (MDLdroid §3.2.3).

After the reduce, the root holds the new global model. Sending it to the other
N-1 devices one by one takes N-1 sequential transfers on the root's radio. A
binomial tree (Hoefler et al., IPDPS'07, the paper's ref. [14]) lets every
device that already has the model forward it, doubling the holders each round:
⌈log2 N⌉ rounds. MDLdroid sorts the list by resources so the devices with the
most resources get the model first and do the forwarding; busy devices come
last, so they only receive.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from edgetrain.decentralized.resources import DeviceStatus
from edgetrain.decentralized.schedule import Pair


def resource_score(s: DeviceStatus) -> tuple:
    """Higher is more able to forward: free before busy, then charging, battery,
    free memory and idle CPU."""
    return (not s.busy, s.charging, s.battery_frac, s.free_memory_frac, -s.cpu_load)


def binomial_broadcast(root: int, statuses: Sequence[DeviceStatus]) -> list[list[Pair]]:
    """Rounds of (forwarder -> receiver) transfers reaching every device in ``statuses``.

    Each round every holder (richest first) sends to the next device of the
    resource-sorted list; the number of rounds is ⌈log2 N⌉.
    """
    others = sorted((s for s in statuses if s.device != root), key=resource_score, reverse=True)
    by_id = {s.device: s for s in statuses}
    holders = [root]
    queue = [s.device for s in others]
    rounds: list[list[Pair]] = []
    while queue:
        order = sorted(
            holders,
            key=lambda d: resource_score(by_id.get(d, DeviceStatus(d))),
            reverse=True,
        )
        rnd = []
        for h in order:
            if not queue:
                break
            rnd.append(Pair(h, queue.pop(0)))
        holders += [p.receiver for p in rnd]
        rounds.append(rnd)
    return rounds


def energy_aware_broadcast(
    root: int,
    statuses: Sequence[DeviceStatus],
    spent: Mapping[int, float],
    transfer_j: Callable[[int, int], tuple[float, float]],
) -> list[list[Pair]]:
    """The binomial tree of :func:`binomial_broadcast` with the forwarding list sorted by
    what each device has spent in this iteration (an alternative reading of §3.2.3's
    "resource condition"; not the default).

    Each round the holders forward least-spent first and the receivers are taken
    least-spent first (they forward in later rounds), free devices before busy ones,
    the resource score breaking ties. ``spent`` is each device's energy so far (J, the
    reduce's); ``transfer_j(src, dst)`` the (sender, receiver) energy one transfer adds.
    Same ⌈log2 N⌉ rounds and N − 1 transfers as the resource-sorted tree."""
    by_id = {s.device: s for s in statuses}
    e = {d: float(spent.get(d, 0.0)) for d in by_id}

    def key(d: int) -> tuple:
        s = by_id.get(d, DeviceStatus(d))
        return (s.busy, e.get(d, 0.0), tuple(-x for x in resource_score(s)[1:]))

    holders = [root]
    queue = [s.device for s in statuses if s.device != root]
    rounds: list[list[Pair]] = []
    while queue:
        rnd = []
        for h in sorted(holders, key=key):
            if not queue:
                break
            r = min(queue, key=key)
            queue.remove(r)
            rnd.append(Pair(h, r))
        for p in rnd:
            tx_j, rx_j = transfer_j(p.sender, p.receiver)
            e[p.sender] = e.get(p.sender, 0.0) + tx_j
            e[p.receiver] = e.get(p.receiver, 0.0) + rx_j
        holders += [p.receiver for p in rnd]
        rounds.append(rnd)
    return rounds


def sequential_broadcast(root: int, statuses: Sequence[DeviceStatus]) -> list[list[Pair]]:
    """The master-slave baseline: the root sends to every device itself, N-1 rounds."""
    return [[Pair(root, s.device)] for s in statuses if s.device != root]


def broadcast_rounds(n: int) -> int:
    """⌈log2 N⌉, the rounds a binomial tree needs for N devices."""
    return math.ceil(math.log2(n)) if n > 1 else 0
