"""One call from a model to a measured budget run: profile, plan, execute, compare.

``run_budget`` is what ``edgetrain budget`` and the benchmarks use.  It profiles the
model on this CPU, resolves the budget (a fraction of the *measured* unplanned
saved-activation peak, or bytes), plans, then executes ``repeats`` training steps
of the plan and of ``none`` alternately from the same weights, reporting medians.
Gradients are compared on the first step (same weights, same batch, same RNG).
"""

from __future__ import annotations

import copy
import re
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from edgetrain.compress import make_codec
from edgetrain.engine.budget.accountant import (
    MemoryAccountant,
    minor_faults,
    model_state_tensors,
    peak_rss_bytes,
    settle_heap,
    step_alloc_peak,
)
from edgetrain.engine.budget.executor import PlanExecutor
from edgetrain.engine.budget.plan import ExecutionPlan
from edgetrain.engine.budget.planner import CODECS_FOR, METHODS, check_scope, plan
from edgetrain.engine.budget.profile import ModelProfile, profile_model
from edgetrain.errors import ConfigError

_UNITS = {
    "": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9,
    "kib": 2**10, "mib": 2**20, "gib": 2**30,
}  # fmt: skip


def check_budget_form(text: str | float, name: str = "--budget") -> None:
    """Check a budget before any profiling: the forms :func:`parse_budget` accepts, and a
    plain number above 1 (a count of bytes) must be whole (``1.5`` is not 1 byte)."""
    parse_budget(text, 1)  # raises, naming the accepted forms, on anything else
    try:
        value = float(text)
    except ValueError:
        return  # a size with a unit (300MB)
    if value > 1.0 and not value.is_integer():
        raise ConfigError(
            f"{name} {text!r}: a plain number above 1 is a count of bytes and must be whole; "
            "give a fraction in (0, 1] of the unplanned peak (e.g. 0.5) or a size such as "
            "300MB, 256MiB or 123456 (bytes)"
        )


def parse_budget(text: str | float, unplanned_peak: int) -> int:
    """``0.5`` -> half of ``unplanned_peak``; ``300MB`` / ``256MiB`` / ``123456`` -> bytes."""
    s = str(text).strip().lower()
    m = re.fullmatch(r"([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmg]i?b|b)?", s)
    if not m:
        raise ConfigError(
            f"budget {text!r} not understood; give a fraction in (0, 1] of the unplanned peak "
            "(e.g. 0.5) or a size such as 300MB, 256MiB or 123456 (bytes)"
        )
    value = float(m.group(1))
    unit = m.group(2)
    if unit is None and value <= 1.0:
        if value <= 0:
            raise ConfigError(f"budget {text!r}: a fraction must be > 0")
        return max(1, int(value * unplanned_peak))
    return int(value * _UNITS[unit or ""])


@dataclass
class BudgetReport:
    method: str
    budget_bytes: int
    unplanned_peak_bytes: int  # measured, plan "none"
    measured_peak_bytes: int  # measured, this plan (max over repeats)
    predicted_peak_bytes: int
    step_time_ratio: float  # median(plan step) / median(none step), CPU time, same run
    decisions: dict[str, int]
    max_abs_grad_error: float
    loss_abs_error: float
    step_s: float
    none_step_s: float
    predicted_overhead_s: float
    peak_rss_bytes: int
    plan: ExecutionPlan
    extra: dict[str, Any] = field(default_factory=dict)
    #: "saved" (the budget bounds autograd's saved tensors) or "all" (every allocation)
    budget_scope: str = "saved"
    #: scope "all": the plan's predicted peak over every allocation of the step, the
    #: measured one (one extra untimed step, :func:`.accountant.step_alloc_peak`: torch's
    #: allocations plus the encoded buffers and mask bits the executor holds outside
    #: them, i.e. what the process held) and
    #: the unplanned step's measured one (what a fractional budget is a fraction of)
    predicted_alloc_peak_bytes: int | None = None
    measured_alloc_peak_bytes: int | None = None
    unplanned_alloc_peak_bytes: int | None = None

    @property
    def within_budget(self) -> bool:
        """The measured peak of the budget's scope is at most the budget."""
        if self.budget_scope == "all":
            return (self.measured_alloc_peak_bytes or 0) <= self.budget_bytes
        return self.measured_peak_bytes <= self.budget_bytes

    def to_json(self) -> dict[str, Any]:
        d = {k: v for k, v in vars(self).items() if k != "plan"}
        d["plan"] = self.plan.to_json()
        return d


