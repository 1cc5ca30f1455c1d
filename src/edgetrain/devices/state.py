"""``ResourceState``: the five quantities a device reports, and when they make it busy.

MDLdroid §3.3.1 selects "free memory, battery, in-use (whether under intensive use),
charge (whether charging), cpu (current CPU)" to decide whether a device is in S_busy or
S_free, and §4.2 evaluates with "a maximum of 50% of the devices being in busy state".
The paper does not print the thresholds; ours are in :class:`BusyThresholds`, each with
its reason, and match ``edgetrain.decentralized.resources``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from edgetrain.devices.profile import DeviceProfile
from edgetrain.errors import ConfigError


@dataclass(frozen=True)
class BusyThresholds:
    """When a device counts as busy (MDLdroid §3.3.1's five quantities)."""

    # Android's low-memory killer reclaims background apps well before free memory
    # reaches 10% of RAM; below it training would page (our conservative choice).
    min_free_memory_frac: float = 0.10
    # AOSP config_lowBatteryWarningLevel = 15 (frameworks/base core/res config.xml).
    min_battery_pct: float = 15.0
    # A CPU already 80% loaded by other apps leaves too little for training/aggregation.
    max_cpu_load: float = 0.80


DEFAULT_THRESHOLDS = BusyThresholds()


@dataclass(frozen=True)
class ResourceState:
    """One device's resource report at one instant."""

    free_memory_bytes: int
    memory_bytes: int
    battery_pct: float
    in_use: bool = False
    charging: bool = False
    cpu_load: float = 0.0

    def __post_init__(self) -> None:
        if not 0 <= self.free_memory_bytes <= self.memory_bytes:
            raise ConfigError("free_memory_bytes must be in [0, memory_bytes]")
        if not 0.0 <= self.battery_pct <= 100.0:
            raise ConfigError(f"battery_pct must be in [0, 100], got {self.battery_pct}")
        if not 0.0 <= self.cpu_load <= 1.0:
            raise ConfigError(f"cpu_load must be in [0, 1], got {self.cpu_load}")

    @property
    def free_memory_frac(self) -> float:
        return self.free_memory_bytes / self.memory_bytes

    def features(self) -> list[float]:
        """The five reported quantities as floats in [0, 1] (a scheduler's input)."""
        return [
            self.free_memory_frac,
            self.battery_pct / 100.0,
            float(self.in_use),
            float(self.charging),
            float(self.cpu_load),
        ]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def busy_reasons(
    state: ResourceState, thresholds: BusyThresholds = DEFAULT_THRESHOLDS
) -> list[str]:
    """Which of the five quantities make ``state`` busy (empty list: free)."""
    reasons = []
    if state.in_use:
        reasons.append("in_use")
    if state.cpu_load >= thresholds.max_cpu_load:
        reasons.append("cpu")
    if state.free_memory_frac < thresholds.min_free_memory_frac:
        reasons.append("memory")
    if state.battery_pct < thresholds.min_battery_pct and not state.charging:
        reasons.append("battery")
    return reasons


def is_busy(state: ResourceState, thresholds: BusyThresholds = DEFAULT_THRESHOLDS) -> bool:
    """S_busy: in intensive use, CPU loaded, memory short, or battery low and not charging."""
    return bool(busy_reasons(state, thresholds))


def random_resource_states(
    profiles: Sequence[DeviceProfile],
    max_busy_share: float = 0.5,
    seed: int | np.random.Generator = 0,
    thresholds: BusyThresholds = DEFAULT_THRESHOLDS,
) -> list[ResourceState]:
    """MDLdroid §4.2's random allocation: at most ``max_busy_share`` of devices busy.

    The busy count is uniform in [0, floor(share x n)], members uniform; a busy device gets
    one random busy cause, a free one healthy values within ``thresholds``.
    """
    if not 0.0 <= max_busy_share <= 1.0:
        raise ConfigError(f"max_busy_share must be in [0, 1], got {max_busy_share}")
    rng = np.random.default_rng(seed)
    n = len(profiles)
    k = int(rng.integers(0, int(np.floor(n * max_busy_share)) + 1))
    busy = set(rng.choice(n, size=k, replace=False).tolist()) if k else set()
    out = []
    for i, p in enumerate(profiles):
        mem_lo = thresholds.min_free_memory_frac
        free = int(p.memory_bytes * rng.uniform(mem_lo + 0.05, 0.9))
        battery = float(rng.uniform(max(thresholds.min_battery_pct + 5.0, 20.0), 100.0))
        cpu = float(rng.uniform(0.0, thresholds.max_cpu_load * 0.6))
        in_use = False
        charging = bool(rng.random() < 0.3)
        if i in busy:
            cause = int(rng.integers(0, 4))
            if cause == 0:
                in_use = True
            elif cause == 1:
                cpu = float(rng.uniform(thresholds.max_cpu_load, 1.0))
            elif cause == 2:
                free = int(p.memory_bytes * rng.uniform(0.0, mem_lo * 0.9))
            else:
                battery = float(rng.uniform(0.0, thresholds.min_battery_pct * 0.9))
                charging = False
        out.append(ResourceState(free, p.memory_bytes, battery, in_use, charging, cpu))
    return out
