"""Local training: the loop, run orchestration and (in ``engine.budget``) plans under a memory budget."""

from edgetrain.engine.trainer import EpochMetrics, evaluate, make_optimizer, train_classifier

__all__ = ["EpochMetrics", "evaluate", "make_optimizer", "train_classifier"]
