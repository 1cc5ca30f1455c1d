"""The methods compared in FedHybrid Tables 3-4 and Fig. 17, as (selector, technique) pairs.

``technique`` is how a client whose budget is below M_G trains: ``none`` (over budget, under
page reclaim, or killed), a plan strategy (``hybrid`` = FedHybrid's graph optimizer,
``recompute`` = Melon-like, ``swap`` = Capuchin-like, ``compress`` = GACT-like, applied
uniformly), or ``heterofl`` (a width-scaled submodel that fits). ``predictor`` False uses an
instantaneous memory reading instead of the Memory Budget Predictor (Fig. 17 ablation).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MethodSpec:
    selector: str
    technique: str
    predictor: bool = True


METHODS: dict[str, MethodSpec] = {
    "random": MethodSpec("random", "none"),
    "oort": MethodSpec("oort", "none"),
    "fedhybrid": MethodSpec("fedhybrid", "hybrid"),
    "heterofl": MethodSpec("random", "heterofl"),
    "oort+recompute": MethodSpec("oort", "recompute"),
    "oort+swap": MethodSpec("oort", "swap"),
    "oort+compress": MethodSpec("oort", "compress"),
    # Fig. 17 ablations
    "fedhybrid-noselector": MethodSpec("random", "hybrid"),
    "fedhybrid-nocompress": MethodSpec("fedhybrid", "recompute"),
    "fedhybrid-nopredictor": MethodSpec("fedhybrid", "hybrid", predictor=False),
}
#: the seven methods ``--compare`` runs (issue 6)
COMPARE_METHODS = (
    "random", "oort", "fedhybrid", "heterofl", "oort+recompute", "oort+swap", "oort+compress",
)  # fmt: skip
