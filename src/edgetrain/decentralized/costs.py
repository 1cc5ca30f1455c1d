"""Simulated clock and energy for one training iteration of a device fleet.

Accuracy is trained for real; time and energy of phones we do not have are
simulated here from the device profiles (``edgetrain.devices``), whose every
constant cites its source (MDLdroid Table 2 phones, Bluetooth/Wi-Fi Direct
link rates and radio power). The model of one iteration:

1. Local training: device i trains ``flops_i`` FLOPs at its sustained training
   rate ``compute_flops`` (profile) -> ``train_s[i]``.
2. Busy: a busy device cannot take part in aggregation before
   ``train_s[i] + busy_s`` (T_b of eq. 5). The paper gives no busy duration.
   Our default ``BUSY_S`` = 75 s: FedHybrid §4.4.2 (our ``devices.traces``
   app-usage model) has interaction sessions of ~150 s, and a session caught at
   a random instant has on average half of it left.
3. Reduce: pairs run in schedule order; a pair starts when both devices are
   free, moves ``model_bytes`` over the link at the slower side's bandwidth
   (bytes·8/bps) and the receiver then aggregates (4 FLOPs per parameter:
   two multiplies, an add and the division of eq. 3). For CentralSGD every
   delta goes to the master, whose radio receives them one after another.
4. Broadcast: binomial tree (⌈log2 N⌉ rounds, §3.2.3) for chain/neighbor, forwarders
   by resource condition (``broadcast="energy"``: by energy spent in this iteration,
   an alternative measured in round 9); the master's sequential N-1 sends for
   central (FL's one-to-many).

Execution is dependency-driven, as in Algorithm 1 (a device sends as soon as it
has finished and the MA has named its partner): a pair starts when both of its
devices are free, with no barrier between rounds, for every scheduler alike. A
busy device therefore delays every pair it is in and everything downstream of
it — a Tree whose first-round pair includes a busy device finishes
``busy + ⌈log2 N⌉`` transfers after the start. The one exception is a
:attr:`Schedule.synchronous` schedule (the Ring-Allreduce baseline), a collective
that starts when its last member is ready, so its reduce ends at
``max ready + (N-1)`` transfers: eq. 5's worst case f = T_a + T_b, no overlap.
:attr:`IterationCost.eq5_time_s` (reduce end) is eq. 5's T(t);
:attr:`IterationCost.sched_latency_s` its scheduler part f(T_a, T_b) = T(t) − T_tr;
:attr:`IterationCost.time_s` adds the broadcast.

Energy per device = compute power × (training + aggregation time) + radio
tx/rx power × transfer time (``edgetrain.devices.energy.energy_j``). Eq. 6's
energy variance is taken over the *aggregation* energy (reduce and broadcast
transfers + aggregate compute), the part a scheduler can move between devices;
training energy is reported separately. :attr:`IterationCost.energy_parts`
splits each device's energy into :data:`ENERGY_PARTS`; the reduce's part is what
eq. 7's aggregation count n_agg steers, the broadcast's part follows the root the
schedule picks and the resource ranking of §3.2.3.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from edgetrain.decentralized.broadcast import (
    binomial_broadcast,
    energy_aware_broadcast,
    sequential_broadcast,
)
from edgetrain.decentralized.resources import DeviceStatus
from edgetrain.decentralized.schedule import Schedule
from edgetrain.devices import DeviceProfile, energy_j
from edgetrain.errors import ConfigError

# eq. 3 per element: θi·Δwi + θj·Δwj then / (θi + θj): 2 mul + 1 add + 1 div.
AGG_FLOPS_PER_PARAM = 4
# Expected remaining length of a ~150 s phone interaction session (FedHybrid §4.4.2).
BUSY_S = 75.0
# Forwarder choice of the chain/neighbor broadcast: "resource" = §3.2.3's list sorted by
# resource condition (default); "energy" = sorted by the energy spent in this iteration
# (broadcast.energy_aware_broadcast), an alternative reading measured in round 9.
BROADCASTS = ("resource", "energy")
# The components of one device's energy in :attr:`IterationCost.energy_parts` (J).
ENERGY_PARTS = ("train", "reduce_tx", "reduce_rx", "aggregate", "broadcast_tx", "broadcast_rx")
# The reduce's parts: the energy the pair aggregations themselves cost.
REDUCE_PARTS = ("reduce_tx", "reduce_rx", "aggregate")


@dataclass
class IterationCost:
    """Simulated time and energy of one iteration (all times in seconds)."""

    time_s: float
    reduce_end_s: float
    train_s: dict[int, float]
    energy_j: dict[int, float]
    agg_energy_j: dict[int, float]
    tx_bytes: dict[int, int]
    rx_bytes: dict[int, int]
    broadcast_rounds: int
    reduce_rounds: int
    extra: dict = field(default_factory=dict)
    # per device {part: J} over ENERGY_PARTS; the parts sum to energy_j[d], all but
    # "train" to agg_energy_j[d]
    energy_parts: dict[int, dict[str, float]] = field(default_factory=dict)

    @property
    def eq5_time_s(self) -> float:
        """Eq. 5's T(t) = T_tr + f(T_a, T_b): local training, busy latency and the
        scheduled reduce, up to the moment the root holds the aggregate. This is the
        part a scheduler changes; the broadcast after it is the same binomial tree for
        every chain schedule (§3.2.3) and is in :attr:`time_s` only."""
        return self.reduce_end_s

    @property
    def train_time_s(self) -> float:
        """Eq. 5's T_tr: the local training phase, until the slowest device has trained
        (the devices train in parallel, so the phase lasts as long as its longest run)."""
        return max(self.train_s.values()) if self.train_s else 0.0

    @property
    def sched_latency_s(self) -> float:
        """Eq. 5's f(T_a, T_b) = T(t) − T_tr: aggregation time and busy latency as the
        schedule overlaps them, the only part of T(t) a scheduler changes. Bounded by
        max(T_a, T_b) (full overlap) and T_a + T_b (linear, no overlap: the Ring)."""
        return self.reduce_end_s - self.train_time_s

    @property
    def energy_variance(self) -> float:
        """Eq. 6 over the devices' aggregation energy (J²)."""
        return energy_variance(self.agg_energy_j)

    def part_variance(self, parts: Sequence[str]) -> float:
        """Eq. 6 over the sum of some of each device's :data:`ENERGY_PARTS` — e.g. the
        reduce alone (``reduce_tx``, ``reduce_rx``, ``aggregate``), the part eq. 7's
        aggregation count n_agg is about, without the broadcast that follows it."""
        bad = [p for p in parts if p not in ENERGY_PARTS]
        if bad:
            raise ConfigError(f"unknown energy parts {bad}; choose from {', '.join(ENERGY_PARTS)}")
        return energy_variance(
            {d: sum(ps[p] for p in parts) for d, ps in self.energy_parts.items()}
        )


