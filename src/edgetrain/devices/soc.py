"""SoC targets with an explicit memory hierarchy (L1 / L2 / L3) for static memory planning.

``pulp`` is the PULP cluster TrainDeeploy trains on (§V, Fig. 4); ``stm32`` is an
STM32F7-class MCU, the target of TTE in TrainDeeploy's Table II. The memory planner tiles
tensors into these tiers and moves them with DMA at ``dma_bytes_per_cycle``; the compute
model uses ``fpus x core_flop_per_cycle`` for the cores and ``rows x cols`` FMAs per cycle
for a GEMM array.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from edgetrain.devices.profile import KIB, MIB
from edgetrain.errors import ConfigError


@dataclass(frozen=True)
class MemoryTier:
    """One level of the hierarchy; ``writable=False`` marks flash that holds constants only."""

    name: str
    capacity_bytes: int
    bandwidth_bytes_per_cycle: float
    latency_cycles: int
    writable: bool = True

    def __post_init__(self) -> None:
        if self.capacity_bytes <= 0 or self.bandwidth_bytes_per_cycle <= 0:
            raise ConfigError(f"memory tier {self.name!r}: capacity and bandwidth must be > 0")
        if self.latency_cycles < 0:
            raise ConfigError(f"memory tier {self.name!r}: latency_cycles must be >= 0")


@dataclass(frozen=True)
class SoCTarget:
    """A microcontroller-class training target: memory tiers (fastest first) and compute."""

    name: str
    tiers: tuple[MemoryTier, ...]
    cores: int
    fpus: int
    freq_hz: float
    gemm_array: tuple[int, int] | None
    core_flop_per_cycle: float
    dma_bytes_per_cycle: dict[str, float]
    sources: dict[str, str]
    description: str = ""

    def __post_init__(self) -> None:
        if not self.tiers:
            raise ConfigError(f"SoC {self.name!r} needs at least one memory tier")
        names = [t.name for t in self.tiers]
        if len(set(names)) != len(names):
            raise ConfigError(f"SoC {self.name!r}: duplicate tier names {names}")
        if self.cores <= 0 or self.fpus <= 0 or self.freq_hz <= 0:
            raise ConfigError(f"SoC {self.name!r}: cores, fpus and freq_hz must be > 0")

    def __hash__(self) -> int:
        # dma_bytes_per_cycle / sources are dicts; equal targets share these fields
        return hash((self.name, self.tiers, self.cores, self.fpus, self.freq_hz))

    def tier(self, name: str) -> MemoryTier:
        """The tier called ``name`` (case-insensitive: ``"l2"`` finds ``"L2"``)."""
        for t in self.tiers:
            if t.name.lower() == name.lower():
                return t
        raise ConfigError(
            f"SoC {self.name!r} has no memory tier {name!r}; tiers: {[t.name for t in self.tiers]}"
        )

    @property
    def core_peak_flops(self) -> float:
        """Peak FLOP/s of the cores' FPUs (FPUs are shared, so FPUs, not cores, bound it)."""
        return self.fpus * self.core_flop_per_cycle * self.freq_hz

    @property
    def gemm_peak_flops(self) -> float:
        """Peak FLOP/s of the GEMM array: rows x cols FMAs (2 FLOP each) per cycle; 0 if none."""
        if self.gemm_array is None:
            return 0.0
        rows, cols = self.gemm_array
        return 2.0 * rows * cols * self.freq_hz

    @property
    def total_memory_bytes(self) -> int:
        return sum(t.capacity_bytes for t in self.tiers)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["tiers"] = [asdict(t) for t in self.tiers]
        out["gemm_array"] = list(self.gemm_array) if self.gemm_array else None
        return out


_TD = "TrainDeeploy §V / Fig. 4"

