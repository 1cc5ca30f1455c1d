"""The compressed unit's all-allocation margin, explained: ``alloc.released``.

Within a unit's backward step the unplanned step peaks late (the unit's first leaf
allocates the input gradient) after its other leaves' saved tensors were freed, so the
measured residual of that step is short by them; a compressed unit, which no longer
holds them, needs them added back (round 10 used a blanket 1.5 leaves instead).
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from edgetrain import models
from edgetrain.engine.budget import profile_model
from edgetrain.engine.budget.accountant import (
    MarkingAccountant,
    alloc_peak_bytes,
    model_state_tensors,
    replay_allocs,
    run_plan_step,
    step_alloc_peak,
)
from edgetrain.engine.budget.alloc import (
    measure_alloc_steps,
    plan_states,
    step_timeline,
    torch_visible,
    unit_call_steps,
)
from edgetrain.engine.budget.plan import ExecutionPlan, UnitDecision
from edgetrain.engine.budget.planner import simulate, simulate_all
from edgetrain.engine.budget.runner import codecs_for


# -- the replay on synthetic events ------------------------------------------------------
def _ev(seq):
    """(time, size, ptr, mark) from a compact list: ("m", name) | (size, ptr)."""
    return [(i, 0, 0, e[1]) if e[0] == "m" else (i, e[0], e[1], None) for i, e in enumerate(seq)]


def test_released_is_what_the_step_freed_before_its_peak():
    # T = 1: forward step 0, backward step 1 (the unit's, mark "b0")
    events = _ev(
        [
            ("m", "f0"),
            (100, 1),  # A: saved by the unit's first leaf (alive until its backward)
            (50, 2),  # B: saved by a later leaf, freed first in backward
            ("m", "b0"),
            (-50, 2),  # B released
            (80, 3),  # the input gradient: the step's peak, 100 + 80
            (-100, 1),
            (-80, 3),
            (-7, 99),  # a block allocated before the events: ignored
        ]
    )
    meas, released = step_timeline(events, 1, set())
    assert list(meas) == [150, 180]
    # the residual subtracts A + B = 150, the peak held A only: B's 50 B are missing
    assert list(released) == [0, 50]


def test_released_is_zero_when_the_step_peaks_before_freeing():
    events = _ev([("m", "f0"), (100, 1), ("m", "b0"), (80, 3), (-100, 1), (-80, 3)])
    meas, released = step_timeline(events, 1, set())
    assert list(meas) == [100, 180] and list(released) == [0, 0]


def test_replay_allocs_is_the_peak_of_alloc_peak_bytes():
    def fn():
        x = torch.empty(250_000)
        y = torch.empty(500_000)
        del x
        return y

    peak = alloc_peak_bytes(fn)
    assert peak == 3_000_000
    levels = [lv for name, _, _, lv in replay_allocs(_ev([(10, 1), (5, 2), (-10, 1), (-3, 7)]))]
    assert levels == [10, 15, 5, 5]


@st.composite
def _step(draw):
    """Random marked events of a T-step forward + backward, unique pointers."""
    t = draw(st.integers(1, 3))
    seq, live, ptr = [], [], 0
    for k in range(2 * t):
        seq.append(("m", f"f{k}" if k < t else f"b{2 * t - 1 - k}"))
        for _ in range(draw(st.integers(0, 5))):
            if live and draw(st.booleans()):
                p, size = live.pop(draw(st.integers(0, len(live) - 1)))
                seq.append((-size, p))
            else:
                ptr += 1
                size = draw(st.integers(1, 1000))
                live.append((ptr, size))
                seq.append((size, ptr))
    return t, seq


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_step(), data=st.data())
def test_released_bounds_the_peak_without_any_subset_of_released_blocks(case, data):
    """The safety argument of the model: dropping any subset ``S`` of the blocks a
    backward step frees (allocated in forward), the step's peak is at most
    ``measured - |S| + released`` (so adding ``min(released, bytes dropped)`` is safe)."""
    t, seq = case
    events = _ev(seq)
    meas, released = step_timeline(events, t, set())
    assert (released >= 0).all() and not released[:t].any()
    # blocks allocated in forward and freed in backward, with their free step
    step, born, freed = 0, {}, {}
    for e in seq:
        if e[0] == "m":
            step += 1 if step or e[1] != "f0" else 0
            continue
        if e[0] > 0:
            born[e[1]] = step
        elif born[e[1]] < t <= step:
            freed[e[1]] = (step, -e[0])
    total = np.zeros(2 * t, dtype=np.int64)
    for k, size in freed.values():
        total[k] += size
    assert (released <= total).all()
    drop = {p for p in freed if data.draw(st.booleans())}
    kept = [e for e in seq if e[0] == "m" or e[1] not in drop]
    meas2, _ = step_timeline(_ev(kept), t, set())
    for k in range(t, 2 * t):
        gone = sum(size for p, (j, size) in freed.items() if p in drop and j == k)
        assert meas2[k] <= meas[k] - gone + released[k]


# -- a real mixed plan on a tiny model: the cause appears, the model covers it ---------------
FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def tiny():
    model = models.build("mobilenetv2", seed=0, width_mult=0.35, input_size=32)
    gen = torch.Generator().manual_seed(0)
    x = models.example_input(model, batch=2, generator=gen)
    y = torch.randint(0, model.num_classes, (2,), generator=gen)
    return (model, *_profiled(model, x, y))


def _profiled(model: nn.Module, x: torch.Tensor, y: torch.Tensor):
    """(inputs, loss, profile): a cross-entropy step profiled with the all-allocation
    timeline and no timed in-situ steps."""

    def loss_fn(out):
        return nn.functional.cross_entropy(out, y)

    prof = profile_model(
        model, (x,), loss_fn, codecs=codecs_for("hybrid"), alloc_timeline=True,
        in_situ_steps=0, repeats=1,
    )  # fmt: skip
    return (x,), loss_fn, prof


def test_compressed_unit_beside_a_recomputed_one_is_covered_at_every_step(tiny):
    """features.1.conv.1 (depthwise conv, BN, ReLU6) compressed, its neighbour
    recomputed: at its backward step the measured bytes exceed the model without
    ``released`` (the round-10 shortfall, on this tiny model) and not the model with it;
    no step of the plan is under-predicted."""
    model, inputs, loss_fn, prof = tiny
    t = prof.n_steps
    unit = prof.unit("features.1.conv.1")
    b = 2 * t - 1 - unit.step
    states = {unit.name: ("compress", "mix"), "features.1.conv.0": ("recompute", None)}
    p = ExecutionPlan(
        "hybrid", 1, 1, 1, 0.0, [UnitDecision(n, d, c) for n, (d, c) in states.items()]
    )
    assert plan_states(prof, p) == states
    got, _ = measure_alloc_steps(
        model, inputs, loss_fn, unit_call_steps(prof),
        {s for s, _ in prof.glue}, t, plan=p,
    )  # fmt: skip
    pred = simulate_all(prof, states)
    released = prof.alloc.released
    assert 0 < released[b] <= unit.float_bytes
    assert (got <= pred).all(), [(k, int(got[k] - pred[k])) for k in np.flatnonzero(got > pred)]
    assert got.max() <= pred.max()
    # without the released bytes (no margin either) the unit's backward is short ...
    prof.alloc.released = []
    try:
        bare = simulate_all(prof, states)
        seen_bare = simulate_all(torch_visible(prof), states)
    finally:
        prof.alloc.released = released
    assert got[b] > bare[b]
    # ... by about the released bytes, on what the profiler sees (no encoded bytes)
    short = got[b] - seen_bare[b]
    assert 0.5 * released[b] <= short <= released[b]


def test_kept_and_recomputed_units_get_no_released_bytes(tiny):
    """Recompute re-materialises every saved tensor at its backward step (as kept units
    hold them): the unplanned and recompute predictions do not change."""
    _, _, _, prof = tiny
    released = prof.alloc.released
    rc = {"features.1.conv.1": ("recompute", None)}
    with_r = simulate_all(prof, rc), simulate_all(prof, {})
    prof.alloc.released = []
    try:
        without = simulate_all(prof, rc), simulate_all(prof, {})
    finally:
        prof.alloc.released = released
    assert all((a == c).all() for a, c in zip(with_r, without, strict=True))


class _Outside(MarkingAccountant):
    """Sums what the executor holds outside torch's allocator in one step: encoded
    buffers (``hold_bytes``) and fast masks' packed bits (``mark_outside``)."""

    total = 0

    def mark_outside(self, nbytes: int, owner: object) -> None:
        _Outside.total += nbytes
        super().mark_outside(nbytes, owner)


