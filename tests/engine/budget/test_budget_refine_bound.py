"""The refine search's pruning (:meth:`.refine._Space.removal_bounds`, ``bounded=True``).

The bounded repair step skips simulating a candidate whose score cannot beat the best
found, using an upper bound on the bytes the decision can remove at any one step.  The
bound must hold for every state the search can visit, and the pruned search must pick
what the full loop picks.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from edgetrain import models
from edgetrain.engine.budget import minimum_budget, profile_model
from edgetrain.engine.budget.alloc import plan_states
from edgetrain.engine.budget.planner import _candidates, _Ctx, simulate
from edgetrain.engine.budget.refine import KEEP, _Space, refine
from edgetrain.engine.budget.runner import codecs_for
from edgetrain.engine.budget.swap import IoContentionModel

sys.path.insert(0, str(Path(__file__).parent))
from test_budget_refine import tiny_profile  # noqa: E402
from test_budget_scope import synthetic_profile  # noqa: E402

_PROF: dict = {}


def _mobilenet_profile():
    """A 0.35-wide MobileNetV2 on 8x8 inputs: BatchNorm / ReLU6 regenerations, masks,
    residual glue, compressible units; once."""
    if "m" not in _PROF:
        model = models.build("mobilenetv2", num_classes=10, width_mult=0.35, in_channels=1)
        g = torch.Generator().manual_seed(0)
        x = torch.randn(8, 1, 8, 8, generator=g)
        y = torch.randint(0, 10, (8,), generator=g)
        _PROF["m"] = profile_model(
            model, (x,), lambda out: nn.functional.cross_entropy(out, y),
            codecs=codecs_for("hybrid"), in_situ_steps=0, repeats=1,
        )  # fmt: skip
    return _PROF["m"]


def _albert_profile():
    """A tiny ALBERT: one shared layer called three times (decisions over several calls,
    leaf recomputes of the attention core); once."""
    if "a" not in _PROF:
        model = models.build(
            "albert-small", vocab_size=64, max_len=16, embedding_dim=16, hidden=32,
            num_layers=3, heads=2, intermediate=64, seed=0,
        )  # fmt: skip
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(1, 64, (4, 16), generator=g)
        y = torch.randint(0, model.num_classes, (4,), generator=g)
        _PROF["a"] = profile_model(
            model, (ids,), lambda out: nn.functional.cross_entropy(out, y),
            codecs=codecs_for("hybrid"), in_situ_steps=0, repeats=1,
        )  # fmt: skip
    return _PROF["a"]


PROFILES = {
    "synthetic": lambda: synthetic_profile(with_alloc=True),
    "tinycct": tiny_profile,
    "mobilenetv2": _mobilenet_profile,
    "albert": _albert_profile,
}


def _random_states(space: _Space, rng: random.Random, density: float) -> dict:
    """A state the search could visit: random decisions, each allowed next to the
    ones set before it."""
    states = dict.fromkeys(space.by_key, KEEP)
    keys = list(space.by_key)
    rng.shuffle(keys)
    for k in keys:
        if rng.random() < density:
            s = rng.choice(space.on_state(k))
            if space.allowed(states, k, s):
                states = space.apply(states, k, s)
    return states


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(sorted(PROFILES)),
    seed=st.integers(0, 10_000),
    density=st.floats(0.0, 0.6),
)
def test_no_decision_removes_more_than_its_bound_or_outside_its_lifetime(name, seed, density):
    prof = PROFILES[name]()
    space = _Space(prof, "hybrid", _Ctx(prof, IoContentionModel()))
    bound = space.removal_bounds()
    rng = random.Random(seed)
    states = _random_states(space, rng, density)
    mem = simulate(prof, states)
    t2 = 2 * prof.n_steps
    for k, item in space.by_key.items():
        for s in space.on_state(k):
            if s == states[k] or not space.allowed(states, k, s):
                continue
            removed = mem - simulate(prof, space.apply(states, k, s))
            most, first = bound[k]
            assert removed.max(initial=0) <= most, (k, s)
            assert not np.r_[removed[:first], removed[t2 - first :]].any(), (k, s)
            assert first <= item.step


# The MobileNetV2's unbounded search costs 4-26 s a start (all its greedy walks, 3-6 a budget, at
# four budgets: 289 s of the suite); its first walk at each budget keeps every budget's check
# (29 s alone, 54 s in one loaded suite run).
STARTS = {"mobilenetv2": 1}


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_the_bounded_search_returns_the_full_searchs_plan_with_fewer_simulations(name):
    prof = PROFILES[name]()
    ctx = _Ctx(prof, IoContentionModel())
    unplanned = int(simulate(prof, {}).max())
    least = minimum_budget(prof, "hybrid")
    fewer = 0
    for frac in (0.1, 0.3, 0.5, 0.8):
        budget = int(least + frac * (unplanned - least))
        found = _candidates(prof, budget, "hybrid", IoContentionModel(), "saved", refine=False)
        for _, p, _ in found[: STARTS.get(name)]:  # the greedy walks as starts
            start = plan_states(prof, p)
            full, a = refine(prof, budget, start, ctx, simulate)
            pruned, b = refine(prof, budget, start, ctx, simulate, bounded=True)
            assert pruned == full and b["after"] == a["after"]
            assert b["sims"] <= a["sims"]
            fewer += b["sims"] < a["sims"]
    if name != "synthetic":  # six units: little to prune
        assert fewer > 0
