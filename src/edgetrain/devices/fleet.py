"""Fleets: many heterogeneous phones drawn from FedHybrid's memory mix.

Each device draws its RAM from ``memory_mix``, then a template phone from the catalogue with
that RAM (the nearest smaller RAM class when none matches, e.g. 16 GB uses a 12 GB phone's
SoC), then a compute speed spread around the template's by a log-normal factor, as FedHybrid
spreads clients' computation efficiency from AI-Benchmark data (Fig. 14(c)).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

import numpy as np

from edgetrain.devices.phones import phones
from edgetrain.devices.profile import GIB, DeviceProfile, kernel_watermarks
from edgetrain.errors import ConfigError

# FedHybrid §2.1: "the memory distributions are as follows: 4GB (15%), 6GB (25%),
# 8GB (30%), 12GB (25%), and 16GB (5%)" (emulated from AI Benchmark data).
FEDHYBRID_MEMORY_MIX: dict[int, float] = {4: 0.15, 6: 0.25, 8: 0.30, 12: 0.25, 16: 0.05}

# Log-normal sigma of the per-device compute factor (derived: FedHybrid Fig. 14(c) shows
# clients' computation efficiency spread over roughly one order of magnitude; sigma = 0.35
# puts the central 95% within a factor ~2 either side of the template phone).
DEFAULT_COMPUTE_SPREAD = 0.35


def _check_mix(memory_mix: Mapping[int | float, float]) -> list[tuple[float, float]]:
    if not memory_mix:
        raise ConfigError("memory_mix is empty; give e.g. {4: 0.5, 8: 0.5} (GB -> share)")
    items = [(float(gb), float(share)) for gb, share in memory_mix.items()]
    if any(gb <= 0 for gb, _ in items) or any(s < 0 for _, s in items):
        raise ConfigError(f"memory_mix needs positive GB keys and shares >= 0, got {memory_mix}")
    total = sum(s for _, s in items)
    if not math.isclose(total, 1.0, abs_tol=1e-6):
        raise ConfigError(f"memory_mix shares must sum to 1, got {total:.6f}")
    return items


def _templates_for(gb: float, pool: Sequence[DeviceProfile]) -> list[DeviceProfile]:
    exact = [p for p in pool if math.isclose(p.memory_gb, gb)]
    if exact:
        return exact
    smaller = [p for p in pool if p.memory_gb < gb]
    if smaller:
        best = max(p.memory_gb for p in smaller)
        return [p for p in smaller if p.memory_gb == best]
    best = min(p.memory_gb for p in pool)
    return [p for p in pool if p.memory_gb == best]


def generate_fleet(
    n: int,
    seed: int | np.random.Generator = 0,
    memory_mix: Mapping[int | float, float] = FEDHYBRID_MEMORY_MIX,
    compute_spread: float = DEFAULT_COMPUTE_SPREAD,
    templates: Sequence[DeviceProfile] | None = None,
    name_prefix: str = "fleet",
) -> list[DeviceProfile]:
    """``n`` device profiles, RAM drawn i.i.d. from ``memory_mix`` (GB -> share).

    ``compute_spread`` is the sigma of a log-normal factor (median 1) on the template's
    sustained FLOP/s; 0 keeps the template's speed. ``templates`` defaults to all catalogue
    phones (MDLdroid + FedHybrid).
    """
    if n < 0:
        raise ConfigError(f"fleet size must be >= 0, got {n}")
    if compute_spread < 0:
        raise ConfigError(f"compute_spread must be >= 0, got {compute_spread}")
    items = _check_mix(memory_mix)
    pool = list(templates) if templates is not None else phones()
    if not pool:
        raise ConfigError("templates is empty; pass at least one DeviceProfile")
    rng = np.random.default_rng(seed)
    gbs = np.array([gb for gb, _ in items])
    shares = np.array([s for _, s in items])
    classes = rng.choice(len(gbs), size=n, p=shares / shares.sum())
    factors = rng.lognormal(0.0, compute_spread, size=n) if compute_spread > 0 else np.ones(n)
    by_class = {i: _templates_for(float(gbs[i]), pool) for i in range(len(gbs))}
    picks = rng.random(n)
    fleet = []
    for i in range(n):
        gb = float(gbs[classes[i]])
        cands = by_class[int(classes[i])]
        tpl = cands[int(picks[i] * len(cands))]
        memory = int(round(gb * GIB))
        gb_label = f"{gb:g}"
        sources = dict(tpl.sources)
        sources["memory_bytes"] = "FedHybrid §2.1 memory mix (sampled)"
        sources["compute_flops"] = (
            f"template {tpl.name} x lognormal(0, {compute_spread}) factor "
            f"{factors[i]:.3f} (FedHybrid Fig. 14(c) spread; derived)"
        )
        sources["template"] = tpl.name
        fleet.append(
            dataclasses.replace(
                tpl,
                name=f"{name_prefix}-{i:05d}",
                memory_bytes=memory,
                compute_flops=float(tpl.compute_flops * factors[i]),
                low_watermark_bytes=kernel_watermarks(memory).high_bytes,
                device_class=f"phone-{gb_label}GB",
                catalogue="fleet",
                sources=sources,
            )
        )
    return fleet


def memory_shares(fleet: Sequence[DeviceProfile]) -> dict[float, float]:
    """Observed share of each RAM size (GB) in ``fleet``."""
    if not fleet:
        return {}
    counts: dict[float, int] = {}
    for p in fleet:
        gb = round(p.memory_gb, 3)
        counts[gb] = counts.get(gb, 0) + 1
    return {gb: c / len(fleet) for gb, c in sorted(counts.items())}
