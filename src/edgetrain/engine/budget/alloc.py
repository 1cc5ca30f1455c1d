"""Every allocation of a training step on the planner's timeline (``scope="all"``).

The planner's own timeline (:func:`.planner.simulate`) counts autograd's saved tensors
only.  What a process must hold is every allocation of the step: besides the saved
tensors, the parameter gradients (allocated when their unit is back-propagated and
held to the end of the step, the step starting from ``zero_grad(set_to_none=True)``),
the gradient flowing between units, the forward's outputs that nobody saves, and the
kernels' workspace.  The model here is

    all(k) = saved_plan(k) + grads(k) + residual(k) + forward_extra_plan(k)
             + released_plan(k) + fix_plan(k)

at every step ``k`` of the timeline (forward items ``0..T-1``, then item ``s``'s
backward at ``2T-1-s``):

* ``saved_plan`` -- :func:`.planner.simulate` under the plan's states;
* ``grads`` -- the bytes of every parameter (``requires_grad``) from the backward step
  of its unit on; a parameter shared by several units is counted once, at its first
  backward use (the unit latest in forward order); parameters of no unit (the model's
  own, used in glue) from the first backward step on (an upper bound);
* ``residual`` -- *measured*: one unplanned step (after a warm-up, as
  :func:`.accountant.step_alloc_peak` runs it) under the torch profiler's memory
  events, split into the timeline's steps by marks emitted from module and gradient
  hooks (:func:`measure_alloc_steps`); ``residual(k)`` = measured peak within step
  ``k`` - ``saved_none(k)`` - ``grads(k)``.  It is everything besides saved tensors and
  gradients (inter-unit gradients, non-saved outputs, workspace, the loss) and is
  taken as independent of the plan;
* ``forward_extra_plan`` -- a unit that is recomputed, compressed or swapped still
  materialises its tensors one leaf at a time in forward (a no-grad forward / raw
  tensors before encoding) while holding less: its largest leaf's saved bytes
  (``leaf_max_bytes``) at its forward step;
* ``released`` -- why a compressed (or swapped) unit's backward needs more than its
  decoded leaf.  ``residual(k)`` subtracts every saved tensor held at step ``k``, but
  the unplanned step reaches its peak within a unit's backward step late (at the
  unit's first leaf, whose backward allocates the input gradient), after the backward
  of its other leaves has released their saved tensors: the residual of that step is
  short by those bytes.  A kept or recomputed unit adds all its saved tensors back and
  the two cancel; a compressed unit adds only its encoded bytes and one decoded leaf,
  so the shortfall showed: measured on MobileNetV2 b8 (hybrid's plan at its minimum
  all-allocation budget, no margin), features.2.conv.1's backward held 9,437,184 B
  more than the model counted with encoded bytes left out (the batch norm's input and
  the ReLU6 output, 2 x 4,718,592 B, freed before the depthwise convolution's
  backward peaked), features.1.conv.1's 6,291,456 B, features.3.conv.1's 2,359,296 B:
  each exactly ``released`` of its step.  ``released(k)`` is measured in the unplanned
  step (:func:`step_timeline`): with ``R(k)`` the bytes allocated in forward and freed
  within backward step ``k``, ``released(k) = max_t (level(t) - R_alive(t)) -
  measured(k) + R(k)``, the most the step's peak can exceed the model once any subset of
  those tensors is gone from it (<= ``R(k)``); the planner adds
  ``min(released, float bytes)`` at a compressed / swapped unit's backward step;
* ``fix`` -- what a decision's own transients add beyond that, *measured*: one step
  with every recomputable unit recomputed and one with every unit compressed by the
  ``mix`` codec are profiled like the unplanned one, and at each unit's forward and
  backward step the measured excess over the model (>= 0) is kept and added whenever
  the unit takes that decision.  The excess is taken over the model *as the profiler
  sees it* (:func:`torch_visible`): a codec's encoded ``bytes`` and the masks' packed
  bits live outside torch's allocator, so the measurement never contains them while
  the model must (they are held); compared with them, the encoded bytes of every
  other compressed unit hid the transients of the all-compressed step (round 10's
  fix was 0 at features.2.conv.1's backward, whose real excess was 9.4 MB).  In
  forward the excess is mostly raw tensors that a call frame keeps until its module
  returns (the argument of an ``nn.Sequential`` lives until the whole sequence has
  run) and the unit's tensors between two leaves before they are encoded.

So the prediction is exact for the unplanned step by construction (up to the
step-to-step variation of the allocator), and for a plan its error is what the plan
changes besides saved tensors; for compressed units the prediction exceeds the
profiler's measurement by the encoded bytes the profiler cannot see.  Measured in
docs/results/budget.md (rounds 10 and 11).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from edgetrain.engine.budget.accountant import (
    MemoryAccountant,
    alloc_events,
    mark,
    model_state_tensors,
    replay_allocs,
)


@dataclass
class AllocTimeline:
    """What ``scope="all"`` adds to the saved-tensor timeline (see the module doc)."""

    #: bytes of parameter gradients held at every step (length ``2 * n_steps``)
    grads: list[int]
    #: measured unplanned all-allocation peak within every step (length ``2 * n_steps``)
    measured: list[int]
    #: measured - saved_none - grads, per step
    residual: list[int]
    #: measured transients of a decision kind (``"recompute"``, ``"compress:<codec>"``)
    #: beyond the model, per unit: (at its forward step, at its backward step), bytes >= 0
    #: (:func:`build_timeline`)
    fix: dict[str, dict[str, tuple[int, int]]] = field(default_factory=dict)
    #: per step, the most its measured peak can exceed ``measured - R`` once tensors
    #: allocated in forward and freed within the step (``R`` bytes, the unit's own saved
    #: tensors) are gone from it: what the residual of a backward step lacks when a
    #: compressed unit drops them (module doc, :func:`step_timeline`); 0 in forward.
    #: Empty: not measured (counted as 0)
    released: list[int] = field(default_factory=list)

    @property
    def measured_peak(self) -> int:
        return max(self.measured, default=0)


def unit_call_steps(profile: Any) -> dict[str, list[int]]:
    """The forward step of every call of every unit, in call order (a shared module's
    calls are several units of one name, :attr:`.profile.UnitProfile.call`)."""
    steps: dict[str, list[int]] = {}
    for u in sorted(profile.units, key=lambda v: v.step):
        steps.setdefault(u.name, []).append(u.step)
    return steps


def grad_schedule(model: nn.Module, unit_steps: dict[str, list[int]], n_steps: int) -> np.ndarray:
    """Bytes of parameter gradients held at every timeline step (see the module doc)."""
    t = n_steps
    size: dict[int, int] = {
        id(p): p.numel() * p.element_size() for p in model.parameters() if p.requires_grad
    }
    first_bwd: dict[int, int] = {}  # id(param) -> backward step of its first use
    for name, steps in unit_steps.items():
        mod = model.get_submodule(name) if name else model
        for p in mod.parameters():
            if id(p) in size:
                # the unit latest in forward order is back-propagated first
                b = 2 * t - 1 - max(steps)
                first_bwd[id(p)] = min(first_bwd.get(id(p), b), b)
    for k in size:  # no unit (the model's own, used in glue): from the first backward step
        first_bwd.setdefault(k, t)
    delta = np.zeros(2 * t + 1, dtype=np.int64)
    for k, b in first_bwd.items():
        delta[b] += size[k]
    return np.cumsum(delta)[: 2 * t]


def _first_grad_tensor(out: Any) -> torch.Tensor | None:
    if isinstance(out, torch.Tensor):
        return out if out.requires_grad else None
    if isinstance(out, (tuple, list)):
        for o in out:
            t = _first_grad_tensor(o)
            if t is not None:
                return t
    if isinstance(out, dict):
        return _first_grad_tensor(list(out.values()))
    return None


def _step_of(name: str, t: int, glue_steps: set[int]) -> int:
    """The timeline step a mark starts (see :func:`measure_alloc_steps`)."""
    kind, s = name[0], int(name[1:]) if len(name) > 1 else 0
    if kind == "f":
        j = s
    elif kind == "e":
        j = s + 1 if s + 1 in glue_steps else s
    elif kind == "L":
        j = t
    else:  # "b"
        j = 2 * t - 1 - s
    return min(j, 2 * t - 1)


def step_timeline(
    events: Sequence[tuple[int, int, int, str | None]], t: int, glue_steps: set[int]
) -> tuple[np.ndarray, np.ndarray]:
    """(measured, released) per timeline step from one step's marked allocation events.

    ``measured[k]``: the peak of the running sum of allocations
    (:func:`.accountant.replay_allocs`) within step ``k`` (a step no event falls in gets
    the sum at the moment it was passed).  ``released[k]`` (backward steps; 0 in
    forward): with ``R(k)`` the bytes of blocks allocated in forward and freed within
    step ``k`` and ``R_alive(k, e)`` those of them still live after event ``e``,
    ``max_e (level(e) - R_alive(k, e)) - measured[k] + R(k)`` (>= 0, <= ``R(k)``) -- how
    far the step's peak can rise above ``measured - R`` when any part of those tensors is
    absent (the residual subtracts them whole, but they are freed before the peak).
    """
    # pass 1: the step of every event, and the forward step of every freed block
    rows: list[tuple[int, int, int | None]] = []  # (step, level, freed bytes of a fwd block)
    born: dict[int, int] = {}  # live block's pointer -> step it was allocated in
    cur = 0
    for name, change, ptr, level in replay_allocs(events):
        if name is not None:
            cur = max(cur, _step_of(name, t, glue_steps))
            rows.append((cur, level, None))
            continue
        fwd = None
        if change > 0:
            born[ptr] = cur
        elif change < 0 and born.pop(ptr, cur) < t <= cur:
            fwd = -change
        rows.append((cur, level, fwd))
    total = np.zeros(2 * t, dtype=np.int64)  # R(k)
    for k, _, fwd in rows:
        if fwd:
            total[k] += fwd
    # pass 2: per-step peak, and the peak less the still-live part of R(k)
    meas = np.zeros(2 * t, dtype=np.int64)
    lean = np.full(2 * t, np.iinfo(np.int64).min, dtype=np.int64)
    alive = total.copy()
    cur = level = 0
    for k, lv, fwd in rows:
        for j in range(cur + 1, k + 1):  # entering a step: the level carried into it
            meas[j] = max(meas[j], level)
            lean[j] = max(lean[j], level - alive[j])
        cur, level = max(cur, k), lv
        if fwd:
            alive[k] -= fwd
        meas[k] = max(meas[k], lv)
        lean[k] = max(lean[k], lv - alive[k])
    for j in range(cur + 1, 2 * t):
        meas[j] = max(meas[j], level)
        lean[j] = max(lean[j], level - alive[j])
    released = np.clip(lean - meas + total, 0, total)
    released[:t] = 0
    return meas, released


def measure_alloc_steps(
    model: nn.Module,
    inputs: Sequence[Any],
    loss_fn: Callable[[Any], torch.Tensor],
    unit_steps: dict[str, list[int]],
    glue_steps: set[int],
    n_steps: int,
    seed: int = 0,
    plan: Any = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(measured, released) of :func:`step_timeline` for the unplanned step, or for
    ``plan``'s (an ``ExecutionPlan``, to check a prediction): ``measured`` is the step's
    all-allocation peak within every timeline step (bytes).

    One warm-up step, then one step under :func:`.accountant.alloc_events`, both run as
    :func:`.accountant.step_alloc_peak` runs the empty plan (the executor with the
    accountant, gradients set to None first).  Marks: a unit's forward pre-hook starts
    its forward step, its forward hook the glue item after it (if any), the loss starts
    the backward, and a hook on the gradient of the unit's output starts the unit's
    backward step.  Within a step the running sum of allocations (frees matched by
    pointer to allocations of the step) is maximised; a step with no event gets the sum
    at the moment it was passed.  Weights, buffers, RNG state and ``.grad`` are restored.
    """
    from edgetrain.engine.budget.accountant import run_plan_step
    from edgetrain.engine.budget.plan import ExecutionPlan

    t = n_steps
    base = plan if plan is not None else ExecutionPlan("none", 1, 1, 1, 0.0, [])
    state = copy.deepcopy(model.state_dict())
    rng = torch.get_rng_state()
    seen: dict[str, int] = {}  # calls of each unit ended so far in this step
    handles = []

    def pre(name: str):
        def hook(mod, args):
            i = seen.get(name, 0)
            if i < len(unit_steps[name]):
                mark(f"f{unit_steps[name][i]}")

        return hook

    def post(name: str):
        def hook(mod, args, out):
            i = seen.get(name, 0)
            if i >= len(unit_steps[name]):
                return
            seen[name] = i + 1
            step = unit_steps[name][i]
            mark(f"e{step}")
            g = _first_grad_tensor(out)
            if g is not None:
                g.register_hook(lambda _g, step=step: mark(f"b{step}"))

        return hook

    def marked_loss(out: Any) -> torch.Tensor:
        loss = loss_fn(out)
        mark("L")
        return loss

    def once() -> None:
        seen.clear()
        torch.manual_seed(seed)
        model.load_state_dict(state)
        model.zero_grad(set_to_none=True)
        acc = MemoryAccountant(exclude=model_state_tensors(model))
        run_plan_step(model, base, inputs, marked_loss, acc)

    for name in unit_steps:
        mod = model.get_submodule(name) if name else model
        handles.append(mod.register_forward_pre_hook(pre(name)))
        handles.append(mod.register_forward_hook(post(name)))
    try:
        once()
        model.zero_grad(set_to_none=True)
        events = alloc_events(once)
    finally:
        for h in handles:
            h.remove()
        model.load_state_dict(state)
        model.zero_grad(set_to_none=True)
        torch.set_rng_state(rng)
    return step_timeline(events, t, glue_steps)


