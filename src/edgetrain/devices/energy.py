"""Energy and battery: a linear power-state model over a device profile.

Energy = sum over states of (power in that state x time in it). Time on a link is
bytes x 8 / link bandwidth. This is the model MDLdroid's energy-balance objective (Eq. 6)
and battery plots (Fig. 13) are about; its constants live in the profile with their sources.
Battery capacity converts with 1 mAh = 3.6 x V joules.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from edgetrain.devices.profile import DeviceProfile
from edgetrain.errors import ConfigError

LINKS = ("wifi", "bluetooth", "wifi_direct", "ble")


def transfer_time_s(profile: DeviceProfile, n_bytes: float, link: str = "wifi") -> float:
    """Seconds to move ``n_bytes`` over ``link`` at the profile's bandwidth."""
    if n_bytes < 0:
        raise ConfigError(f"n_bytes must be >= 0, got {n_bytes}")
    return 8.0 * n_bytes / profile.link_bps(link)


def energy_j(
    profile: DeviceProfile,
    compute_s: float = 0.0,
    tx_bytes: float = 0.0,
    rx_bytes: float = 0.0,
    idle_s: float = 0.0,
    link: str = "wifi",
) -> float:
    """Joules spent computing ``compute_s``, sending/receiving bytes on ``link``, idling ``idle_s``."""
    for key, value in (
        ("compute_s", compute_s),
        ("tx_bytes", tx_bytes),
        ("rx_bytes", rx_bytes),
        ("idle_s", idle_s),
    ):
        if value < 0:
            raise ConfigError(f"{key} must be >= 0, got {value}")
    tx_w, rx_w = profile.link_power(link)
    bps = profile.link_bps(link)
    return (
        profile.power_compute_w * compute_s
        + profile.power_idle_w * idle_s
        + tx_w * 8.0 * tx_bytes / bps
        + rx_w * 8.0 * rx_bytes / bps
    )


def battery_drain(profile: DeviceProfile, energy_j: float) -> float:
    """mAh drawn from the profile's battery by ``energy_j`` joules (1 mAh = 3.6 x V J)."""
    if energy_j < 0:
        raise ConfigError(f"energy_j must be >= 0, got {energy_j}")
    return energy_j / (3.6 * profile.battery_voltage)


@dataclass
class Battery:
    """A battery's charge over simulated time; ``level_mah`` never leaves [0, capacity]."""

    profile: DeviceProfile
    level_mah: float | None = None
    consumed_mah: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        if self.level_mah is None:
            self.level_mah = self.profile.battery_mah
        if not 0 <= self.level_mah <= self.profile.battery_mah:
            raise ConfigError(
                f"battery level {self.level_mah} mAh outside [0, {self.profile.battery_mah}]"
            )

    @property
    def capacity_mah(self) -> float:
        return self.profile.battery_mah

    @property
    def percent(self) -> float:
        assert self.level_mah is not None
        return 100.0 * self.level_mah / self.profile.battery_mah

    @property
    def empty(self) -> bool:
        return self.level_mah == 0.0

    def drain(self, energy: float) -> float:
        """Spend ``energy`` joules; returns the mAh actually drawn (capped at what is left)."""
        assert self.level_mah is not None
        want = battery_drain(self.profile, energy)
        drawn = min(want, self.level_mah)
        self.level_mah -= drawn
        self.consumed_mah += drawn
        return drawn

    def spend(self, **work: float | str) -> float:
        """Drain the energy of ``energy_j(profile, **work)``; returns mAh drawn."""
        return self.drain(energy_j(self.profile, **work))  # type: ignore[arg-type]

    def charge(self, mah: float) -> float:
        """Add up to ``mah`` (capped at capacity); returns the mAh actually added."""
        if mah < 0:
            raise ConfigError(f"charge must be >= 0 mAh, got {mah}")
        assert self.level_mah is not None
        added = min(mah, self.profile.battery_mah - self.level_mah)
        self.level_mah += added
        return added
