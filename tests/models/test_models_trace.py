"""Zoo models trace with make_fx, and invariants of the text models hold."""

from __future__ import annotations

import pytest
import torch
import torch.fx
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.fx.experimental.proxy_tensor import make_fx

from edgetrain import models

SMALL = {
    "lenet": {"length": 32},
    "alexnet": {"length": 64, "fc_width": 32},
    "cnn-lstm": {"length": 16, "hidden": 8, "conv_channels": 8},
    "cct2": {"input_size": 16},
    "deep-ae": {"input_dim": 32, "hidden": 16},
    "ds-cnn": {"channels": 8},
    "mobilenetv2": {"width_mult": 0.25, "input_size": 16},
    "shufflenetv2": {"width_mult": 0.5, "input_size": 16},
    "bert-small": {"vocab_size": 40, "max_len": 8, "hidden": 16, "heads": 2, "intermediate": 32},
    "albert-small": {
        "vocab_size": 40,
        "max_len": 8,
        "hidden": 16,
        "heads": 2,
        "intermediate": 32,
        "embedding_dim": 8,
    },
}


def test_small_configs_cover_the_zoo():
    assert set(SMALL) == set(models.names())


# Depthwise CNNs have hundreds of small ops; tracing their backward too costs ~15 s on a
# shared CPU, so they are traced forward-only (their backward ops are the same kinds as
# ds-cnn's, which is traced with its backward).
FORWARD_ONLY = {"mobilenetv2", "shufflenetv2"}


@pytest.mark.parametrize("name", sorted(FORWARD_ONLY))
def test_make_fx_forward_matches_eager(name):
    model = models.build(name, seed=0, **SMALL[name]).eval()
    x = models.example_input(model, 2, torch.Generator().manual_seed(0))
    graph = make_fx(model)(x)
    torch.testing.assert_close(graph(x), model(x))


@pytest.mark.parametrize("name", sorted(set(SMALL) - FORWARD_ONLY))
def test_make_fx_training_step_matches_eager(name):
    model = models.build(name, seed=0, **SMALL[name])
    x = models.example_input(model, 2, torch.Generator().manual_seed(0))
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())

    def loss_and_grads(p, x):
        out = torch.func.functional_call(model, ({**p, **buffers},), (x,))
        loss = out.float().pow(2).mean()
        return (loss, *torch.autograd.grad(loss, list(p.values())))

    graph = make_fx(loss_and_grads)(params, x)
    traced = graph(params, x)
    eager = loss_and_grads(params, x)
    assert len(traced) == len(params) + 1
    for a, b in zip(traced, eager, strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_fx_symbolic_trace_matches_eager(name):
    model = models.build(name, seed=0, **SMALL[name]).eval()
    x = models.example_input(model, 2, torch.Generator().manual_seed(0))
    traced = torch.fx.symbolic_trace(model)
    torch.testing.assert_close(traced(x), model(x))


@settings(max_examples=15, deadline=None)
@given(
    tokens=st.lists(st.integers(1, 39), min_size=1, max_size=6),
    extra_pad=st.integers(0, 4),
    shared=st.booleans(),
)
def test_trailing_padding_does_not_change_logits(tokens, extra_pad, shared):
    name = "albert-small" if shared else "bert-small"
    model = models.build(name, seed=1, **{**SMALL[name], "max_len": 10}).eval()
    ids = torch.tensor([tokens])
    padded = torch.cat([ids, torch.zeros(1, extra_pad, dtype=torch.long)], dim=1)
    with torch.no_grad():
        torch.testing.assert_close(model(ids), model(padded), atol=1e-5, rtol=1e-5)


@settings(max_examples=20, deadline=None)
@given(
    name=st.sampled_from(sorted(SMALL)),
    key=st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12),
)
def test_unknown_options_always_rejected(name, key):
    from edgetrain.errors import ModelError

    if key in models.spec(name).defaults or key == "seed":
        return
    with pytest.raises(ModelError, match="accepted options"):
        models.build(name, **{key: 1})
