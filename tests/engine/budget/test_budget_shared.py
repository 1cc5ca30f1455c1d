"""Shared modules (one module called several times: ALBERT's layer, a block applied twice).

Each call is a unit of its own in the profile (its step, inputs and saved tensors), all
calls take the module's one decision, and the executor recomputes every call from that
call's own inputs -- so a weight-shared model can be planned below what keeping its
activations takes (before, ALBERT's minimum feasible budget was 0.98 of its unplanned
peak: no unit of the shared layer could be evicted).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from edgetrain import models
from edgetrain.engine.budget import (
    ExecutionPlan,
    MemoryAccountant,
    PlanExecutor,
    UnitDecision,
    minimum_budget,
    plan,
    profile_model,
    run_budget,
    simulate,
)
from edgetrain.engine.budget.accountant import model_state_tensors
from edgetrain.engine.budget.planner import calls_of
from edgetrain.engine.budget.runner import codecs_for
from edgetrain.errors import BudgetError


class Twice(nn.Module):
    """``head(block(block(stem(x))))`` -- ``block`` holds most of the saved bytes."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.stem = nn.Linear(16, 32)
        self.block = nn.Sequential(nn.Linear(32, 128), nn.GELU(), nn.Linear(128, 32), nn.Tanh())
        self.head = nn.Linear(32, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(self.block(self.stem(x))))


def _task(batch: int = 64):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(batch, 16, generator=g)
    y = torch.randint(0, 3, (batch,), generator=g)
    return (x,), lambda out: nn.functional.cross_entropy(out, y)


def _tiny_albert():
    model = models.build(
        "albert-small", vocab_size=64, max_len=16, embedding_dim=16, hidden=32, num_layers=3,
        heads=2, intermediate=64, seed=0,
    )  # fmt: skip
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 64, (4, 16), generator=g)
    y = torch.randint(0, model.num_classes, (4,), generator=g)
    return model, (ids,), lambda out: nn.functional.cross_entropy(out, y)


def _step(model, p, inputs, loss_fn):
    state = {k: v.clone() for k, v in model.state_dict().items()}
    model.zero_grad(set_to_none=True)
    acc = MemoryAccountant(exclude=model_state_tensors(model))
    torch.manual_seed(0)
    with PlanExecutor(model, p, accountant=acc) as ex:
        loss = ex.step(inputs, loss_fn)
    grads = [q.grad.clone() for q in model.parameters()]
    model.load_state_dict(state)
    return float(loss), grads, acc.peak


def test_each_call_of_a_shared_module_is_a_unit_of_its_own():
    model = Twice()
    inputs, loss_fn = _task()
    prof = profile_model(model, inputs, loss_fn, in_situ_steps=0)
    block = [u for u in prof.units if u.name == "block"]
    assert [u.call for u in block] == [0, 1]
    assert all(u.calls == 2 for u in block)
    assert block[0].step < block[1].step
    assert block[0].entry == "block" and block[1].entry == "block#1"
    # each call saves its own activations: 64 x (32 + 128 + 128 + 32) floats
    assert block[0].saved_bytes == block[1].saved_bytes
    # they share one tensor: the first call's output (its Tanh saves it) is the second's
    # input (its first Linear saves it)
    assert set(block[0].saved) & set(block[1].saved) == set(block[1].inputs)
    assert all(u.recomputable() for u in block)
    # the profile's saved bytes are every call's, counted once
    assert (
        sum(u.saved_bytes for u in prof.units) + sum(sum(k.values()) for _, k in prof.glue)
        >= prof.total_saved_bytes
    )


def test_a_shared_module_recomputed_at_every_call_trains_bit_identically():
    model = Twice()
    inputs, loss_fn = _task()
    prof = profile_model(model, inputs, loss_fn, in_situ_steps=0)
    none = plan(prof, prof.total_saved_bytes * 2, "none")
    both = ExecutionPlan("recompute", 1, 1, 1, 0.0, [UnitDecision("block", "recompute")])
    loss0, g0, peak0 = _step(model, none, inputs, loss_fn)
    loss1, g1, peak1 = _step(model, both, inputs, loss_fn)
    assert loss1 == loss0
    assert all(torch.equal(a, b) for a, b in zip(g0, g1, strict=True))
    # both calls hold only their inputs: the model predicts the measured peak
    assert peak1 == int(simulate(prof, {"block": ("recompute", None)}).max()) < peak0
    assert peak0 == int(simulate(prof, {}).max())


def test_the_planner_decides_a_shared_module_once_for_all_its_calls():
    model = Twice()
    inputs, loss_fn = _task()
    prof = profile_model(model, inputs, loss_fn, in_situ_steps=0)
    low = minimum_budget(prof, "recompute")
    assert low < int(simulate(prof, {}).max())
    p = plan(prof, low, "recompute")
    assert len({(u.name, u.decision) for u in p.units}) == len(p.units)
    block = next(u for u in p.units if u.name == "block")
    assert block.saved_bytes == sum(u.saved_bytes for u in prof.units if u.name == "block")
    loss0, g0, _ = _step(model, plan(prof, prof.total_saved_bytes * 2, "none"), inputs, loss_fn)
    loss1, g1, peak1 = _step(model, p, inputs, loss_fn)
    assert loss1 == loss0 and all(torch.equal(a, b) for a, b in zip(g0, g1, strict=True))
    assert peak1 <= p.predicted_peak_bytes <= low


