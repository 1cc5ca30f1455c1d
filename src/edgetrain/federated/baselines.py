"""Table 4's memory-saving baselines, applied uniformly: Melon, Capuchin and GACT.

FedHybrid §5.2 ("Baselines"): "(4) Melon (Wang et al., 2022) uses micro-batching and
recomputation to minimize memory usage. (5) Capuchin (Peng et al., 2020) employs swap and
recomputation strategies for memory reduction. (6) GACT (Liu et al., 2022) dynamically
compresses activations, adjusting compression ratios per network layer." §5.3 says what
makes them slow in FL: "the simplistic application of memory reduction strategies in FL
training, which overlooks client heterogeneity", "combined with the extra computational
demands of these strategies"; §3 adds that GACT's latency "lies in its uniform compression
of all activations" and Fig. 5 runs Melon at one fixed memory budget on every device.

So each baseline here is **one configuration for every client** (no per-client budget
fitting: that is FedHybrid's heterogeneity-aware optimiser, §4.3):

* it is sized for the memory it must fit: the smallest predicted budget of the fleet
  (:func:`uniform_fraction`), so that the low-end phones can train at all (§3: the
  techniques help because "more low-end devices can be involved"); where the technique
  cannot reach that budget, its most memory-saving setting runs, with its demand above
  the target (a client with less memory then trains under page reclaim or is killed);
* every selected client trains under it and pays its overhead, memory-rich or not;
* every client generates the plan itself, on the device (these systems plan locally;
  FedHybrid's server-side generation is its own contribution, §4.3 "Plan generation for
  large scale of clients"), charged at :data:`~edgetrain.federated.plans.
  ON_DEVICE_PLAN_SLOWDOWN` x the planner's measured CPU seconds (Fig. 20(c), §5.4).

The plans, all on the plan model's :class:`~edgetrain.engine.budget.ModelProfile`
(budget ``f`` = ``f x`` its unplanned saved-activation peak, as in
:class:`~edgetrain.federated.plans.PlanService`):

* **Melon** (:func:`melon_plan`): ``n`` micro-batches (gradient accumulation) divide the
  activation footprint by ``n``; the recompute planner (``edgetrain.engine.budget.plan``,
  method ``recompute``) fits the rest. The time factor is the *measured* per-sample cost of
  ``n`` micro-batches on this CPU (:func:`measure_micro_batches`) x the recompute plan's.
  The ``n`` with the lowest predicted time wins (Melon maximises throughput under the
  budget). The LeNet proxy has no BatchNorm, so accumulated micro-batches give the same
  gradient as the full batch and the real local training is unchanged.
* **Capuchin** (:func:`capuchin_plan`): per unit, swap or recompute, whichever frees more
  bytes per second of overhead (Capuchin's "memory saving per second", Peng et al. 2020
  §4.3), taken greedily over the units alive at the current peak until it fits (a
  recomputed block whose re-materialisation sets the peak may be swapped instead). Swap cost:
  :class:`~edgetrain.engine.budget.IoContentionModel` (eUFS 3.1 shared with background
  apps, FedHybrid §3/§4.3.1); on a phone nothing overlaps it.
* **GACT** (:func:`gact_plan`): every compressible unit is compressed (int8), then layers
  step down to int4 until the budget fits -- adaptive bits per layer. GACT ranks layers by
  gradient sensitivity (Liu et al. 2022 §4); we have no such estimate and rank by bytes
  saved per second of codec time among the units alive at the peak. Local training passes
  the compressed share of activations through the same codecs (real error).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from edgetrain.engine.budget import IoContentionModel, ModelProfile, minimum_budget, plan, simulate
from edgetrain.errors import BudgetError, ConfigError
from edgetrain.federated.plans import EXACT_RESOLUTION, PlanOutcome, PlanService
from edgetrain.sim.clock import TRAIN_FLOPS_PER_FORWARD

#: plan technique of the per-client methods -> the uniform baseline that stands for it
UNIFORM_BASELINES = {"recompute": "melon", "swap": "capuchin", "compress": "gact"}
#: the plan-model profile each baseline works on (its codecs); recompute's and swap's are
#: hybrid's (edgetrain.federated.plans.PROFILE_OF), so Melon and Capuchin are priced from
#: the measurement FedHybrid's own plans come from
_PROFILE_OF = {"melon": "recompute", "capuchin": "recompute", "gact": "compress"}
#: micro-batch counts Melon may choose (divisors of the profiled batch are used)
MICRO_BATCHES = (1, 2, 4, 8)


def uniform_fraction(budgets: Sequence[float] | np.ndarray, m_g: float) -> float:
    """The budget (fraction of M_G) one fleet-wide configuration must fit: the smallest
    predicted budget of the fleet, floored to 0.1 % of M_G."""
    b = np.asarray(budgets, dtype=float)
    if b.size == 0 or m_g <= 0:
        raise ConfigError("uniform baseline needs a non-empty fleet and M_G > 0")
    f = float(b.min()) / m_g
    return round(math.floor(f / EXACT_RESOLUTION + 1e-9) * EXACT_RESOLUTION, 6)


def _unplanned(prof: ModelProfile) -> int:
    return int(simulate(prof, {}).max(initial=0))


def _step_s(prof: ModelProfile) -> float:
    return TRAIN_FLOPS_PER_FORWARD * max(sum(prof.item_s), 1e-9)


def measure_micro_batches(
    model: nn.Module,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    counts: Sequence[int] = MICRO_BATCHES,
    repeats: int = 5,
) -> dict[int, float]:
    """Per-sample training time of ``n`` micro-batches over one full batch, measured.

    For each ``n`` dividing the batch: ``n`` forward+backward passes of ``batch / n``
    samples (gradients accumulated), process CPU seconds, repeats interleaved across the
    counts, median; the ratio to ``n = 1`` is clipped below at 1 (a smaller batch never
    runs faster per sample; a ratio under 1 is timer noise).
    """
    b = int(inputs.shape[0])
    ns = [n for n in counts if n >= 1 and b % n == 0]
    if 1 not in ns:
        ns = [1, *ns]
    was = model.training
    model.train()
    times: dict[int, list[float]] = {n: [] for n in ns}

    def run(n: int) -> float:
        m = b // n
        model.zero_grad(set_to_none=True)
        c0 = time.process_time()
        for j in range(n):
            out = model(inputs[j * m : (j + 1) * m])
            nn.functional.cross_entropy(out, targets[j * m : (j + 1) * m]).backward()
        return time.process_time() - c0

    for n in ns:  # warm-up (allocator, kernels)
        run(n)
    for _ in range(max(1, repeats)):
        for n in ns:
            times[n].append(run(n))
    model.zero_grad(set_to_none=True)
    model.train(was)
    base = max(statistics.median(times[1]), 1e-9)
    return {n: max(1.0, statistics.median(times[n]) / base) for n in ns}


def melon_plan(
    prof: ModelProfile,
    fraction: float,
    efficiency: dict[int, float],
    floor: tuple[float, float] | None = None,
) -> tuple[PlanOutcome, float]:
    """Melon: micro-batches x recompute for ``fraction`` of the unplanned peak.

    Returns the outcome (``fraction`` = the target, ``demand`` = its predicted demand,
    ``micro_batches`` = n) and the planner's CPU seconds of the whole search. ``floor``:
    ``(recompute's smallest reachable fraction, the CPU seconds that took)`` from an
    earlier search on the same profile (its seconds are charged again: every device
    computes it).
    """
    c0 = time.process_time()
    unplanned = _unplanned(prof)
    # recompute's smallest reachable peak: counts that leave more than it can shed are
    # skipped without a planner run
    if floor is None:
        f0 = time.process_time()
        floor = (minimum_budget(prof, "recompute") / max(unplanned, 1), 0.0)
        floor = (floor[0], time.process_time() - f0)
    else:
        c0 -= floor[1]
    lowest = floor[0]
    best: PlanOutcome | None = None
    for n in sorted(efficiency):
        fn = fraction * n
        if fn < min(lowest, 1.0):
            continue
        if fn >= 1.0:  # n micro-batches alone fit: no recomputation
            cand = PlanOutcome("melon", fraction, True, efficiency[n], {"keep": len(prof.units)},
                               micro_batches=n, demand=1.0 / n)  # fmt: skip
        else:
            try:
                p = plan(prof, max(1, int(fn * unplanned)), "recompute")
            except BudgetError:
                continue
            factor = efficiency[n] * (1.0 + p.predicted_overhead_s / _step_s(prof))
            demand = p.predicted_peak_bytes / unplanned / n
            cand = PlanOutcome("melon", fraction, True, factor, p.decision_counts(),
                               micro_batches=n, demand=demand)  # fmt: skip
        if best is None or cand.overhead_factor < best.overhead_factor:
            best = cand
        if fn >= 1.0:
            break  # more micro-batches only cost more
    if best is None:  # even the most micro-batches cannot fit: its most saving setting
        n = max(efficiency)
        try:
            p = plan(prof, max(1, int(lowest * unplanned) + 1), "recompute")
        except BudgetError:  # pragma: no cover - the minimum is reachable by definition
            cpu = time.process_time() - c0
            return PlanOutcome("melon", fraction, False, 1.0, plan_s=cpu), cpu
        factor = efficiency[n] * (1.0 + p.predicted_overhead_s / _step_s(prof))
        best = PlanOutcome("melon", fraction, True, factor, p.decision_counts(), micro_batches=n,
                           demand=p.predicted_peak_bytes / unplanned / n)  # fmt: skip
    cpu = time.process_time() - c0
    return _with_plan_s(best, cpu), cpu


def _alive(prof: ModelProfile, u_step: int, step: int) -> bool:
    """Whether a unit's saved tensors are held at ``step`` (forward then backward)."""
    return u_step <= step <= 2 * prof.n_steps - 1 - u_step


def _greedy_uniform(
    prof: ModelProfile,
    budget: int,
    states: dict[str, tuple[str, str | None]],
    options,
) -> bool:
    """Apply the best-scoring option among units alive at the peak until ``budget`` fits.

    ``options(u, state)`` yields ``(score, next_state)``; True if the peak fits.
    """
    while True:
        mem = simulate(prof, states)
        peak = int(mem.max(initial=0))
        if peak <= budget:
            return True
        at = int(mem.argmax())
        best = None
        for live_only in (True, False):
            for u in prof.units:
                if live_only and not _alive(prof, u.step, at):
                    continue
                for score, nxt in options(u, states[u.name]):
                    if score > 0 and (best is None or score > best[0]):
                        best = (score, u.name, nxt)
            if best is not None:
                break
        if best is None:
            return False
        states[best[1]] = best[2]


def capuchin_plan(
    prof: ModelProfile, fraction: float, io: IoContentionModel | None = None
) -> tuple[PlanOutcome, float]:
    """Capuchin: per unit swap or recompute by memory saving per second, until it fits."""
    io = io or IoContentionModel()
    c0 = time.process_time()
    unplanned = _unplanned(prof)
    states: dict[str, tuple[str, str | None]] = {u.name: ("keep", None) for u in prof.units}
    costs: dict[str, float] = {}

    def options(u, s):
        if u.calls != 1 or s[0] not in ("keep", "recompute"):
            return []
        out = []
        sw_s = io.write_s(u.float_bytes) + io.read_s(u.float_bytes)
        if s[0] == "recompute":
            # a recomputed block re-materialises all its tensors at once in backward; when
            # that transient sets the peak, swapping the block instead bounds it to one
            # leaf (Capuchin decides per tensor; our units are blocks)
            gain = u.saved_bytes - u.leaf_max_bytes
            if u.float_bytes > 0 and gain > 0:
                out.append((gain / sw_s, ("swap", None)))
            return out
        rc_saved = u.saved_bytes - sum(u.inputs.values())
        rc_s = max(u.rc_compute(), 1e-9)
        if rc_saved > 0:
            out.append((rc_saved / rc_s, ("recompute", None)))
        if u.float_bytes > 0:
            out.append((u.float_bytes / sw_s, ("swap", None)))
        return out

    if fraction < 1.0:  # where it cannot fit, its most saving state is what runs
        _greedy_uniform(prof, max(1, int(fraction * unplanned)), states, options)
    for u in prof.units:
        d = states[u.name][0]
        if d == "recompute":
            costs[u.name] = u.rc_compute()
        elif d == "swap":
            costs[u.name] = io.write_s(u.float_bytes) + io.read_s(u.float_bytes)
    cpu = time.process_time() - c0
    peak = int(simulate(prof, states).max(initial=0))
    factor = 1.0 + sum(costs.values()) / _step_s(prof)
    return (
        PlanOutcome("capuchin", fraction, True, factor, _counts(states), plan_s=cpu,
                    demand=min(1.0, peak / unplanned)),
        cpu,
    )  # fmt: skip


def gact_plan(prof: ModelProfile, fraction: float) -> tuple[PlanOutcome, float]:
    """GACT: every compressible unit int8, then per-layer int4 until ``fraction`` fits."""
    c0 = time.process_time()
    unplanned = _unplanned(prof)
    missing = [u.name for u in prof.units if not {"int8", "int4"} <= set(u.codecs)]
    if missing:
        raise ConfigError(f"GACT needs int8 and int4 codecs profiled; missing for {missing[:3]}")
    states: dict[str, tuple[str, str | None]] = {
        u.name: (("compress", "int8") if u.float_bytes > 0 else ("keep", None)) for u in prof.units
    }

    def options(u, s):
        if s != ("compress", "int8"):
            return []
        a, b = u.codecs["int8"], u.codecs["int4"]
        saved = a.held_bytes - b.held_bytes
        extra = max(b.encode_s + b.decode_s - (a.encode_s + a.decode_s), 1e-9)
        return [(saved / extra, ("compress", "int4"))] if saved > 0 else []

    # where it cannot fit, its most saving state (int4 wherever it saves) is what runs
    _greedy_uniform(prof, max(1, int(min(fraction, 1.0) * unplanned)), states, options)
    cpu = time.process_time() - c0
    over = 0.0
    share: dict[str, float] = {}
    total = sum(u.saved_bytes for u in prof.units)
    for u in prof.units:
        d, codec = states[u.name]
        if d == "compress" and codec:
            c = u.codecs[codec]
            over += c.encode_s + c.decode_s
            share[codec] = share.get(codec, 0.0) + u.saved_bytes / max(total, 1)
    peak = int(simulate(prof, states).max(initial=0))
    factor = 1.0 + over / _step_s(prof)
    return (
        PlanOutcome("gact", fraction, True, factor, _counts(states),
                    compress_share={k: round(v, 6) for k, v in sorted(share.items())},
                    plan_s=cpu, demand=min(1.0, peak / unplanned)),
        cpu,
    )  # fmt: skip


def _counts(states: dict[str, tuple[str, str | None]]) -> dict[str, int]:
    out = {"keep": 0, "recompute": 0, "compress": 0, "swap": 0}
    for d, _ in states.values():
        out[d] = out.get(d, 0) + 1
    return out


def _with_plan_s(o: PlanOutcome, cpu: float) -> PlanOutcome:
    from dataclasses import replace

    return replace(o, plan_s=cpu)


def uniform_plan(
    service: PlanService, technique: str, fraction: float, *, repeats: int = 5
) -> PlanOutcome:
    """The fleet-wide plan of the baseline standing for ``technique`` (memoised in
    ``service.table`` under the baseline's name, so ``plans.json`` keeps it for resume)."""
    if technique not in UNIFORM_BASELINES:
        raise ConfigError(
            f"no uniform baseline for technique {technique!r}; "
            f"accepted: {', '.join(UNIFORM_BASELINES)}"
        )
    name = UNIFORM_BASELINES[technique]
    key = (name, round(fraction, 6))
    if key in service.table:
        return service.table[key]
    prof = service.profile(_PROFILE_OF[name])
    if name == "melon":
        if service.melon_floor is None:
            f0 = time.process_time()
            lowest = minimum_budget(prof, "recompute") / max(_unplanned(prof), 1)
            service.melon_floor = (lowest, time.process_time() - f0)
        out, _ = melon_plan(prof, fraction, _efficiency(service, repeats), service.melon_floor)
    elif name == "capuchin":
        out, _ = capuchin_plan(prof, fraction)
    else:
        out, _ = gact_plan(prof, fraction)
    service.table[key] = out
    return out


def _efficiency(service: PlanService, repeats: int = 5) -> dict[int, float]:
    if service.micro_batch_eff is None:
        service.micro_batch_eff = measure_micro_batches(
            service.model, service.inputs, service.targets, repeats=repeats
        )
    return service.micro_batch_eff


def melon_exact(service: PlanService, fraction: float) -> PlanOutcome:
    """Melon's plan generation for one client's own budget (0.1 % of M_G resolution), as a
    client without FedHybrid's server-side optimiser runs it on the device (FedHybrid
    §5.4: "requiring each client to generate its own execution plan using Melon's plan
    generation"); memoised in ``service.table`` like :func:`uniform_plan`."""
    f = round(math.floor(fraction / EXACT_RESOLUTION + 1e-9) * EXACT_RESOLUTION, 6)
    if f <= 0:
        return PlanOutcome("melon", 0.0, False, 1.0)
    if f >= 1.0:
        return PlanOutcome("melon", 1.0, True, 1.0)
    return uniform_plan(service, "recompute", f)
