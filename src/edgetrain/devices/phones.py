"""Phone catalogues from the papers: MDLdroid Table 2 and FedHybrid Table 2.

RAM, SoC, storage and (MDLdroid) battery come from the papers' tables. What the papers
omit is taken from the phone's or SoC's public specification and marked ``derived`` in the
profile's ``sources``:

* ``compute_flops`` (sustained training FLOP/s) = ``TRAINING_EFFICIENCY`` x the CPU's peak
  FP32 FLOP/s, where the peak sums ``cores x GHz x FP32 FLOP/cycle`` over the SoC's CPU
  clusters (core counts and clocks: the vendors' SoC spec sheets; FLOP/cycle: the Arm
  core's NEON FMA width, see ``FLOP_PER_CYCLE``).
* battery capacity for FedHybrid's phones: the manufacturer's spec sheet.
* links and power draw: see the constants below.
"""

from __future__ import annotations

from dataclasses import dataclass

from edgetrain.devices.profile import GIB, DeviceProfile, kernel_watermarks
from edgetrain.errors import ConfigError

# FP32 FLOP per cycle per core from the Arm core's Advanced SIMD (NEON) FMA datapath
# (Arm Cortex-A technical reference manuals; derived): 2 x 128-bit FMA pipes on the
# A72..A715 "big" cores = 2 pipes x 4 lanes x 2 = 16; 4 pipes on Cortex-X1/X2/X3 = 32;
# a 64-bit FMA datapath on A53/A55 = 4; A510 pairs share a 2 x 128-bit complex = 8 per core.
FLOP_PER_CYCLE = {
    "A53": 4,
    "A55": 4,
    "A510": 8,
    "A72": 16,
    "A73": 16,
    "A75": 16,
    "A76": 16,
    "A77": 16,
    "A710": 16,
    "A715": 16,
    "X1": 32,
    "X2": 32,
    "X3": 32,
}

# Das, Kwon, Chauhan, Mascolo, "Enabling On-Device Smartphone GPU based Training: Lessons
# Learned" (arXiv:2202.10100, 2022): MNN training on the CPUs of Snapdragon 8-series phones
# reaches 15-30 GFLOP/s. Those CPUs peak at ~190-280 GFLOP/s by the formula above, so
# sustained training runs at ~10% of CPU peak (derived).
TRAINING_EFFICIENCY = 0.10

# Default link: FedHybrid Fig. 20(c) measures plan transfers "connected 100Mbps WIFI".
WIFI_BPS = 100e6
# MDLdroid §3.1 aggregates models over Bluetooth Socket (BR/EDR RFCOMM): Bluetooth Core
# Spec 2.0+EDR gives 3 Mbit/s gross, 2.1 Mbit/s practical throughput.
BLUETOOTH_BPS = 2.1e6
# MDLdroid §6 proposes Wi-Fi Direct [36]; Wi-Fi Alliance: Wi-Fi Direct (802.11n) "up to 250 Mbps".
WIFI_DIRECT_BPS = 250e6
# MDLdroid monitors resources over BLE; Bluetooth Core Spec 4.0 LE 1M PHY = 1 Mbit/s raw.
BLE_BPS = 1e6

# Radio power (derived, order of magnitude): Wi-Fi active transmit ~1.2 W / receive ~0.9 W
# (Carroll & Heiser, USENIX ATC 2010; Huang et al., MobiSys 2012, Wi-Fi model);
# Bluetooth BR/EDR radios draw ~30 mA at 3.3 V ~ 0.1 W; BLE ~15 mA at 3 V ~ 0.05 W
# (TI CC2541 data sheet: 18.2 mA TX at 0 dBm, 17.9 mA RX).
WIFI_TX_W, WIFI_RX_W = 1.2, 0.9
BLUETOOTH_TX_W, BLUETOOTH_RX_W = 0.10, 0.10
BLE_TX_W, BLE_RX_W = 0.055, 0.054
# Screen off, awake, CPU idle (derived, Carroll & Heiser 2010 baseline ~0.25 W).
IDLE_W = 0.25
# Nominal Li-ion polymer cell voltage printed on 2017-2023 phone batteries (spec sheets).
CELL_VOLTAGE = 3.85
# FedHybrid §5.2: devices run "standardized ZRAM ... 1 GB of memory for swap space".
ZRAM_BYTES = 1 * GIB