def _outside_bytes(model, p, inputs, loss_fn) -> int:
    _Outside.total = 0
    run_plan_step(model, p, inputs, loss_fn, _Outside(exclude=model_state_tensors(model)))
    model.zero_grad(set_to_none=True)
    return _Outside.total


def test_step_alloc_peak_counts_the_encoded_buffers_outside_torch(tiny):
    """The default measurement adds what the executor holds outside torch's allocator
    (the codec's encoded ``bytes``, and the packed bits of the masks it puts on a
    compressed unit's ReLU6s): above the profiler's view by at most those bytes, and
    equal to it for a plan that holds none."""
    model, inputs, loss_fn, prof = tiny
    units = [u for u in prof.units if "mix" in u.codecs and u.float_bytes][:3]
    assert units
    p = ExecutionPlan(
        "hybrid", 1, 1, 1, 0.0, [UnitDecision(u.name, "compress", "mix") for u in units]
    )
    torch_only, _ = step_alloc_peak(model, p, inputs, loss_fn, held=False)
    held, acc_peak = step_alloc_peak(model, p, inputs, loss_fn)
    outside = _outside_bytes(model, p, inputs, loss_fn)
    assert outside > 0
    assert 0 < held - torch_only <= outside
    assert acc_peak > 0
    rc = ExecutionPlan("hybrid", 1, 1, 1, 0.0, [UnitDecision(units[0].name, "recompute", None)])
    assert (
        step_alloc_peak(model, rc, inputs, loss_fn)[0]
        == step_alloc_peak(model, rc, inputs, loss_fn, held=False)[0]
    )


