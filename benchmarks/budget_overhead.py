"""Step-time overhead vs memory budget: none / recompute / compress / swap / hybrid,
beside torch.utils.checkpoint on every block and PyTorch's min-cut partitioner.

For each model (MobileNetV2 batch 32, small BERT batch 8 by default) the model is
profiled once; at every budget (a fraction of the *measured* unplanned
saved-activation peak) each method is planned and all plans run interleaved
from the same weights (``--repeats`` timed steps each after a warm-up).  Reported:
step-time ratio = median(plan) / median(none) of the same run in process CPU
time (one intra-op thread; wall-time ratio also recorded), measured peak
(accountant: bytes held by saved tensors) vs budget, predicted peak, max |grad
error| vs unplanned.  Infeasible budgets print the method's minimum feasible
budget.  ``swap`` writes real files, but on this server they land in the page
cache (RAM speed), so its step time also includes the simulated phone-storage
time of every write/read (:class:`IoContentionModel`: eUFS 3.1 bandwidths shared
with 4 background I/O issuers, FedHybrid §3 and §4.3.1); without it swap would
look nearly free here.  Baselines on the same accountant:

* ``ckpt-all``: ``torch.utils.checkpoint(use_reentrant=False)`` on every planner
  unit (block); budget-independent, but timed in every budget's interleaved rounds
  (applied for its own steps only) so the planners are paired with it
  (``vs_ckpt_all``).  Its recomputed tensors live in torch's private frames, so the
  accountant sees only the checkpoint inputs (a lower bound on its true peak); its
  ``alloc_peak_bytes`` counts every allocation.
* ``mincut``: ``torch.compile`` with AOTAutograd's
  ``min_cut_rematerialization_partition`` and
  ``torch._functorch.config.activation_memory_budget = budget fraction``, run
  with eager FX graphs (no inductor codegen).
* ``mincut-free``: the same compiled graph with ``activation_memory_budget = 1.0``
  (the partitioner's own no-budget point: it saves its runtime-optimised min cut
  and does no budget-driven rematerialisation).  ``mincut`` runs a traced graph of
  aten ops, not the modules' Python, so its ratio vs the eager ``none`` mixes
  execution path and memory plan; its ratio vs ``mincut-free`` (``vs_free``) is the
  cost of its memory plan on its own execution path.

Every method of a budget -- ``none``, the planners, ``mincut`` and ``mincut-free``
-- runs interleaved in the same rounds (same repeats, medians, same CPU clock), so
machine noise between steps hits them alike.  The compiled variants are compiled
during the warm-up step of each budget; a recompilation during timed steps is
reported (``recompiles``), since it would put compile time into the ratio.

Writes a PNG per model (``--out``).  ``--quick`` runs a tiny setting (for tests).

    python benchmarks/budget_overhead.py [--quick] [--models mobilenetv2:32,bert-small:8]
        [--budgets 0.9,0.8,0.7,0.6,0.5,0.4,0.3,0.25,0.2] [--no-mincut] [--json]
        [--methods recompute,compress,swap,hybrid] [--rounds R [--rounds-at 0.5,0.25]]

``--rounds R`` repeats the whole interleaved measurement of a budget R times and
reports the median over rounds of the per-round ratio (each round: median of
``--repeats`` steps of the plan / median of the unplanned steps); the per-round
ratios are kept in the JSON (``round_ratios``).  Without ``--rounds-at`` every
budget gets ``--rounds`` rounds.  ``--methods`` restricts the planners that run
(``none`` always runs; ``--no-mincut`` drops both compiled variants).
``--profiles K`` measures every budget K times, each in a fresh child process with its
own profile (so possibly its own plan), and summarises the ratios over profiles
(``by_profile``).  With min-cut in the run every planner row also carries its paired
ratio to it (``vs_mincut``, same rounds), and the min-cut rows what its forward saves
for the backward (``saved_for_backward``) and what its backward runs (``backward_ops``).
``--by-kind`` adds ``hybrid-only-<kind>`` entries: hybrid's plan with only its
decisions of one kind (recompute, compress, regen, mask; the rest kept), timed in the same
rounds, so each kind's measured step overhead (``overhead_s``) stands beside its
predicted one (``predicted_by_kind``).
``--autotune`` adds ``hybrid-tuned``: hybrid's candidate plans timed before each
budget's measurement, the fastest measured with the others (``tune_s``: tuning time).
``--refined-entry`` adds ``hybrid-refined`` (``plan(..., refine=True)``: the local search
of :mod:`edgetrain.engine.budget.refine` on) and ``hybrid-greedy`` (``refine=False``: the
greedy walks alone), each only when its plan differs from hybrid's own, timed in the
same rounds; their rows carry ``vs_hybrid`` (this plan / hybrid's, paired).

The accountant's peak is a lower bound for the compiled entries (what their backward
recomputes are graph locals), so every entry also gets its step's peak over *every*
allocation (``alloc_peak_bytes``: :func:`step_alloc_peak`, one extra untimed step).
``--mincut-matched`` adds ``mincut-matched``: min-cut at the ``activation_memory_budget``
whose all-allocation peak meets the budget (or hybrid's own, if higher), found by
:func:`match_mincut`, and paired with the planners (``vs_mincut_matched``).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from edgetrain.commands.budget import zoo_task
from edgetrain.engine.budget import (
    MemoryAccountant,
    PlanExecutor,
    minimum_budget,
    plan,
    plan_candidates,
    profile_model,
)
from edgetrain.engine.budget.accountant import (  # noqa: F401  (alloc_peak_bytes: API)
    alloc_peak_bytes,
    minor_faults,
    model_state_tensors,
    peak_rss_bytes,
    settle_heap,
)
from edgetrain.engine.budget.accountant import step_alloc_peak as _step_alloc_peak
from edgetrain.engine.budget.autotune import autotune
from edgetrain.engine.budget.runner import (
    codecs_for,
    max_grad_diff,
    measure_steps,
    none_plan,
    step_order,
)
from edgetrain.engine.budget.stats import paired_summary
from edgetrain.errors import BudgetError, ConfigError

METHODS = ("recompute", "compress", "swap", "hybrid")
#: the compiled min-cut entries (``mincut-matched`` only with ``--mincut-matched``)
COMPILED = ("mincut", "mincut-free", "mincut-matched")


def _by_kind(p, unit_names: set[str]) -> dict[str, float]:
    """Predicted overhead (s) of a plan per decision kind."""
    out: dict[str, float] = {}
    for u in p.units:
        if u.decision == "keep":
            continue
        k = "leafrc" if u.decision == "recompute" and u.name not in unit_names else u.decision
        out[k] = out.get(k, 0.0) + u.cost_s
    return out


def _ckpt_all(units):
    def wrap(model):
        for name in units:
            mod = model.get_submodule(name)
            fwd = type(mod).forward.__get__(mod)
            mod.forward = lambda *a, _f=fwd, **k: torch.utils.checkpoint.checkpoint(
                _f, *a, use_reentrant=False, **k
            )
        return model

    def unwrap(model):
        for name in units:
            mod = model.get_submodule(name)
            if "forward" in vars(mod):
                del mod.forward

    return wrap, unwrap


class _CkptAll:
    """Entry for ``torch.utils.checkpoint`` on every unit in :func:`_interleaved`: the
    wrapping is applied around its own steps only (outside the timed region), so the
    other entries of the same rounds run the model's own forwards."""

    def __init__(self, units) -> None:
        self.units = list(units)
        self._wrap, self._unwrap = _ckpt_all(self.units)

    @contextlib.contextmanager
    def applied(self, model):
        self._wrap(model)
        try:
            yield model
        finally:
            self._unwrap(model)


#: hybrid's decision kinds that ``--by-kind`` times on their own
KINDS = ("recompute", "compress", "regen", "mask", "swap")


def only_kind(p, kind: str):
    """``p`` with only its ``kind`` decisions (the other units kept): timed beside the
    full plan, its overhead is what that kind of decision costs inside the step."""
    q = copy.deepcopy(p)
    for u in q.units:
        if u.decision != kind:
            u.decision, u.codec, u.chain, u.held_bytes = "keep", None, None, u.saved_bytes
    q.method = f"{p.method}-only-{kind}"
    q.predicted_overhead_s = sum(u.cost_s for u in q.units if u.decision != "keep")
    return q


