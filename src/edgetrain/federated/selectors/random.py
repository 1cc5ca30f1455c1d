"""Random selection (McMahan et al. 2017): ``k`` clients uniformly without replacement."""

from __future__ import annotations

from edgetrain.federated.selectors.base import CheckIn, Selector


class RandomSelector(Selector):
    name = "random"

    def select(self, round_idx: int, checkin: CheckIn, k: int) -> list[int]:
        # choice over arange(n) draws exactly as choice(n): all eligible = the earlier draw
        ids = checkin.candidates()
        k = min(k, len(ids))
        return sorted(int(i) for i in self.rng.choice(ids, size=k, replace=False))