# -- masks: their measured excess (alloc.fix["mask"]) ------------------------------------
def test_a_mask_whose_output_a_glue_op_keeps_is_predicted_with_its_measured_excess(tiny):
    """Masking MobileNetV2's last ReLU6 (``last_conv.2``) frees nothing: its output feeds
    the pooling glue, which keeps it.  Without ``fix["mask"]`` the model counted the
    tensor as gone and the step held 163,840 B (1,280 x 4 x 4 x 2 float32) more than
    predicted -- refined plans that filled the budget then measured over it (round 12).
    """
    model, (x,), loss_fn, shared = tiny
    prof = dataclasses.replace(shared, alloc=copy.deepcopy(shared.alloc))  # fix is popped below
    (last,) = [m for m in prof.masks if m.name == "last_conv.2"]
    fwd, bwd = prof.alloc.fix["mask"][last.state_key]
    p = ExecutionPlan("hybrid", 1, 1, 1, 0.0, [UnitDecision(last.name, "mask", None)])
    states = plan_states(prof, p)
    assert states == {last.state_key: ("mask", None)}
    held = step_alloc_peak(model, p, (x,), loss_fn)[0]
    predicted = int(simulate_all(prof, states).max())
    assert held <= predicted
    # per step, on the instrument the excess was measured with (the profiler's events)
    t = prof.n_steps
    meas = measure_alloc_steps(
        model, (x,), loss_fn, unit_call_steps(prof),
        {s for s, _ in prof.glue}, t, plan=p,
    )[0]  # fmt: skip
    assert (meas <= simulate_all(torch_visible(prof), states)[: len(meas)]).all()
    prof.alloc.fix.pop("mask")  # without it the model is short by the excess there
    short = meas - simulate_all(torch_visible(prof), states)[: len(meas)]
    assert abs(int(short[2 * t - 1 - last.step]) - bwd) <= 8192, (fwd, bwd)
    assert bwd >= last.nbytes - 8192