def codecs_for(method: str) -> dict[str, Any]:
    return {c: make_codec(c) for c in CODECS_FOR.get(method, ())}


def step_order(names: Sequence[str], repeat: int, order_seed: int = 0) -> list[str]:
    """The order the entries run in, in repeat ``repeat``: seeded random permutations,
    each followed by its mirror image.

    A rotation (each repeat starting one entry later) was used before, but it keeps
    the cyclic order, so every entry still ran right after the same other entry in
    every repeat but one; whatever a step leaves behind (freed memory the allocator
    returns to the OS, cache state) then biased its follower the same way each time.
    Repeats 1 and 2 run a random permutation and its reverse, repeats 3 and 4 another
    one and its reverse, and so on: within each pair every entry's mean position is
    the middle of the round and its predecessor in one is its successor in the other
    (with plain random permutations, two entries running the *same* plan measured
    1.028 apart over 9 rounds of 3 repeats, 8 of 9 rounds on one side:
    benchmarks/out/r6/exec/mnv2.log).  An even number of repeats balances fully.
    ``repeat`` 0 (the warm-up) keeps the given order."""
    names = list(names)
    if repeat == 0 or len(names) < 2:
        return names
    perm = np.random.default_rng([order_seed, (repeat - 1) // 2]).permutation(len(names))
    if repeat % 2 == 0:
        perm = perm[::-1]
    return [names[i] for i in perm]


def measure_steps(
    model: nn.Module,
    plans: dict[str, ExecutionPlan],
    inputs: Sequence[Any],
    loss_fn: Callable[[Any], torch.Tensor],
    repeats: int = 3,
    seed: int = 0,
    order_seed: int = 0,
) -> dict[str, dict[str, Any]]:
    """Run each plan ``repeats`` times (interleaved) from the same state; times, peaks, grads.

    ``times`` are process CPU seconds (``time.process_time``): on a CPU shared with
    other jobs, wall time mostly measures the neighbours; with one intra-op thread
    the process's CPU time is the step's own work (wall times are kept in ``wall``).
    The order of the plans within a repeat is :func:`step_order` (``order_seed``).
    A plan that swaps also pays its simulated phone-storage time
    (:attr:`PlanExecutor.simulated_io_s`, FedHybrid §3/§4.3.1 UFS model) in both.
    """
    state = copy.deepcopy(model.state_dict())
    out: dict[str, dict[str, Any]] = {
        k: {"times": [], "wall": [], "minflt": [], "peak": 0, "grads": None, "loss": None}
        for k in plans
    }
    for r in range(repeats + 1):  # first round is a warm-up (timing discarded)
        # a fresh seeded order every repeat (:func:`step_order`): no plan always runs
        # first or right after the same other plan
        for name in step_order(list(plans), r, order_seed):
            p = plans[name]
            model.load_state_dict(state)
            model.zero_grad(set_to_none=True)
            acc = MemoryAccountant(exclude=model_state_tensors(model))
            torch.manual_seed(seed)
            with PlanExecutor(model, p, accountant=acc) as ex:
                flt = minor_faults()
                c0, t0 = time.process_time(), time.perf_counter()
                loss = ex.step(inputs, loss_fn)
                cpu, wall = time.process_time() - c0, time.perf_counter() - t0
                cpu, wall = cpu + ex.simulated_io_s, wall + ex.simulated_io_s
                flt = minor_faults() - flt
            rec = out[name]
            rec["peak"] = max(rec["peak"], acc.peak)
            if r > 0:
                rec["minflt"].append(flt)
                rec["times"].append(cpu)
                rec["wall"].append(wall)
            if rec["grads"] is None:
                rec["grads"] = [
                    (p_.grad.detach().clone() if p_.grad is not None else None)
                    for p_ in model.parameters()
                ]
                rec["loss"] = float(loss)
    model.load_state_dict(state)
    model.zero_grad(set_to_none=True)
    return out


def max_grad_diff(a: list, b: list) -> float:
    diffs = [
        (x - y).abs().max().item()
        for x, y in zip(a, b, strict=True)
        if x is not None and y is not None
    ]
    return max(diffs, default=0.0)


def none_plan(profile: ModelProfile) -> ExecutionPlan:
    from edgetrain.engine.budget.planner import simulate

    peak = int(simulate(profile, {}).max(initial=0))
    return ExecutionPlan("none", peak, peak, peak, 0.0, [])


def run_budget(
    model: nn.Module,
    inputs: Sequence[Any],
    loss_fn: Callable[[Any], torch.Tensor],
    budget: str | float,
    method: str = "hybrid",
    *,
    repeats: int = 3,
    seed: int = 0,
    profile: ModelProfile | None = None,
    autotune: bool = False,
    tune_repeats: int = 3,
    scope: str = "saved",
) -> BudgetReport:
    """Profile (unless given), plan and measure ``method`` under ``budget``.

    ``autotune``: pick the plan by measuring every feasible candidate
    (:func:`~edgetrain.engine.budget.autotune.autotune`, ``tune_repeats`` rounds) instead
    of by predicted overhead; the tuning steps are not among the timed steps and
    ``extra["autotune"]`` holds what the tuning measured.

    ``scope="all"``: the budget bounds every allocation of the step (a fraction is of
    the unplanned step's measured all-allocation peak); the profile is made with
    ``alloc_timeline=True``, the plan with ``scope="all"``, and one extra untimed step
    measures the plan's all-allocation peak (``measured_alloc_peak_bytes``)."""
    if method not in METHODS:
        raise ConfigError(f"unknown budget method {method!r}; expected one of {', '.join(METHODS)}")
    check_scope(scope)
    torch.manual_seed(seed)
    if profile is None:
        profile = profile_model(
            model, inputs, loss_fn, codecs=codecs_for(method), alloc_timeline=scope == "all"
        )
    # the timed steps start from the heap a training run has, not the one profiling left,
    # and keep what they free, so no timed step pays page faults that depend on what ran
    # before it (:func:`~edgetrain.engine.budget.accountant.settle_heap`)
    settle_heap()
    base = none_plan(profile)
    first = measure_steps(model, {"none": base}, inputs, loss_fn, repeats=0, seed=seed)
    unplanned = first["none"]["peak"]
    unplanned_all = None
    if scope == "all":
        unplanned_all = step_alloc_peak(model, base, inputs, loss_fn, seed=seed)[0]
    budget_bytes = parse_budget(budget, unplanned if scope == "saved" else unplanned_all)
    extra: dict[str, Any] = {}
    if autotune:
        from edgetrain.engine.budget.autotune import autotune as tune
        from edgetrain.engine.budget.planner import plan_candidates

        cands = plan_candidates(profile, budget_bytes, method, scope=scope)
        p, info = tune(model, inputs, loss_fn, cands, repeats=tune_repeats, seed=seed)
        info["candidates"] = [
            {"predicted_overhead_s": c.predicted_overhead_s, "decisions": c.decision_counts()}
            for c in cands
        ]
        extra["autotune"] = info
    else:
        p = plan(profile, budget_bytes, method, scope=scope)
    res = measure_steps(model, {"none": base, method: p}, inputs, loss_fn, repeats, seed)
    measured_all = None
    predicted_saved = p.predicted_peak_bytes
    if scope == "all":
        measured_all = step_alloc_peak(model, p, inputs, loss_fn, seed=seed)[0]
        predicted_saved = p.meta.get("predicted_saved_peak_bytes", predicted_saved)
    if repeats:
        # minor page faults per timed step (median): 0 once the heap is retained
        extra["page_faults"] = {k: statistics.median(r["minflt"]) for k, r in res.items()}
    none_s = statistics.median(res["none"]["times"]) if repeats else float("nan")
    plan_s = statistics.median(res[method]["times"]) if repeats else float("nan")
    return BudgetReport(
        method=method,
        budget_bytes=budget_bytes,
        unplanned_peak_bytes=unplanned,
        measured_peak_bytes=res[method]["peak"],
        predicted_peak_bytes=predicted_saved,
        step_time_ratio=plan_s / none_s if repeats else float("nan"),
        decisions={k: v for k, v in p.decision_counts().items()},
        max_abs_grad_error=max_grad_diff(res[method]["grads"], res["none"]["grads"]),
        loss_abs_error=abs(res[method]["loss"] - res["none"]["loss"]),
        step_s=plan_s,
        none_step_s=none_s,
        predicted_overhead_s=p.predicted_overhead_s,
        peak_rss_bytes=peak_rss_bytes(),
        plan=p,
        extra=extra,
        budget_scope=scope,
        predicted_alloc_peak_bytes=p.predicted_peak_bytes if scope == "all" else None,
        measured_alloc_peak_bytes=measured_all,
        unplanned_alloc_peak_bytes=unplanned_all,
    )