class _Compiled:
    """``model`` under ``torch.compile`` with the min-cut partitioner at ``frac``.

    The budget is patched inside the partition function, i.e. at compile time, so
    two variants of the same model (``mincut`` and ``mincut-free``) can live in
    dynamo's cache side by side (it keys entries by backend) and be called
    alternately.  ``compiles`` counts partitioner calls (one per compiled graph).
    ``saved`` summarises what the partitioned forward hands to the backward (per aten
    op: count and bytes, graph inputs / parameters as ``input/param``) and
    ``bw_ops`` the op counts of the backward graph (what it recomputes shows there),
    both summed over every partitioner call (one per compiled graph; the benchmark
    reports ``recompiles`` in timed steps, normally 0).
    """

    def __init__(self, model, frac: float) -> None:
        from functorch.compile import make_boxed_func, min_cut_rematerialization_partition
        from torch._dynamo.backends.common import aot_autograd

        self.frac, self.compiles = frac, 0
        self.saved: dict[str, list[int]] = {}
        self.bw_ops: dict[str, int] = {}

        def nop(gm, example_inputs):
            return make_boxed_func(gm)

        def partition(*a, **k):
            self.compiles += 1
            with torch._functorch.config.patch(activation_memory_budget=frac):
                fw, bw = min_cut_rematerialization_partition(*a, **k)
            self._summarise(fw, bw, k.get("num_fwd_outputs", 1))
            return fw, bw

        backend = aot_autograd(fw_compiler=nop, bw_compiler=nop, partition_fn=partition)
        self.fn = torch.compile(model, backend=backend, dynamic=False)

    def __call__(self, *a):
        return self.fn(*a)

    def _summarise(self, fw, bw, num_fwd_outputs: int) -> None:
        out = next(n for n in fw.graph.nodes if n.op == "output")
        for n in out.args[0][num_fwd_outputs:]:
            v = getattr(n, "meta", {}).get("val")
            if not isinstance(v, torch.Tensor):
                continue
            key = "input/param" if n.op == "placeholder" else str(n.target).replace("aten.", "")
            c = self.saved.setdefault(key, [0, 0])
            c[0] += 1
            c[1] += v.numel() * v.element_size()
        for n in bw.graph.nodes:
            if n.op == "call_function":
                key = str(n.target).replace("aten.", "")
                self.bw_ops[key] = self.bw_ops.get(key, 0) + 1


def _run_entry(model, entry, inputs, loss_fn, acc) -> None:
    """One forward + loss + backward of ``entry`` (as :func:`_interleaved` runs it, untimed).
    ``entry``: :data:`BARE`, an :class:`ExecutionPlan`, an :class:`_Unaccounted` plan,
    or any callable model (a :class:`_Compiled` runner, a checkpoint-wrapped model)."""
    if entry is BARE:
        loss_fn(model(*inputs)).backward()
    elif isinstance(entry, _Unaccounted):
        with PlanExecutor(model, entry.plan, accountant=acc, account=False) as ex:
            ex.step(inputs, loss_fn)
    elif isinstance(entry, _CkptAll):
        with entry.applied(model), acc.track():
            loss_fn(model(*inputs)).backward()
    elif callable(entry):
        with acc.track():
            loss_fn(entry(*inputs)).backward()
    else:
        with PlanExecutor(model, entry, accountant=acc) as ex:
            ex.step(inputs, loss_fn)


def step_alloc_peak(model, entry, inputs, loss_fn, seed=0) -> tuple[int, int]:
    """(all-allocation peak, accountant peak) of one untimed step of any entry of this
    benchmark: :func:`edgetrain.engine.budget.accountant.step_alloc_peak` with
    :func:`_run_entry`."""
    return _step_alloc_peak(model, entry, inputs, loss_fn, seed=seed, run=_run_entry)


def match_mincut(model, inputs, loss_fn, target_bytes: int, hi: float, steps: int = 3) -> dict:
    """Min-cut's ``activation_memory_budget`` for an all-allocation step peak
    (:func:`step_alloc_peak`) of at most ``target_bytes``: :func:`search_setting` over
    real compiles of ``model`` (each try a fresh one, ``torch._dynamo.reset()`` first)."""

    def peak_of(f: float) -> tuple[int, int]:
        torch._dynamo.reset()
        return step_alloc_peak(model, _Compiled(model, f), inputs, loss_fn)

    out = search_setting(peak_of, target_bytes, hi, steps)
    torch._dynamo.reset()
    return out


def search_setting(peak_of, target_bytes: int, hi: float, steps: int = 3) -> dict:
    """The largest setting ``f`` in ``[0, hi]`` found with ``peak_of(f)[0] <= target_bytes``
    (``peak_of`` returns (all-allocation peak, saved-tensor peak); for min-cut a larger
    ``activation_memory_budget`` means less recomputation, so the largest fitting one is
    the fastest), by bisection.

    Tries ``hi`` (fits: done), then 0.0 (the most recomputation the partitioner allows);
    if 0.0 does not fit either, ``hi / 2``, ``hi / 4``, ``3 hi / 4`` until one fits (the
    peak need not fall monotonically with the setting: a backward that recomputes
    everything holds much of it at once again).  If none of these fits, it refines around
    the lowest peak found, ``steps`` times: the midpoints between it and its tried
    neighbours.  Between the fitting ``lo`` found and the next tried setting above it
    (which did not fit) it bisects ``steps`` times.  Settings are rounded to 4 decimals
    and none is tried twice.  Returns ``chosen`` (the setting to run),
    ``reached`` (whether any try fitted; if not, ``chosen`` is the try with the lowest
    peak), and ``tried``: per try the setting, all-allocation and saved-tensor peaks.
    """
    tried: list[dict] = []

    def fits(f: float) -> bool:
        done = [t for t in tried if t["activation_memory_budget"] == f]
        if done:
            return done[0]["fits"]
        alloc, saved = peak_of(f)
        tried.append({"activation_memory_budget": f, "alloc_peak_bytes": alloc,
                      "saved_peak_bytes": saved, "fits": alloc <= target_bytes})  # fmt: skip
        return alloc <= target_bytes

    lo = None
    if fits(hi):
        lo = hi
    elif fits(0.0):
        lo = 0.0
    else:
        lo = next((f for f in (hi / 2, hi / 4, 3 * hi / 4) if fits(round(f, 4))), None)
        lo = None if lo is None else round(lo, 4)
    for _ in range(0 if lo is not None else steps):
        fs = sorted(t["activation_memory_budget"] for t in tried)
        best = min(tried, key=lambda t: t["alloc_peak_bytes"])["activation_memory_budget"]
        i = fs.index(best)
        near = [fs[j] for j in (i - 1, i + 1) if 0 <= j < len(fs)]
        lo = next((m for m in (round((best + f) / 2, 4) for f in near) if fits(m)), None)
        if lo is not None:
            break
    if lo is not None:  # bisect upwards from it, to the next tried setting (did not fit)
        hi = min((t["activation_memory_budget"] for t in tried
                  if t["activation_memory_budget"] > lo), default=lo)  # fmt: skip
    if lo is not None and lo < hi:
        for _ in range(steps):
            mid = round((lo + hi) / 2, 4)
            if fits(mid):
                lo = mid
            else:
                hi = mid
    if lo is None:
        best = min(tried, key=lambda t: t["alloc_peak_bytes"])
        return {"chosen": best["activation_memory_budget"], "reached": False,
                "target_bytes": target_bytes, "tried": tried}  # fmt: skip
    return {"chosen": lo, "reached": True, "target_bytes": target_bytes, "tried": tried}


#: entry for plain PyTorch training (:func:`_interleaved`): what a user runs without us
BARE = "bare"


class _Unaccounted:
    """An entry running ``plan`` with ``PlanExecutor(account=False)``: no Python hook on
    kept tensors (the executor's training mode); its peak is not measured."""

    def __init__(self, plan) -> None:
        self.plan = plan


