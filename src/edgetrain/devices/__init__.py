"""Devices and fleets: phone profiles and SoC targets from the papers, fleets, traces, energy.

* :mod:`~edgetrain.devices.profile` — ``DeviceProfile`` and kernel watermarks
* :mod:`~edgetrain.devices.phones` — MDLdroid / FedHybrid Table 2 phones
* :mod:`~edgetrain.devices.soc` — ``pulp`` and ``stm32`` targets with L1/L2/L3 tiers
* :mod:`~edgetrain.devices.fleet` — fleets with FedHybrid's memory mix
* :mod:`~edgetrain.devices.traces` — busy/free and app-usage memory traces
* :mod:`~edgetrain.devices.state` — ``ResourceState`` and MDLdroid's busy rule
* :mod:`~edgetrain.devices.energy` — energy and battery model
"""

from edgetrain.devices.catalog import catalog
from edgetrain.devices.energy import LINKS, Battery, battery_drain, energy_j, transfer_time_s
from edgetrain.devices.fleet import (
    DEFAULT_COMPUTE_SPREAD,
    FEDHYBRID_MEMORY_MIX,
    generate_fleet,
    memory_shares,
)
from edgetrain.devices.phones import (
    CATALOGUES,
    TRAINING_EFFICIENCY,
    get_device,
    peak_cpu_flops,
    phones,
)
from edgetrain.devices.profile import (
    SWAP_ALPHA,
    DeviceProfile,
    Watermarks,
    kernel_watermarks,
)
from edgetrain.devices.soc import PULP, STM32, MemoryTier, SoCTarget, get_target, soc_targets
from edgetrain.devices.state import (
    DEFAULT_THRESHOLDS,
    BusyThresholds,
    ResourceState,
    busy_reasons,
    is_busy,
    random_resource_states,
)
from edgetrain.devices.traces import (
    PAGE_BYTES,
    AppUsageModel,
    MemoryTrace,
    busy_trace,
    memory_trace,
    reclaim_pages,
)

__all__ = [
    "CATALOGUES",
    "DEFAULT_COMPUTE_SPREAD",
    "DEFAULT_THRESHOLDS",
    "FEDHYBRID_MEMORY_MIX",
    "LINKS",
    "PAGE_BYTES",
    "PULP",
    "STM32",
    "SWAP_ALPHA",
    "TRAINING_EFFICIENCY",
    "AppUsageModel",
    "Battery",
    "BusyThresholds",
    "DeviceProfile",
    "MemoryTier",
    "MemoryTrace",
    "ResourceState",
    "SoCTarget",
    "Watermarks",
    "battery_drain",
    "busy_reasons",
    "busy_trace",
    "catalog",
    "energy_j",
    "generate_fleet",
    "get_device",
    "get_target",
    "is_busy",
    "kernel_watermarks",
    "memory_shares",
    "memory_trace",
    "peak_cpu_flops",
    "phones",
    "random_resource_states",
    "reclaim_pages",
    "soc_targets",
    "transfer_time_s",
]
