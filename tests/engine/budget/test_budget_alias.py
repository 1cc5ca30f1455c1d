"""The "alias" decision: a Hardtanh-family leaf saves its output instead of its input.

``hardtanh_backward`` reads its saved tensor only through ``lo < v < hi``, which holds
for ``y = clamp(x)`` exactly where it holds for ``x``; where the next op saves ``y``
anyway, the leaf's input need not be held at all (:class:`.profile.AliasProfile`).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import sys
from pathlib import Path

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
from edgetrain.engine.budget.accountant import model_state_tensors
from edgetrain.engine.budget.mask import alias_call
from edgetrain.engine.budget.planner import _clash
from edgetrain.engine.budget.profile_io import every_codec
from edgetrain.errors import ConfigError

sys.path.insert(0, str(Path(__file__).parent))
from test_budget_fastmask import _INT, EDGE_VALUES  # noqa: E402


@settings(max_examples=60, deadline=None)
@given(
    vals=EDGE_VALUES,
    grads=st.lists(st.floats(width=16, allow_nan=False), min_size=1, max_size=8),
    rng=st.sampled_from([(0.0, 6.0), (-1.0, 1.0), (-0.5, 2.0)]),
    dtype=st.sampled_from([torch.float16, torch.float32, torch.float64]),
)
def test_alias_op_is_bit_identical_to_hardtanh_nan_included(vals, grads, rng, dtype):
    lo, hi = rng
    x = torch.tensor(vals, dtype=dtype)
    g = torch.tensor((grads * len(vals))[: len(vals)], dtype=dtype)
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    y1 = F.hardtanh(x1, lo, hi)
    held: list[torch.Tensor] = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: held.append(t) or t, lambda t: t):
        y2 = alias_call(x2, lo, hi)
    y1.backward(g)
    y2.backward(g)
    it = _INT[dtype]
    assert torch.equal(y1.view(it), y2.view(it))
    assert torch.equal(x1.grad.view(it), x2.grad.view(it))  # every bit, NaN positions too
    # what is held for backward is the output itself (its storage), not the input
    assert len(held) == 1
    assert held[0].untyped_storage().data_ptr() == y2.untyped_storage().data_ptr()


def test_alias_call_refuses_an_unbounded_range():
    with pytest.raises(ValueError, match="finite hi"):
        alias_call(torch.zeros(3, requires_grad=True), 0.0, math.inf)


class _ConvNet(nn.Module):
    """conv -> BN -> ReLU6 (not in place) -> conv: the ReLU6's output is the next
    convolution's saved input; and a final ReLU6 whose output nobody saves."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU6())
        self.b = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU6())
        self.c = nn.Sequential(nn.Conv2d(8, 4, 1), nn.BatchNorm2d(4), nn.Hardtanh(-1.0, 1.0))
        self.head = nn.Linear(4, 3)

    def forward(self, x):
        return self.head(self.c(self.b(self.a(x))).sum((2, 3)))


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(0)
    model = _ConvNet()
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(4, 3, 12, 12, generator=gen)
    y = torch.randint(0, 3, (4,), generator=gen)

    def loss_fn(out):
        return F.cross_entropy(out, y)

    prof = profile_model(model, (x,), loss_fn, codecs=every_codec(), repeats=1)
    return model, x, loss_fn, prof


def _run(model, p, x, loss_fn):
    m = copy.deepcopy(model)
    acc = MemoryAccountant(exclude=model_state_tensors(m))
    torch.manual_seed(0)
    with PlanExecutor(m, p, accountant=acc) as ex:
        loss = ex.step((x,), loss_fn)
    return loss, [q.grad.clone() for q in m.parameters()], acc


def _plan(prof, units):
    peak = int(simulate(prof, {}).max())
    return ExecutionPlan("hybrid", peak, peak, peak, 0.0, units)


def test_aliases_are_the_relu6_whose_output_the_next_conv_saves(setup):
    _, _, _, prof = setup
    names = {a.name for a in prof.aliases}
    # a.2 feeds b.0 and b.2 feeds c.0 (both convolutions save their input); c.2's
    # output goes into a sum, which saves nothing: nothing to alias there
    assert names == {"a.2", "b.2"}
    for a in prof.aliases:
        assert a.mask_bytes == 0 and a.alias_bytes == a.nbytes and a.bits_bytes > 0
        assert a.alias_key != a.key and a.cost_s >= 0
    assert "c.2" in {m.name for m in prof.masks}  # still a 1-bit mask candidate


