"""Every zoo model builds, trains one step and carries the contract attributes."""

from __future__ import annotations

import functools
import json

import pytest
import torch
from torch import nn

from edgetrain import models
from edgetrain.errors import EdgetrainError, ModelError

EXPECTED_NAMES = [
    "lenet",
    "alexnet",
    "cnn-lstm",
    "cct2",
    "deep-ae",
    "ds-cnn",
    "mobilenetv2",
    "shufflenetv2",
    "bert-small",
    "albert-small",
]


@functools.cache
def default_model(name: str) -> nn.Module:
    """Default-option models are built once per test session (BERT-Small init is slow)."""
    return models.build(name, seed=0)


def test_names_are_the_contract():
    assert models.names() == EXPECTED_NAMES


@pytest.mark.parametrize("name", EXPECTED_NAMES)
def test_forward_backward_batch2(name):
    model = default_model(name)
    model.zero_grad(set_to_none=True)
    x = models.example_input(model, batch=2, generator=torch.Generator().manual_seed(1))
    assert x.dtype == model.input_dtype
    assert tuple(x.shape) == (2, *model.input_shape)
    out = model(x)
    assert tuple(out.shape) == (2, model.num_classes)
    out.pow(2).mean().backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None for g in grads), "every parameter must receive a gradient"
    assert all(torch.isfinite(g).all() for g in grads)
    assert sum(float(g.abs().sum()) for g in grads) > 0


@pytest.mark.parametrize("name", EXPECTED_NAMES)
def test_contract_attributes_name_real_modules(name):
    model = default_model(name)
    modules = dict(model.named_modules())
    assert model.stem and model.blocks
    for qualified in [*model.stem, *model.blocks, model.head]:
        assert qualified in modules
    head = modules[model.head]
    assert isinstance(head, nn.Linear)
    assert head.out_features == model.num_classes
    # blocks are disjoint from stem and head and listed in forward order without repeats
    assert len(set(model.blocks)) == len(model.blocks)
    assert not set(model.blocks) & {*model.stem, model.head}
    # no in-place activations: graph capture and recomputation need every activation
    assert not any(getattr(m, "inplace", False) for m in model.modules())


@pytest.mark.parametrize(
    ("name", "options", "shape"),
    [
        ("lenet", {"in_channels": 3, "length": 64, "num_classes": 5}, (3, 64)),
        ("lenet", {"in_channels": 28, "length": 28, "num_classes": 10, "norm": "batch"}, (28, 28)),
        ("lenet", {"in_channels": 28, "length": 28, "num_classes": 10, "norm": "group"}, (28, 28)),
        ("alexnet", {"in_channels": 77, "length": 96, "fc_width": 64}, (77, 96)),
        ("cnn-lstm", {"in_channels": 6, "length": 40, "hidden": 16}, (6, 40)),
        ("cct2", {"in_channels": 1, "input_size": 28, "num_classes": 10}, (1, 28, 28)),
        ("mobilenetv2", {"width_mult": 0.35, "in_channels": 1, "input_size": 28}, (1, 28, 28)),
        ("shufflenetv2", {"width_mult": 0.5, "in_channels": 1, "input_size": 28}, (1, 28, 28)),
        ("ds-cnn", {"channels": 16, "num_blocks": 2}, (1, 49, 10)),
        ("deep-ae", {"input_dim": 64, "hidden": 16, "batchnorm": False}, (64,)),
        ("bert-small", {"vocab_size": 100, "max_len": 12, "hidden": 32, "heads": 4}, (12,)),
    ],
)
def test_options_change_input_shape(name, options, shape):
    model = models.build(name, **options)
    assert model.input_shape == shape
    out = model(models.example_input(model, batch=2))
    assert out.shape[0] == 2 and out.shape[1] == model.num_classes


def test_deep_ae_without_batchnorm_trains_at_batch_1():
    model = models.build("deep-ae", batchnorm=False)
    x = models.example_input(model, batch=1)
    nn.functional.mse_loss(model(x), x).backward()
    assert not any(isinstance(m, nn.BatchNorm1d) for m in model.modules())


def test_seed_makes_weights_reproducible_and_leaves_global_rng_alone():
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    a = models.build("cct2", seed=7)
    assert torch.equal(torch.rand(3), expected_next)
    b = models.build("cct2", seed=7)
    c = models.build("cct2", seed=8)
    for (k, va), (_, vb) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(va, vb), k
    assert any(
        not torch.equal(va, vc) for va, vc in zip(a.parameters(), c.parameters(), strict=True)
    )


