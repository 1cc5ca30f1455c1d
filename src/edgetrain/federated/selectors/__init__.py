"""Client selectors on one interface (:class:`Selector`): random, Oort, FedHybrid."""

from edgetrain.errors import ConfigError
from edgetrain.federated.selectors.base import CheckIn, Feedback, Selector
from edgetrain.federated.selectors.fedhybrid import (
    MEMSTAT_FORMS,
    FedHybridSelector,
    comp_stat,
    mem_stat,
    stat_util,
    utility,
)
from edgetrain.federated.selectors.oort import OortSelector, get_norm
from edgetrain.federated.selectors.random import RandomSelector

SELECTORS: dict[str, type[Selector]] = {
    "random": RandomSelector,
    "oort": OortSelector,
    "fedhybrid": FedHybridSelector,
}


def make_selector(name: str, seed: int = 0, **options) -> Selector:
    """Build a selector by name."""
    if name not in SELECTORS:
        raise ConfigError(f"unknown selector {name!r}; accepted: {', '.join(SELECTORS)}")
    return SELECTORS[name](seed=seed, **options)


__all__ = [
    "MEMSTAT_FORMS",
    "SELECTORS",
    "CheckIn",
    "FedHybridSelector",
    "Feedback",
    "OortSelector",
    "RandomSelector",
    "Selector",
    "comp_stat",
    "get_norm",
    "make_selector",
    "mem_stat",
    "stat_util",
    "utility",
]
