"""Aggregators: FedAvg, FedProx (mu), FedYogi (server-side Yogi)."""

from edgetrain.errors import ConfigError
from edgetrain.federated.aggregators.base import Aggregator, State, weighted_mean
from edgetrain.federated.aggregators.fedavg import FedAvg
from edgetrain.federated.aggregators.fedprox import FedProx
from edgetrain.federated.aggregators.fedyogi import FedYogi

AGGREGATORS = {"fedavg": FedAvg, "fedprox": FedProx, "fedyogi": FedYogi}


def make_aggregator(name: str, **options) -> Aggregator:
    if name not in AGGREGATORS:
        raise ConfigError(f"unknown aggregator {name!r}; accepted: {', '.join(AGGREGATORS)}")
    return AGGREGATORS[name](**options)


__all__ = [
    "AGGREGATORS",
    "Aggregator",
    "FedAvg",
    "FedProx",
    "FedYogi",
    "State",
    "make_aggregator",
    "weighted_mean",
]
