"""The executor's masked ReLU-family op, measured executor costs, and attention's core."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.nn import functional as F

from edgetrain import models
from edgetrain.engine.budget import (
    ExecutionPlan,
    MemoryAccountant,
    PlanExecutor,
    UnitDecision,
    plan,
    profile_model,
    simulate,
)
from edgetrain.engine.budget import regen as regen_mod
from edgetrain.engine.budget.accountant import model_state_tensors
from edgetrain.engine.budget.mask import fast_maskable, mask_bytes, masked_call

_SPECIAL = [0.0, -0.0, 1e-45, -1e-45, 6.0, 5.9999995, 6.0000005, 1.0, -1.0, 1e30, -1e30]
_OPS = {
    "relu6": (lambda x: F.hardtanh(x, 0.0, 6.0), 0.0, 6.0, False),
    "relu": (torch.relu, 0.0, math.inf, True),
    "hardtanh": (lambda x: F.hardtanh(x, -1.0, 1.0), -1.0, 1.0, False),
}
_INT = {torch.float16: torch.int16, torch.float32: torch.int32, torch.float64: torch.int64}


#: inputs for the ReLU-family ops' bit-identity tests: float16 values and the range edges
#: (+-0, subnormals, 6 and its neighbours), NaN and inf (test_budget_alias.py too)
EDGE_VALUES = st.lists(
    st.one_of(
        st.floats(width=16, allow_nan=True), st.sampled_from(_SPECIAL + [math.nan, math.inf])
    ),
    min_size=1,
    max_size=70,
)


@settings(max_examples=60, deadline=None)
@given(
    vals=EDGE_VALUES,
    grads=st.lists(
        st.one_of(st.floats(width=16, allow_nan=True), st.sampled_from([0.0, -0.0])),
        min_size=1,
        max_size=8,
    ),
    op=st.sampled_from(sorted(_OPS)),
    dtype=st.sampled_from([torch.float16, torch.float32, torch.float64]),
)
def test_masked_op_is_bit_identical_to_the_op(vals, grads, op, dtype):
    fn, lo, hi, on_output = _OPS[op]
    x = torch.tensor(vals, dtype=dtype)
    if not on_output:
        # ATen's hardtanh_backward treats a NaN input differently in its vectorised body
        # and its scalar tail (see mask.pass_bits); ours follows the body
        x = torch.nan_to_num(x, nan=0.5)
    g = torch.tensor((grads * len(vals))[: len(vals)], dtype=dtype)
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    y1 = fn(x1)
    held: list[torch.Tensor] = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: held.append(t) or t, lambda t: t):
        y2 = masked_call(x2, fn, lo, hi, on_output)
    y1.backward(g)
    y2.backward(g)
    it = _INT[dtype]
    assert torch.equal(y1.view(it), y2.view(it))
    # every bit, signed zeros and NaN handling included, as ATen's own backward
    assert torch.equal(x1.grad.view(it), x2.grad.view(it))
    # all that is held for backward is the packed bits
    assert [t.dtype for t in held] == [torch.uint8]
    assert held[0].numel() == mask_bytes(x.numel())


def test_fast_path_only_takes_what_it_can():
    assert fast_maskable(torch.zeros(4, 3))
    assert not fast_maskable(torch.zeros(4, 3).t())
    assert not fast_maskable(torch.zeros(4, 3, dtype=torch.bfloat16))


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU6())
        self.c2 = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.c2(self.c1(x)).mean((2, 3)))


def _step(model, p, inputs, loss_fn):
    model.zero_grad(set_to_none=True)
    acc = MemoryAccountant(exclude=model_state_tensors(model))
    torch.manual_seed(0)
    with PlanExecutor(model, p, accountant=acc) as ex:
        loss = ex.step(inputs, loss_fn)
    return loss, [q.grad.clone() for q in model.parameters()], acc.peak


def test_masks_through_the_executor_hold_no_float_stand_in():
    torch.manual_seed(0)
    model = _Net()
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(4, 3, 10, 10, generator=gen)
    y = torch.randint(0, 3, (4,), generator=gen)

    def loss_fn(o):
        return F.cross_entropy(o, y)

    prof = profile_model(model, (x,), loss_fn, repeats=1)
    assert {m.name for m in prof.masks} == {"c1.2", "c2.2"}
    assert all(m.fast and m.cost_s >= 0 for m in prof.masks)
    state = copy.deepcopy(model.state_dict())
    masks = ExecutionPlan(
        "hybrid", 1, 1, 1, 0.0, [UnitDecision(name=m.name, decision="mask") for m in prof.masks]
    )
    l0, g0, p0 = _step(model, ExecutionPlan("none", 1, 1, 1, 0.0, []), (x,), loss_fn)
    model.load_state_dict(state)
    l1, g1, p1 = _step(model, masks, (x,), loss_fn)
    model.load_state_dict(state)
    assert torch.equal(l0, l1) and all(torch.equal(a, b) for a, b in zip(g0, g1, strict=True))
    # the fast path never expands a mask to a full tensor: the measured peak is the
    # unplanned one minus each masked tensor plus its bits, exactly as predicted
    states = {m.state_key: ("mask", None) for m in prof.masks}
    assert p1 == p0 - sum(m.nbytes - m.mask_bytes for m in prof.masks)
    assert p1 <= simulate(prof, states).max()


def test_regen_costs_are_measured_once_and_cached(monkeypatch):
    bn = nn.BatchNorm1d(4)
    x = torch.randn(8, 4)
    regen_mod.clear_cost_cache()
    calls = []
    real = regen_mod.median_cpu_s
    monkeypatch.setattr(regen_mod, "median_cpu_s", lambda fn, r: calls.append(1) or real(fn, r))
    before = bn.running_mean.clone()
    a = regen_mod.regen_cost_s([bn], x, 2)
    b = regen_mod.regen_cost_s([bn], x.clone(), 2)  # same signature: cached
    assert a == b >= 0 and len(calls) == 1
    assert torch.equal(bn.running_mean, before)  # regeneration restores buffers
    regen_mod.regen_cost_s([bn], torch.randn(16, 4), 2)  # another shape: measured
    assert len(calls) == 2
    regen_mod.clear_cost_cache()


_TINY_BERT = {"vocab_size": 40, "max_len": 16, "hidden": 32, "heads": 2, "intermediate": 64}


def _old_attention(a, x, bias):
    """SelfAttention before the core was a module (the reference the zoo must equal)."""

    def split(t):
        return t.unflatten(-1, (a.heads, a.head_dim)).transpose(1, 2)

    q, k, v = split(a.q(x)), split(a.k(x)), split(a.v(x))
    scores = torch.matmul(q, k.transpose(-2, -1)) * a.scale
    if bias is not None:
        scores = scores + bias
    w = torch.softmax(scores, dim=-1)
    return a.out(torch.matmul(w, v).transpose(1, 2).flatten(2))


@pytest.mark.parametrize("bias", [False, True])
def test_attention_core_is_a_parameter_free_module_with_identical_outputs(bias):
    from edgetrain.models.attention import AttentionCore, SelfAttention

    torch.manual_seed(0)
    a = SelfAttention(16, 4)
    assert isinstance(a.core, AttentionCore) and not list(a.core.parameters())
    assert sorted(a.state_dict()) == sorted(
        f"{n}.{p}" for n in ("q", "k", "v", "out") for p in ("weight", "bias")
    )
    x = torch.randn(2, 5, 16)
    b = torch.zeros(2, 1, 1, 5).index_fill_(3, torch.tensor([4]), -1e9) if bias else None
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    y1, y2 = a(x1, b), _old_attention(a, x2, b)
    assert torch.equal(y1, y2)
    y1.sum().backward()
    g1 = [p.grad.clone() for p in a.parameters()]
    a.zero_grad()
    y2.sum().backward()
    assert torch.equal(x1.grad, x2.grad)
    assert all(torch.equal(p, q.grad) for p, q in zip(g1, a.parameters(), strict=True))


def test_attention_core_recompute_is_exact_and_frees_the_softmax():
    model = models.build("bert-small", seed=0, **_TINY_BERT)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 40, (4, 16), generator=gen)
    y = torch.randint(0, model.num_classes, (4,), generator=gen)

    def loss_fn(o):
        return F.cross_entropy(o, y)

    prof = profile_model(model, (ids,), loss_fn, repeats=1)
    lrs = {x.name: x for x in prof.leaf_recomputes}
    assert set(lrs) == {f"encoder.{i}.attn.core" for i in range(len(model.encoder))}
    for x in lrs.values():
        # holds q, k, v instead of the per-head copies + the softmax output (B*h*L*L floats)
        assert x.saved_bytes - x.input_bytes >= 4 * 2 * 16 * 16 * 4 - 4 * 16 * 4  # - the bias
        assert x.unit.endswith(".attn") and x.fwd_s >= 0
    state = copy.deepcopy(model.state_dict())
    units = [UnitDecision(name=n, decision="recompute") for n in lrs]
    p = ExecutionPlan("hybrid", 1, 1, 1, 0.0, units)
    l0, g0, p0 = _step(model, ExecutionPlan("none", 1, 1, 1, 0.0, []), (ids,), loss_fn)
    model.load_state_dict(state)
    l1, g1, p1 = _step(model, p, (ids,), loss_fn)
    model.load_state_dict(state)
    assert torch.equal(l0, l1) and all(torch.equal(a, b) for a, b in zip(g0, g1, strict=True))
    states = {x.state_key: ("recompute", None) for x in lrs.values()}
    pred = simulate(prof, states).max()
    assert p1 < p0 and pred < simulate(prof, {}).max()
    assert p1 <= pred
    # the planner may choose it: at a budget between the two peaks, recompute's plan fits
    budget = int((p0 + pred) / 2)
    q = plan(prof, budget, "recompute")
    assert q.predicted_peak_bytes <= budget


class _Relu6Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1, self.b1, self.a1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU6()
        self.c2, self.b2, self.a2 = nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU6()
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        x = self.a1(self.b1(self.c1(x)))
        x = self.a2(self.b2(self.c2(x)))
        return self.head(x.mean((2, 3)))


def test_mask_costs_come_from_the_step_split_by_bytes(monkeypatch):
    """The masks' cost is their measured in-step overhead (cached), split by bytes, never
    below the isolated per-op measurement; profiling leaves the model as it was."""
    from edgetrain.engine.budget import profile as profile_mod
    from edgetrain.engine.budget import profile_model

    torch.manual_seed(0)
    model = _Relu6Net()
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(4, 3, 16, 16, generator=gen), torch.randint(0, 3, (4,), generator=gen)

    def loss_fn(out):
        return nn.functional.cross_entropy(out, y)

    state = {k: v.clone() for k, v in model.state_dict().items()}
    regen_mod.clear_cost_cache()
    iso = profile_model(model, (x,), loss_fn, repeats=1, in_situ_steps=0)
    after_iso = {k: v.clone() for k, v in model.state_dict().items()}  # its forward moved BN
    model.load_state_dict(state)
    calls = []
    real = profile_mod._time_schedule
    monkeypatch.setattr(
        profile_mod, "_time_schedule", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    prof = profile_model(model, (x,), loss_fn, repeats=1, in_situ_steps=2)
    assert len(calls) == 1 and len(prof.masks) == 2
    # the in-step measurement leaves weights and buffers as the profile alone leaves them
    assert all(torch.equal(v, after_iso[k]) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())
    total = sum(m.cost_s for m in prof.masks)
    assert total >= sum(m.cost_s for m in iso.masks) - 1e-12  # the isolated sum is a floor
    per_byte = {round(m.cost_s / m.nbytes, 15) for m in prof.masks}
    assert len(per_byte) == 1  # split by bytes
    profile_model(model, (x,), loss_fn, repeats=1, in_situ_steps=2)
    assert len(calls) == 1  # same model, masks and input shapes: cached
    regen_mod.clear_cost_cache()
