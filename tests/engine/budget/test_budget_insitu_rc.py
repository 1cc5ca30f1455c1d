"""Eq. 6's psi on layout copies only, and the in-step recompute factor (real execution)."""

from __future__ import annotations

import statistics

import pytest
import torch
from torch import nn

from edgetrain.engine.budget import minimum_budget, plan, profile_model
from edgetrain.engine.budget.profile import RC_SCALE_BOUNDS, layout_copies
from edgetrain.engine.budget.runner import measure_steps, none_plan


class _Views(nn.Module):
    """Only metadata-only layout functions (views share the input's storage): psi = 1."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x):  # (B, 4, 16)
        y = x.view(x.shape[0], 2, 2, 16).transpose(1, 2).unsqueeze(0).squeeze(0)
        y = y.permute(0, 2, 1, 3).flatten(1, 2)  # permute back: contiguous, flatten is a view
        return torch.tanh(self.fc(y))


class _Copies(nn.Module):
    """A reshape of a transposed tensor allocates new storage: psi = 2."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x):  # (B, 4, 16)
        y = x.transpose(1, 2).reshape(x.shape[0], 4, 16)
        return torch.tanh(self.fc(y))


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.views = _Views()
        self.copies = _Copies()
        self.mlp = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 16), nn.Tanh())
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        return self.head(self.mlp(self.copies(self.views(x))).mean(1))


@pytest.fixture(scope="module")
def task():
    torch.manual_seed(0)
    model = _Net()
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(64, 4, 16, generator=gen)
    y = torch.randint(0, 3, (64,), generator=gen)

    def loss_fn(out):
        return nn.functional.cross_entropy(out, y)

    return model, x, loss_fn


def test_layout_copies_tells_views_from_copies():
    x = torch.randn(2, 3, 4)
    t = x.transpose(1, 2)
    assert not layout_copies(torch.Tensor.transpose, (x, 1, 2), t)
    assert not layout_copies(torch.Tensor.view, (x, 6, 4), x.view(6, 4))
    assert not layout_copies(torch.Tensor.contiguous, (x,), x.contiguous())  # already is
    assert layout_copies(torch.Tensor.contiguous, (t,), t.contiguous())
    assert layout_copies(torch.Tensor.reshape, (t, 8, 3), t.reshape(8, 3))
    assert not layout_copies(torch.Tensor.chunk, (x, 3, 1), x.chunk(3, 1))
    assert not layout_copies(torch.tanh, (x,), torch.tanh(x))  # not a layout function


def test_view_only_unit_gets_psi_1_and_copying_unit_psi_2(task):
    model, x, loss_fn = task
    prof = profile_model(model, (x,), loss_fn, repeats=1, max_units=8, in_situ_steps=0)
    views, copies = prof.unit("views"), prof.unit("copies")
    assert not views.has_layout
    assert copies.has_layout
    assert views.rc_scale == copies.rc_scale == 1.0  # no in-situ steps: eq. 6 as is
    assert all(r.scale == 1.0 for r in prof.regens)
    assert views.rc_eq6() == pytest.approx(views.fwd_s)
    assert copies.rc_eq6() == pytest.approx(
        copies.last_op_s + 2 * (copies.fwd_s - copies.last_op_s)
    )
    assert copies.rc_compute() == copies.rc_eq6()


def test_in_situ_factor_scales_recompute_and_keeps_predictions_near_a_step(task):
    model, x, loss_fn = task
    before = [p.detach().clone() for p in model.parameters()]
    prof = profile_model(model, (x,), loss_fn, repeats=3, max_units=8, in_situ_steps=3)
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))
    fits = {(u.rc_scale, u.rc_fixed_s) for u in prof.units}
    assert len(fits) == 1  # one fit per kind: eq. 6's ranking among units is kept
    ((scale, fixed),) = fits
    assert scale >= 0 and fixed >= 0
    lo, hi = RC_SCALE_BOUNDS
    rcs = [u for u in prof.units if u.recomputable()]
    implied = sum(u.rc_compute() for u in rcs) / sum(u.rc_eq6() for u in rcs)
    assert lo - 1e-9 <= implied <= hi + 1e-9  # the bound the single factor had
    for u in prof.units:
        assert u.rc_compute() == pytest.approx(scale * u.rc_eq6() + fixed)
    # regenerations (the GELU output the next Linear saves) get their own shared factor
    assert prof.regens
    (rscale,) = {r.scale for r in prof.regens}
    assert lo <= rscale <= hi
    for r in prof.regens:
        assert r.regen_cost() == pytest.approx(rscale * r.fwd_s * max(r.saves, 1))
    # the recompute plan's prediction is the fitted eq. 6 sum, and stays within a
    # factor of what a real step costs (a recomputation re-runs at most one forward)
    unplanned = measure_steps(model, {"none": none_plan(prof)}, (x,), loss_fn, repeats=0)
    p = plan(prof, minimum_budget(prof, "recompute"), "recompute")
    assert p.predicted_peak_bytes < unplanned["none"]["peak"]
    rc = [d for d in p.units if d.decision == "recompute"]
    assert rc
    assert sum(d.cost_s for d in rc) == pytest.approx(
        sum(scale * prof.unit(d.name).rc_eq6() + fixed for d in rc)
    )
    res = measure_steps(model, {"none": none_plan(prof), "rc": p}, (x,), loss_fn, repeats=3)
    step = statistics.median(res["none"]["times"])
    assert 0 < p.predicted_overhead_s < 3.0 * step
