"""BatchNorm inside a recomputed unit: its recomputation is one fused multiply-add from
the batch statistics the unit's forward computed (kept with the unit, 2 x C floats),
not a second pass of the kernel -- bit-identical loss, gradients and running
statistics, with autograd's own backward for the kernel."""

from __future__ import annotations

import copy

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from edgetrain import models
from edgetrain.engine.budget import ExecutionPlan, MemoryAccountant, PlanExecutor, UnitDecision
from edgetrain.engine.budget import executor as executor_mod
from edgetrain.engine.budget.accountant import model_state_tensors
from edgetrain.engine.budget.regen import _affine_exact, batchnorm_call, batchnorm_from_stats_ok


class _Block(nn.Module):
    def __init__(self, c: int, momentum: float | None = 0.1, affine: bool = True) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)
        self.bn = nn.BatchNorm2d(c, momentum=momentum, affine=affine)
        self.act = nn.ReLU6()

    def forward(self, x):
        return self.act(self.bn(self.conv(x))) + x


class _Net(nn.Module):
    def __init__(self, **kw) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.b1, self.b2 = _Block(8, **kw), _Block(8, **kw)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        return self.head(self.b2(self.b1(self.stem(x))).mean((2, 3)))


def _plan(*names: str) -> ExecutionPlan:
    return ExecutionPlan(
        "recompute", 1, 1, 1, 0.0, [UnitDecision(name=n, decision="recompute") for n in names]
    )


def _run(model, plan, x, y, steps: int = 2):
    """``steps`` training steps (SGD) under ``plan``; every loss, the final grads,
    weights and buffers (running statistics and the batch counter)."""
    model = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    acc = MemoryAccountant(exclude=model_state_tensors(model))
    with PlanExecutor(model, plan, accountant=acc) as ex:
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            losses.append(ex.step((x,), lambda out: nn.functional.cross_entropy(out, y)))
            opt.step()
    grads = [p.grad.clone() for p in model.parameters()]
    return losses, grads, list(model.state_dict().values())


def _same(a, b) -> None:
    la, ga, sa = a
    lb, gb, sb = b
    assert all(torch.equal(p, q) for p, q in zip(la, lb, strict=True))
    assert all(torch.equal(p, q) for p, q in zip(ga, gb, strict=True))
    assert all(torch.equal(p, q) for p, q in zip(sa, sb, strict=True))


@pytest.fixture
def kernel_calls(monkeypatch):
    """Calls of the BatchNorm kernel made through :func:`.regen.batchnorm_call` (the
    once-per-process exactness probe run beforehand, for both memory formats)."""
    for fmt in (torch.contiguous_format, torch.channels_last):
        _affine_exact(torch.zeros(2, 2, 2, 2).to(memory_format=fmt))
    calls = []
    real = torch.native_batch_norm

    def counting(*a, **k):
        calls.append(tuple(a[0].shape))
        return real(*a, **k)

    monkeypatch.setattr(torch, "native_batch_norm", counting)
    return calls


def _data(n: int = 6, size: int = 9):
    gen = torch.Generator().manual_seed(4)
    return torch.randn(n, 3, size, size, generator=gen) * 2, torch.randint(
        0, 4, (n,), generator=gen
    )


@pytest.mark.parametrize("kw", [{}, {"momentum": None}])
def test_recomputed_units_batchnorm_is_bit_exact_and_runs_the_kernel_once(kernel_calls, kw):
    torch.manual_seed(0)
    model = _Net(**kw)
    x, y = _data()
    none = _run(model, ExecutionPlan("none", 1, 1, 1, 0.0, []), x, y)
    assert kernel_calls == []  # unplanned: F.batch_norm as ever
    planned = _run(model, _plan("b1", "b2"), x, y)
    _same(none, planned)  # losses, grads, weights, running statistics, batch counter
    # the kernel ran in the units' forwards only (2 units x 2 steps), never in backward
    assert len(kernel_calls) == 4