def torch_visible(profile: Any) -> Any:
    """``profile`` as the torch profiler sees a plan's memory: a copy whose compressed
    units hold only their raw (non-float / small) saved tensors and whose masks hold
    nothing -- the codec's encoded ``bytes`` and the masks' packed bits are allocated
    outside torch's allocator (Python / numpy), so no allocation event contains them.
    The decision transients (``fix``) are measured against this model
    (:func:`build_timeline`); plans are predicted with the real one."""
    units = [
        dataclasses.replace(
            u,
            codecs={
                k: dataclasses.replace(c, held_bytes=u.saved_bytes - u.float_bytes, per_key={})
                for k, c in u.codecs.items()
            },
            auto_mask_bytes=0,
        )
        for u in profile.units
    ]
    masks = [dataclasses.replace(m, mask_bytes=0) for m in profile.masks]
    return dataclasses.replace(profile, units=units, masks=masks)


def plan_states(profile: Any, plan: Any) -> dict[str, tuple[str, str | None]]:
    """The planner's states behind an ``ExecutionPlan`` of ``profile`` (unit decisions
    and the masks, regenerations and leaf recomputations it applies), so that
    :func:`.planner.simulate_all` can replay its prediction (under another model, e.g.
    :func:`torch_visible`)."""
    units = {u.name for u in profile.units}
    chosen = {(u.name, u.decision, tuple(u.chain or ())) for u in plan.units}
    states: dict[str, tuple[str, str | None]] = {}
    for u in plan.units:
        if u.name in units and u.decision in ("keep", "recompute", "compress", "swap"):
            states[u.name] = (u.decision, u.codec)
    for r in profile.regens:
        if (r.name, "regen", tuple(r.chain or ())) in chosen:
            states[r.state_key] = ("regen", None)
    for m in profile.masks:
        if (m.name, "mask", ()) in chosen:
            states[m.state_key] = ("mask", None)
    for m in profile.aliases:  # the planner's state of an alias is "mask" too
        if (m.name, "alias", ()) in chosen:
            states[m.state_key] = ("mask", None)
    for x in profile.leaf_recomputes:
        if (x.name, "recompute", ()) in chosen:
            states[x.state_key] = ("recompute", None)
    return states


