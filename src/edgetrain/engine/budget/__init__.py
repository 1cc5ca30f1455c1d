"""Training under a memory budget (FedHybrid §4.3-4.4), executed for real.

profile_model -> plan (hybrid | recompute | compress | swap | none) -> ExecutionPlan
-> PlanExecutor (measured by MemoryAccountant; units keep / recompute / compress /
swap, cheap leaves and leaf chains regen, ReLU-family leaves mask, parameter-free
multi-input leaves such as attention's core recompute); BudgetPredictor
for the budget itself; :class:`BudgetedTraining` for a whole run under a plan
(``edgetrain run`` with a ``budget`` section).  ``scope="all"`` budgets every
allocation of the step (saved tensors, parameter gradients, the rest measured:
:mod:`.alloc`).
"""

from edgetrain.engine.budget.accountant import (
    MemoryAccountant,
    alloc_peak_bytes,
    peak_rss_bytes,
    step_alloc_peak,
)
from edgetrain.engine.budget.alloc import AllocTimeline
from edgetrain.engine.budget.autotune import autotune
from edgetrain.engine.budget.executor import PlanExecutor
from edgetrain.engine.budget.plan import PLAN_VERSION, ExecutionPlan, UnitDecision
from edgetrain.engine.budget.planner import (
    METHODS,
    SCOPES,
    minimum_budget,
    plan,
    plan_candidates,
    simulate,
    simulate_all,
)
from edgetrain.engine.budget.predictor import BudgetPredictor, MemorySample, sample_linux
from edgetrain.engine.budget.profile import (
    LeafRecomputeProfile,
    MaskProfile,
    ModelProfile,
    RegenProfile,
    UnitProfile,
    profile_model,
)
from edgetrain.engine.budget.runner import (
    BudgetReport,
    codecs_for,
    parse_budget,
    run_budget,
    step_order,
)
from edgetrain.engine.budget.stats import PairedSummary, paired_summary
from edgetrain.engine.budget.swap import IoContentionModel
from edgetrain.engine.budget.train import BudgetedTraining, BudgetSpec

__all__ = [
    "METHODS",
    "PLAN_VERSION",
    "SCOPES",
    "AllocTimeline",
    "BudgetPredictor",
    "BudgetReport",
    "BudgetSpec",
    "BudgetedTraining",
    "ExecutionPlan",
    "IoContentionModel",
    "LeafRecomputeProfile",
    "MaskProfile",
    "MemoryAccountant",
    "MemorySample",
    "ModelProfile",
    "PairedSummary",
    "PlanExecutor",
    "RegenProfile",
    "UnitDecision",
    "UnitProfile",
    "alloc_peak_bytes",
    "autotune",
    "codecs_for",
    "minimum_budget",
    "paired_summary",
    "parse_budget",
    "peak_rss_bytes",
    "plan",
    "plan_candidates",
    "profile_model",
    "run_budget",
    "sample_linux",
    "simulate",
    "simulate_all",
    "step_alloc_peak",
    "step_order",
]
