"""A client's memory budget in a round, and what training over it does.

Budget (what the training process may use without page reclaim), per FedHybrid §4.4.2:
``M_safe = M_avail - alpha * Watermark_high`` with ``M_avail = RAM - system - foreground -
background apps``. The app sizes and counts are drawn per (client, round) from
:class:`edgetrain.devices.AppUsageModel` (FedHybrid Fig. 11(b): one foreground app and 3-5
background apps; sizes: typical Android PSS). The *predicted* budget (the Memory Budget
Predictor, eq. 10) is the mean of that draw — the predictor's weighted moving average
filters the per-round fluctuation. Users differ: each client draws its *typical* load
once (:meth:`MemoryModel.user_budget`: its number of background apps and app sizes), so
budgets vary within a RAM class. The *measured* budget (ablation "without predictor") is
one instantaneous reading: the user's budget plus the deviation of a fresh app-state draw
from the class mean, spikes included (a launch spike of ``launch_spike_frac`` x the
foreground app with probability ``SPIKE_SHARE``).

Outcomes of training with a demand ``D`` bytes:

* ``D <= budget``: fits, no penalty;
* ``budget < D <= hard limit``: runs under page reclaim (penalty, :mod:`edgetrain.sim.clock`);
* ``D > hard limit``: the low-memory killer ends the process (failed round). The hard
  limit is the *physical* memory the process can get with every cached app evicted:
  ``RAM - system - foreground`` (system = kernel + system services, never reclaimable).
  Issue 6 specifies "a kill (failed round) above physical memory", and it is what FedHybrid
  §2.1 observes: MobileNetV2 needs over 8 GB, and Oort-Practical loses the 4 GB and 6 GB
  phones (15% + 25% = "over 40%" of the fleet). Swap does not raise the limit: a training
  working set larger than RAM refaults continuously, and Android's lmkd kills a process
  that thrashes (AOSP ``lmkd``: ``ro.lmk.thrashing_limit``, kill when the workingset
  refault rate exceeds it) rather than let it page forever. Swap (FedHybrid §5.2: 1 GB
  ZRAM + a 3 GB NAND partition, :meth:`MemoryModel.swap_bytes`) is what makes the region between the
  budget and the physical limit survivable, at the page-reclaim penalty.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgetrain.devices import SWAP_ALPHA, AppUsageModel, DeviceProfile

# Share of a round during which an app launch/switch spike is in progress, used by the
# "measured" (no predictor) budget: launches every session (median 153 s, Fig. 11(a)) with
# tau 2 s plus switches every 45 s with tau 1 s -> (2 + 153/45 * 1) / 153 ~= 3.5% of the
# time; derived from AppUsageModel's constants (FedHybrid Fig. 12(a)).
SPIKE_SHARE = (2.0 + 153.0 / 45.0 * 1.0) / 153.0

GIB = 1024**3
# FedHybrid §5.2: "standardized ZRAM, using 1 GB of memory for swap space with lz4
# compression. Additionally, a 3 GB swap partition is allocated on NAND storage."
ZRAM_BYTES = 1 * GIB
SWAP_PARTITION_BYTES = 3 * GIB
# lz4 in zram compresses typical anonymous app memory about 2:1 (derived: Linux
# Documentation/admin-guide/blockdev/zram.rst reports mm_stat orig vs compr sizes of this
# order; Android's zram guidance assumes ~2-3x).
ZRAM_RATIO = 2.0


@dataclass(frozen=True)
class MemoryModel:
    """Budgets and hard limits of devices (bytes)."""

    apps: AppUsageModel = AppUsageModel()

    def system_bytes(self, p: DeviceProfile) -> float:
        return self.apps.system_base_bytes + self.apps.system_frac * p.memory_bytes

    def hard_limit(self, p: DeviceProfile) -> float:
        """Physical bytes a training process can get at most (cached apps evicted)."""
        return p.memory_bytes - self.system_bytes(p) - self.apps.fg_median_bytes

    def swap_bytes(self) -> float:
        """Swap capacity (ZRAM's net gain + the NAND partition), where reclaimed pages go."""
        return SWAP_PARTITION_BYTES + (ZRAM_RATIO - 1.0) * ZRAM_BYTES

    def expected_budget(self, p: DeviceProfile) -> float:
        """Predicted budget: M_safe at the mean app load (the predictor's smoothed value)."""
        n_bg = 0.5 * (self.apps.min_background + self.apps.max_background)
        mean_app = np.exp(0.5 * self.apps.app_sigma**2)  # log-normal mean / median
        used = (
            self.system_bytes(p)
            + self.apps.fg_median_bytes * mean_app
            + n_bg * self.apps.bg_median_bytes * mean_app
        )
        return max(0.0, p.memory_bytes - used - SWAP_ALPHA[p.swap_kind] * p.low_watermark_bytes)

    def user_budget(self, p: DeviceProfile, rng: np.random.Generator) -> float:
        """A user's typical (predicted) budget: its own app count and sizes, no spikes."""
        a = self.apps
        n_bg = int(rng.integers(a.min_background, a.max_background + 1))
        fg = a.fg_median_bytes * rng.lognormal(0.0, a.app_sigma)
        bg = float(np.sum(a.bg_median_bytes * rng.lognormal(0.0, a.app_sigma, size=n_bg)))
        used = self.system_bytes(p) + fg + bg
        return max(0.0, p.memory_bytes - used - SWAP_ALPHA[p.swap_kind] * p.low_watermark_bytes)

    def measured_budget(
        self, p: DeviceProfile, rng: np.random.Generator, mean: float | None = None
    ) -> float:
        """One instantaneous M_safe reading (what a client without the predictor uses).

        With ``mean`` (the user's budget) the reading scatters around it; without, around
        the class mean :meth:`expected_budget`.
        """
        if mean is not None:
            return max(0.0, mean + self.measured_budget(p, rng) - self.expected_budget(p))
        a = self.apps
        n_bg = int(rng.integers(a.min_background, a.max_background + 1))
        fg = a.fg_median_bytes * rng.lognormal(0.0, a.app_sigma)
        bg = float(np.sum(a.bg_median_bytes * rng.lognormal(0.0, a.app_sigma, size=n_bg)))
        spike = a.launch_spike_frac * fg if rng.random() < SPIKE_SHARE else 0.0
        used = self.system_bytes(p) + fg + bg + spike
        return max(0.0, p.memory_bytes - used - SWAP_ALPHA[p.swap_kind] * p.low_watermark_bytes)