def build_timeline(
    model: nn.Module,
    profile: Any,
    inputs: Sequence[Any],
    loss_fn: Callable[[Any], torch.Tensor],
    seed: int = 0,
    fixes: bool = True,
) -> AllocTimeline:
    """Measure ``profile``'s :class:`AllocTimeline`: one warm-up + one profiled step,
    unplanned, then (``fixes``) the same for every recomputable unit recomputed and
    every unit compressed (the ``fix`` transients of the module doc)."""
    from edgetrain.engine.budget.planner import simulate

    unit_steps = unit_call_steps(profile)
    glue_steps = {s for s, _ in profile.glue}
    t = profile.n_steps
    meas, released = measure_alloc_steps(model, inputs, loss_fn, unit_steps, glue_steps, t, seed)
    grads = grad_schedule(model, unit_steps, t)
    saved = simulate(profile, {})
    residual = meas - saved - grads
    out = AllocTimeline(
        grads=[int(x) for x in grads],
        measured=[int(x) for x in meas],
        residual=[int(x) for x in residual],
        released=[int(x) for x in released],
    )
    if not fixes:
        return out
    from edgetrain.engine.budget.plan import ExecutionPlan, UnitDecision
    from edgetrain.engine.budget.planner import simulate_all

    old, profile.alloc = profile.alloc, out
    try:
        seen_as = torch_visible(profile)  # carries ``out`` (fixes measured so far)
        configs: list[tuple[str, list]] = []
        rc = [u for u in profile.units if u.recomputable()]
        if rc:
            configs.append(("recompute", rc))
        # every codec the profile priced: the GACT-like baseline's int8 / int4 decode
        # transients too (round 19: unmeasured, a compress plan of a small residual CNN
        # held 603,931 B over every allocation against its 591,214 B budget)
        for c in sorted({c for u in profile.units for c in u.codecs}):
            cu = [u for u in profile.units if c in u.codecs and u.float_bytes]
            if cu:
                configs.append((f"compress:{c}", cu))
        for kind, units in configs:
            if kind == "mask":
                continue
            d, codec = (kind.split(":") + [None])[:2]
            names = dict.fromkeys(u.name for u in units)  # a shared module once
            p = ExecutionPlan("hybrid", 1, 1, 1, 0.0, [UnitDecision(n, d, codec) for n in names])
            got = measure_alloc_steps(
                model, inputs, loss_fn, unit_steps, glue_steps, t, seed, plan=p
            )[0]
            pred = simulate_all(seen_as, {u.name: (d, codec) for u in units})
            out.fix[kind] = {
                u.entry: (
                    int(max(got[u.step] - pred[u.step], 0)),
                    int(max(got[2 * t - 1 - u.step] - pred[2 * t - 1 - u.step], 0)),
                )
                for u in units
            }
        if profile.masks:  # every mask at once, each unit's excess kept under its name
            out.fix["mask"] = _mask_fix(model, profile, inputs, loss_fn, seed, seen_as)
        if profile.regens:  # the same, for regenerations, and for them all at once
            seen_as = torch_visible(profile)  # with the masks' fix (never on together)
            out.fix["regen"] = _regen_fix(model, profile, inputs, loss_fn, seed, seen_as)
            out.fix["regen-step"] = _regen_step_fix(model, profile, inputs, loss_fn, seed, seen_as)
    finally:
        profile.alloc = old
    return out