def test_a_regenerated_leaf_feeding_a_recomputed_unit_keeps_its_input(tiny):
    """``conv_stem.2`` (ReLU6) regenerated and masked, ``features.0`` (its consumer)
    recomputed: the consumer's kept input is the regenerated output, and the executor's
    regeneration source refers to the leaf's input while that output lives, so the mask
    frees nothing.  The model held the input only for placeholders in saved slots and was
    short by it; MobileNetV2 b32 at half the all-allocation peak measured 2.6 MB over
    its prediction and its budget (round 14)."""
    from edgetrain.engine.budget.planner import simulate

    model, (x,), loss_fn, prof = tiny
    (regen,) = [r for r in prof.regens if r.name == "conv_stem.2" and not r.chain]
    (mask,) = [m for m in prof.masks if m.name == "conv_stem.2"]
    p = ExecutionPlan(
        "hybrid", 1, 1, 1, 0.0,
        [UnitDecision("features.0", "recompute"), UnitDecision("conv_stem.2", "regen"),
         UnitDecision("conv_stem.2", "mask")],
    )  # fmt: skip
    states = plan_states(prof, p)
    assert states == {
        "features.0": ("recompute", None),
        regen.state_key: ("regen", None),
        mask.state_key: ("mask", None),
    }
    t = prof.n_steps
    meas = measure_alloc_steps(
        model, (x,), loss_fn, unit_call_steps(prof),
        {s for s, _ in prof.glue}, t, plan=p,
    )[0]  # fmt: skip
    seen = simulate_all(torch_visible(prof), states)[: len(meas)]
    assert (meas <= seen).all(), [(k, int(meas[k] - seen[k])) for k in np.flatnonzero(meas > seen)]
    assert step_alloc_peak(model, p, (x,), loss_fn)[0] <= int(simulate_all(prof, states).max())
    # the input held beside the recomputed unit's kept input is what the model lacked
    # (the mask's bits are held too: numpy's memory, apart from that storage; round 25)
    extra = simulate(prof, states, live_sources=True) - simulate(prof, states)
    assert extra.max() == regen.in_bytes > mask.mask_bytes > 0
    assert (meas > (seen - extra[: len(meas)])).any()


# -- regenerations: their measured excess (alloc.fix["regen"], ["regen-step"]) -----------
def test_a_blocks_regenerations_together_are_within_the_prediction():
    """A plan hybrid chose at the minimum all-allocation budget of MobileNetV2 b2 (32 px;
    recompute 11, compress 2, regen 19, mask 10): with features.11 / .12's expansion and
    depthwise BatchNorm -> ReLU6 and the depthwise BatchNorm all regenerated, their
    backward steps held one more 576-channel output (271,104 / 280,320 B) than the model,
    and the step 149,952 B more than predicted -- over its budget (the quick
    budget_alloc_model benchmark failed in 2 of 3 runs, round 16).  Any two of the three
    did not.  The model now adds the regenerations' measured excess and, where two or
    more share a step, one regenerated output at its backward step."""
    from edgetrain.commands.budget import zoo_task

    model, (x,), loss_fn = zoo_task("mobilenetv2", 2, 0)
    prof = profile_model(
        model, (x,), loss_fn, codecs=codecs_for("hybrid"), alloc_timeline=True,
        in_situ_steps=0, repeats=1,
    )  # fmt: skip
    p = ExecutionPlan.from_json(json.loads((FIXTURES / "regen_block_plan.json").read_text()))
    states = plan_states(prof, p)
    held = step_alloc_peak(model, p, (x,), loss_fn)[0]
    predicted = int(simulate_all(prof, states).max())
    assert held <= predicted <= 1.03 * held  # before: 149,952 B above the prediction