def _interleaved(model, entries, inputs, loss_fn, repeats, seed=0, order_seed=0):
    """Each entry ``repeats`` times (+1 warm-up), interleaved, from the same state; the
    order is a fresh seeded permutation every repeat (:func:`step_order`: no entry has
    a constant position or predecessor).

    ``entries`` maps a name to :data:`BARE` (the model's own forward + loss + backward:
    no executor, no saved-tensor hooks, no accountant; its peak is not measured), to an
    :class:`ExecutionPlan` (run by
    :class:`PlanExecutor` exactly as :func:`measure_steps` does, simulated swap I/O
    time included), to a :class:`_Compiled` runner or to :class:`_CkptAll` (forward +
    loss + backward under the same accountant).  Every step is timed on the same clocks: process
    CPU time (``times``, the clock of :func:`measure_steps`), thread CPU time
    (``thread``) and wall time (``wall``).
    """
    state = copy.deepcopy(model.state_dict())
    out = {k: {"times": [], "thread": [], "wall": [], "minflt": [], "peak": 0, "grads": None}
           for k in entries}  # fmt: skip
    warm_compiles = {}
    for r in range(repeats + 1):  # r == 0: warm-up (and compilation), not timed
        if r == 1:
            warm_compiles = {k: e.compiles for k, e in entries.items() if isinstance(e, _Compiled)}
        for name in step_order(list(entries), r, order_seed):
            entry = entries[name]
            model.load_state_dict(state)
            model.zero_grad(set_to_none=True)
            acc = MemoryAccountant(exclude=model_state_tensors(model))
            torch.manual_seed(seed)
            io_s = 0.0
            flt0 = minor_faults()
            if entry is BARE:  # plain PyTorch: no executor, no hooks, nothing measured
                c0, h0, t0 = time.process_time(), time.thread_time(), time.perf_counter()
                loss_fn(model(*inputs)).backward()
                c1, h1, t1 = time.process_time(), time.thread_time(), time.perf_counter()
            elif isinstance(entry, _Compiled):
                with acc.track():
                    c0, h0, t0 = time.process_time(), time.thread_time(), time.perf_counter()
                    loss = loss_fn(entry(*inputs))
                    loss.backward()
                    c1, h1, t1 = time.process_time(), time.thread_time(), time.perf_counter()
            elif isinstance(entry, _CkptAll):  # wrapped outside the timed region
                with entry.applied(model), acc.track():
                    c0, h0, t0 = time.process_time(), time.thread_time(), time.perf_counter()
                    loss_fn(model(*inputs)).backward()
                    c1, h1, t1 = time.process_time(), time.thread_time(), time.perf_counter()
            else:
                unacc = isinstance(entry, _Unaccounted)
                p_ = entry.plan if unacc else entry
                with PlanExecutor(model, p_, accountant=acc, account=not unacc) as ex:
                    c0, h0, t0 = time.process_time(), time.thread_time(), time.perf_counter()
                    ex.step(inputs, loss_fn)
                    c1, h1, t1 = time.process_time(), time.thread_time(), time.perf_counter()
                    io_s = ex.simulated_io_s
            rec = out[name]
            rec["peak"] = max(rec["peak"], acc.peak)
            if r > 0:
                # minor page faults of the step (and its setup): a step whose peak the
                # heap does not cover pays the kernel's zeroed pages in system time
                rec["minflt"].append(minor_faults() - flt0)
                rec["times"].append(c1 - c0 + io_s)
                rec["thread"].append(h1 - h0 + io_s)
                rec["wall"].append(t1 - t0 + io_s)
            if rec["grads"] is None:
                rec["grads"] = [
                    (p_.grad.detach().clone() if p_.grad is not None else None)
                    for p_ in model.parameters()
                ]
    for k, e in entries.items():
        if isinstance(e, _Compiled):
            out[k]["compiles"] = e.compiles
            out[k]["recompiles"] = e.compiles - warm_compiles.get(k, e.compiles)
    model.load_state_dict(state)
    model.zero_grad(set_to_none=True)
    return out


def _planner(k: str) -> bool:
    """A planner entry (paired with the baselines): a method, ``hybrid-tuned`` or a
    ``--by-kind`` part of hybrid's plan."""
    return (
        k in METHODS
        or k in ("hybrid-tuned", "hybrid-exact", *VARIANTS)
        or k.startswith("hybrid-only-")
    )


#: ``--refined-entry``: hybrid's plan with the local search on / off (``refine``)
VARIANTS = ("hybrid-refined", "hybrid-greedy")


def _paired_with_baselines(k: str) -> bool:
    """Entries paired with min-cut (``vs_mincut`` / ``vs_mincut_matched``)."""
    return k in METHODS or k in ("hybrid-tuned", *VARIANTS)


def _round_ratios(model, entries, inputs, loss_fn, repeats, rounds):
    """Run the interleaved measurement ``rounds`` times; per round, each entry's ratio of
    medians vs ``none`` (process CPU, thread CPU, wall) and ``mincut``'s vs
    ``mincut-free``.  Returns (first round's result, {entry: {clock: [ratio per
    round]}}, {entry: max peak over rounds}, {entry: recompiles in timed steps})."""
    ratios = {k: {"cpu": [], "thread": [], "wall": [], "vs_free": [], "vs_recompute": [],
                  "step_vs_none": [], "step_vs_recompute": [], "vs_mincut": [],
                  "step_vs_mincut": [], "vs_mincut_matched": [], "step_vs_mincut_matched": [],
                  "vs_ckpt_all": [], "step_vs_ckpt_all": [], "overhead_s": [],
                  "vs_hybrid": [], "step_vs_hybrid": [], "minflt": []}
              for k in entries}  # fmt: skip
    peaks = dict.fromkeys(entries, 0)
    recompiles = dict.fromkeys(entries, 0)
    first = None
    for i in range(rounds):
        res = _interleaved(model, entries, inputs, loss_fn, repeats, order_seed=i)
        first = first or res
        med = {k: {c: statistics.median(r[c]) for c in ("times", "thread", "wall")}
               for k, r in res.items()}  # fmt: skip
        for k, r in res.items():
            ratios[k]["cpu"].append(med[k]["times"] / med["none"]["times"])
            ratios[k]["thread"].append(med[k]["thread"] / med["none"]["thread"])
            ratios[k]["wall"].append(med[k]["wall"] / med["none"]["wall"])
            # seconds of process CPU time this entry adds to the unplanned step (this round)
            ratios[k]["overhead_s"].append(med[k]["times"] - med["none"]["times"])
            ratios[k]["minflt"] += r["minflt"]
            if k in ("mincut", "mincut-matched") and "mincut-free" in res:
                ratios[k]["vs_free"].append(med[k]["times"] / med["mincut-free"]["times"])
            # per repeat: step j of every entry ran within the same repeat (seconds apart)
            ratios[k]["step_vs_none"] += [a / b for a, b in zip(r["times"], res["none"]["times"],
                                                                  strict=True)]  # fmt: skip
            if k not in ("none", "aa", "bare", "none-fast", "recompute") and "recompute" in res:
                # paired: both plans ran in the same interleaved steps of this round
                ratios[k]["vs_recompute"].append(med[k]["times"] / med["recompute"]["times"])
                ratios[k]["step_vs_recompute"] += [
                    a / b for a, b in zip(r["times"], res["recompute"]["times"], strict=True)
                ]
            if _paired_with_baselines(k) and "mincut" in res:
                # paired against the min-cut partitioner run in the same interleaved steps
                ratios[k]["vs_mincut"].append(med[k]["times"] / med["mincut"]["times"])
                ratios[k]["step_vs_mincut"] += [
                    a / b for a, b in zip(r["times"], res["mincut"]["times"], strict=True)
                ]
            if _paired_with_baselines(k) and "mincut-matched" in res:
                # paired against min-cut at the setting matched to the same all-allocation memory
                ratios[k]["vs_mincut_matched"].append(
                    med[k]["times"] / med["mincut-matched"]["times"]
                )
                ratios[k]["step_vs_mincut_matched"] += [
                    a / b for a, b in zip(r["times"], res["mincut-matched"]["times"], strict=True)
                ]
            if _planner(k) and "ckpt-all" in res:
                # paired against checkpointing every block in the same interleaved steps
                ratios[k]["vs_ckpt_all"].append(med[k]["times"] / med["ckpt-all"]["times"])
                ratios[k]["step_vs_ckpt_all"] += [
                    a / b for a, b in zip(r["times"], res["ckpt-all"]["times"], strict=True)
                ]
            if k in VARIANTS and "hybrid" in res:
                # the same method with the local search on / off, in the same steps
                ratios[k]["vs_hybrid"].append(med[k]["times"] / med["hybrid"]["times"])
                ratios[k]["step_vs_hybrid"] += [
                    a / b for a, b in zip(r["times"], res["hybrid"]["times"], strict=True)
                ]
            peaks[k] = max(peaks[k], r["peak"])
            recompiles[k] += r.get("recompiles", 0)
    return first, ratios, peaks, recompiles


