"""Federated learning across a heterogeneous, memory-limited fleet (FedHybrid §4).

* :mod:`~edgetrain.federated.config` — the ``edgetrain federate`` YAML schema
* :mod:`~edgetrain.federated.environment` — data, partitions, fleet, M_G, costs
* :mod:`~edgetrain.federated.selectors` — Random, Oort (FedScale), FedHybrid (eq. 1-4)
* :mod:`~edgetrain.federated.aggregators` — FedAvg, FedProx, FedYogi
* :mod:`~edgetrain.federated.plans` — k-means clustered, cached server-side plans
* :mod:`~edgetrain.federated.server` — the round loop, checkpoints and resume
* :mod:`~edgetrain.federated.api` — ``run_federated`` and ``compare``
* :mod:`~edgetrain.federated.report` — ``report.html`` with time-to-accuracy curves
"""

from edgetrain.federated.aggregators import FedAvg, FedProx, FedYogi, make_aggregator
from edgetrain.federated.api import compare, run_federated
from edgetrain.federated.config import FederatedConfig
from edgetrain.federated.environment import Environment, build_environment
from edgetrain.federated.methods import COMPARE_METHODS, METHODS, MethodSpec
from edgetrain.federated.plans import PlanOutcome, PlanService, kmeans_labels
from edgetrain.federated.selectors import (
    FedHybridSelector,
    OortSelector,
    RandomSelector,
    make_selector,
)
from edgetrain.federated.server import FederatedServer, summarize

__all__ = [
    "COMPARE_METHODS",
    "METHODS",
    "Environment",
    "FedAvg",
    "FedHybridSelector",
    "FedProx",
    "FedYogi",
    "FederatedConfig",
    "FederatedServer",
    "MethodSpec",
    "OortSelector",
    "PlanOutcome",
    "PlanService",
    "RandomSelector",
    "build_environment",
    "compare",
    "kmeans_labels",
    "make_aggregator",
    "make_selector",
    "run_federated",
    "summarize",
]