def test_alias_frees_the_input_at_no_gradient_error_and_as_predicted(setup):
    model, x, loss_fn, prof = setup
    ref_loss, ref_grads, ref_acc = _run(model, _plan(prof, []), x, loss_fn)
    states = {a.state_key: ("mask", None) for a in prof.aliases}
    predicted = int(simulate(prof, states).max())
    p = _plan(prof, [UnitDecision(a.name, "alias") for a in prof.aliases])
    loss, grads, acc = _run(model, p, x, loss_fn)
    assert torch.equal(loss, ref_loss)
    for g, rg in zip(grads, ref_grads, strict=True):
        assert torch.equal(g, rg)
    freed = sum(a.nbytes for a in prof.aliases)
    assert acc.peak == predicted == ref_acc.peak - freed


def test_hybrid_takes_the_free_aliases_first(setup):
    model, x, loss_fn, measured = setup
    # priced at nothing (on MobileNetV2 b32's tensors a 45 us call against a clamp of
    # megabytes; on this model's 4 kB tensors an in-place clamp may cost less, and the
    # planner may rightly prefer it, so the measured prices would make this test race)
    prof = dataclasses.replace(
        measured, aliases=[dataclasses.replace(a, cost_s=0.0) for a in measured.aliases]
    )
    unplanned = int(simulate(prof, {}).max())
    freed = sum(a.nbytes for a in prof.aliases)
    p = plan(prof, unplanned - freed, "hybrid")
    assert p.decision_counts()["alias"] == 2
    assert p.decision_counts()["recompute"] == p.decision_counts()["compress"] == 0
    loss, grads, acc = _run(model, p, x, loss_fn)
    assert acc.peak <= p.predicted_peak_bytes <= p.budget_bytes
    _, ref_grads, _ = _run(model, _plan(prof, []), x, loss_fn)
    for g, rg in zip(grads, ref_grads, strict=True):
        assert torch.equal(g, rg)
    # the baselines (Melon-like recompute, GACT-like compress) have no alias decision
    for method in ("recompute", "compress", "swap"):
        assert "alias" not in {u.decision for u in plan(prof, unplanned - 1, method).units}


def test_alias_excludes_the_mask_of_its_leaf_and_regenerating_its_output(setup):
    _, _, _, prof = setup
    for a in prof.aliases:
        mask = next(m for m in prof.masks if m.name == a.name)
        assert _clash(a, mask)
        for r in prof.regens:
            if r.out_key == a.alias_key:
                assert _clash(a, r)  # the alias holds the output whole


def test_alias_inside_a_compressed_unit_holds_the_mask_instead(setup):
    model, x, loss_fn, prof = setup
    _, ref_grads, _ = _run(model, _plan(prof, []), x, loss_fn)
    unit = next(u for u in prof.units if u.name == "a.2" or "a.2".startswith(u.name + "."))
    states = {unit.name: ("compress", "mix"), "alias:a.2": ("mask", None)}
    predicted = int(simulate(prof, states).max())
    p = _plan(prof, [UnitDecision(unit.name, "compress", "mix"), UnitDecision("a.2", "alias")])
    _, grads, acc = _run(model, p, x, loss_fn)
    assert acc.peak <= predicted
    err = max((g - rg).abs().max().item() for g, rg in zip(grads, ref_grads, strict=True))
    assert err < 0.5  # within the codec's error (a raw / encoded alias would be exact / not)


def test_alias_on_another_leaf_is_one_clear_error(setup):
    model, x, loss_fn, prof = setup
    p = _plan(prof, [UnitDecision("a.0", "alias")])
    with pytest.raises(ConfigError, match="only Hardtanh-family leaves"):
        _run(model, p, x, loss_fn)


def test_mobilenetv2_aliases_every_relu6_that_feeds_a_conv():
    model = models.build("mobilenetv2", num_classes=10, width_mult=0.35, in_channels=1)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 1, 8, 8, generator=g)
    y = torch.randint(0, 10, (4,), generator=g)
    prof = profile_model(
        model, (x,), lambda out: F.cross_entropy(out, y), in_situ_steps=0, repeats=1
    )
    relu6 = {n for n, m in model.named_modules() if type(m) is nn.ReLU6}
    # every ReLU6 mask candidate whose output the next convolution saves: all but the
    # last conv's (at 8 x 8 inputs its map is 1 x 1, and that pooling saves nothing)
    aliases = {a.name for a in prof.aliases}
    assert aliases == {m.name for m in prof.masks} - {"last_conv.2"}
    assert aliases <= relu6 and len(aliases) >= len(relu6) - 2
    unplanned = int(simulate(prof, {}).max())
    states = {a.state_key: ("mask", None) for a in prof.aliases}
    assert int(simulate(prof, states).max()) < 0.75 * unplanned
