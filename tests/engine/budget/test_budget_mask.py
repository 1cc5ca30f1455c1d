"""Finer evictions: exact 1-bit ReLU-family masks, chained regeneration, honest swap time."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from edgetrain.engine.budget import (
    ExecutionPlan,
    IoContentionModel,
    MemoryAccountant,
    PlanExecutor,
    UnitDecision,
    plan,
    profile_model,
    simulate,
)
from edgetrain.engine.budget.accountant import model_state_tensors
from edgetrain.engine.budget.mask import decode_mask, encode_mask, mask_bytes
from edgetrain.errors import BudgetError, ConfigError

_SPECIAL = [0.0, -0.0, 1e-45, -1e-45, 6.0, 5.9999995, 6.0000005, 1.0, -1.0, 1e30, -1e30]


@settings(max_examples=60, deadline=None)
@given(
    vals=st.lists(
        st.one_of(st.floats(width=32, allow_nan=True), st.sampled_from(_SPECIAL)),
        min_size=1,
        max_size=70,
    ),
    rng=st.sampled_from([(0.0, 6.0), (0.0, math.inf), (-1.0, 1.0), (0.0, 1.0), (-2.0, 0.5)]),
    dtype=st.sampled_from([torch.float32, torch.float64]),
)
def test_mask_keeps_the_range_predicate_exactly(vals, rng, dtype):
    x = torch.tensor(vals, dtype=dtype)
    lo, hi = rng
    p = encode_mask(x, lo, hi)
    assert p.nbytes == mask_bytes(x.numel())
    d = decode_mask(p)
    assert d.shape == x.shape and d.dtype == x.dtype
    assert torch.equal((x > lo) & (x < hi), (d > lo) & (d < hi))


def test_mask_shape_and_size():
    x = torch.randn(2, 3, 5, 7)
    p = encode_mask(x, 0.0, 6.0)
    assert p.nbytes == math.ceil(x.numel() / 8)
    assert decode_mask(p).shape == x.shape


def _cbr(i: int, o: int) -> nn.Module:
    return nn.Sequential(nn.Conv2d(i, o, 3, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU6())


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(_cbr(3, 8), _cbr(8, 8), _cbr(8, 16))
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        return self.head(self.features(x).mean((2, 3)))


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(0)
    model = _Net()
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(4, 3, 12, 12, generator=gen)
    y = torch.randint(0, 4, (4,), generator=gen)

    def loss_fn(out):
        return nn.functional.cross_entropy(out, y)

    from edgetrain.compress import make_codec

    prof = profile_model(model, (x,), loss_fn, codecs={"mix": make_codec("mix")}, repeats=1)
    return model, x, loss_fn, prof


def _step(model, p, x, loss_fn, **kw):
    model.zero_grad(set_to_none=True)
    acc = MemoryAccountant(exclude=model_state_tensors(model))
    torch.manual_seed(0)
    with PlanExecutor(model, p, accountant=acc, **kw) as ex:
        loss = ex.step((x,), loss_fn)
    return loss, [q.grad.clone() for q in model.parameters()], acc.peak, ex


def test_profile_finds_masks_and_sibling_chains(setup):
    _, _, _, prof = setup
    masks = {m.name for m in prof.masks}
    # every ReLU6 saves only its input (the BN output), which nobody else saves
    assert masks == {f"features.{i}.2" for i in range(3)}
    for m in prof.masks:
        assert m.mask_bytes * 8 >= m.nbytes // 4 and m.mask_bytes < m.nbytes
    chains = {r.chain for r in prof.regens if r.chain}
    # BN -> ReLU6 inside a block; the last ReLU6 only feeds mean(), which saves nothing
    assert {("features.0.1", "features.0.2"), ("features.1.1", "features.1.2")} <= chains
    assert all(a.rpartition(".")[0] == b.rpartition(".")[0] for a, b in chains)


def test_masks_and_chains_are_bit_exact_and_free_memory(setup):
    model, x, loss_fn, prof = setup
    state = copy.deepcopy(model.state_dict())
    units = [UnitDecision(name=m.name, decision="mask") for m in prof.masks]
    chains = [r for r in prof.regens if r.chain]
    units += [UnitDecision(name=r.name, decision="regen", chain=list(r.chain)) for r in chains]
    p = ExecutionPlan("hybrid", 1, 1, 1, 0.0, units)
    base = ExecutionPlan("none", 1, 1, 1, 0.0, [])
    l0, g0, peak0, _ = _step(model, base, x, loss_fn)
    stats0 = [b.clone() for b in model.buffers()]
    model.load_state_dict(state)
    l1, g1, peak1, _ = _step(model, p, x, loss_fn)
    assert torch.equal(l0, l1)
    assert all(torch.equal(a, b) for a, b in zip(g0, g1, strict=True))
    # regeneration re-ran BatchNorm without touching its running statistics
    assert all(torch.equal(a, b) for a, b in zip(stats0, model.buffers(), strict=True))
    assert peak1 < 0.75 * peak0
    states = {m.state_key: ("mask", None) for m in prof.masks}
    states.update({r.state_key: ("regen", None) for r in chains})
    pred = simulate(prof, states).max()
    assert pred < simulate(prof, {}).max()
    assert peak1 <= pred
    model.load_state_dict(state)


@pytest.mark.parametrize("frac", [0.8, 0.5])
def test_hybrid_with_fine_candidates_stays_within_budget(setup, frac):
    model, x, loss_fn, prof = setup
    state = copy.deepcopy(model.state_dict())
    unplanned = int(simulate(prof, {}).max())
    budget = int(frac * unplanned)
    p = plan(prof, budget, "hybrid")
    counts = p.decision_counts()
    assert sum(v for k, v in counts.items() if k != "keep") >= 1
    assert p.predicted_peak_bytes <= budget
    # hybrid's walks include recompute's: it never predicts more overhead (and masks
    # reach budgets that recompute alone cannot)
    try:
        rec = plan(prof, budget, "recompute").predicted_overhead_s
    except BudgetError:
        rec = math.inf
    assert p.predicted_overhead_s <= rec + 1e-12
    _, g, peak, _ = _step(model, p, x, loss_fn)
    model.load_state_dict(state)
    _, g0, _, _ = _step(model, ExecutionPlan("none", 1, 1, 1, 0.0, []), x, loss_fn)
    model.load_state_dict(state)
    assert peak <= budget
    if counts["compress"] == 0:  # masks, regeneration and recompute are exact
        assert all(torch.equal(a, b) for a, b in zip(g0, g, strict=True))
    assert ExecutionPlan.from_json(p.to_json()) == p


def test_mask_on_a_non_relu_leaf_is_rejected(setup):
    model, x, loss_fn, _ = setup
    p = ExecutionPlan("hybrid", 1, 1, 1, 0.0, [UnitDecision(name="features.0.1", decision="mask")])
    with pytest.raises(ConfigError, match="masked"), PlanExecutor(model, p):
        pass


def test_swap_pays_the_phone_storage_model(setup, tmp_path):
    model, x, loss_fn, prof = setup
    state = copy.deepcopy(model.state_dict())
    units = [UnitDecision(name=u.name, decision="swap") for u in prof.units if u.float_bytes]
    p = ExecutionPlan("swap", 1, 1, 1, 0.0, units)
    io = IoContentionModel()
    _, g, _, ex = _step(model, p, x, loss_fn, swap_dir=str(tmp_path), io=io)
    model.load_state_dict(state)
    _, g0, _, _ = _step(model, ExecutionPlan("none", 1, 1, 1, 0.0, []), x, loss_fn)
    model.load_state_dict(state)
    assert all(torch.equal(a, b) for a, b in zip(g0, g, strict=True))
    # every swapped tensor is written once and read back at least once, at the UFS
    # bandwidths shared with 4 background apps (not at this server's page-cache speed)
    swapped = sum(u.float_bytes for u in prof.units)
    share = 1 + io.background_apps
    floor = swapped * share / (io.write_mb_s * 1e6) + swapped * share / (io.read_mb_s * 1e6)
    assert ex.simulated_io_s >= 0.99 * floor > 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_mask_puts_inf_outside_an_open_range_to_inf(dtype):
    """Regression (hypothesis, float64 [inf] with (0, inf)): +inf is not inside (0, inf)
    in either dtype."""
    x = torch.tensor([math.inf, 1.0, 0.0, -math.inf, math.nan], dtype=dtype)
    d = decode_mask(encode_mask(x, 0.0, math.inf))
    assert torch.equal((d > 0.0) & (d < math.inf), torch.tensor([False, True, False, False, False]))