def _mask_fix(model, profile, inputs, loss_fn, seed, seen_as) -> dict[str, tuple[int, int]]:
    """The ``fix`` of masks, keyed by the mask's ``state_key``: measured steps in which
    the ``j``-th mask candidate of every forward step is masked (``j = 0, 1, ...``, so
    no two masks of one step are on together and each step's excess belongs to one
    mask), and at each mask's forward and backward step the excess over the model
    (>= 0), added whenever that mask is on.

    Measured (round 12, MobileNetV2 w0.35 b2 at 32 px): masking ``last_conv``'s ReLU6
    alone left 163,840 B (its output, 1,280 x 4 x 4 x 2 float32) more than the model at
    that unit's forward and backward steps -- another holder keeps the output -- and
    refined plans that filled the budget to 0.996 then measured 22-56 kB over it."""
    from edgetrain.engine.budget.plan import UnitDecision

    return _leaf_fix(
        model, profile, inputs, loss_fn, seed, seen_as, profile.masks,
        lambda m: UnitDecision(m.name, "mask", None), "mask",
    )  # fmt: skip


def _regen_fix(model, profile, inputs, loss_fn, seed, seen_as) -> dict[str, tuple[int, int]]:
    """The ``fix`` of regenerations, keyed by ``state_key``, measured as :func:`_mask_fix`
    measures masks (the ``j``-th candidate of every forward step at once).

    Measured (round 16, MobileNetV2 w0.35 b2 at 32 px, hybrid's plans at the minimum
    all-allocation budget): with the BatchNorm and BatchNorm -> ReLU6 outputs of
    features.11 / .12 regenerated, their backward steps held 271,104 / 280,320 B more
    than the model -- about one regenerated 576-channel tensor (294,912 B) -- and 5 of 19
    such plans measured 49-155 kB over their budget (``tests/engine/budget/
    test_budget_benchmarks.py::test_budget_alloc_model_benchmark_quick`` failed in 2 of 3
    runs)."""
    from edgetrain.engine.budget.plan import UnitDecision

    return _leaf_fix(
        model, profile, inputs, loss_fn, seed, seen_as, profile.regens,
        lambda r: UnitDecision(r.name, "regen", None, chain=list(r.chain) or None), "regen",
    )  # fmt: skip