@dataclass(frozen=True)
class _Spec:
    """One row of a paper table plus the public figures it lacks."""

    slug: str
    model: str
    catalogue: str
    ram_gb: int
    soc: str
    clusters: tuple[tuple[int, float, str], ...]  # (cores, GHz, core type)
    battery_mah: float
    battery_source: str
    cpu_power_w: float  # sustained all-core CPU power (derived, see _POWER_NOTE)
    table_source: str
    year: int = 0


_POWER_NOTE = (
    "derived: sustained all-core CPU power of this SoC class in published SoC power "
    "measurements (AnandTech SoC reviews: ~3-5 W flagship, ~2.5 W mid-range)"
)

_MD = "MDLdroid Table 2"
_FH = "FedHybrid Table 2"
_SPECS: tuple[_Spec, ...] = (
    # --- MDLdroid Table 2: Device, HD, RAM, CPU, Battery(mAh) ---
    _Spec("oneplus-6", "OnePlus 6", "mdldroid", 8, "Snapdragon 845",
          ((4, 2.8, "A75"), (4, 1.77, "A55")), 3300, _MD, 3.5, _MD, 2018),
    _Spec("pixel-2-xl", "Pixel 2 XL", "mdldroid", 4, "Snapdragon 835",
          ((4, 2.45, "A73"), (4, 1.9, "A53")), 3520, _MD, 3.0, _MD, 2017),
    _Spec("honor-8", "Huawei Honor 8", "mdldroid", 4, "HiSilicon Kirin 950",
          ((4, 2.3, "A72"), (4, 1.8, "A53")), 3000, _MD, 3.0, _MD, 2016),
    # --- FedHybrid Table 2: Year, Mem, SoC, OS (battery from spec sheets) ---
    _Spec("galaxy-s23-ultra", "Samsung Galaxy S23 Ultra", "fedhybrid", 8,
          "Snapdragon 8 Gen 2",
          ((1, 3.36, "X3"), (2, 2.8, "A715"), (2, 2.8, "A710"), (3, 2.0, "A510")),
          5000, "derived: Samsung spec sheet", 4.5, _FH, 2023),
    _Spec("galaxy-s22", "Samsung Galaxy S22", "fedhybrid", 8, "Snapdragon 8 Gen 1",
          ((1, 3.0, "X2"), (3, 2.5, "A710"), (4, 1.8, "A510")),
          3700, "derived: Samsung spec sheet", 5.0, _FH, 2022),
    _Spec("oneplus-10-pro", "OnePlus 10 Pro", "fedhybrid", 12, "Snapdragon 8 Gen 1",
          ((1, 3.0, "X2"), (3, 2.5, "A710"), (4, 1.8, "A510")),
          5000, "derived: OnePlus spec sheet", 5.0, _FH, 2022),
    _Spec("pixel-6", "Google Pixel 6", "fedhybrid", 8, "Google Tensor",
          ((2, 2.8, "X1"), (2, 2.25, "A76"), (4, 1.8, "A55")),
          4614, "derived: Google spec sheet", 4.5, _FH, 2021),
    _Spec("redmi-note-10", "Xiaomi Redmi Note 10", "fedhybrid", 6, "Snapdragon 678",
          ((2, 2.2, "A76"), (6, 1.7, "A55")),
          5000, "derived: Xiaomi spec sheet", 2.5, _FH, 2021),
    _Spec("honor-v30-pro", "Honor V30 Pro", "fedhybrid", 8, "Kirin 990",
          ((2, 2.86, "A76"), (2, 2.36, "A76"), (4, 1.95, "A55")),
          4100, "derived: Honor spec sheet", 3.5, _FH, 2019),
    _Spec("realme-gt-neo-2", "Realme GT Neo 2", "fedhybrid", 8, "Snapdragon 870",
          ((1, 3.2, "A77"), (3, 2.42, "A77"), (4, 1.8, "A55")),
          5000, "derived: Realme spec sheet", 4.0, _FH, 2021),
)  # fmt: skip


def peak_cpu_flops(clusters: tuple[tuple[int, float, str], ...]) -> float:
    """Peak FP32 FLOP/s of CPU clusters given as (cores, GHz, core type)."""
    total = 0.0
    for count, ghz, core in clusters:
        if core not in FLOP_PER_CYCLE:
            raise ConfigError(f"unknown core type {core!r}; known: {sorted(FLOP_PER_CYCLE)}")
        total += count * ghz * 1e9 * FLOP_PER_CYCLE[core]
    return total


