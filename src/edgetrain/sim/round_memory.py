"""A selected client's memory during one round, replayed from an app-usage trace.

Each (round, client) gets a trace of its phone's available memory
(:func:`edgetrain.devices.memory_trace`, FedHybrid's app-usage model: sessions, launch and
switch spikes, lmkd kills of cached apps) covering a warm-up window before the round and the
round itself. The client's budget along the trace is its user's typical budget (the level
its check-ins report, :meth:`MemoryModel.user_budget`) plus the trace's deviation of
``M_safe = M_avail - alpha x Watermark_high`` from the class mean
(:meth:`MemoryModel.expected_budget`), one value per :data:`TRACE_STEP_S`.

* **With the Memory Budget Predictor** (FedHybrid §4.4.2) the plan is made for eq. 10's
  prediction over the last ``W`` seconds before the round (weights: the trace's
  oom_adj importance weights); ``W`` starts as one local epoch on the device. During the
  round, the regeneration rule runs on the page faults so far: once they exceed ``TP1``
  x the client's average of previous rounds, or lmkd killed it more than ``TP2`` times,
  the window shrinks (``W x WS_adj``), a new budget is predicted from the trace up to now,
  and the client fetches a new plan for it (counted; its download is charged).
* **Without the predictor** (Fig. 17 / Fig. 19(b) baseline "using initial available
  memory as a fixed budget") the plan is made for the reading at the start of the
  client's first round, kept for every later round, and never regenerated: when the
  memory the client really has is lower, it trains under page reclaim (or is killed
  above physical memory).

Training then advances through the trace: a step of ``TRACE_STEP_S`` wall seconds does
``TRACE_STEP_S / pressure`` seconds of work, where ``pressure`` is
:func:`edgetrain.sim.clock.pressure_factor` of the demand against that step's budget, and
the demand above the budget is reclaimed every step (pages, the fault count the rule
reads, :data:`edgetrain.devices.PAGE_BYTES` each).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgetrain.devices import DeviceProfile, memory_trace
from edgetrain.devices.profile import SWAP_ALPHA
from edgetrain.devices.traces import PAGE_BYTES
from edgetrain.sim.clock import pressure_factor
from edgetrain.sim.memory import MemoryModel

# One sample per second: the app-usage model's spikes decay with tau 1-2 s (FedHybrid
# Fig. 12(a), edgetrain.devices.AppUsageModel), so coarser steps would skip them.
TRACE_STEP_S = 1.0
# FedHybrid §5.2 hyper-parameters of the regeneration rule.
TP1 = 2.0
TP2 = 3
WS_ADJ = 0.9
# An ExecutionPlan's JSON for a ~50-unit model (MobileNetV2: ~300 B per unit decision
# with its name, codec, bytes and MPS) plus framing: what a regeneration downloads.
REGEN_PLAN_BYTES = 16 * 1024


@dataclass
class ClientMemoryState:
    """A client's predictor state between rounds (plain data, a few numbers)."""

    window_s: float | None = None  # W; None until the client's first round
    faults: list[int] = field(default_factory=list)  # page faults of its previous rounds
    kills: int = 0  # lmkd kills of its training since the last regeneration
    regenerations: int = 0
    # without the predictor: the reading of its first round, kept as a fixed budget
    static_budget: float | None = None
    # a uniform baseline's client has generated its plan on the device before
    local_plan: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "window_s": self.window_s,
            "faults": list(self.faults),
            "kills": self.kills,
            "regenerations": self.regenerations,
            "static_budget": self.static_budget,
            "local_plan": self.local_plan,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ClientMemoryState:
        w = d.get("window_s")
        return cls(
            None if w is None else float(w),
            [int(f) for f in d.get("faults", [])],
            int(d.get("kills", 0)),
            int(d.get("regenerations", 0)),
            None if d.get("static_budget") is None else float(d["static_budget"]),
            bool(d.get("local_plan", False)),
        )


@dataclass(frozen=True)
class BudgetTrace:
    """Budget (bytes) and importance weight per trace step; ``start`` = the round's step."""

    budget: np.ndarray
    weight: np.ndarray
    start: int