def test_a_chain_regeneration_frees_its_batchnorm_statistics_with_the_batchnorm(tiny):
    """A BatchNorm -> ReLU6 chain regenerated from the BatchNorm's batch statistics: the
    executor took the statistics from the head's entry but left the entry (2 x C floats)
    to the end of the step, after the BatchNorm's own backward had freed its copy.  The
    model does not count them there; MobileNetV2 b2 held 4,608 B per 576-channel chain
    to the end of the step, and a plan at its all-allocation minimum measured 239 B over
    its budget (round 24).  One chain: every step within the model; every
    chain of the tiny profile at once: every backward step."""
    model, (x,), loss_fn, prof = tiny
    chains = [r for r in prof.regens if r.chain and "conv.0.1>" in r.state_key]
    assert chains, [r.state_key for r in prof.regens if r.chain]
    t = prof.n_steps
    for group in (chains[:1], chains):
        p = ExecutionPlan(
            "hybrid", 1, 1, 1, 0.0,
            [UnitDecision(r.name, "regen", chain=list(r.chain)) for r in group],
        )  # fmt: skip
        states = plan_states(prof, p)
        assert states == {r.state_key: ("regen", None) for r in group}
        meas = measure_alloc_steps(
            model, (x,), loss_fn, unit_call_steps(prof),
            {s for s, _ in prof.glue}, t, plan=p,
        )[0]  # fmt: skip
        seen = simulate_all(torch_visible(prof), states)[: len(meas)]
        # backward steps: the forward of many regenerations at once is under-counted
        # otherwise (their measured sets do not contain every chain; known, README)
        lo = 0 if len(group) == 1 else t
        over = [(int(k), int(meas[k] - seen[k])) for k in np.flatnonzero(meas > seen) if k >= lo]
        assert not over, (len(group), over)


def test_a_compressed_unit_encodes_what_is_left_of_it_byte_for_byte(tiny):
    """A compressed unit one of whose float storages is regenerated encodes the rest.
    The model scaled the unit's encoded bytes by the float bytes left, but activations do
    not compress alike: a ReLU6 output (about half zeros) encodes to far less per byte
    than the projection convolution's dense output.  features.5.conv.2 of MobileNetV2 b2,
    compressed with its input regenerated, encoded 10,084 B where the model had 6,724:
    3,360 B held outside torch's allocator beyond the prediction (round 24).  The profile
    now keeps each storage's encoded bytes (``CodecCost.per_key``)."""
    model, inputs, loss_fn, prof = tiny
    unit = prof.unit("features.1.conv.2")
    cost = unit.codecs["mix"]
    regen = next(r for r in prof.regens if r.state_key == "regen:features.1.conv.1.2")
    assert regen.out_key in cost.per_key and len(cost.per_key) == 2
    assert sum(cost.per_key.values()) == cost.held_bytes - (unit.saved_bytes - unit.float_bytes)
    p = ExecutionPlan(
        "hybrid", 1, 1, 1, 0.0,
        [UnitDecision(unit.name, "compress", "mix"), UnitDecision(regen.name, "regen")],
    )  # fmt: skip
    states = plan_states(prof, p)
    assert states == {unit.name: ("compress", "mix"), regen.state_key: ("regen", None)}
    outside = simulate_all(prof, states) - simulate_all(torch_visible(prof), states)
    predicted = int(outside[unit.step] - outside[unit.step - 1])
    encoded = _outside_bytes(model, p, inputs, loss_fn)  # the unit has no ReLU: no masks
    (left,) = (b for k, b in cost.per_key.items() if k != regen.out_key)
    assert predicted == left
    assert abs(encoded - predicted) <= 0.01 * encoded
    # the old estimate: the unit's encoded bytes scaled by the float bytes left
    enc = sum(cost.per_key.values())
    scaled = enc * (unit.float_bytes - unit.saved[regen.out_key]) / unit.float_bytes
    assert encoded - scaled > 0.2 * encoded