def bench_model(name, batch, budgets, repeats, mincut, log, rounds=1, rounds_at=None,
                methods=METHODS, rows_path=None, tune=False, ckpt_all=True,
                aa=False, profile_index=None, mincut_matched=False, match_steps=3,
                by_kind=False, scope="saved", exact_entry=False,
                refined_entry=False, release=True):  # fmt: skip
    """Measure every budget; ``rows_path`` (JSON lines) gets each budget's rows as soon as
    they are measured, so a run that dies later (e.g. out of memory) keeps them.

    ``tune`` adds ``hybrid-tuned``: hybrid's candidate plans (:func:`plan_candidates`)
    timed by :func:`autotune` before the measurement, the fastest then measured
    interleaved with the others; the tuning steps are not among the timed steps, their
    wall time is the row's ``tune_s``.

    ``aa`` adds ``aa``: a second copy of the empty plan, measured like every other
    entry (an A/A control: its ratio to ``none`` and that ratio's interval show the
    step noise of the run; it should be level with 1), and ``bare``: plain PyTorch
    training without the executor (its ratio to ``none`` is the inverse of the
    executor's fixed cost: the hooks and the accountant that every entry pays), and
    ``none-fast``: the empty plan with ``PlanExecutor(account=False)`` (no hook on kept
    tensors; the executor's fixed cost without the accountant).

    ``profile_index`` (set by ``--profiles``) tags every row with the index of the fresh
    process (and so of the fresh profile) that measured it.

    ``ckpt_all`` adds ``ckpt-all`` (``torch.utils.checkpoint`` on every unit) to every
    budget's rounds; the planner rows get ``vs_ckpt_all`` / ``steps_vs_ckpt_all`` (paired,
    like ``vs_mincut``).  ``by_kind`` adds ``hybrid-only-<kind>`` (:func:`only_kind`) for
    every decision kind in hybrid's plan.

    After the timed rounds, one extra untimed step per entry (``none``, the planners,
    ``ckpt-all``, the compiled entries) gives its all-allocation peak
    (:func:`step_alloc_peak`: ``alloc_peak_bytes``, ``alloc_peak_over_budget``).

    ``mincut_matched`` (needs ``mincut``) adds ``mincut-matched``: min-cut at the
    ``activation_memory_budget`` that :func:`match_mincut` finds for an all-allocation
    peak at most the budget bytes -- or hybrid's own all-allocation peak when that is
    higher (the gradients alone can exceed a saved-tensor budget), i.e. the same
    measured memory -- timed with the others in the same rounds (``vs_mincut_matched``
    on the planner rows, the search on its row as ``match``).

    ``exact_entry`` adds ``hybrid-exact``: hybrid's lowest-predicted candidate plan
    without compression (:func:`plan_candidates`; lossless), when hybrid's own plan
    compresses a unit -- the same plan otherwise, and then not added.

    ``refined_entry`` adds ``hybrid-refined`` (:func:`plan_candidates` with
    ``refine=True``, first) and ``hybrid-greedy`` (``refine=False``), each only when its
    decisions differ from hybrid's plan (which is one of the two under the scope's
    default); their rows get ``vs_hybrid`` / ``steps_vs_hybrid`` (paired, like
    ``vs_mincut``) and are paired with the baselines like hybrid.

    ``scope="all"``: the budget bounds every allocation of the step (the planners plan
    with ``scope="all"`` on a profile with ``alloc_timeline=True``); a fraction is of
    the unplanned step's measured all-allocation peak, ``"ckpt-all"`` is ckpt-all's
    measured all-allocation peak, ``"min"`` hybrid's minimum feasible all-allocation
    budget; ``within_budget`` is then the all-allocation peak's."""
    model, inputs, loss_fn = zoo_task(name, batch, seed=0)
    t0 = time.perf_counter()
    codecs = {**codecs_for("hybrid"), **codecs_for("compress")}
    prof = profile_model(model, inputs, loss_fn, codecs=codecs, alloc_timeline=scope == "all")
    log(f"[{name} b{batch}] profiled {len(prof.units)} units in {time.perf_counter() - t0:.1f}s")
    released = 0
    if release:
        released, retained = settle_heap()
        log(
            f"[{name} b{batch}] released {released / 2**20:.0f} MiB of the profiler's heap; "
            + ("freed memory is kept from now on" if retained else "no glibc: heap as it is")
        )
    base = none_plan(prof)
    unplanned = measure_steps(model, {"none": base}, inputs, loss_fn, repeats=0)["none"]["peak"]
    ckpt = _CkptAll([u.name for u in prof.units])
    pre_alloc: dict[str, tuple[int, int]] = {}
    if scope == "all":
        pre_alloc["none"] = step_alloc_peak(model, base, inputs, loss_fn)
        unplanned = pre_alloc["none"][0]
        log(f"[{name} b{batch}] unplanned all-allocation peak {unplanned:,} "
            f"(predicted {prof.alloc.measured_peak:,})")  # fmt: skip
    mins = {m: minimum_budget(prof, m, scope=scope) for m in methods}
    if tune:
        mins["hybrid-tuned"] = minimum_budget(prof, "hybrid", scope=scope)
    names = (*methods, "hybrid-tuned") if tune else methods
    names = (*names, "hybrid-exact") if exact_entry else names
    names = (*names, *VARIANTS) if refined_entry else names
    names = ("bare", "none-fast", "aa", *names) if aa else names
    names = (*names, "ckpt-all") if ckpt_all else names
    rows = []
    for spec in budgets:
        t_budget = time.perf_counter()
        if spec == "ckpt-all":
            pre_alloc["ckpt-all"] = step_alloc_peak(model, ckpt, inputs, loss_fn)
            budget = pre_alloc["ckpt-all"][0]
        elif spec == "min":
            budget = minimum_budget(prof, "hybrid", scope=scope)
        else:
            budget = int(float(spec) * unplanned)
        frac = float(spec) if spec not in ("ckpt-all", "min") else budget / unplanned
        if spec in ("ckpt-all", "min"):
            log(f"  {frac:4.3f} = {spec}: budget {budget:,} bytes ({scope})")
        entries = {"none": base}
        if aa:
            entries["aa"] = copy.deepcopy(base)
            entries["bare"] = BARE
            entries["none-fast"] = _Unaccounted(copy.deepcopy(base))
        for m in methods:
            with contextlib.suppress(BudgetError):
                entries[m] = plan(prof, budget, m, scope=scope)
        if ckpt_all:
            entries["ckpt-all"] = ckpt
        if exact_entry and "hybrid" in entries and entries["hybrid"].decision_counts()["compress"]:
            lossless = [
                c
                for c in plan_candidates(prof, budget, "hybrid", scope=scope)
                if not c.decision_counts()["compress"]
            ]
            if lossless:
                entries["hybrid-exact"] = lossless[0]
        if refined_entry and "hybrid" in entries:
            for k, on in zip(VARIANTS, (True, False), strict=True):
                alt = plan_candidates(prof, budget, "hybrid", scope=scope, refine=on)[0]
                if _decided(alt) != _decided(entries["hybrid"]):
                    entries[k] = alt
        kinds = []
        if by_kind and "hybrid" in entries:
            counts = entries["hybrid"].decision_counts()
            kinds = [f"hybrid-only-{k}" for k in KINDS if counts.get(k)]
            for k in kinds:
                entries[k] = only_kind(entries["hybrid"], k.removeprefix("hybrid-only-"))
        tuned = None
        if tune:
            with contextlib.suppress(BudgetError):
                cands = plan_candidates(prof, budget, "hybrid", scope=scope)
                entries["hybrid-tuned"], tuned = autotune(
                    model, inputs, loss_fn, cands, repeats=repeats
                )
                tuned["candidates"] = [
                    {"predicted_overhead_s": c.predicted_overhead_s,
                     "decisions": c.decision_counts()} for c in cands
                ]  # fmt: skip
        compiled_error = None
        alloc: dict[str, tuple[int, int]] = dict(pre_alloc)
        match = None
        if mincut:
            torch._dynamo.reset()  # drop the previous budget's graphs (cache size limit)
            if mincut_matched:
                t_match = time.perf_counter()
                target, basis = budget, "budget"
                if "hybrid" in entries:
                    alloc["hybrid"] = step_alloc_peak(model, entries["hybrid"], inputs, loss_fn)
                    if alloc["hybrid"][0] > budget:
                        target, basis = alloc["hybrid"][0], "hybrid all-allocation peak"
                match = match_mincut(model, inputs, loss_fn, target, frac, match_steps)
                match.update(target=basis, search_s=time.perf_counter() - t_match)
                log(f"  {frac:4.2f} mincut-matched search ({match['search_s']:.0f}s, target "
                    f"{target:,} = {basis}): " + ", ".join(
                        f"{t['activation_memory_budget']:g}->{t['alloc_peak_bytes']:,}"
                        for t in match["tried"]) + f"; chosen {match['chosen']:g}"
                    + ("" if match["reached"] else " (NOT reached: lowest peak)"))  # fmt: skip
            entries["mincut"] = _Compiled(model, frac)
            entries["mincut-free"] = _Compiled(model, 1.0)
            if match is not None:
                entries["mincut-matched"] = _Compiled(model, match["chosen"])
        n_rounds = rounds if rounds_at is None or frac in rounds_at or spec in rounds_at else 1
        try:
            res, ratios, peaks, recompiles = _round_ratios(
                model, entries, inputs, loss_fn, repeats, n_rounds
            )
        except Exception as exc:  # report, do not hide: a compiled baseline failed to run
            if not mincut:
                raise
            compiled_error = f"{type(exc).__name__}: {str(exc)[:200]}"
            for k in COMPILED:
                entries.pop(k, None)
            res, ratios, peaks, recompiles = _round_ratios(
                model, entries, inputs, loss_fn, repeats, n_rounds
            )
        # one extra untimed step per entry: its peak over every allocation (not in the ratios)
        for m in ("none", *names, *kinds, *COMPILED):
            if m in entries and m not in alloc and m not in ("aa", "bare", "none-fast"):
                alloc[m] = step_alloc_peak(model, entries[m], inputs, loss_fn)
        compiled = [m for m in COMPILED if mincut and (m != "mincut-matched" or mincut_matched)]
        for m in (*names, *kinds, *compiled):
            if m == "hybrid-exact" and m not in entries:  # hybrid's own plan is lossless
                continue
            if m in VARIANTS and m not in entries:  # the same plan as hybrid's
                continue
            row = {"model": name, "batch": batch, "budget": frac, "budget_bytes": budget,
                   "method": m, "budget_scope": scope}  # fmt: skip
            if spec in ("ckpt-all", "min"):
                row["budget_spec"] = spec
            if profile_index is not None:
                row["profile"] = profile_index
            if m in COMPILED and compiled_error:
                row.update(feasible=False, error=compiled_error)
            elif m not in entries:
                row.update(feasible=False, min_feasible_bytes=mins[m],
                           min_feasible_frac=mins[m] / unplanned)  # fmt: skip
            else:
                rr = ratios[m]
                row.update(
                    feasible=True,
                    # median over rounds of (median step / median none step), same round
                    ratio=statistics.median(rr["cpu"]),
                    round_ratios=rr["cpu"],
                    thread_ratio=statistics.median(rr["thread"]),
                    wall_ratio=statistics.median(rr["wall"]),
                    measured_peak=peaks[m],
                    peak_over_budget=peaks[m] / budget,
                    measured_peak_frac=peaks[m] / unplanned,
                    within_budget=peaks[m] <= budget,
                    grad_err=max_grad_diff(res[m]["grads"], res["none"]["grads"]),
                    # order-statistic interval (>= 90 %) of the median over rounds, and its verdict
                    vs_none=paired_summary(rr["cpu"]).to_json(),
                    # the same, paired per repeat (rounds x repeats samples)
                    steps_vs_none=paired_summary(rr["step_vs_none"]).to_json(),
                )
                row["overhead_s"] = statistics.median(rr["overhead_s"])
                # minor page faults per timed step (median): where the heap the step
                # starts from does not cover its peak (e.g. unplanned after a plan)
                row["minflt"] = statistics.median(rr["minflt"])
                row["none_minflt"] = statistics.median(ratios["none"]["minflt"])
                if m in alloc:
                    row.update(alloc_peak_bytes=alloc[m][0],
                               alloc_peak_over_budget=alloc[m][0] / budget,
                               alloc_step_saved_peak=alloc[m][1],
                               none_alloc_peak_bytes=alloc["none"][0])  # fmt: skip
                    if scope == "all":  # the budget bounds every allocation
                        row["within_budget"] = alloc[m][0] <= budget
                if rr["vs_recompute"]:
                    row.update(vs_recompute=paired_summary(rr["vs_recompute"]).to_json(),
                               round_vs_recompute=rr["vs_recompute"],
                               steps_vs_recompute=paired_summary(
                                   rr["step_vs_recompute"]).to_json())  # fmt: skip
                    if _paired_with_baselines(m):
                        # the same decisions: the paired ratio is then a second A/A control
                        row["same_plan_as_recompute"] = _decided(entries[m]) == _decided(
                            entries["recompute"]
                        )
                if rr["vs_hybrid"]:
                    # this plan / hybrid's (local search on vs off), paired per round and repeat
                    row.update(vs_hybrid=paired_summary(rr["vs_hybrid"]).to_json(),
                               round_vs_hybrid=rr["vs_hybrid"],
                               steps_vs_hybrid=paired_summary(
                                   rr["step_vs_hybrid"]).to_json())  # fmt: skip
                if rr["vs_mincut"]:
                    # this plan / min-cut, paired per round and per repeat (same steps)
                    row.update(vs_mincut=paired_summary(rr["vs_mincut"]).to_json(),
                               round_vs_mincut=rr["vs_mincut"],
                               steps_vs_mincut=paired_summary(
                                   rr["step_vs_mincut"]).to_json())  # fmt: skip
                if rr["vs_ckpt_all"]:
                    # this plan / checkpointing every block, paired per round and per repeat
                    row.update(vs_ckpt_all=paired_summary(rr["vs_ckpt_all"]).to_json(),
                               round_vs_ckpt_all=rr["vs_ckpt_all"],
                               steps_vs_ckpt_all=paired_summary(
                                   rr["step_vs_ckpt_all"]).to_json())  # fmt: skip
                if rr["vs_mincut_matched"]:
                    row.update(vs_mincut_matched=paired_summary(rr["vs_mincut_matched"]).to_json(),
                               round_vs_mincut_matched=rr["vs_mincut_matched"],
                               steps_vs_mincut_matched=paired_summary(
                                   rr["step_vs_mincut_matched"]).to_json())  # fmt: skip
                if m in COMPILED:
                    row.update(
                        activation_memory_budget=entries[m].frac,
                        compiles=entries[m].compiles,
                        recompiles=recompiles[m],
                        # what its forward saves for the backward, largest first, and
                        # what its backward graph runs (recomputation shows there)
                        saved_for_backward=dict(sorted(
                            entries[m].saved.items(), key=lambda kv: -kv[1][1])),
                        backward_ops=dict(sorted(
                            entries[m].bw_ops.items(), key=lambda kv: -kv[1])),
                    )  # fmt: skip
                    if m == "mincut-matched":
                        row["match"] = match
                    if rr["vs_free"]:
                        row.update(vs_free=statistics.median(rr["vs_free"]),
                                   round_vs_free=rr["vs_free"])  # fmt: skip
                elif m == "ckpt-all":
                    # budget-independent: its saved tensors and its whole step against this
                    # budget (above: peak_over_budget, measured_peak_frac, alloc_peak_*)
                    row.update(units=len(ckpt.units),
                               alloc_peak_frac=alloc[m][0] / unplanned)  # fmt: skip
                elif m in ("bare", "none-fast"):
                    row.update(measured_peak=None, peak_over_budget=None,
                               measured_peak_frac=None, within_budget=None)  # fmt: skip
                else:
                    p = entries[m]
                    row.update(
                        predicted_peak=p.predicted_peak_bytes,
                        predicted_overhead_s=p.predicted_overhead_s,
                        decisions=p.decision_counts(),
                        # what was evicted and how (to tell identical plans from equal counts)
                        plan=[[u.name, u.decision] for u in p.units if u.decision != "keep"],
                        # predicted overhead per decision kind (s); "recompute" = blocks,
                        # "leafrc" = leaf recomputations inside kept blocks
                        predicted_by_kind=_by_kind(p, {u.name for u in prof.units}),
                        # the profile's in-step recompute factor (eq. 6 x rc_scale)
                        rc_scale=prof.units[0].rc_scale if prof.units else 1.0,
                        # and its in-step factor per kind of regeneration
                        regen_scale={r.kind: r.scale for r in prof.regens},
                    )
                    if scope == "all":
                        row.update(predicted_alloc_peak=p.predicted_peak_bytes,
                                   predicted_saved_peak=p.meta.get("predicted_saved_peak_bytes"),
                                   alloc_prediction_error=(alloc[m][0] - p.predicted_peak_bytes)
                                   / p.predicted_peak_bytes)  # fmt: skip
                    if m == "hybrid":  # what the tie-break chose from (first = chosen)
                        row["candidates"] = [
                            {"predicted_overhead_s": c.predicted_overhead_s,
                             "decisions": {k: v for k, v in c.decision_counts().items() if v}}
                            for c in plan_candidates(prof, budget, "hybrid", scope=scope)
                        ]  # fmt: skip
                    if m == "hybrid-tuned":
                        row.update(
                            tune_s=tuned["tune_s"],
                            tune_medians=tuned["medians"],
                            tune_peaks=tuned["peaks"],
                            tune_chosen=tuned["chosen"],
                            tune_candidates=tuned["candidates"],
                        )
            rows.append(row)
            log(f"  {frac:4.2f} {m:11s} " + _brief(row))
        log(f"  {frac:4.2f} ({n_rounds} round(s), {time.perf_counter() - t_budget:.0f}s)")
        here = [r for r in rows if r["budget"] == frac]
        for m in ("hybrid", "hybrid-tuned"):
            vb = versus_baselines(here, of=m)
            if vb is not None:
                next(r for r in here if r["method"] == m)["vs_baselines"] = vb
                log(f"  {frac:4.2f} {m} vs every baseline that fits: " + ", ".join(
                    f"{b} {v['median']:.3f} [{v['lo']:.3f},{v['hi']:.3f}] {v['verdict']}"
                    + (" (same plan)" if v.get("same_plan") else "")
                    for b, v in vb["vs"].items()
                ) + (f"; over the budget: {', '.join(vb['does_not_fit'])}"
                     if vb["does_not_fit"] else ""))  # fmt: skip
        if mincut:
            # free this budget's compiled graphs now: a long run grew by about 2 GB of RSS
            # per budget without this (cause not isolated; see the README notes)
            del entries, res
            torch._dynamo.reset()
            gc.collect()
        if rows_path is not None:
            with open(rows_path, "a") as f:
                for row in rows:
                    if row["budget"] == frac:
                        f.write(json.dumps({**row, "unplanned_peak_bytes": unplanned}) + "\n")
    return {"model": name, "batch": batch, "unplanned_peak_bytes": unplanned, "rows": rows,
            "budget_scope": scope,
            "min_feasible_frac": {m: v / unplanned for m, v in mins.items()},
            "peak_rss_bytes": peak_rss_bytes(), "heap_released_bytes": released}  # fmt: skip


