"""FedYogi (Reddi et al. 2021, "Adaptive Federated Optimization", Algorithm 2).

``Delta = weighted mean of (client - global)``; ``m = b1 m + (1 - b1) Delta``;
``v = v - (1 - b2) Delta^2 sign(v - Delta^2)``; ``x = x + eta m / (sqrt(v) + tau)``.
Defaults are FedScale's (``yogi_eta 3e-3, yogi_tau 1e-8, yogi_beta 0.9, yogi_beta2
0.99``); ``v`` starts at ``tau^2`` (Reddi et al.: v_{-1} >= tau^2).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from edgetrain.errors import ConfigError
from edgetrain.federated.aggregators.base import Aggregator, State, weighted_mean


class FedYogi(Aggregator):
    name = "fedyogi"

    def __init__(
        self, eta: float = 3e-3, tau: float = 1e-8, beta1: float = 0.9, beta2: float = 0.99
    ) -> None:
        if eta <= 0 or tau <= 0 or not (0 <= beta1 < 1) or not (0 <= beta2 < 1):
            raise ConfigError("FedYogi needs eta > 0, tau > 0 and betas in [0, 1)")
        self.eta, self.tau, self.beta1, self.beta2 = eta, tau, beta1, beta2
        self.m: State = {}
        self.v: State = {}

    def aggregate(self, global_state: State, updates: Sequence[tuple[State, float]]) -> State:
        if not updates:
            return {k: v.clone() for k, v in global_state.items()}
        avg = weighted_mean(global_state, updates)
        out: State = {}
        for key, g in global_state.items():
            if not g.is_floating_point():
                out[key] = avg[key]
                continue
            delta = avg[key] - g
            m = self.m.get(key, torch.zeros_like(g))
            v = self.v.get(key, torch.full_like(g, self.tau**2))
            m = self.beta1 * m + (1 - self.beta1) * delta
            d2 = delta * delta
            v = v - (1 - self.beta2) * d2 * torch.sign(v - d2)
            self.m[key], self.v[key] = m, v
            out[key] = g + self.eta * m / (torch.sqrt(v) + self.tau)
        return out

    def state_tensors(self) -> State:
        d = {f"yogi_m.{k}": v for k, v in self.m.items()}
        d.update({f"yogi_v.{k}": v for k, v in self.v.items()})
        return d

    def load_state_tensors(self, tensors: Mapping[str, torch.Tensor]) -> None:
        self.m = {
            k[len("yogi_m.") :]: v.clone() for k, v in tensors.items() if k.startswith("yogi_m.")
        }
        self.v = {
            k[len("yogi_v.") :]: v.clone() for k, v in tensors.items() if k.startswith("yogi_v.")
        }