def test_recomputation_without_the_shortcut_when_it_cannot_reproduce_the_kernel(kernel_calls):
    """Eval-mode and affine-free BatchNorms, and a strided input, run as they are."""
    torch.manual_seed(0)
    x, y = _data()
    for model in (_Net(affine=False), _Net().eval()):
        _same(_run(model, ExecutionPlan("none", 1, 1, 1, 0.0, []), x, y),
              _run(model, _plan("b1", "b2"), x, y))  # fmt: skip
    assert kernel_calls == []
    bn = nn.BatchNorm2d(5)
    strided = torch.randn(4, 9, 5, 5).transpose(1, 3)[:, :5]  # no probed kernel path
    assert not batchnorm_from_stats_ok(bn, strided)
    assert batchnorm_from_stats_ok(bn, torch.randn(4, 5, 3, 3))
    assert batchnorm_from_stats_ok(
        bn, torch.randn(4, 5, 3, 3).to(memory_format=torch.channels_last)
    )
    assert not batchnorm_from_stats_ok(bn.eval(), torch.randn(4, 5, 3, 3))


def test_mobilenetv2_recomputed_blocks_train_bit_identically(kernel_calls):
    torch.manual_seed(0)
    model = models.build("mobilenetv2", seed=0, width_mult=0.35, input_size=32)
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(4, 3, 32, 32, generator=gen), torch.randint(0, 10, (4,), generator=gen)
    blocks = [f"features.{i}" for i in (0, 1, 3, 6, 13)]
    _same(_run(model, ExecutionPlan("none", 1, 1, 1, 0.0, []), x, y),
          _run(model, _plan(*blocks), x, y))  # fmt: skip
    # each block's BatchNorms: 2 (block 0, no expansion) or 3, once per forward
    assert len(kernel_calls) == 2 * (2 + 3 * 4)


def test_the_statistics_are_held_with_the_recomputed_unit(monkeypatch):
    """The accountant sees the unit's kept statistics (they are 2 x C floats per
    BatchNorm), so the measured peak counts them."""
    torch.manual_seed(0)
    model = _Net()
    x, y = _data()
    peaks = {}
    for shortcut in (True, False):
        if not shortcut:  # every BatchNorm runs as is, in forward and recomputation
            monkeypatch.setattr(executor_mod, "batchnorm_from_stats_ok", lambda m, x: False)
        m = copy.deepcopy(model)
        acc = MemoryAccountant(exclude=model_state_tensors(m))
        with PlanExecutor(m, _plan("b1", "b2"), accountant=acc) as ex:
            ex.step((x,), lambda out: nn.functional.cross_entropy(out, y))
        peaks[shortcut] = acc.peak
    # the peak is b2's recomputation in backward: b2's statistics are saved tensors
    # either way, and b1's (mean and inverse std of 8 channels, float32) are held beside
    assert peaks[True] - peaks[False] == 2 * 8 * 4


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(2, 6),
    c=st.integers(1, 7),
    hw=st.integers(1, 5),
    scale=st.floats(1e-3, 1e3),
    channels_last=st.booleans(),
)
def test_the_stand_in_equals_the_kernel_and_its_recomputation(n, c, hw, scale, channels_last):
    gen = torch.Generator().manual_seed(n * 100 + c * 10 + hw)
    x = torch.randn(n, c, hw, hw, generator=gen) * scale + 0.5
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    g = torch.randn(n, c, hw, hw, generator=gen)
    a, b = nn.BatchNorm2d(c), nn.BatchNorm2d(c)
    with torch.no_grad():
        a.weight.uniform_(0.5, 1.5, generator=gen)
        a.bias.uniform_(-1, 1, generator=gen)
    b.load_state_dict(a.state_dict())
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    ya = a(xa)
    ya.backward(g)
    assert batchnorm_from_stats_ok(b, xb)
    yb, stats = batchnorm_call(b, xb, None)
    yb.backward(g)
    again, none = batchnorm_call(b, xb.detach(), stats)
    assert none is None
    assert torch.equal(ya, yb) and torch.equal(ya, again)
    assert torch.equal(xa.grad, xb.grad)
    assert torch.equal(a.weight.grad, b.weight.grad) and torch.equal(a.bias.grad, b.bias.grad)
    for p, q in zip(a.state_dict().values(), b.state_dict().values(), strict=True):
        assert torch.equal(p, q)  # running statistics moved once, the batch counter too