def test_example_input_text_has_padding_tail_and_is_seeded():
    model = models.build("bert-small", vocab_size=50, max_len=16, hidden=16, heads=2)
    x1 = models.example_input(model, 8, torch.Generator().manual_seed(3))
    x2 = models.example_input(model, 8, torch.Generator().manual_seed(3))
    assert torch.equal(x1, x2)
    assert x1.dtype == torch.long and x1.min() >= 0 and x1.max() < 50
    assert (x1[:, 0] > 0).all()
    for row in x1:
        n = int((row > 0).sum())
        assert n >= 8 and (row[:n] > 0).all() and (row[n:] == 0).all()


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda: models.build("resnet50"), "accepted names: lenet"),
        (lambda: models.spec("nope"), "accepted names"),
        (lambda: models.build("cct2", depth=3), "no option 'depth'"),
        (lambda: models.build("cct2", num_classes="10"), "must be of type int"),
        (lambda: models.build("cct2", num_classes=True), "must be of type int"),
        (lambda: models.build("cct2", num_classes=0), "must be > 0"),
        (lambda: models.build("cct2", num_heads=3), "divisible"),
        (lambda: models.build("cct2", positional_embedding="rope"), "learnable"),
        (lambda: models.build("lenet", length=8), "too short"),
        (lambda: models.build("lenet", norm="layer"), "one of ['none', 'batch', 'group']"),
        (lambda: models.build("alexnet", length=10), "too short"),
        (lambda: models.build("shufflenetv2", width_mult=0.75), "one of [0.5, 1.0, 1.5, 2.0]"),
        (lambda: models.build("bert-small", hidden=30, heads=4), "divisible"),
        (lambda: models.build("albert-small", vocab_size=1), ">= 2"),
        (lambda: models.build("ds-cnn", seed=1.5), "seed"),
        (lambda: models.example_input(nn.Linear(2, 2)), "not a zoo model"),
        (lambda: models.example_input(models.build("lenet"), batch=0), "positive"),
    ],
)
def test_user_mistakes_raise_model_error(call, fragment):
    with pytest.raises(ModelError) as info:
        call()
    assert isinstance(info.value, EdgetrainError)
    assert fragment in str(info.value)


def test_unknown_option_message_lists_defaults():
    with pytest.raises(ModelError, match=r"embed_dim=128.*num_heads=2"):
        models.build("cct2", heads=2)


def test_width_mult_accepts_int_for_float_option():
    model = models.build("mobilenetv2", width_mult=1, input_size=32)
    assert model.input_shape == (3, 32, 32)


def test_catalog_rows_are_json_and_consistent():
    rows = models.catalog()
    assert [r["name"] for r in rows] == EXPECTED_NAMES
    json.loads(json.dumps(rows))
    keys = {
        "name",
        "params",
        "input_shape",
        "input_dtype",
        "num_classes",
        "task",
        "family",
        "paper_params",
        "paper_source",
        "flops_forward",
    }
    for row in rows:
        assert keys <= set(row)
        model = default_model(row["name"])
        assert row["params"] == models.count_params(model)
        assert row["input_shape"] == list(model.input_shape)
        assert row["flops_forward"] > 0
        assert (row["paper_params"] is None) == (row["paper_source"] is None)
    rows[0]["name"] = "mutated"
    assert models.catalog()[0]["name"] == "lenet"


def test_spec_exposes_defaults_and_builder():
    s = models.spec("cct2")
    assert s.defaults["embed_dim"] == 128 and s.defaults["num_heads"] == 2
    assert s.paper_params == 280_000
    assert s.builder(**s.defaults).num_classes == 10


def test_lenet_norm_adds_one_normalisation_after_each_convolution():
    plain = models.build("lenet", in_channels=28, length=28, num_classes=10, seed=0)
    assert not any(isinstance(m, nn.BatchNorm1d | nn.GroupNorm) for m in plain.modules())
    # the default is DL4J's LeNet, parameter for parameter
    assert models.count_params(plain) == 113_380
    for norm, kind in (("batch", nn.BatchNorm1d), ("group", nn.GroupNorm)):
        model = models.build("lenet", in_channels=28, length=28, num_classes=10, norm=norm)
        widths = [
            m.num_features if norm == "batch" else m.num_channels
            for m in model.modules()
            if isinstance(m, kind)
        ]
        assert widths == [20, 50]
        # two affine parameters per normalised channel
        assert models.count_params(model) == 113_380 + 2 * (20 + 50)
        # a batch of one window trains (statistics over time as well as the batch)
        model.train()
        model(torch.randn(1, 28, 28)).sum().backward()
    batch = models.build("lenet", in_channels=28, length=28, num_classes=10, norm="batch")
    assert any(k.endswith("running_mean") for k in batch.state_dict())
