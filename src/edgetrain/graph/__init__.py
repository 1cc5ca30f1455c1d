"""TrainGraph: a static, typed graph of one training step (TrainDeeploy §IV, Fig. 2b).

``capture`` traces forward + loss + backward + optimizer update once per
(model, strategy, batch shape); ``execute`` runs it; the IR in ``ir`` is plain
data for the memory planner, budget predictor and C backend.
"""

from edgetrain.graph.cache import GraphCache
from edgetrain.graph.capture import CapturedStep, capture, execute
from edgetrain.graph.ir import PHASES, Node, TensorInfo, TensorKind, TrainGraph
from edgetrain.graph.ops import is_layout, op_flops
from edgetrain.graph.optim import LOSSES, OPTIMIZERS, OptimizerSpec

__all__ = [
    "LOSSES",
    "OPTIMIZERS",
    "PHASES",
    "CapturedStep",
    "GraphCache",
    "Node",
    "OptimizerSpec",
    "TensorInfo",
    "TensorKind",
    "TrainGraph",
    "capture",
    "execute",
    "is_layout",
    "op_flops",
]
