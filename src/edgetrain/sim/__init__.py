"""Simulated clock and executors for federated rounds.

* :mod:`~edgetrain.sim.clock` — a client's simulated round time and energy (documented
  cost model; every constant cites its source)
* :mod:`~edgetrain.sim.memory` — a client's memory budget per round and the
  memory-pressure / kill outcome of training over it
* :mod:`~edgetrain.sim.round_memory` — a client's budget along an app-usage trace in
  one round, the predictor (eq. 10) and its plan-regeneration rule
* :mod:`~edgetrain.sim.executor` — the in-process executor (client state as data)
"""

from edgetrain.sim.clock import (
    PRESSURE_RUNNING_SHARE,
    PRESSURE_SLOWDOWN_CAL,
    TRAIN_FLOPS_PER_FORWARD,
    ClientCost,
    client_cost,
    pressure_factor,
)
from edgetrain.sim.executor import ClientTask, InProcessExecutor, slice_state
from edgetrain.sim.memory import MemoryModel
from edgetrain.sim.round_memory import (
    BudgetTrace,
    ClientMemoryState,
    RoundMemory,
    budget_trace,
    predict,
    train_through,
)

__all__ = [
    "BudgetTrace",
    "ClientMemoryState",
    "RoundMemory",
    "budget_trace",
    "predict",
    "train_through",
    "PRESSURE_RUNNING_SHARE",
    "PRESSURE_SLOWDOWN_CAL",
    "TRAIN_FLOPS_PER_FORWARD",
    "ClientCost",
    "ClientTask",
    "InProcessExecutor",
    "MemoryModel",
    "client_cost",
    "pressure_factor",
    "slice_state",
]
