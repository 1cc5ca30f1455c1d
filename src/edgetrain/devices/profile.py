"""``DeviceProfile``: what one phone offers a training job, and where each figure comes from.

A profile is plain, frozen data. Everything that *costs* (time, energy, memory pressure)
is computed elsewhere from these fields, so every simulated number traces back to one
constant here, and each constant names its source in ``sources`` (a paper table, a data
sheet, or ``derived: ...`` when we had to compute it from public specs).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from edgetrain.errors import ConfigError

GIB = 1024**3
MIB = 1024**2
KIB = 1024

SWAP_KINDS = ("zram", "disk", "none")

# Linux page-reclaim watermarks (mm/page_alloc.c, init_per_zone_wmark_min and
# __setup_per_zone_wmarks): min_free_kbytes = sqrt(16 * lowmem_kbytes), clamped to
# [128 KiB, 256 MiB] (kernel >= 5.x); the gap min->low->high is
# max(min/4, managed * watermark_scale_factor / 10000) with watermark_scale_factor = 10.
_MIN_FREE_KBYTES_FLOOR = 128
_MIN_FREE_KBYTES_CEIL = 262_144
_WATERMARK_SCALE_FACTOR = 10


@dataclass(frozen=True)
class Watermarks:
    """The kernel's three free-page thresholds for one memory zone, in bytes."""

    min_bytes: int
    low_bytes: int
    high_bytes: int