#: the baselines hybrid must beat at a budget: the other planners, checkpointing every
#: block and min-cut (at its matched setting, and at the budget's own setting)
BASELINES = ("recompute", "compress", "swap", "ckpt-all", "mincut-matched", "mincut")


def versus_baselines(rows, of="hybrid"):
    """``of``'s step against every baseline entry of one budget that fits it.

    ``rows``: the rows of one budget (one run, so every entry was timed in the same
    interleaved rounds against the same unplanned steps).  Per round, ``of``'s ratio
    over a baseline's ratio is their paired step-time ratio; a baseline over the
    budget (``within_budget`` false) or not run is listed under ``does_not_fit`` /
    left out, not compared.  ``same_plan`` marks a planner baseline that chose
    ``of``'s very decisions (then the pair is an A/A control).  ``below_every`` is
    true when every compared baseline's verdict is "below"; ``not_above_every`` when
    none is "above".
    """
    by = {r["method"]: r for r in rows if r.get("feasible")}
    me = by.get(of)
    if me is None or not me.get("round_ratios"):
        return None
    out = {"vs": {}, "does_not_fit": []}
    for b in BASELINES:
        r = by.get(b)
        if r is None or not r.get("round_ratios"):
            continue
        if not r.get("within_budget"):
            out["does_not_fit"].append(b)
            continue
        pairs = [a / c for a, c in zip(me["round_ratios"], r["round_ratios"], strict=True)]
        v = paired_summary(pairs).to_json()
        if r.get("plan") is not None:
            v["same_plan"] = r["plan"] == me.get("plan")
        out["vs"][b] = v
    verdicts = [v["verdict"] for v in out["vs"].values()]
    out["below_every"] = bool(verdicts) and all(x == "below" for x in verdicts)
    out["not_above_every"] = bool(verdicts) and all(x != "above" for x in verdicts)
    return out


