"""Regenerating a leaf's output from its *encoded* input.

Where a compressed unit saves a leaf's input encoded, a regeneration of that leaf's
output runs on the decoding of that encoding: the executor holds no raw copy of the
input, and the one decoding serves the leaf's own backward too (``_Encoded.decoded``).
The planner models both (:func:`.planner._encoded_sources`).
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from edgetrain.compress import make_codec
from edgetrain.engine.budget import (
    ExecutionPlan,
    MemoryAccountant,
    PlanExecutor,
    UnitDecision,
    profile_model,
    simulate,
)
from edgetrain.engine.budget.accountant import model_state_tensors
from edgetrain.engine.budget.planner import _encoded_sources, fine_owners


class _FFN(nn.Module):
    """BERT's feed-forward half on (B, L, D) tokens: LayerNorm -> fc1 -> GELU -> fc2."""

    def __init__(self, d: int = 32, hidden: int = 128) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, d)
        self.head = nn.Linear(d, 3)

    def forward(self, x):
        return self.head(self.fc2(self.act(self.fc1(self.norm(x)))).mean(1))


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(0)
    model = _FFN()
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(4, 16, 32, generator=gen)
    y = torch.randint(0, 3, (4,), generator=gen)

    def loss_fn(out):
        return F.cross_entropy(out, y)

    prof = profile_model(model, (x,), loss_fn, codecs={"mix": make_codec("mix")}, repeats=1)
    return model, x, loss_fn, prof


class _Counting:
    """A codec that counts its decodings (the executor's one per encoding)."""

    def __init__(self, inner) -> None:
        self.inner, self.decodes = inner, 0

    def encode(self, t):
        return self.inner.encode(t)

    def decode(self, data):
        self.decodes += 1
        return self.inner.decode(data)


def _run(model, p, x, loss_fn, codec=None):
    m = copy.deepcopy(model)
    acc = MemoryAccountant(exclude=model_state_tensors(m))
    torch.manual_seed(0)
    codecs = {"mix": codec} if codec is not None else None
    with PlanExecutor(m, p, accountant=acc, codecs=codecs) as ex:
        loss = ex.step((x,), loss_fn)
    return loss, [q.grad.clone() for q in m.parameters()], acc


def _plan(prof, states):
    units = [
        UnitDecision(k.split(":", 1)[1] if k.startswith("regen:") else k, d[0], d[1])
        for k, d in states.items()
    ]
    peak = int(simulate(prof, states).max())
    return ExecutionPlan("hybrid", peak, peak, peak, 0.0, units)


def _regen(prof, name):
    return next(r for r in prof.regens if r.name == name and not r.chain)


@pytest.mark.parametrize("leaf", ["act", "fc1"])
def test_a_compressed_leafs_regeneration_holds_no_raw_input(setup, leaf):
    """The GELU (saves its input itself) and the Linear (saves a (B*L, D) view of its
    (B, L, D) input): each compressed, its output regenerated for the next op."""
    model, x, loss_fn, prof = setup
    r = _regen(prof, leaf)
    assert fine_owners(prof)[r.state_key] == leaf
    consumer = "fc2" if leaf == "act" else "act"
    states = {leaf: ("compress", "mix"), r.state_key: ("regen", None)}
    assert _encoded_sources(prof, states, [r], set(), {}) == {r.state_key}
    codec = _Counting(make_codec("mix"))
    loss, grads, acc = _run(model, _plan(prof, states), x, loss_fn, codec)
    # predicted = measured to the byte: no raw copy of the input beside its encoding
    assert acc.peak == int(simulate(prof, states).max())
    # the raw model of before (the source holds the input whole) would predict more
    raw = simulate(prof, {leaf: ("compress", "mix"), consumer: ("keep", None)}).max()
    assert acc.peak < raw + r.in_bytes
    assert codec.decodes == 1  # the regeneration's decoding served the leaf's backward
    ref_loss, ref_grads, _ = _run(model, _plan(prof, {}), x, loss_fn)
    assert torch.equal(loss, ref_loss)
    # the error of what it replaces: the leaf and its consumer each encoding a copy
    both = {leaf: ("compress", "mix"), consumer: ("compress", "mix")}
    _, both_grads, _ = _run(model, _plan(prof, both), x, loss_fn)
    for g, b, h in zip(grads, both_grads, ref_grads, strict=True):
        err, base = float((g - h).abs().max()), float((b - h).abs().max())
        assert err <= 1.5 * base + 1e-3 * float(h.abs().max()) + 1e-9


def test_without_regeneration_the_consumer_encodes_its_own_copy(setup):
    """The baseline it replaces: compressing the leaf and its consumer encodes twice."""
    model, x, loss_fn, prof = setup
    states = {"act": ("compress", "mix"), "fc2": ("compress", "mix")}
    codec = _Counting(make_codec("mix"))
    _, _, acc = _run(model, _plan(prof, states), x, loss_fn, codec)
    assert codec.decodes == 2
    assert acc.peak <= int(simulate(prof, states).max())


def test_a_kept_leaf_still_regenerates_from_its_raw_input(setup):
    model, x, loss_fn, prof = setup
    r = _regen(prof, "act")
    states = {r.state_key: ("regen", None)}
    assert _encoded_sources(prof, states, [r], set(), {}) == set()
    _, _, acc = _run(model, _plan(prof, states), x, loss_fn)
    assert acc.peak == int(simulate(prof, states).max())


def test_a_regenerated_input_is_no_encoded_source(setup):
    """fc1's output regenerated too: the GELU's input is not encoded by its unit."""
    _, _, _, prof = setup
    r = _regen(prof, "act")
    f = _regen(prof, "fc1")
    states = {"act": ("compress", "mix"), r.state_key: ("regen", None)}
    assert _encoded_sources(prof, states, [r, f], {f.out_key}, {}) == set()
