"""The simulated clock: one client's round time and energy, from documented constants.

``round time = download + compute + upload``:

* compute = ``local_steps x batch x flops_per_sample x TRAIN_FLOPS_PER_FORWARD /
  device.compute_flops x plan overhead x pressure factor``;
* communication = model bytes x 8 / the device's link bandwidth, both directions
  (:func:`edgetrain.devices.transfer_time_s`);
* the plan overhead factor is the execution plan's predicted time over an unplanned
  step (measured by :mod:`edgetrain.engine.budget`); 1 when the model fits;
* the memory-pressure factor applies when a client trains over its budget *without* a
  plan (:func:`pressure_factor`).

Energy (FedHybrid Fig. 21) comes from the profile's power model
(:func:`edgetrain.devices.energy_j`): computing time at ``power_compute_w``; of the
page-reclaim penalty time only the running share draws compute power, the rest (the
process in uninterruptible sleep waiting for I/O) draws idle power.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from edgetrain.devices import DeviceProfile, energy_j, transfer_time_s
from edgetrain.errors import ConfigError

# Training FLOPs per sample = 3 x forward FLOPs (forward + backward ~ 2x forward):
# Kaplan et al. 2020, "Scaling Laws for Neural Language Models", §2.1 (C ~ 6N per token
# for training vs 2N forward).
TRAIN_FLOPS_PER_FORWARD = 3.0

# FedHybrid §2 / Fig. 2(a): MobileNetV2 at batch 16 runs equally fast on the S22 (8 GB) and
# the OP10P (12 GB), at batch 32 the S22 is 6.1x slower. Doubling the batch roughly doubles
# the activation footprint, so the calibration point is "demand = 2 x what fits"
# (overflow r = (D - M) / M = 1) -> factor 6.1. Between r = 0 and 1 we interpolate
# linearly; above r = 1 the factor stays at 6.1 (beyond it the LMK decides, see
# edgetrain.sim.memory).
PRESSURE_SLOWDOWN_CAL = 6.1
PRESSURE_OVERFLOW_CAL = 1.0
# FedHybrid Fig. 2(b): on the S22 under pressure the training process spends 56% of CPU
# time in uninterruptible sleep, 40% running and 4% runnable -> 44% of the time at compute
# power, 56% at idle power.
PRESSURE_RUNNING_SHARE = 0.44


def pressure_factor(demand_bytes: float, budget_bytes: float) -> float:
    """Slow-down of training ``demand_bytes`` under page reclaim with ``budget_bytes`` free."""
    if demand_bytes <= budget_bytes:
        return 1.0
    if budget_bytes <= 0:
        return PRESSURE_SLOWDOWN_CAL
    r = min((demand_bytes - budget_bytes) / budget_bytes, PRESSURE_OVERFLOW_CAL)
    return 1.0 + (PRESSURE_SLOWDOWN_CAL - 1.0) * r / PRESSURE_OVERFLOW_CAL


@dataclass(frozen=True)
class ClientCost:
    """Simulated seconds and joules of one client's round."""

    download_s: float
    compute_s: float  # including plan overhead and pressure penalty
    upload_s: float
    penalty_s: float  # the part of compute_s caused by page reclaim
    energy_j: float
    setup_s: float = 0.0  # the part of compute_s before training (a plan made on the device)
    train_energy_j: float = 0.0  # the part of energy_j spent training (scales with steps)

    @property
    def total_s(self) -> float:
        return self.download_s + self.compute_s + self.upload_s

    def truncated(self, share: float) -> ClientCost:
        """The cost of training only ``share`` (0..1) of the local steps, then uploading:
        a straggler's partial work (FedProx, Li et al. MLSys 2020 §3). The download and the
        set-up are paid whole; training time, its page-reclaim penalty and training energy
        scale with the share."""
        if not 0.0 <= share <= 1.0:
            raise ConfigError(f"share must be in [0, 1], got {share}")
        train_s = self.compute_s - self.setup_s
        return ClientCost(
            self.download_s,
            self.setup_s + share * train_s,
            self.upload_s,
            share * self.penalty_s,
            self.energy_j - (1.0 - share) * self.train_energy_j,
            self.setup_s,
            share * self.train_energy_j,
        )

    def to_dict(self) -> dict:
        d = asdict(self)
        d["total_s"] = self.total_s
        return d


def client_cost(
    device: DeviceProfile,
    *,
    samples: int,
    flops_per_sample: float,
    model_bytes: float,
    overhead_factor: float = 1.0,
    pressure: float = 1.0,
    compute_scale: float = 1.0,
    extra_compute_s: float = 0.0,
    extra_rx_bytes: float = 0.0,
) -> ClientCost:
    """Round time and energy of ``device`` training ``samples`` samples (see module doc).

    ``compute_scale`` scales the FLOPs (HeteroFL submodels of width r: r^2);
    ``extra_compute_s`` is on-device work besides training (a client generating its own
    plan); ``extra_rx_bytes`` are downloads besides the model (regenerated plans).
    """
    if samples < 0 or flops_per_sample < 0 or model_bytes < 0:
        raise ConfigError("samples, flops_per_sample and model_bytes must be >= 0")
    if overhead_factor < 1.0 or pressure < 1.0:
        raise ConfigError("overhead_factor and pressure must be >= 1")
    base = (
        samples * flops_per_sample * TRAIN_FLOPS_PER_FORWARD * compute_scale / device.compute_flops
    )
    planned = base * overhead_factor
    if extra_compute_s < 0 or extra_rx_bytes < 0:
        raise ConfigError("extra_compute_s and extra_rx_bytes must be >= 0")
    compute = planned * pressure
    penalty = compute - planned
    compute += extra_compute_s
    down = transfer_time_s(device, model_bytes + extra_rx_bytes)
    up = transfer_time_s(device, model_bytes)
    energy = energy_j(
        device,
        compute_s=planned + extra_compute_s + PRESSURE_RUNNING_SHARE * penalty,
        idle_s=(1.0 - PRESSURE_RUNNING_SHARE) * penalty,
        tx_bytes=model_bytes,
        rx_bytes=model_bytes + extra_rx_bytes,
    )
    train_energy = energy_j(
        device,
        compute_s=planned + PRESSURE_RUNNING_SHARE * penalty,
        idle_s=(1.0 - PRESSURE_RUNNING_SHARE) * penalty,
    )
    return ClientCost(down, compute, up, penalty, energy, extra_compute_s, train_energy)
