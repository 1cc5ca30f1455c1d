"""Measured plan selection (autotune): time every candidate plan, keep the fastest.

``plan()`` keeps the greedy walk with the lowest *predicted* overhead (near-ties go to
fewer recomputations), but predicted per-decision costs do not add up to a step's
measured overhead on a real CPU (allocator and memory-traffic effects that a
per-candidate cost cannot see), so hybrid sometimes ran slower than recompute's own
plan.  Like torch.compile's max-autotune, :func:`autotune` instead
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

from edgetrain.engine.budget.plan import ExecutionPlan
from edgetrain.engine.budget.planner import plan, plan_candidates
from edgetrain.engine.budget.profile import ModelProfile
from edgetrain.engine.budget.runner import (
    measure_steps,
)
from edgetrain.errors import BudgetError, ConfigError

#: fractions of the budget whose chosen plans :func:`tune_candidates` adds: plans that
#: hold less than the budget asks.  A plan that frees more memory can run faster than
#: one that frees just enough, because the rest of the step then touches fewer fresh
#: pages -- the effect no per-decision cost sees (docs/results/budget.md, round 14:
#: MobileNetV2 b32 under an all-allocation budget of 0.9, the 8-regeneration plan
#: chosen there measured +22 / +27 ms over the unplanned step, the 0.75 plan of 19
#: regenerations and 6 masks +19 ms in another process).
DEEPER = (0.9, 0.8)


def tune_candidates(
    profile: ModelProfile,
    budget_bytes: int,
    method: str = "hybrid",
    *,
    scope: str = "saved",
    deeper: Sequence[float] = DEEPER,
) -> list[ExecutionPlan]:
    """The plans :func:`autotune` times: :func:`plan_candidates` under ``budget_bytes``,
    then the plan :func:`plan` chooses under each ``deeper`` fraction of it (each fits
    ``budget_bytes`` a fortiori; skipped where infeasible), without repeating a set of
    decisions already listed."""
    cands = plan_candidates(profile, budget_bytes, method, scope=scope)
    seen = {_decided(c) for c in cands}
    for f in deeper:
        if not 0.0 < f < 1.0:
            raise ConfigError(f"deeper fraction {f}; expected a fraction in (0, 1)")
        try:
            p = plan(profile, int(budget_bytes * f), method, scope=scope)
        except BudgetError:
            continue
        if _decided(p) not in seen:
            seen.add(_decided(p))
            cands.append(p)
    return cands


def _decided(p: ExecutionPlan) -> tuple:
    return tuple(sorted((u.name, u.decision) for u in p.units if u.decision != "keep"))


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