def test_albert_plans_below_keeping_its_shared_layer():
    model, inputs, loss_fn = _tiny_albert()
    prof = profile_model(model, inputs, loss_fn, codecs=codecs_for("hybrid"), in_situ_steps=0)
    attn = [u for u in prof.units if u.name == "shared_layer.attn"]
    assert [u.call for u in attn] == [0, 1, 2]
    unplanned = plan(prof, prof.total_saved_bytes * 2, "none").predicted_peak_bytes
    # recompute alone now reaches well below the unplanned peak (before: 0.98 of it)
    assert minimum_budget(prof, "recompute") < 0.8 * unplanned
    rep = run_budget(model, inputs, loss_fn, 0.7, "recompute", repeats=1, profile=prof)
    assert rep.decisions["recompute"] + rep.decisions["regen"] >= 1
    assert rep.max_abs_grad_error == 0.0
    assert rep.measured_peak_bytes <= rep.predicted_peak_bytes <= rep.budget_bytes
    hyb = run_budget(model, inputs, loss_fn, 0.5, "hybrid", repeats=1, profile=prof)
    assert hyb.measured_peak_bytes <= hyb.budget_bytes


def test_albert_under_an_all_allocation_budget_holds_its_prediction():
    model, inputs, loss_fn = _tiny_albert()
    rep = run_budget(model, inputs, loss_fn, 0.9, "hybrid", repeats=1, scope="all")
    decided = [u.name for u in rep.plan.units if u.decision != "keep"]
    assert any(n.startswith("shared_layer") for n in decided)
    assert rep.measured_alloc_peak_bytes <= rep.budget_bytes


def test_too_small_a_budget_for_a_shared_model_names_the_minimum():
    model = Twice()
    inputs, loss_fn = _task()
    prof = profile_model(model, inputs, loss_fn, in_situ_steps=0)
    low = minimum_budget(prof, "recompute")
    with pytest.raises(BudgetError, match=f"{low:,}"):
        plan(prof, low // 2, "recompute")


class Reused(nn.Module):
    """One ReLU6 module applied after each of two Linears (a common way to write it)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b, self.head = nn.Linear(16, 256), nn.Linear(256, 256), nn.Linear(256, 3)
        self.act = nn.ReLU6()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.act(self.b(self.act(self.a(x)))))


def test_the_leaves_of_a_shared_module_regenerate_at_every_call():
    model, inputs, loss_fn = _tiny_albert()
    prof = profile_model(model, inputs, loss_fn, codecs=codecs_for("hybrid"), in_situ_steps=0)
    by_key: dict[str, list[int]] = {}
    for r in prof.regens:
        by_key.setdefault(r.state_key, []).append(r.call)
    shared = {k: c for k, c in by_key.items() if "shared_layer" in k}
    assert shared and all(c == [0, 1, 2] for c in shared.values())
    assert len({r.entry for r in prof.regens}) == len(prof.regens)
    rep = run_budget(model, inputs, loss_fn, 0.6, "recompute", repeats=1, profile=prof)
    assert rep.decisions["regen"] >= 1
    names = [(u.name, u.decision, tuple(u.chain or ())) for u in rep.plan.units]
    assert len(names) == len(set(names))  # one decision per leaf, for all its calls
    regen = next(u for u in rep.plan.units if u.decision == "regen")
    calls = [r for r in prof.regens if r.name == regen.name and (r.chain or None) == (
        tuple(regen.chain) if regen.chain else None)]  # fmt: skip
    assert regen.saved_bytes == sum(r.out_bytes for r in calls)
    assert rep.max_abs_grad_error == 0.0 and rep.loss_abs_error == 0.0
    assert rep.measured_peak_bytes <= rep.predicted_peak_bytes <= rep.budget_bytes


def test_a_reused_relu6_is_masked_at_both_calls():
    model = Reused()
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(64, 16, generator=g), torch.randint(0, 3, (64,), generator=g)
    inputs, loss_fn = (x,), lambda out: nn.functional.cross_entropy(out, y)
    prof = profile_model(model, inputs, loss_fn, codecs=codecs_for("hybrid"), in_situ_steps=0)
    assert sorted(m.call for m in prof.masks if m.name == "act") == [0, 1]
    both = ExecutionPlan("hybrid", 1, 1, 1, 0.0, [UnitDecision("act", "mask")])
    none = plan(prof, prof.total_saved_bytes * 2, "none")
    loss0, g0, peak0 = _step(model, none, inputs, loss_fn)
    loss1, g1, peak1 = _step(model, both, inputs, loss_fn)
    assert loss1 == loss0 and all(torch.equal(a, b) for a, b in zip(g0, g1, strict=True))
    assert peak1 == int(simulate(prof, {"mask:act": ("mask", None)}).max()) < peak0
    # the planner takes it as one decision over both calls
    first = next(m for m in prof.masks if m.name == "act" and m.call == 0)
    assert [m.call for m in calls_of(prof, first)] == [0, 1]
    p = plan(prof, peak1, "hybrid", refine=False)
    keys = [(u.name, u.decision) for u in p.units]
    assert len(keys) == len(set(keys))
    for u in p.units:
        if (u.name, u.decision) == ("act", "mask"):
            assert u.held_bytes == sum(m.mask_bytes for m in calls_of(prof, first))
