"""Static memory planning of a training step.

Liveness and lower bound (:mod:`.liveness`), where the peak is (:mod:`.peak`), a static allocator — greedy by size
plus a MiniMalloc-style exact search — (:mod:`.allocator`), MiniMalloc's CSV format
(:mod:`.minimalloc_csv`), the L1/L2/L3 hierarchy with tiling and transfers
(:mod:`.hierarchy`, :mod:`.tiling`), LoRA accumulation-chain fusion
(:mod:`.fusion`), an analytical latency estimate
(:mod:`.cost_model`) and the ``plan_training`` façade (:mod:`.planner`).
"""

from edgetrain.memory.allocator import Allocation, allocate, check_allocation
from edgetrain.memory.cost_model import LatencyEstimate, estimate_latency
from edgetrain.memory.fusion import fuse_lora, lora_modules
from edgetrain.memory.hierarchy import HierarchyPlan, place_hierarchy
from edgetrain.memory.liveness import Buffer, lifetimes, live_bytes, lower_bound
from edgetrain.memory.minimalloc_csv import read_minimalloc_csv, write_minimalloc_csv
from edgetrain.memory.peak import PeakReport, peak_report
from edgetrain.memory.planner import TrainingPlan, plan_graph, plan_training, plot_timeline
from edgetrain.memory.tiling import Gemm, Tile, node_gemms, tile_gemm

__all__ = [
    "Allocation",
    "Buffer",
    "Gemm",
    "HierarchyPlan",
    "LatencyEstimate",
    "PeakReport",
    "Tile",
    "TrainingPlan",
    "allocate",
    "check_allocation",
    "estimate_latency",
    "fuse_lora",
    "lifetimes",
    "live_bytes",
    "lora_modules",
    "lower_bound",
    "node_gemms",
    "peak_report",
    "place_hierarchy",
    "plan_graph",
    "plan_training",
    "plot_timeline",
    "read_minimalloc_csv",
    "tile_gemm",
    "write_minimalloc_csv",
]