def _fresh_process_runs(spec, budgets, argv, out, log, profiles=1):
    """Each budget in its own child process (same options, ``--budgets`` one value).

    ``profiles`` > 1 runs every budget that many times, each time in a fresh child
    (so from a fresh profile, possibly a different plan), in the order
    budget 1..n of profile 0, then of profile 1, ... (load drift spreads over
    budgets); every row carries its ``profile`` index, and ``by_profile``
    (:func:`_profile_summary`) lists each (budget, method)'s per-profile ratios,
    plans and peaks with their median.

    Processes once grew by gigabytes per budget (a MobileNetV2 run was OOM-killed at
    24 GB); the cause was the executor's recompute path leaking recomputed activations
    (fixed), but a child per budget still bounds whatever compiled entries keep and
    returns it to the OS.  Each child profiles afresh (its plans come from its own profile, which
    :func:`profile_model` makes stable between processes).  The children's rows are
    merged; ``peak_rss_bytes`` is the largest child's.  Every child times ``ckpt-all`` in
    its rounds (unless ``--no-ckpt-all``).
    """
    import subprocess

    merged = None
    runs = [(frac, k) for k in range(profiles) for frac in budgets]
    for frac, k in runs:
        cmd = [sys.executable, str(Path(__file__).resolve()), *argv, "--models", spec,
               "--budgets", str(frac), "--json", "--out", str(out), "--child"]  # fmt: skip
        if profiles > 1:
            cmd += ["--profile-index", str(k)]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        for line in proc.stderr.splitlines():
            log(line)
        if proc.returncode != 0:
            raise RuntimeError(f"child for budget {frac} failed ({proc.returncode}): "
                               f"{proc.stderr[-2000:]}")  # fmt: skip
        (res,) = json.loads(proc.stdout)
        log(f"  [{spec} {frac}] child peak RSS {res['peak_rss_bytes'] / 1e9:.2f} GB, "
            f"{time.perf_counter() - t0:.0f}s")  # fmt: skip
        if merged is None:
            merged = {**res, "child_peak_rss_bytes": []}
        else:
            merged["rows"] += res["rows"]
            merged["peak_rss_bytes"] = max(merged["peak_rss_bytes"], res["peak_rss_bytes"])
        merged["child_peak_rss_bytes"].append(res["peak_rss_bytes"])
    if profiles > 1:
        merged["by_profile"] = _profile_summary(merged["rows"])
        for s in merged["by_profile"]:
            log(f"  [{spec} {s['budget']}] {s['method']:9s} median {s['median_ratio']:.3f} "
                f"over {len(s['ratios'])} profiles: "
                + ", ".join(f"{r:.3f}" for r in s["ratios"]))  # fmt: skip
    return merged