def budget_trace(
    mm: MemoryModel,
    profile: DeviceProfile,
    user_budget: float,
    seed: int,
    warmup_s: float,
    horizon_s: float,
) -> BudgetTrace:
    """The client's budget along a fresh trace: ``warmup_s`` before, ``horizon_s`` after."""
    apps = mm.apps
    # memory_trace starts idle; a burn-in drawn uniformly over one mean idle+session cycle
    # puts the round at a random phase of the user's usage (in a session ~1/3 of the time)
    cycle = apps.gap_mean_s + apps.session_median_s
    burn = int(np.random.default_rng([seed, 1]).integers(0, int(cycle / TRACE_STEP_S) + 1))
    warm = max(1, math.ceil(warmup_s / TRACE_STEP_S))
    steps = burn + warm + max(1, math.ceil(horizon_s / TRACE_STEP_S))
    tr = memory_trace(profile, steps * TRACE_STEP_S, TRACE_STEP_S, seed=seed, model=apps)
    m_safe = tr.available_bytes[burn:].astype(np.float64) - (
        SWAP_ALPHA[profile.swap_kind] * profile.low_watermark_bytes
    )
    # never above the physical memory the process can get (MemoryModel.hard_limit)
    budget = np.clip(
        user_budget + m_safe - mm.expected_budget(profile), 0.0, mm.hard_limit(profile)
    )
    return BudgetTrace(budget, tr.oom_weight[burn:].astype(np.float64), warm)


def predict(tr: BudgetTrace, end: int, window_s: float) -> float:
    """Eq. 10 over the ``window_s`` seconds of samples before step ``end`` (exclusive)."""
    w = max(1, int(round(window_s / TRACE_STEP_S)))
    lo = max(0, end - w)
    b, wt = tr.budget[lo:end], tr.weight[lo:end]
    return float((b * wt).sum() / wt.sum())


@dataclass(frozen=True)
class RoundMemory:
    """How the round went for the client's memory."""

    elapsed_s: float  # wall compute seconds (base work x plan overhead x pressure)
    work_s: float  # the same without the pressure penalty (base work x plan overhead)
    pages: int  # reclaimed pages over the round (the fault count of the rule)
    demand_end: float  # demand after any regeneration
    regenerated: bool


def train_through(
    tr: BudgetTrace,
    base_s: float,
    demand: float,
    overhead: float = 1.0,
    *,
    regen: Callable[[int], tuple[float, float] | None] | None = None,
    fault_limit: float = math.inf,
) -> RoundMemory:
    """Advance ``base_s`` seconds of unplanned work through the trace from the round start.

    A trace step of ``TRACE_STEP_S`` seconds does ``TRACE_STEP_S / (overhead x pressure)``
    seconds of base work. ``regen(step)`` is called once, at the first step where the
    round's faults exceed ``fault_limit``; it returns the new ``(demand, overhead)`` or
    None. Past the trace's end its last budget holds (the trace is made long enough for
    the slowest case, see the server).
    """
    done, i, pages, regenerated = 0.0, tr.start, 0, False
    n = len(tr.budget)
    elapsed = work = 0.0
    while done < base_s:
        b = float(tr.budget[min(i, n - 1)])
        press = pressure_factor(demand, b)
        step_base = TRACE_STEP_S / (press * overhead)
        if done + step_base >= base_s:
            frac = (base_s - done) / step_base
            elapsed += frac * TRACE_STEP_S
            work += (base_s - done) * overhead
            done = base_s
        else:
            done += step_base
            elapsed += TRACE_STEP_S
            work += step_base * overhead
        pages += math.ceil(max(0.0, demand - b) / PAGE_BYTES)
        i += 1
        if regen is not None and not regenerated and pages > fault_limit and done < base_s:
            regenerated = True
            new = regen(min(i, n))
            if new is not None:
                demand, overhead = new
    return RoundMemory(elapsed, work, pages, demand, regenerated)