def test_a_compressed_units_relu6_is_held_as_its_mask(tiny):
    """The executor masks every ReLU-family leaf of a compressed unit (a lossy codec
    must not hold what the leaf's backward reads through a predicate), so the ReLU6's
    input is held as 1 bit per element, not encoded.  The model encoded it: 37 % more
    than the executor held outside torch on this unit (140,973 B against 102,719), and
    the compress method's plans on MobileNetV2 b2 held 4-11 % less than predicted
    (round 25)."""
    model, inputs, loss_fn, prof = tiny
    unit = prof.unit("features.1.conv.1")
    (mask,) = [m for m in prof.masks if m.name == "features.1.conv.1.2"]
    assert mask.key in unit.saved and mask.key in unit.codecs["mix"].per_key
    states = {unit.name: ("compress", "mix")}
    p = ExecutionPlan("hybrid", 1, 1, 1, 0.0, [UnitDecision(unit.name, "compress", "mix")])
    outside = simulate_all(prof, states) - simulate_all(torch_visible(prof), states)
    predicted = int(outside[unit.step] - outside[unit.step - 1])
    measured = _outside_bytes(model, p, inputs, loss_fn)
    cost = unit.codecs["mix"]
    assert predicted == sum(cost.per_key.values()) - cost.per_key[mask.key] + mask.mask_bytes
    assert abs(measured - predicted) <= 0.01 * measured, (measured, predicted)
    # and the same saved-tensor bytes as the plan masking the leaf itself (the
    # all-allocation model adds the mask's own measured transients, ``fix["mask"]``)
    p2 = ExecutionPlan(
        "hybrid", 1, 1, 1, 0.0,
        [UnitDecision(unit.name, "compress", "mix"), UnitDecision(mask.name, "mask")],
    )  # fmt: skip
    s2 = plan_states(prof, p2)
    assert s2 == {**states, mask.state_key: ("mask", None)}
    assert (simulate(prof, s2) == simulate(prof, states)).all()
    assert _outside_bytes(model, p2, inputs, loss_fn) == measured


def test_a_chain_regeneration_inside_a_compressed_unit_regenerates_nothing(tiny):
    """A BatchNorm -> ReLU6 chain regenerates from the BatchNorm's input, which a
    compressed unit holds only encoded: by the tail nothing holds the raw tensor, and the
    ReLU6's output is held as without the chain.  The model dropped that output and
    held the BatchNorm's input for it instead: up to 917,504 B over what the step held,
    at some steps, on the tiny profile.  It now ignores such a chain (the predicted peak
    is then the one measured), and the planner does not offer one there."""
    model, inputs, loss_fn, prof = tiny
    unit = prof.unit("features.1.conv.1")
    (chain,) = [r for r in prof.regens if r.state_key == f"regen:{unit.name}.1>{unit.name}.2"]
    states = {unit.name: ("compress", "mix")}
    with_chain = {**states, chain.state_key: ("regen", None)}
    assert (simulate_all(prof, with_chain) == simulate_all(prof, states)).all()
    p = ExecutionPlan("hybrid", 1, 1, 1, 0.0, [UnitDecision(unit.name, "compress", "mix")])
    pc = ExecutionPlan(
        "hybrid", 1, 1, 1, 0.0,
        [UnitDecision(unit.name, "compress", "mix"),
         UnitDecision(chain.name, "regen", chain=list(chain.chain))],
    )  # fmt: skip
    assert plan_states(prof, pc) == with_chain
    assert _outside_bytes(model, pc, inputs, loss_fn) == _outside_bytes(model, p, inputs, loss_fn)
    assert step_alloc_peak(model, pc, inputs, loss_fn)[0] <= simulate_all(prof, with_chain).max()
    # kept, the chain does drop the ReLU6's output
    kept = {chain.state_key: ("regen", None)}
    assert simulate_all(prof, kept).max() < simulate_all(prof, {}).max()


def test_a_fast_masks_bits_count_in_the_held_peak(tiny):
    """A fast mask's packed bits are numpy memory under a ``torch.from_numpy`` tensor:
    the profiler does not see them, so ``step_alloc_peak`` adds them from the
    accountant's marks (``mark_outside``), as it adds encoded buffers."""
    model, inputs, loss_fn, prof = tiny
    masks = [m for m in prof.masks if m.fast][:4]
    assert masks
    p = ExecutionPlan("hybrid", 1, 1, 1, 0.0, [UnitDecision(m.name, "mask") for m in masks])
    torch_only = step_alloc_peak(model, p, inputs, loss_fn, held=False)[0]
    held = step_alloc_peak(model, p, inputs, loss_fn)[0]
    assert 0 < held - torch_only <= sum(m.mask_bytes for m in masks)
    assert _outside_bytes(model, p, inputs, loss_fn) == sum(m.mask_bytes for m in masks)