def _profile_summary(rows):
    """Per (budget, method) over fresh-process profiles: each profile's ratio, plan
    counts, peak / budget and gradient error, and the median ratio (feasible rows only)."""
    groups: dict[tuple, list] = {}
    for r in rows:
        if r.get("budget") is not None and r.get("feasible") and "profile" in r:
            groups.setdefault((r["budget"], r["method"]), []).append(r)
    out = []
    for (budget, method), rs in groups.items():
        rs = sorted(rs, key=lambda r: r["profile"])
        out.append({
            "budget": budget, "method": method,
            "profiles": [r["profile"] for r in rs],
            "ratios": [r["ratio"] for r in rs],
            "median_ratio": statistics.median(r["ratio"] for r in rs),
            "decisions": [{k: v for k, v in r.get("decisions", {}).items() if v} for r in rs],
            "peak_over_budget": [r.get("peak_over_budget") for r in rs],
            "grad_err": [r["grad_err"] for r in rs],
            "rc_scale": [r.get("rc_scale") for r in rs],
        })  # fmt: skip
    return out


def accuracy_check(model_name, dataset, frac, epochs, batch, lr, seed, log, **model_opts):
    """Train the same model from the same seed with and without a hybrid plan; test accuracy.

    The plan is made once (profile of one batch) at ``frac`` of the measured
    unplanned peak (raised to the hybrid minimum when that is higher, reported)
    and executed on every step; SGD with momentum, last partial batch dropped so
    every step has the planned shape.
    """
    from torch import nn

    from edgetrain import data, models
    from edgetrain.engine.budget import PlanExecutor

    ds = data.load(dataset)
    train, test = ds.train_test_split(0.2, seed=seed)
    net = models.build(model_name, seed=seed, **model_opts)
    init = copy.deepcopy(net.state_dict())
    xb, yb = train.x[:batch].clone(), train.y[:batch].clone()  # own storage: not the whole set
    prof = profile_model(
        net, (xb,), lambda o: nn.functional.cross_entropy(o, yb), codecs=codecs_for("hybrid")
    )
    base = none_plan(prof)
    unplanned = measure_steps(
        net, {"none": base}, (xb,), lambda o: nn.functional.cross_entropy(o, yb), 0
    )
    unplanned = unplanned["none"]["peak"]
    budget = max(int(frac * unplanned), minimum_budget(prof, "hybrid"))
    plans = {"none": base, "hybrid": plan(prof, budget, "hybrid")}
    out = {"model": model_name, "dataset": dataset, "budget_frac": budget / unplanned,
           "decisions": plans["hybrid"].decision_counts(), "epochs": epochs}  # fmt: skip
    for name, p in plans.items():
        net.load_state_dict(init)
        opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
        gen = torch.Generator().manual_seed(seed)
        peak = 0
        for _ in range(epochs):
            net.train()
            perm = torch.randperm(len(train.y), generator=gen)
            for i in range(0, len(perm) - batch + 1, batch):
                idx = perm[i : i + batch]
                x, y = train.x[idx], train.y[idx]
                acc = MemoryAccountant(exclude=model_state_tensors(net))
                opt.zero_grad(set_to_none=True)
                torch.manual_seed(seed + i)
                with PlanExecutor(net, p, accountant=acc) as ex:
                    ex.step((x,), lambda o, y=y: nn.functional.cross_entropy(o, y))
                opt.step()
                peak = max(peak, acc.peak)
        net.eval()
        with torch.no_grad():
            pred = net(test.x).argmax(1)
        out[f"{name}_test_acc"] = float((pred == test.y).float().mean())
        out[f"{name}_peak"] = peak
        log(f"[accuracy] {name}: test acc {out[f'{name}_test_acc']:.4f}, peak {peak:,}")
    out["budget_bytes"] = budget
    out["acc_gap_points"] = 100 * (out["none_test_acc"] - out["hybrid_test_acc"])
    return out


def _decided(p):
    """A plan's non-keep decisions (to tell identical plans from equal counts)."""
    return sorted((u.name, u.decision, u.codec, tuple(u.chain or ()))
                  for u in p.units if u.decision != "keep")  # fmt: skip


def _brief(row):
    if not row.get("feasible"):
        if "error" in row:
            return "error " + row["error"]
        return f"infeasible (min {row['min_feasible_frac']:.3f})"
    s = f"ratio={row['ratio']:.3f}"
    if row.get("measured_peak") is not None:
        s += f" peak={row['measured_peak']:,}"
        if row.get("peak_over_budget") is not None:
            s += f" ({row['peak_over_budget']:.3f})"
    if row.get("overhead_s") is not None:
        s += f" +{row['overhead_s'] * 1e3:.0f}ms"
    if len(row.get("round_ratios", ())) > 1:
        s += " rounds=[" + ",".join(f"{x:.3f}" for x in row["round_ratios"]) + "]"
    if "vs_free" in row:
        s += f" vs_free={row['vs_free']:.3f}"
        if len(row["round_vs_free"]) > 1:
            s += " [" + ",".join(f"{x:.3f}" for x in row["round_vs_free"]) + "]"
    if row.get("decisions"):
        s += " plan=" + ",".join(f"{k}:{v}" for k, v in row["decisions"].items() if v)
    if "vs_hybrid" in row:
        v = row["vs_hybrid"]
        s += f" vs_hybrid={v['median']:.3f} [{v['lo']:.3f},{v['hi']:.3f}] {v['verdict']}"
    if "vs_mincut" in row:
        v = row["vs_mincut"]
        s += f" vs_mincut={v['median']:.3f} [{v['lo']:.3f},{v['hi']:.3f}] {v['verdict']}"
    if "vs_ckpt_all" in row:
        v = row["vs_ckpt_all"]
        s += f" vs_ckpt_all={v['median']:.3f} [{v['lo']:.3f},{v['hi']:.3f}] {v['verdict']}"
    if "vs_mincut_matched" in row:
        v = row["vs_mincut_matched"]
        s += (f" vs_mincut_matched={v['median']:.3f} [{v['lo']:.3f},{v['hi']:.3f}]"
              f" {v['verdict']}")  # fmt: skip
    if row.get("alloc_peak_over_budget") is not None:
        s += f" alloc={row['alloc_peak_bytes']:,} ({row['alloc_peak_over_budget']:.3f})"
    elif row.get("alloc_peak_bytes") is not None:
        s += f" alloc={row['alloc_peak_bytes']:,} ({row['alloc_peak_frac']:.3f} of unplanned)"
    if "match" in row:
        s += f" amb={row['match']['chosen']:g} reached={row['match']['reached']}"
    if "vs_recompute" in row:
        v = row["vs_recompute"]
        s += f" vs_recompute={v['median']:.3f} [{v['lo']:.3f},{v['hi']:.3f}] {v['verdict']}"
        if row.get("same_plan_as_recompute"):
            s += " (same plan)"
    if "within_budget" in row:
        s += f" within={row['within_budget']}"
    if row.get("recompiles"):
        s += f" RECOMPILED x{row['recompiles']} in timed steps"
    return s + f" grad_err={row['grad_err']:.2e}"


