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
from edgetrain.engine.budget.runner import (
    measure_steps,
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
