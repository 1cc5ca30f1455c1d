"""Decentralized training without a server (MDLdroid): ChainSGD-reduce and its schedulers.

* :mod:`~edgetrain.decentralized.aggregation` — CentralSGD, NeighborSGD, ChainSGD (eq. 1-3)
* :mod:`~edgetrain.decentralized.schedule` — pair schedules, rounds, validation
* :mod:`~edgetrain.decentralized.schedulers` — Ring and Tree baselines, latency-optimal reference
* :mod:`~edgetrain.decentralized.env` — the Chain scheduler's Gymnasium env (eq. 7-10)
* :mod:`~edgetrain.decentralized.dqn` — DQN with TDGE / DGE / TGE exploration
* :mod:`~edgetrain.decentralized.chain_scheduler` — DQN scheduler, re-learning, fallback
* :mod:`~edgetrain.decentralized.resources` — device reports and the busy rule
* :mod:`~edgetrain.decentralized.broadcast` — resource-aware binomial broadcast
* :mod:`~edgetrain.decentralized.costs` — simulated clock and energy (eq. 5-6)
* :mod:`~edgetrain.decentralized.faults` — file cache, lost/rejoining devices
* :mod:`~edgetrain.decentralized.trainer` — in-process training run
* :mod:`~edgetrain.decentralized.report` — report.html
"""

from edgetrain.decentralized.aggregation import (
    AGGREGATORS,
    Aggregator,
    CentralSGD,
    ChainSGD,
    Message,
    NeighborSGD,
    ReduceResult,
    make_aggregator,
    mean_of_sum,
    pair_aggregate,
    pair_sum,
)
from edgetrain.decentralized.broadcast import binomial_broadcast, sequential_broadcast
from edgetrain.decentralized.chain_scheduler import ChainScheduler
from edgetrain.decentralized.costs import IterationCost, energy_variance, simulate_iteration
from edgetrain.decentralized.dqn import DQNAgent, DQNConfig
from edgetrain.decentralized.env import (
    ChainSchedulingEnv,
    RewardConfig,
    threshold,
    worst_complete_return,
)
from edgetrain.decentralized.faults import DeviceCache, Fault
from edgetrain.decentralized.resources import DeviceStatus, as_free, random_statuses
from edgetrain.decentralized.schedule import Pair, Schedule, all_schedules, star_schedule
from edgetrain.decentralized.schedulers import (
    EarliestPairScheduler,
    RingScheduler,
    Scheduler,
    TreeScheduler,
)
from edgetrain.decentralized.trainer import ChainConfig, ChainResult, run_chain

__all__ = [
    "AGGREGATORS",
    "Aggregator",
    "CentralSGD",
    "ChainConfig",
    "ChainResult",
    "ChainSGD",
    "ChainScheduler",
    "ChainSchedulingEnv",
    "DQNAgent",
    "DQNConfig",
    "DeviceCache",
    "DeviceStatus",
    "EarliestPairScheduler",
    "Fault",
    "IterationCost",
    "Message",
    "NeighborSGD",
    "Pair",
    "ReduceResult",
    "RewardConfig",
    "RingScheduler",
    "Schedule",
    "Scheduler",
    "TreeScheduler",
    "all_schedules",
    "as_free",
    "binomial_broadcast",
    "energy_variance",
    "make_aggregator",
    "mean_of_sum",
    "pair_aggregate",
    "pair_sum",
    "random_statuses",
    "run_chain",
    "sequential_broadcast",
    "simulate_iteration",
    "star_schedule",
    "threshold",
    "worst_complete_return",
]