def plot(result, out: Path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    rows = result["rows"]
    for m in (*METHODS, "hybrid-tuned", *COMPILED, "ckpt-all"):
        by_budget: dict[float, list[float]] = {}  # several with --profiles: their median
        for r in rows:
            if r["method"] == m and r.get("feasible"):
                by_budget.setdefault(r["budget"], []).append(r["ratio"])
        pts = [(b, statistics.median(v)) for b, v in by_budget.items()]
        if pts:
            style = (
                {"ls": "--", "color": "grey", "label": "ckpt every block"}
                if m == "ckpt-all"
                else {"label": m}
            )
            ax.plot(*zip(*sorted(pts), strict=True), marker="o", **style)
    ax.set_xlabel("budget (fraction of unplanned saved-activation peak)")
    ax.set_ylabel("step time / unplanned step time")
    ax.set_title(f"{result['model']} batch {result['batch']} (this CPU, measured)")
    ax.invert_xaxis()
    ax.legend()
    fig.tight_layout()
    path = out / f"budget_overhead_{result['model']}.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _strip_options(argv, valued, flags):
    """``argv`` without the options in ``valued`` (and their values) and ``flags``."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        name = a.split("=", 1)[0]
        if name in valued:
            skip = "=" not in a
            continue
        if name in flags or name in ("--repeats", "--rounds-at"):
            skip = name in ("--repeats", "--rounds-at") and "=" not in a
            continue
        out.append(a)
    return out


def _budget_spec(text: str, scope: str):
    """A ``--budgets`` entry: a fraction (float), or under ``--scope all`` also
    ``ckpt-all`` / ``min`` (resolved by :func:`bench_model`)."""
    from edgetrain.engine.budget.planner import check_scope

    check_scope(scope)
    t = text.strip()
    if t in ("ckpt-all", "min"):
        if scope != "all":
            raise ConfigError(f"--budgets {t!r} needs --scope all")
        return t
    try:
        return float(t)
    except ValueError:
        raise ConfigError(
            f"--budgets entry {t!r}: expected a fraction such as 0.5"
            + (" or ckpt-all / min" if scope == "all" else "")
        ) from None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--models", default=None, help="default mobilenetv2:32,bert-small:8")
    ap.add_argument("--budgets", default=None, help="default 0.9,0.8,0.7,0.6,0.5,0.4,0.3,0.25,0.2")
    ap.add_argument("--repeats", type=int, default=None, help="timed steps per entry (default 3)")
    ap.add_argument("--no-mincut", action="store_true", help="skip mincut and mincut-free")
    ap.add_argument(
        "--mincut-matched",
        action="store_true",
        help="add mincut-matched: min-cut at the activation_memory_budget whose step peaks, "
        "over every allocation, at no more than the budget (or hybrid's own all-allocation "
        "peak if higher), found by bisection (each try a recompile)",
    )
    ap.add_argument(
        "--match-steps",
        type=int,
        default=3,
        help="bisection / refinement steps of the --mincut-matched search (default 3)",
    )
    ap.add_argument(
        "--methods",
        default=",".join(METHODS),
        help="planners to run, comma-separated (none always runs); default: all",
    )
    ap.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="repeat the whole interleaved measurement R times; the ratio is the median "
        "over rounds (run-to-run noise on a shared CPU is about +-10%%)",
    )
    ap.add_argument(
        "--rounds-at",
        default=None,
        help="budgets (comma-separated) that get --rounds; default: every budget",
    )
    ap.add_argument(
        "--autotune",
        action="store_true",
        help="add hybrid-tuned: hybrid's candidate plans timed, the fastest measured "
        "(tuning steps not counted; tuning wall time reported as tune_s)",
    )
    ap.add_argument(
        "--fresh-process",
        action="store_true",
        help="run each budget in its own child process (bounds the RSS growth of the "
        "compiled min-cut entries; each child profiles afresh)",
    )
    ap.add_argument(
        "--aa",
        action="store_true",
        help="add an A/A control: a second empty plan measured like the others "
        "(its ratio to none shows the run's step noise)",
    )
    ap.add_argument(
        "--profiles",
        type=int,
        default=1,
        help="run every budget K times, each in a fresh child process with its own "
        "profile (implies --fresh-process); rows carry their profile index and the "
        "result a per-budget summary over profiles (by_profile)",
    )
    ap.add_argument("--profile-index", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument(
        "--no-ckpt-all",
        action="store_true",
        help="leave out ckpt-all (torch.utils.checkpoint on every block) from the rounds",
    )
    ap.add_argument(
        "--by-kind",
        action="store_true",
        help="add hybrid-only-<kind>: hybrid's plan with only one kind of decision "
        "(the rest kept), timed in the same rounds (measured cost per decision kind)",
    )
    ap.add_argument(
        "--exact-entry",
        action="store_true",
        help="add hybrid-exact: hybrid's lowest-predicted candidate without compression, "
        "timed in the same rounds, where hybrid's plan compresses a unit",
    )
    ap.add_argument(
        "--keep-heap",
        action="store_true",
        help="time in the heap the profiler left, under glibc's dynamic thresholds (rounds "
        "<= 25); by default it is given back to the system first and freed memory is kept "
        "from then on (accountant.settle_heap), so no timed step faults pages",
    )
    ap.add_argument(
        "--refined-entry",
        action="store_true",
        help="add hybrid-refined (the local search on, refine=True) and hybrid-greedy "
        "(refine=False), each where its plan differs from hybrid's, timed in the same "
        "rounds and paired with hybrid (vs_hybrid)",
    )
    ap.add_argument(
        "--scope",
        default="saved",
        help="saved: budgets bound autograd's saved tensors (fractions of the unplanned "
        "saved-tensor peak); all: every allocation of the step (fractions of the unplanned "
        "all-allocation peak; also 'ckpt-all' = ckpt-all's all-allocation peak and 'min' = "
        "hybrid's minimum feasible all-allocation budget)",
    )
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help="folder for PNGs (default: a temp folder)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--accuracy",
        default=None,
        help="MODEL:DATASET:EPOCHS[:BATCH] - train none vs hybrid (budget 0.5) and compare accuracy",
    )
    args = ap.parse_args(argv)
    if args.accuracy:
        parts = args.accuracy.split(":")
        mname, dname, epochs = parts[0], parts[1], int(parts[2])
        batch = int(parts[3]) if len(parts) > 3 else 32
        from edgetrain import data

        ds = data.load(dname)
        opts = {"num_classes": ds.num_classes}
        if mname == "mobilenetv2":
            opts.update(
                in_channels=ds.input_shape[0], input_size=ds.input_shape[-1], width_mult=0.5
            )
        elif mname in ("lenet", "alexnet"):
            opts.update(in_channels=ds.input_shape[0], length=ds.input_shape[-1])
        res = accuracy_check(mname, dname, 0.5, epochs, batch, 0.01, 0, print, **opts)
        print(json.dumps(res, indent=1))
        return 0
    # --quick fills in only what was not given, so a test can pick its own budgets
    quick = {"models": "ds-cnn:4", "budgets": "0.9,0.7", "repeats": 1}
    full = {"models": "mobilenetv2:32,bert-small:8",
            "budgets": "0.9,0.8,0.7,0.6,0.5,0.4,0.3,0.25,0.2", "repeats": 3}  # fmt: skip
    for k, v in (quick if args.quick else full).items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.profiles < 1:
        raise ConfigError(f"--profiles {args.profiles}: expected a count >= 1")
    if args.profiles > 1:
        args.fresh_process = True
    if args.mincut_matched and args.no_mincut:
        raise ConfigError("--mincut-matched needs the min-cut entries: drop --no-mincut")
    methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise ConfigError(
            f"--methods {args.methods!r}: unknown planner(s) {unknown}; "
            f"expected a comma-separated subset of {', '.join(METHODS)}"
        )
    out = Path(args.out or tempfile.mkdtemp(prefix="edgetrain-bench-"))
    out.mkdir(parents=True, exist_ok=True)
    log = (lambda s: print(s, file=sys.stderr)) if args.json else print
    results = []
    for spec in args.models.split(","):
        name, batch = spec.split(":")
        budgets = [_budget_spec(b, args.scope) for b in args.budgets.split(",")]
        rounds_at = (
            [_budget_spec(b, args.scope) for b in args.rounds_at.split(",")]
            if args.rounds_at
            else None
        )
        if args.fresh_process and not args.child:
            child_argv = [a for a in (argv if argv is not None else sys.argv[1:])]
            child_argv = _strip_options(
                child_argv, ("--models", "--budgets", "--out", "--profiles"),
                ("--json", "--fresh-process", "--quick"))  # fmt: skip
            child_argv += ["--repeats", str(args.repeats)]
            if args.rounds_at:
                child_argv += ["--rounds-at", args.rounds_at]
            res = _fresh_process_runs(spec, budgets, child_argv, out, log, args.profiles)
        else:
            res = bench_model(
                name, int(batch), budgets, args.repeats, not args.no_mincut, log,
                rounds=max(args.rounds, 1), rounds_at=rounds_at, methods=methods,
                rows_path=out / f"rows_{name}.jsonl", tune=args.autotune,
                ckpt_all=not args.no_ckpt_all, aa=args.aa, profile_index=args.profile_index,
                mincut_matched=args.mincut_matched, match_steps=args.match_steps,
                by_kind=args.by_kind, scope=args.scope, exact_entry=args.exact_entry,
                refined_entry=args.refined_entry, release=not args.keep_heap,
            )  # fmt: skip
        res["png"] = str(plot(res, out))
        log(f"  plot: {res['png']}")
        results.append(res)
    if args.json:
        print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