def _regen_step_fix(model, profile, inputs, loss_fn, seed, seen_as) -> dict[str, tuple[int, int]]:
    """Per forward step (key ``str(step)``), the measured excess over the model with a
    largest set of regenerations that can run together all on: what several
    regenerations of one step add together beyond each one alone (measured where
    :func:`_regen_fix` alone left features.12's backward of MobileNetV2 w0.35 b2
    243,456 B short in a plan with its four regenerations on, round 16).  The planner
    adds it at a step where two or more regenerations are on, in place of the largest
    single one's fix when it is larger (:func:`.planner.simulate_all`)."""
    from edgetrain.engine.budget.plan import ExecutionPlan, UnitDecision
    from edgetrain.engine.budget.planner import simulate_all
    from edgetrain.engine.budget.profile import _regen_set

    rs = _regen_set(profile.regens)
    if len(rs) < 2:
        return {}
    unit_steps = unit_call_steps(profile)
    glue_steps = {s for s, _ in profile.glue}
    t = profile.n_steps
    p = ExecutionPlan(
        "hybrid", 1, 1, 1, 0.0,
        [UnitDecision(r.name, "regen", None, chain=list(r.chain) or None)
         for r in {r.state_key: r for r in rs}.values()],
    )  # fmt: skip
    got = measure_alloc_steps(model, inputs, loss_fn, unit_steps, glue_steps, t, seed, plan=p)[0]
    pred = simulate_all(seen_as, {r.state_key: ("regen", None) for r in rs})
    return {
        str(k): (
            int(max(got[k] - pred[k], 0)),
            int(max(got[2 * t - 1 - k] - pred[2 * t - 1 - k], 0)),
        )
        for k in sorted({r.step for r in rs})
    }