def energy_variance(energy: Mapping[int, float]) -> float:
    """Eq. 6: (1/N) Σ (E_i − μ)²."""
    v = np.array(list(energy.values()), dtype=np.float64)
    return float(((v - v.mean()) ** 2).mean()) if len(v) else 0.0


def link_time_s(a: DeviceProfile, b: DeviceProfile, n_bytes: int, link: str) -> float:
    """Transfer time over ``link`` at the slower of the two ends."""
    return 8.0 * n_bytes / min(a.link_bps(link), b.link_bps(link))


def simulate_iteration(
    schedule: Schedule,
    statuses: Sequence[DeviceStatus],
    profiles: Mapping[int, DeviceProfile],
    train_flops: Mapping[int, float],
    n_params: int,
    model_bytes: int,
    aggregation: str = "chain",
    link: str = "bluetooth",
    busy_s: float | None = None,
    reduce_bytes: int | None = None,
    broadcast: str = "resource",
) -> IterationCost:
    """Simulate one iteration's clock and energy for the devices in ``schedule``.

    ``model_bytes`` travel in every broadcast transfer; ``reduce_bytes`` (default
    ``model_bytes``) in every reduce transfer — more when the chain's partial
    aggregates travel in float64 (``ChainConfig.wire``). ``broadcast``: how the
    chain/neighbor broadcast picks its forwarders (:data:`BROADCASTS`)."""
    if broadcast not in BROADCASTS:
        raise ConfigError(f"unknown broadcast {broadcast!r}; choose {' or '.join(BROADCASTS)}")
    if aggregation not in ("chain", "neighbor", "central"):
        raise ConfigError(f"unknown aggregation {aggregation!r}; choose chain, neighbor or central")
    devs = list(schedule.devices)
    st = {s.device: s for s in statuses}
    missing = [d for d in devs if d not in profiles or d not in train_flops]
    if missing:
        raise ConfigError(f"no profile or training FLOPs for devices {missing}")
    train_s = {d: train_flops[d] / profiles[d].compute_flops for d in devs}
    ready = {}
    for d in devs:
        busy = st.get(d, DeviceStatus(d)).busy
        delay = (BUSY_S if busy_s is None else busy_s) if busy else 0.0
        ready[d] = train_s[d] + delay
    comp_s = dict.fromkeys(devs, 0.0)
    tx = dict.fromkeys(devs, 0)
    rx = dict.fromkeys(devs, 0)
    link_s = {d: [0.0, 0.0] for d in devs}  # seconds sending, receiving
    # link_s split by phase for energy_parts: [reduce send, reduce receive, broadcast
    # send, broadcast receive] (link_s itself stays the one sum the energy is taken from)
    phase_s = {d: [0.0, 0.0, 0.0, 0.0] for d in devs}
    avail = dict(ready)
    if schedule.synchronous and aggregation != "central":
        # a collective (Ring-Allreduce): nothing moves before every member is ready
        start_all = max(ready.values())
        avail = dict.fromkeys(devs, start_all)

    red_bytes = model_bytes if reduce_bytes is None else int(reduce_bytes)

    def transfer(
        src: int, dst: int, start: float, n_bytes: int = red_bytes, phase: int = 0
    ) -> float:
        dt = link_time_s(profiles[src], profiles[dst], n_bytes, link)
        tx[src] += n_bytes
        rx[dst] += n_bytes
        link_s[src][0] += dt
        link_s[dst][1] += dt
        phase_s[src][phase] += dt
        phase_s[dst][phase + 1] += dt
        return start + dt

    if aggregation == "central":
        master = schedule.root
        radio = avail[master]
        for d in sorted((d for d in devs if d != master), key=lambda d: avail[d]):
            start = max(radio, avail[d])
            radio = transfer(d, master, start)
            avail[d] = radio
        agg_s = AGG_FLOPS_PER_PARAM * n_params * (len(devs) - 1) / profiles[master].compute_flops
        comp_s[master] += agg_s
        avail[master] = max(radio, avail[master]) + agg_s
        reduce_rounds = len(devs) - 1
    else:
        for p in schedule.pairs:
            start = max(avail[p.sender], avail[p.receiver])
            end = transfer(p.sender, p.receiver, start)
            agg_s = AGG_FLOPS_PER_PARAM * n_params / profiles[p.receiver].compute_flops
            comp_s[p.receiver] += agg_s
            avail[p.sender] = end
            avail[p.receiver] = end + agg_s
        reduce_rounds = len(schedule.rounds())
    root = schedule.root
    reduce_end = avail[root]
    live_status = [st.get(d, DeviceStatus(d)) for d in devs]
    if aggregation == "central":
        rounds = sequential_broadcast(root, live_status)
    elif broadcast == "energy":

        def spent_j(d: int) -> float:
            tx_w, rx_w = profiles[d].link_power(link)
            return (
                tx_w * link_s[d][0] + rx_w * link_s[d][1] + profiles[d].power_compute_w * comp_s[d]
            )

        def transfer_j(src: int, dst: int) -> tuple[float, float]:
            dt = link_time_s(profiles[src], profiles[dst], model_bytes, link)
            return profiles[src].link_power(link)[0] * dt, profiles[dst].link_power(link)[1] * dt

        rounds = energy_aware_broadcast(
            root, live_status, {d: spent_j(d) for d in devs}, transfer_j
        )
    else:
        rounds = binomial_broadcast(root, live_status)
    for rnd in rounds:
        for p in rnd:
            start = max(avail[p.sender], avail[p.receiver])
            end = transfer(p.sender, p.receiver, start, model_bytes, phase=2)
            avail[p.sender] = end
            avail[p.receiver] = end
    time_s = max(avail.values())
    energy, agg_energy, parts = {}, {}, {}
    for d in devs:
        prof = profiles[d]
        tx_w, rx_w = prof.link_power(link)
        radio_j = tx_w * link_s[d][0] + rx_w * link_s[d][1]
        agg_energy[d] = prof.power_compute_w * comp_s[d] + radio_j
        energy[d] = energy_j(prof, compute_s=train_s[d]) + agg_energy[d]
        parts[d] = {
            "train": energy_j(prof, compute_s=train_s[d]),
            "reduce_tx": tx_w * phase_s[d][0],
            "reduce_rx": rx_w * phase_s[d][1],
            "aggregate": prof.power_compute_w * comp_s[d],
            "broadcast_tx": tx_w * phase_s[d][2],
            "broadcast_rx": rx_w * phase_s[d][3],
        }
    return IterationCost(
        time_s=time_s,
        reduce_end_s=reduce_end,
        train_s=train_s,
        energy_j=energy,
        agg_energy_j=agg_energy,
        tx_bytes=tx,
        rx_bytes=rx,
        broadcast_rounds=len(rounds),
        reduce_rounds=reduce_rounds,
        energy_parts=parts,
    )
