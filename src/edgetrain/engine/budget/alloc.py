"""Every allocation of a training step on the planner's timeline (``scope="all"``).

The planner's own timeline (:func:`.planner.simulate`) counts autograd's saved tensors
only.  What a process must hold is every allocation of the step: besides the saved
tensors, the parameter gradients (allocated when their unit is back-propagated and
held to the end of the step, the step starting from ``zero_grad(set_to_none=True)``),
the gradient flowing between units, the forward's outputs that nobody saves, and the
kernels' workspace.  The model here is

    all(k) = saved_plan(k) + grads(k) + residual(k) + forward_extra_plan(k)

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
  hooks (:func:`measure_alloc_timeline`); ``residual(k)`` = measured peak within step
  ``k`` - ``saved_none(k)`` - ``grads(k)``.  It is everything besides saved tensors and
  gradients (inter-unit gradients, non-saved outputs, workspace, the loss) and is
  taken as independent of the plan;
* ``forward_extra_plan`` -- a unit that is recomputed, compressed or swapped still
  materialises its tensors one leaf at a time in forward (a no-grad forward / raw
  tensors before encoding) while holding less: its largest leaf's saved bytes
  (``leaf_max_bytes``) at its forward step;
* ``fix`` -- what a decision's own transients add beyond that, *measured*: one step
  with every recomputable unit recomputed and one with every unit compressed by the
  ``mix`` codec (int8 / int4 decode through numpy, which the torch profiler does not
  count) are profiled like the unplanned one, and at each unit's forward and backward
  step the measured excess over the model (>= 0) is kept and added whenever the unit
  takes that decision (plus the planner's margin for compressed units,
  :data:`.planner.COMPRESS_MARGIN_LEAVES`).  Why measured: a compressed unit's backward decodes its tensors through
  the codec's own temporaries and, measured on MobileNetV2 b8 (the hybrid plan at its
  minimum), held up to 2.2x its largest leaf's bytes at once, not one leaf's.

So the prediction is exact for the unplanned step by construction (up to the
step-to-step variation of the allocator), and for a plan its error is what the plan
changes besides saved tensors.  Measured in docs/results/budget.md (round 10).
"""

from __future__ import annotations

import copy
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

    @property
    def measured_peak(self) -> int:
        return max(self.measured, default=0)


def grad_schedule(model: nn.Module, unit_steps: dict[str, int], n_steps: int) -> np.ndarray:
    """Bytes of parameter gradients held at every timeline step (see the module doc)."""
    t = n_steps
    size: dict[int, int] = {
        id(p): p.numel() * p.element_size() for p in model.parameters() if p.requires_grad
    }
    first_bwd: dict[int, int] = {}  # id(param) -> backward step of its first use
    for name, step in unit_steps.items():
        mod = model.get_submodule(name) if name else model
        for p in mod.parameters():
            if id(p) in size:
                # the unit latest in forward order is back-propagated first
                b = 2 * t - 1 - step
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


def measure_alloc_timeline(
    model: nn.Module,
    inputs: Sequence[Any],
    loss_fn: Callable[[Any], torch.Tensor],
    unit_steps: dict[str, int],
    glue_steps: set[int],
    n_steps: int,
    seed: int = 0,
    plan: Any = None,
) -> np.ndarray:
    """The unplanned step's all-allocation peak within every timeline step (bytes);
    ``plan``: of that ``ExecutionPlan``'s step instead (to check a prediction).

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
    seen: set[str] = set()
    handles = []

    def pre(name: str):
        def hook(mod, args):
            if name not in seen:
                mark(f"f{unit_steps[name]}")

        return hook

    def post(name: str):
        def hook(mod, args, out):
            if name in seen:
                return
            seen.add(name)
            mark(f"e{unit_steps[name]}")
            g = _first_grad_tensor(out)
            if g is not None:
                step = unit_steps[name]
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
    meas = np.zeros(2 * t, dtype=np.int64)
    cur = 0
    level = 0
    live: dict[int, int] = {}

    def goto(j: int) -> int:
        j = min(j, 2 * t - 1)
        if j <= cur:
            return cur
        meas[cur + 1 : j + 1] = np.maximum(meas[cur + 1 : j + 1], level)
        return j

    for _, size, ptr, name in events:
        if name is not None:
            kind, s = name[0], name[1:]
            if kind == "f":
                cur = goto(int(s))
            elif kind == "e":
                nxt = int(s) + 1
                cur = goto(nxt if nxt in glue_steps else int(s))
            elif kind == "L":
                cur = goto(t)
            elif kind == "b":
                cur = goto(2 * t - 1 - int(s))
            continue
        if size > 0:
            live[ptr] = live.get(ptr, 0) + size
            level += size
        elif ptr in live:
            level -= live.pop(ptr)
        meas[cur] = max(meas[cur], level)
    goto(2 * t - 1)
    return meas


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

    unit_steps = {u.name: u.step for u in profile.units}
    glue_steps = {s for s, _ in profile.glue}
    t = profile.n_steps
    meas = measure_alloc_timeline(model, inputs, loss_fn, unit_steps, glue_steps, t, seed)
    grads = grad_schedule(model, unit_steps, t)
    saved = simulate(profile, {})
    residual = meas - saved - grads
    out = AllocTimeline(
        grads=[int(x) for x in grads],
        measured=[int(x) for x in meas],
        residual=[int(x) for x in residual],
    )
    if not fixes:
        return out
    from edgetrain.engine.budget.plan import ExecutionPlan, UnitDecision
    from edgetrain.engine.budget.planner import simulate_all

    old, profile.alloc = profile.alloc, out
    try:
        configs: list[tuple[str, list]] = []
        rc = [u for u in profile.units if u.recomputable()]
        if rc:
            configs.append(("recompute", rc))
        for c in ("mix",):
            cu = [u for u in profile.units if c in u.codecs and u.calls == 1 and u.float_bytes]
            if cu:
                configs.append((f"compress:{c}", cu))
        for kind, units in configs:
            d, codec = (kind.split(":") + [None])[:2]
            p = ExecutionPlan(
                "hybrid", 1, 1, 1, 0.0, [UnitDecision(u.name, d, codec) for u in units]
            )
            got = measure_alloc_timeline(
                model, inputs, loss_fn, unit_steps, glue_steps, t, seed, plan=p
            )
            pred = simulate_all(profile, {u.name: (d, codec) for u in units})
            out.fix[kind] = {
                u.name: (
                    int(max(got[u.step] - pred[u.step], 0)),
                    int(max(got[2 * t - 1 - u.step] - pred[2 * t - 1 - u.step], 0)),
                )
                for u in units
            }
    finally:
        profile.alloc = old
    return out
