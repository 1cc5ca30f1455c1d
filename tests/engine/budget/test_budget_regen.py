"""Regen (fine-grained recompute of cheap leaves): profile candidates, plan, exact execution."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from edgetrain.engine.budget import (
    ExecutionPlan,
    MemoryAccountant,
    PlanExecutor,
    UnitDecision,
    plan,
    profile_model,
    simulate,
)
from edgetrain.engine.budget.accountant import model_state_tensors


class _Mlp(nn.Module):
    def __init__(self, d: int = 32, h: int = 128) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, h)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(h, d)

    def forward(self, x):
        return x + self.fc2(self.act(self.fc1(self.norm(x))))


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.Sequential(_Mlp(), _Mlp(), _Mlp())
        self.bn = nn.BatchNorm1d(32)
        self.act = nn.ReLU6()
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        h = self.act(self.bn(self.blocks(x).transpose(1, 2)))  # (B, 32, L)
        return self.head(h.mean(2))


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(0)
    model = _Net()
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(8, 16, 32, generator=gen)
    y = torch.randint(0, 4, (8,), generator=gen)

    def loss_fn(out):
        return nn.functional.cross_entropy(out, y)

    prof = profile_model(model, (x,), loss_fn, repeats=1)
    return model, x, loss_fn, prof


def _step(model, p, x, loss_fn):
    model.zero_grad(set_to_none=True)
    acc = MemoryAccountant(exclude=model_state_tensors(model))
    with PlanExecutor(model, p, accountant=acc) as ex:
        loss = ex.step((x,), loss_fn)
    return loss, [q.grad.clone() for q in model.parameters()], acc.peak


def test_candidates_are_cheap_leaves_that_save_their_input(setup):
    _, _, _, prof = setup
    names = {r.name for r in prof.regens}
    # GELU / LayerNorm / BatchNorm save their input and their output is saved by the next
    # layer (BN's by ReLU6).  ReLU6's output only feeds mean(), which saves no tensor.
    assert {"blocks.0.act", "blocks.0.norm", "blocks.2.act", "bn"} <= names
    assert "act" not in names and "head" not in names
    for r in prof.regens:
        assert r.out_key != r.in_key and r.out_bytes > 0 and r.saves >= 1 and r.fwd_s >= 0


def test_regen_plan_frees_memory_and_is_bit_exact(setup):
    model, x, loss_fn, prof = setup
    state = copy.deepcopy(model.state_dict())
    base = ExecutionPlan("none", 1, 1, 1, 0.0, [])
    regen = [UnitDecision(name=r.name, decision="regen") for r in prof.regens]
    p = ExecutionPlan("recompute", 1, 1, 1, 0.0, regen)
    torch.manual_seed(0)
    l0, g0, peak0 = _step(model, base, x, loss_fn)
    bn0 = model.bn.running_mean.clone()
    model.load_state_dict(state)
    torch.manual_seed(0)
    l1, g1, peak1 = _step(model, p, x, loss_fn)
    assert torch.equal(l0, l1)
    assert all(torch.equal(a, b) for a, b in zip(g0, g1, strict=True))
    assert torch.equal(model.bn.running_mean, bn0)  # regeneration did not update BN stats twice
    assert peak1 < peak0
    # the planner's model of the same states predicts the drop too
    states = {f"regen:{r.name}": ("regen", None) for r in prof.regens}
    assert simulate(prof, states).max() < simulate(prof, {}).max()
    model.load_state_dict(state)


@pytest.mark.parametrize("method", ["recompute", "hybrid"])
def test_planner_uses_regen_and_measured_peak_within_budget(setup, method):
    model, x, loss_fn, prof = setup
    if method == "hybrid":
        from edgetrain.compress import make_codec

        prof = profile_model(model, (x,), loss_fn, codecs={"mix": make_codec("mix")}, repeats=1)
    unplanned = int(simulate(prof, {}).max())
    budget = int(0.75 * unplanned)
    p = plan(prof, budget, method)
    assert p.predicted_peak_bytes <= budget
    assert p.decision_counts()["regen"] + p.decision_counts()["recompute"] > 0
    state = copy.deepcopy(model.state_dict())
    _, _, peak = _step(model, p, x, loss_fn)
    model.load_state_dict(state)
    assert peak <= budget
    q = ExecutionPlan.from_json(p.to_json())
    assert q == p
