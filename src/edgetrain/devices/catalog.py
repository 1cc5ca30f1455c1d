"""``catalog()``: every phone and SoC target as JSON-friendly rows (``edgetrain devices``)."""

from __future__ import annotations

from typing import Any

from edgetrain.devices.phones import phones
from edgetrain.devices.soc import soc_targets


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def catalog() -> list[dict[str, Any]]:
    """Phones (``kind="phone"``) then SoC targets (``kind="soc"``).

    Every row has ``name``, ``kind``, ``memory_bytes``, ``compute_flops`` (sustained for
    phones, peak cores + GEMM array for SoCs) and ``battery_mah`` (None for SoCs), plus a
    few descriptive columns and the ``sources`` dict.
    """
    rows: list[dict[str, Any]] = []
    for p in phones():
        rows.append(
            {
                "name": p.name,
                "kind": "phone",
                "catalogue": p.catalogue,
                "soc": p.soc,
                "memory_bytes": p.memory_bytes,
                "compute_flops": p.compute_flops,
                "battery_mah": p.battery_mah,
                "sources": dict(p.sources),
            }
        )
    for s in soc_targets():
        rows.append(
            {
                "name": s.name,
                "kind": "soc",
                "memory_bytes": s.total_memory_bytes,
                "compute_flops": s.core_peak_flops + s.gemm_peak_flops,
                "battery_mah": None,
                "tiers": [
                    {
                        "name": t.name,
                        "capacity_bytes": t.capacity_bytes,
                        "size": _size(t.capacity_bytes),
                    }
                    for t in s.tiers
                ],
                "cores": s.cores,
                "fpus": s.fpus,
                "freq_hz": s.freq_hz,
                "gemm_array": list(s.gemm_array) if s.gemm_array else None,
                "sources": dict(s.sources),
            }
        )
    return rows
