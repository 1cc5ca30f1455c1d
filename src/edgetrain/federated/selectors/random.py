"""Random selection (McMahan et al. 2017): ``k`` clients uniformly without replacement."""

from __future__ import annotations

from edgetrain.federated.selectors.base import CheckIn, Selector


class RandomSelector(Selector):
    name = "random"

    def select(self, round_idx: int, checkin: CheckIn, k: int) -> list[int]:
        if checkin.eligible is None:  # the draw as before eligibility existed
            k = min(k, len(checkin))
            return sorted(int(i) for i in self.rng.choice(len(checkin), size=k, replace=False))
        ids = checkin.candidates()
        k = min(k, len(ids))
        return sorted(int(i) for i in self.rng.choice(ids, size=k, replace=False))