def test_a_compressed_unit_with_any_one_regeneration_holds_what_the_model_says(tiny):
    """Each regeneration inside the compressed features.1.conv.1, one at a time: the
    bytes held outside torch at the unit's step are the model's, to within 1 %, and
    the step's held peak is within the prediction.  Regenerating the BatchNorm's output
    (the ReLU6's input) still leaves the ReLU6 holding its mask: the model had dropped
    the mask with the storage, 12,288 B short (round 25)."""
    model, inputs, loss_fn, prof = tiny
    unit = prof.unit("features.1.conv.1")
    regens = [r for r in prof.regens if r.name.startswith(unit.name + ".")]
    assert len(regens) >= 4
    for r in regens:
        p = ExecutionPlan(
            "hybrid", 1, 1, 1, 0.0,
            [UnitDecision(unit.name, "compress", "mix"),
             UnitDecision(r.name, "regen", chain=list(r.chain) if r.chain else None)],
        )  # fmt: skip
        states = plan_states(prof, p)
        assert states == {unit.name: ("compress", "mix"), r.state_key: ("regen", None)}
        pred = simulate_all(prof, states)
        outside = pred - simulate_all(torch_visible(prof), states)
        predicted = int(outside[unit.step] - outside[unit.step - 1])
        measured = _outside_bytes(model, p, inputs, loss_fn)
        assert abs(measured - predicted) <= 0.01 * measured, (r.state_key, measured, predicted)
        assert step_alloc_peak(model, p, inputs, loss_fn)[0] <= pred.max(), r.state_key


class _ReluNet(nn.Module):
    """``a`` ends in a ReLU whose output only a glue op (the pooling) saves besides it;
    ``b`` has a ReLU whose output the next convolution of the unit saves too."""

    def __init__(self):
        super().__init__()
        self.a = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.b = nn.Sequential(
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1)
        )
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        x = nn.functional.max_pool2d(self.a(x), 2)
        return self.head(self.b(x).mean((2, 3)))


def test_a_compressed_units_relus_that_are_no_mask_candidates_hold_their_bits():
    """A ReLU whose output another op saves too is no mask candidate, yet the executor
    masks it in a compressed unit: its bits are held beside what the unit encodes
    (``auto_mask_bytes``), and where no other op *of the unit* saves the output, the unit
    encodes it no more (``auto_mask_keys``).  Without the keys ShuffleNetV2 b2's
    compressed units were predicted up to 48 % above what they held outside torch
    (stages.0.0.branch2.0: 149,367 B against 101,271, round 25); both units here are
    exact."""
    torch.manual_seed(0)
    model = _ReluNet()
    inputs, loss_fn, prof = _profiled(model, torch.randn(2, 3, 32, 32), torch.tensor([0, 1]))
    a, b = prof.unit("a"), prof.unit("b")
    assert not prof.masks
    assert a.auto_mask_bytes == 2 * 8 * 32 * 32 // 8 and len(a.auto_mask_keys) == 1
    assert b.auto_mask_bytes == 2 * 16 * 16 * 16 // 8 and not b.auto_mask_keys
    for u in (a, b):
        states = {u.name: ("compress", "mix")}
        p = ExecutionPlan("hybrid", 1, 1, 1, 0.0, [UnitDecision(u.name, "compress", "mix")])
        pred = simulate_all(prof, states)
        outside = pred - simulate_all(torch_visible(prof), states)
        predicted = int(outside[u.step] - (outside[u.step - 1] if u.step else 0))
        measured = _outside_bytes(model, p, inputs, loss_fn)
        assert abs(measured - predicted) <= 0.01 * measured, (u.name, measured, predicted)
        assert step_alloc_peak(model, p, inputs, loss_fn)[0] <= pred.max(), u.name
