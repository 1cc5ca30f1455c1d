"""Measured plan selection (autotune): time every candidate plan, keep the fastest.

``plan()`` keeps the greedy walk with the lowest *predicted* overhead, but predicted
regeneration costs are off by about 2x on a real CPU (page faults and allocator
effects that a per-candidate cost cannot see), so hybrid sometimes ran slower than
recompute's own plan.  Like torch.compile's max-autotune, :func:`autotune` instead
runs each feasible candidate (:func:`plan_candidates`) for a few real training steps
with the same executor and timing as the benchmarks (:func:`measure_steps`:
interleaved rounds, one warm-up, process CPU time) and returns the one with the
lowest median.  Every candidate is a feasible plan, so the measured peak stays under
the budget whichever wins; the measured peaks are returned so callers can check.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from edgetrain.engine.budget.accountant import peak_rss_bytes
from edgetrain.engine.budget.plan import ExecutionPlan
from edgetrain.engine.budget.planner import METHODS, plan_candidates
from edgetrain.engine.budget.profile import ModelProfile, profile_model
from edgetrain.engine.budget.runner import (
    BudgetReport,
    codecs_for,
    max_grad_diff,
    measure_steps,
    none_plan,
    parse_budget,
)
from edgetrain.errors import ConfigError


def autotune(
    model: nn.Module,
    inputs: Sequence[Any],
    loss_fn: Callable[[Any], torch.Tensor],
    candidates: Sequence[ExecutionPlan],
    *,
    repeats: int = 3,
    seed: int = 0,
) -> tuple[ExecutionPlan, dict[str, Any]]:
    """Time ``candidates`` (interleaved, ``repeats`` rounds after a warm-up) and return
    the one with the lowest median process-CPU step time, plus what was measured.

    The dict holds ``medians`` (seconds, candidate order; ``None`` for a lone
    candidate, which is returned untimed), ``peaks`` (measured
    saved-tensor bytes), ``chosen`` (index), ``tune_s`` (wall seconds the tuning took)
    and ``repeats``.  Ties go to the earlier candidate (lowest predicted overhead when
    the list comes from :func:`plan_candidates`).  The model's weights are restored.
    """
    if not candidates:
        raise ConfigError("autotune needs at least one candidate plan; got an empty list")
    if repeats < 1:
        raise ConfigError(f"autotune repeats {repeats}; expected >= 1")
    t0 = time.perf_counter()
    if len(candidates) == 1:
        return candidates[0], {
            "medians": [None],  # a lone candidate is not timed
            "peaks": [None],
            "chosen": 0,
            "tune_s": 0.0,
            "repeats": 0,
        }
    plans = {f"c{i}": p for i, p in enumerate(candidates)}
    res = measure_steps(model, plans, inputs, loss_fn, repeats=repeats, seed=seed)
    medians = [statistics.median(res[k]["times"]) for k in plans]
    chosen = min(range(len(medians)), key=lambda i: (medians[i], i))
    return candidates[chosen], {
        "medians": medians,
        "peaks": [int(res[k]["peak"]) for k in plans],
        "chosen": chosen,
        "tune_s": time.perf_counter() - t0,
        "repeats": repeats,
    }


def run_budget_tuned(
    model: nn.Module,
    inputs: Sequence[Any],
    loss_fn: Callable[[Any], torch.Tensor],
    budget: str | float,
    method: str = "hybrid",
    *,
    repeats: int = 3,
    tune_repeats: int = 3,
    seed: int = 0,
    profile: ModelProfile | None = None,
) -> BudgetReport:
    """:func:`run_budget` with the plan picked by :func:`autotune` among
    :func:`plan_candidates`; the tuning steps are not among the timed steps
    (``extra["autotune"]`` has the tuning medians and ``tune_s``)."""
    if method not in METHODS:
        raise ConfigError(f"unknown budget method {method!r}; expected one of {', '.join(METHODS)}")
    torch.manual_seed(seed)
    if profile is None:
        profile = profile_model(model, inputs, loss_fn, codecs=codecs_for(method))
    base = none_plan(profile)
    first = measure_steps(model, {"none": base}, inputs, loss_fn, repeats=0, seed=seed)
    unplanned = first["none"]["peak"]
    budget_bytes = parse_budget(budget, unplanned)
    cands = plan_candidates(profile, budget_bytes, method)
    p, info = autotune(model, inputs, loss_fn, cands, repeats=tune_repeats, seed=seed)
    info["candidates"] = [
        {"predicted_overhead_s": c.predicted_overhead_s, "decisions": c.decision_counts()}
        for c in cands
    ]
    res = measure_steps(model, {"none": base, method: p}, inputs, loss_fn, repeats, seed)
    none_s = statistics.median(res["none"]["times"])
    plan_s = statistics.median(res[method]["times"])
    return BudgetReport(
        method=method,
        budget_bytes=budget_bytes,
        unplanned_peak_bytes=unplanned,
        measured_peak_bytes=res[method]["peak"],
        predicted_peak_bytes=p.predicted_peak_bytes,
        step_time_ratio=plan_s / none_s,
        decisions=p.decision_counts(),
        max_abs_grad_error=max_grad_diff(res[method]["grads"], res["none"]["grads"]),
        loss_abs_error=abs(res[method]["loss"] - res["none"]["loss"]),
        step_s=plan_s,
        none_step_s=none_s,
        predicted_overhead_s=p.predicted_overhead_s,
        peak_rss_bytes=peak_rss_bytes(),
        plan=p,
        extra={"autotune": info},
    )
