"""FedAvg (McMahan et al. 2017): the sample-weighted mean of the client models."""

from __future__ import annotations

from collections.abc import Sequence

from edgetrain.federated.aggregators.base import Aggregator, State, weighted_mean


class FedAvg(Aggregator):
    name = "fedavg"

    def aggregate(self, global_state: State, updates: Sequence[tuple[State, float]]) -> State:
        return weighted_mean(global_state, updates)