def _profile(spec: _Spec) -> DeviceProfile:
    memory = spec.ram_gb * GIB
    peak = peak_cpu_flops(spec.clusters)
    clusters = " + ".join(f"{n}x{c}@{g}GHz" for n, g, c in spec.clusters)
    sources = {
        "memory_bytes": spec.table_source,
        "soc": spec.table_source,
        "year": f"{spec.year} (release year; {spec.table_source if spec.catalogue == 'fedhybrid' else 'derived: spec sheet'})",
        "compute_flops": (
            f"derived: {TRAINING_EFFICIENCY:.0%} (Das et al. 2022, MNN CPU training 15-30 "
            f"GFLOP/s) of CPU peak {peak / 1e9:.1f} GFLOP/s = {clusters} (SoC spec sheet)"
        ),
        "battery_mah": spec.battery_source,
        "battery_voltage": "derived: nominal Li-ion cell voltage on phone spec sheets",
        "link_bandwidth_bps": "FedHybrid Fig. 20(c): 100 Mbps Wi-Fi",
        "bluetooth_bps": "derived: Bluetooth 2.0+EDR practical 2.1 Mbit/s (MDLdroid uses BS)",
        "wifi_direct_bps": "derived: Wi-Fi Alliance, Wi-Fi Direct up to 250 Mbps",
        "ble_bps": "derived: Bluetooth 4.0 LE 1M PHY",
        "swap_kind": "FedHybrid §5.2: standardized ZRAM, 1 GB"
        if spec.catalogue == "fedhybrid"
        else "derived: Android default swap is ZRAM (AOSP low-RAM/memory docs)",
        "low_watermark_bytes": "derived: Linux high watermark (mm/page_alloc.c) for this RAM",
        "power_compute_w": _POWER_NOTE,
        "power_idle_w": "derived: Carroll & Heiser 2010 idle baseline",
        "power_tx_w": "derived: Carroll & Heiser 2010 / Huang et al. 2012 Wi-Fi",
        "power_rx_w": "derived: Carroll & Heiser 2010 / Huang et al. 2012 Wi-Fi",
    }
    return DeviceProfile(
        name=spec.slug,
        memory_bytes=memory,
        compute_flops=peak * TRAINING_EFFICIENCY,
        link_bandwidth_bps=WIFI_BPS,
        battery_mah=float(spec.battery_mah),
        swap_kind="zram",
        low_watermark_bytes=kernel_watermarks(memory).high_bytes,
        power_compute_w=spec.cpu_power_w,
        power_idle_w=IDLE_W,
        power_tx_w=WIFI_TX_W,
        power_rx_w=WIFI_RX_W,
        battery_voltage=CELL_VOLTAGE,
        cores=sum(n for n, _, _ in spec.clusters),
        device_class=f"phone-{spec.ram_gb}GB",
        bluetooth_bps=BLUETOOTH_BPS,
        wifi_direct_bps=WIFI_DIRECT_BPS,
        ble_bps=BLE_BPS,
        link_power_w={
            "bluetooth": (BLUETOOTH_TX_W, BLUETOOTH_RX_W),
            "wifi_direct": (WIFI_TX_W, WIFI_RX_W),
            "ble": (BLE_TX_W, BLE_RX_W),
        },
        swap_bytes=ZRAM_BYTES,
        model=spec.model,
        soc=spec.soc,
        catalogue=spec.catalogue,
        sources=sources,
    )


_PHONES: tuple[DeviceProfile, ...] = tuple(_profile(s) for s in _SPECS)
CATALOGUES = ("mdldroid", "fedhybrid")


def phones(catalogue: str | None = None) -> list[DeviceProfile]:
    """The phones of one paper's table (``"mdldroid"`` / ``"fedhybrid"``), or both."""
    if catalogue is None:
        return list(_PHONES)
    key = catalogue.lower()
    if key not in CATALOGUES:
        raise ConfigError(f"unknown phone catalogue {catalogue!r}; expected one of {CATALOGUES}")
    return [p for p in _PHONES if p.catalogue == key]


def get_device(name: str) -> DeviceProfile:
    """A catalogue phone by slug (``"pixel-2-xl"``) or model name (``"Pixel 2 XL"``)."""
    key = name.strip().lower()
    for p in _PHONES:
        if key in (p.name, p.model.lower()):
            return p
    names = ", ".join(p.name for p in _PHONES)
    raise ConfigError(f"unknown device {name!r}; known devices: {names}")