def _leaf_fix(
    model, profile, inputs, loss_fn, seed, seen_as, items, decide, decision
) -> dict[str, tuple[int, int]]:
    """Per leaf decision (``items``: masks or regenerations, each with ``step`` and
    ``state_key``), the measured excess over the model at its forward and backward step:
    one measured step per ``j``, with the ``j``-th candidate of every forward step on."""
    from edgetrain.engine.budget.plan import ExecutionPlan
    from edgetrain.engine.budget.planner import simulate_all

    unit_steps = unit_call_steps(profile)
    glue_steps = {s for s, _ in profile.glue}
    t = profile.n_steps
    by_step: dict[int, list[Any]] = {}
    for m in items:
        by_step.setdefault(m.step, []).append(m)
    out: dict[str, tuple[int, int]] = {}
    for j in range(max((len(v) for v in by_step.values()), default=0)):
        ms = [v[j] for v in by_step.values() if len(v) > j]
        # one decision per key: a shared leaf's calls at several steps take one decision
        p = ExecutionPlan(
            "hybrid", 1, 1, 1, 0.0, [decide(m) for m in {m.state_key: m for m in ms}.values()]
        )
        got = measure_alloc_steps(model, inputs, loss_fn, unit_steps, glue_steps, t, seed, plan=p)[
            0
        ]
        pred = simulate_all(seen_as, {m.state_key: (decision, None) for m in ms})
        for m in ms:
            out[m.entry] = (
                int(max(got[m.step] - pred[m.step], 0)),
                int(max(got[2 * t - 1 - m.step] - pred[2 * t - 1 - m.step], 0)),
            )
    return out
