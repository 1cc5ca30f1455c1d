"""FedProx (Li et al. 2020): FedAvg on the server; clients add ``mu/2 ||w - w_global||^2``.

With ``mu = 0`` it is FedAvg exactly. Default ``mu = 0.1`` is FedScale's ``proxy_mu``.
"""

from __future__ import annotations

from collections.abc import Sequence

from edgetrain.errors import ConfigError
from edgetrain.federated.aggregators.base import Aggregator, State, weighted_mean


class FedProx(Aggregator):
    name = "fedprox"

    def __init__(self, mu: float = 0.1) -> None:
        if mu < 0:
            raise ConfigError(f"FedProx mu must be >= 0, got {mu}")
        self.proximal_mu = float(mu)

    def aggregate(self, global_state: State, updates: Sequence[tuple[State, float]]) -> State:
        return weighted_mean(global_state, updates)
