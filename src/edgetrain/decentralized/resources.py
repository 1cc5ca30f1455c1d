"""What a device reports to the mobile agent (MA), and whether that makes it busy.

MDLdroid §3.3.1 names five reported quantities: free memory, battery, in-use,
charging and CPU. The paper does not print the rule that turns them into
S_busy / S_free; ours is below, each threshold with its reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace

import numpy as np

from edgetrain.devices.state import DEFAULT_THRESHOLDS, ResourceState

# The busy thresholds are the devices package's (edgetrain.devices.state, each with
# its source): Android's 15 % low-battery warning, 80 % CPU load, 10 % free memory.
LOW_BATTERY_FRAC = DEFAULT_THRESHOLDS.min_battery_pct / 100.0
BUSY_CPU_LOAD = DEFAULT_THRESHOLDS.max_cpu_load
LOW_MEMORY_FRAC = DEFAULT_THRESHOLDS.min_free_memory_frac


@dataclass(frozen=True)
class DeviceStatus:
    """One device's resource report (fractions in [0, 1])."""

    device: int
    free_memory_frac: float = 1.0
    battery_frac: float = 1.0
    in_use: bool = False
    charging: bool = False
    cpu_load: float = 0.0

    @property
    def busy(self) -> bool:
        """S_busy when the user is using the phone, the CPU is loaded, memory is
        short, or the battery is low and not charging."""
        return (
            self.in_use
            or self.cpu_load >= BUSY_CPU_LOAD
            or self.free_memory_frac < LOW_MEMORY_FRAC
            or (self.battery_frac < LOW_BATTERY_FRAC and not self.charging)
        )

    def features(self) -> list[float]:
        """The five reported quantities as floats in [0, 1] (the DQN's input)."""
        return [
            float(self.free_memory_frac),
            float(self.battery_frac),
            float(self.in_use),
            float(self.charging),
            float(self.cpu_load),
        ]

    def to_json(self) -> dict:
        return {**asdict(self), "busy": self.busy}

    @classmethod
    def from_state(cls, device: int, state: ResourceState) -> DeviceStatus:
        """The report of a device whose resources are an ``edgetrain.devices`` state."""
        return cls(
            device,
            state.free_memory_frac,
            state.battery_pct / 100.0,
            state.in_use,
            state.charging,
            state.cpu_load,
        )


def random_statuses(
    n: int, rng: np.random.Generator, max_busy_share: float = 0.5
) -> list[DeviceStatus]:
    """The random resource allocation of MDLdroid §4.2: at most ``max_busy_share``
    of the devices are busy (uniformly chosen count and members), the rest free
    with random but healthy resources."""
    k_max = int(np.floor(n * max_busy_share))
    k = int(rng.integers(0, k_max + 1))
    busy = set(rng.choice(n, size=k, replace=False).tolist()) if k else set()
    out = []
    for d in range(n):
        mem = float(rng.uniform(0.3, 0.9))
        bat = float(rng.uniform(0.3, 1.0))
        cpu = float(rng.uniform(0.0, 0.5))
        if d in busy:
            # one of the busy causes, at random
            cause = int(rng.integers(0, 3))
            if cause == 0:
                out.append(DeviceStatus(d, mem, bat, True, False, cpu))
            elif cause == 1:
                out.append(DeviceStatus(d, mem, bat, False, False, float(rng.uniform(0.8, 1.0))))
            else:
                out.append(DeviceStatus(d, float(rng.uniform(0.0, 0.09)), bat, False, False, cpu))
        else:
            out.append(DeviceStatus(d, mem, bat, False, bool(rng.random() < 0.3), cpu))
    return out


def busy_set(statuses: Sequence[DeviceStatus]) -> frozenset[int]:
    return frozenset(s.device for s in statuses if s.busy)


def as_free(status: DeviceStatus) -> DeviceStatus:
    """The same device's report with every busy cause cleared, its other readings kept.

    The reference for "latency overhead due to busy condition" (MDLdroid abstract):
    the time of an allocation minus the time of the same devices all free. Clearing
    moves each busy reading just inside the healthy range that :func:`random_statuses`
    draws free devices from (CPU ≤ 0.5, memory and battery ≥ 0.3), so a report that
    is already free is returned unchanged.
    """
    if not status.busy:
        return status
    return replace(
        status,
        in_use=False,
        cpu_load=min(status.cpu_load, 0.5),
        free_memory_frac=max(status.free_memory_frac, 0.3),
        battery_frac=max(status.battery_frac, 0.3),
    )