def kernel_watermarks(ram_bytes: int) -> Watermarks:
    """Linux min/low/high watermarks for a device with ``ram_bytes`` of RAM.

    kswapd starts reclaiming below ``low`` and stops above ``high``; FedHybrid §4.4.2
    subtracts ``Watermark_high`` (times a swap-kind factor) from MemAvailable to get the
    memory that is safe to plan with.
    """
    if ram_bytes <= 0:
        raise ConfigError(f"ram_bytes must be positive, got {ram_bytes}")
    ram_kb = ram_bytes // KIB
    min_kb = int(math.isqrt(16 * ram_kb))
    min_kb = max(_MIN_FREE_KBYTES_FLOOR, min(_MIN_FREE_KBYTES_CEIL, min_kb))
    gap_kb = max(min_kb // 4, ram_kb * _WATERMARK_SCALE_FACTOR // 10_000)
    return Watermarks(min_kb * KIB, (min_kb + gap_kb) * KIB, (min_kb + 2 * gap_kb) * KIB)


# FedHybrid §4.4.2: M_safe = M_avail - alpha * Watermark_high, alpha = 1 for disk swap and
# 2 for ZRAM (ZRAM's pool lives in DRAM and triggers reclaim earlier). No swap: alpha = 1
# (reclaim still starts at the watermark; there is just nowhere to push anonymous pages).
SWAP_ALPHA = {"disk": 1.0, "zram": 2.0, "none": 1.0}


@dataclass(frozen=True)
class DeviceProfile:
    """One device's capacity, speed, links, battery and power draw.

    ``compute_flops`` is *sustained training* FLOP/s, not a peak; phones derive it from
    their CPU clusters (see ``edgetrain.devices.phones``). ``low_watermark_bytes`` is the
    kernel *high* watermark that FedHybrid §4.4.2 subtracts from available memory (the
    level below which background reclaim keeps running and the low-memory killer is near).
    Power figures feed :func:`edgetrain.devices.energy.energy_j`.
    """

    name: str
    memory_bytes: int
    compute_flops: float
    link_bandwidth_bps: float
    battery_mah: float
    swap_kind: str
    low_watermark_bytes: int
    power_compute_w: float
    power_idle_w: float
    power_tx_w: float
    power_rx_w: float
    battery_voltage: float = 3.85
    cores: int = 8
    device_class: str = ""
    bluetooth_bps: float | None = None
    wifi_direct_bps: float | None = None
    ble_bps: float | None = None
    # Per non-default link: (tx watts, rx watts); the default link uses power_tx_w/power_rx_w.
    link_power_w: dict[str, tuple[float, float]] = field(default_factory=dict)
    swap_bytes: int = 0
    model: str = ""
    soc: str = ""
    catalogue: str = ""
    sources: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        positive = {
            "memory_bytes": self.memory_bytes,
            "compute_flops": self.compute_flops,
            "link_bandwidth_bps": self.link_bandwidth_bps,
            "battery_mah": self.battery_mah,
            "battery_voltage": self.battery_voltage,
            "cores": self.cores,
        }
        for key, value in positive.items():
            if not value > 0:
                raise ConfigError(f"device {self.name!r}: {key} must be > 0, got {value!r}")
        for key in ("power_compute_w", "power_idle_w", "power_tx_w", "power_rx_w"):
            if getattr(self, key) < 0:
                raise ConfigError(f"device {self.name!r}: {key} must be >= 0")
        if self.swap_kind not in SWAP_KINDS:
            raise ConfigError(
                f"device {self.name!r}: swap_kind {self.swap_kind!r} is not one of {SWAP_KINDS}"
            )
        if not 0 <= self.low_watermark_bytes < self.memory_bytes:
            raise ConfigError(
                f"device {self.name!r}: low_watermark_bytes must be in [0, memory_bytes)"
            )

    def __hash__(self) -> int:
        # the dict fields make the generated hash fail; equal profiles share these fields
        return hash((self.name, self.memory_bytes, self.compute_flops, self.battery_mah))

    @property
    def memory_gb(self) -> float:
        """RAM in GiB (marketing "GB" on phones means GiB of DRAM)."""
        return self.memory_bytes / GIB

    @property
    def battery_energy_j(self) -> float:
        """Full-charge energy: mAh * V * 3.6 J/mWh."""
        return self.battery_mah * self.battery_voltage * 3.6

    def safe_memory(self, available_bytes: float) -> float:
        """FedHybrid §4.4.2 ``M_safe = M_avail - alpha * Watermark_high`` (never below 0)."""
        return max(0.0, available_bytes - SWAP_ALPHA[self.swap_kind] * self.low_watermark_bytes)

    def link_bps(self, link: str) -> float:
        """Bandwidth of ``link`` ("wifi", "bluetooth", "wifi_direct", "ble") in bits/s."""
        table = {
            "wifi": self.link_bandwidth_bps,
            "bluetooth": self.bluetooth_bps,
            "wifi_direct": self.wifi_direct_bps,
            "ble": self.ble_bps,
        }
        if link not in table:
            raise ConfigError(f"unknown link {link!r}; expected one of {sorted(table)}")
        bps = table[link]
        if bps is None:
            known = sorted(k for k, v in table.items() if v is not None)
            raise ConfigError(f"device {self.name!r} has no {link!r} link; it has {known}")
        return float(bps)

    def link_power(self, link: str) -> tuple[float, float]:
        """(tx W, rx W) on ``link``; the default link ("wifi") uses ``power_tx_w/power_rx_w``."""
        self.link_bps(link)  # validates the name and presence
        if link == "wifi":
            return (self.power_tx_w, self.power_rx_w)
        if link not in self.link_power_w:
            raise ConfigError(f"device {self.name!r} has no power figures for link {link!r}")
        tx, rx = self.link_power_w[link]
        return (float(tx), float(rx))

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly dict (tuples become lists)."""
        out = asdict(self)
        out["link_power_w"] = {k: list(v) for k, v in self.link_power_w.items()}
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DeviceProfile:
        """Inverse of :meth:`to_dict`; unknown keys are a :class:`ConfigError`."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ConfigError(f"unknown DeviceProfile fields {unknown}; expected {sorted(names)}")
        data = dict(data)
        if "link_power_w" in data:
            data["link_power_w"] = {
                k: (float(v[0]), float(v[1])) for k, v in data["link_power_w"].items()
            }
        try:
            return cls(**data)
        except TypeError as exc:
            raise ConfigError(f"incomplete DeviceProfile: {exc}") from exc