# PULP cluster of TrainDeeploy (§V, Fig. 4): 8 RV32IMFCXpulp cores sharing 4 FPUs, 128 KB
# multi-banked L1 TCDM with single-cycle access, 2 MB L2 SRAM, 32 MB L3 HyperRAM over
# HyperBus, RedMulE 12x4 FP32 GEMM array, 360 MHz for the whole SoC.
PULP = SoCTarget(
    name="pulp",
    tiers=(
        # 16 banks x 32 bit (banking factor 2 for 8 cores, PULP cluster design; derived)
        MemoryTier("L1", 128 * KIB, 64.0, 1),
        # cluster DMA moves 64 bit per cycle between L2 and L1 (PULP AXI width; derived);
        # ~10 cycles to reach L2 across the cluster/SoC interconnect (derived)
        MemoryTier("L2", 2 * MIB, 8.0, 10),
        # HyperRAM on HyperBus: 8-bit DDR at 166 MHz = 333 MB/s (Infineon S27KS HyperRAM
        # data sheet) = 0.925 B per 360 MHz cycle; ~36-72 ns initial latency ~ 26 cycles
        MemoryTier("L3", 32 * MIB, 333e6 / 360e6, 26),
    ),
    cores=8,
    fpus=4,
    freq_hz=360e6,
    gemm_array=(12, 4),
    core_flop_per_cycle=2.0,  # one FP32 FMA per FPU per cycle (RV32F fmadd.s)
    dma_bytes_per_cycle={"l3_l2": 333e6 / 360e6, "l2_l1": 8.0},
    sources={
        "L1": f"{_TD}: 128 KB TCDM, single-cycle",
        "L2": f"{_TD}: 2 MB L2 SRAM",
        "L3": f"{_TD}: 32 MB HyperRAM",
        "cores": f"{_TD}: 8 RISC-V cores",
        "fpus": f"{_TD}: share four FPUs",
        "freq_hz": f"{_TD}: 360 MHz",
        "gemm_array": f"{_TD}: RedMulE 12x4 FP32 systolic array",
        "core_flop_per_cycle": "derived: FMA = 2 FLOP per FPU per cycle",
        "bandwidth": "derived: PULP cluster banking / AXI width; HyperRAM data sheet",
        "dma_bytes_per_cycle": "derived: HyperBus 333 MB/s; cluster DMA 64 bit/cycle",
        "sustained_flop_per_cycle": "TrainDeeploy Table II: 4.6 FLOP/cycle (CCT), 13.4 (Deep-AE)",
    },
    description="PULP cluster (TrainDeeploy): 8 cores / 4 FPUs, RedMulE 12x4, 360 MHz",
)

# STM32F746 (Cortex-M7), the STM32F7 that TTE trains on (TrainDeeploy Table II:
# "320 KB + 1 MB" SRAM + Flash). ST DS10916 / RM0385: 216 MHz, single-precision FPU,
# 64 KB DTCM (0-wait, 64-bit), 240 KB SRAM1 + 16 KB SRAM2, 1 MB Flash read through a
# 256-bit ART accelerator line with 7 wait states at 216 MHz.
STM32 = SoCTarget(
    name="stm32",
    tiers=(
        MemoryTier("L1", 64 * KIB, 8.0, 1),  # DTCM: 64-bit, zero wait state
        MemoryTier("L2", 256 * KIB, 4.0, 2),  # SRAM1+SRAM2 over 32-bit AHB / DMA
        # Flash: 32 B line per 8 cycles (1 + 7 WS) = 4 B/cycle; holds frozen constants only
        MemoryTier("L3", 1 * MIB, 4.0, 8, writable=False),
    ),
    cores=1,
    fpus=1,
    freq_hz=216e6,
    gemm_array=None,
    core_flop_per_cycle=2.0,  # FPv5 VFMA.F32: one FMA per cycle
    dma_bytes_per_cycle={"l3_l2": 4.0, "l2_l1": 4.0},  # DMA2: one 32-bit word per cycle
    sources={
        "L1+L2": "TrainDeeploy Table II (TTE on STM32F7): 320 KB SRAM; ST DS10916 split",
        "L3": "TrainDeeploy Table II (TTE on STM32F7): 1 MB Flash",
        "freq_hz": "derived: ST DS10916, STM32F746 216 MHz",
        "fpus": "derived: ST DS10916, single-precision FPU",
        "bandwidth": "derived: ST RM0385 (DTCM 64-bit, AHB 32-bit, Flash 7 WS at 216 MHz)",
        "sustained_flop_per_cycle": "TrainDeeploy Table II: TTE < 0.43 FLOP/cycle",
    },
    description="STM32F746-class MCU (Cortex-M7 216 MHz, 320 KB SRAM + 1 MB Flash)",
)

_TARGETS = (PULP, STM32)


def soc_targets() -> list[SoCTarget]:
    """All SoC targets (``pulp``, ``stm32``)."""
    return list(_TARGETS)


def get_target(name: str) -> SoCTarget:
    """An SoC target by name; unknown names raise :class:`ConfigError` listing the known ones."""
    key = name.strip().lower()
    for t in _TARGETS:
        if t.name == key:
            return t
    raise ConfigError(f"unknown SoC target {name!r}; known targets: {[t.name for t in _TARGETS]}")
