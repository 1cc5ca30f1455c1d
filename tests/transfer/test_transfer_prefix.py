"""Frozen-prefix caching trains exactly like the uncached loop, and says when it cannot."""

import copy

import pytest
import torch
from torch import nn

from edgetrain import models
from edgetrain.finetune import apply_strategy
from edgetrain.transfer import Protocol, train_protocol
from edgetrain.transfer.loop import build_prefix_cache
from edgetrain.transfer.prefix import find_prefix

TINY = {"in_channels": 1, "input_size": 8, "num_classes": 3, "embed_dim": 16, "mlp_dim": 16}


def _data(n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 1, 8, 8, generator=g), torch.randint(0, 3, (n,), generator=g)


def _trained(strategy, cached):
    model = models.build("cct2", seed=3, **TINY)
    apply_strategy(model, strategy, seed=3)
    train, test = _data(20, 0), _data(11, 1)
    cache, plan = build_prefix_cache(model, train[0], test[0], enabled=cached)
    hist = train_protocol(
        model,
        train,
        test,
        Protocol(epochs=2, average_last=2, lr=0.05),
        torch.Generator().manual_seed(7),
        strategy=strategy,
        cache=cache,
    )
    return model, hist, plan


@pytest.mark.parametrize(
    ("strategy", "cut_len"), [("lp", 1), ("ft-1", 1), ("lora-1", 5), ("ft-2", 1)]
)
def test_cached_prefix_trains_exactly_like_the_whole_model(strategy, cut_len):
    ref_model, ref_hist, ref_plan = _trained(strategy, cached=False)
    model, hist, plan = _trained(strategy, cached=True)
    assert not ref_plan.used and "disabled" in ref_plan.reason
    assert plan.used and len(plan.cut) == cut_len and plan.prefix_ops > 0
    assert plan.cached_bytes == 4 * (20 + 11) * sum(
        torch.Size(s).numel() for s in plan.feature_shapes
    )
    for a, b in zip(ref_hist, hist, strict=True):
        for key in ("train_loss", "train_accuracy", "test_loss", "test_accuracy", "lr", "step"):
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-6), key
    ref_params, params = dict(ref_model.named_parameters()), dict(model.named_parameters())
    changed = 0
    for name, p in params.items():
        torch.testing.assert_close(p, ref_params[name], rtol=1e-5, atol=1e-6)
        changed += p.requires_grad
    assert changed > 0
    # the frozen prefix really is untouched and the trained part really moved
    fresh = models.build("cct2", seed=3, **TINY)
    assert torch.equal(params["tokenizer.layers.0.weight"], fresh.tokenizer.layers[0].weight)
    assert not torch.equal(params["fc.weight"], fresh.fc.weight)


def test_full_finetuning_falls_back_with_the_reason():
    model = models.build("cct2", seed=0, **TINY)
    apply_strategy(model, "full")
    cache, plan = build_prefix_cache(model, *(_data(4, 0)[0], _data(4, 1)[0]))
    assert cache is None and not plan.used
    assert "tokenizer.layers.0 trains" in plan.reason


class _Drop(nn.Module):
    """A frozen conv, a dropout, then a trained head: only the conv may be cached."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(2, 4, 3)
        self.drop = nn.Dropout(0.5)
        self.head = nn.Linear(4 * 6, 2)

    def forward(self, x):
        return self.head(self.drop(self.conv(x)).flatten(1))


class _Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(2, 4, 3)
        self.head = nn.Linear(4 * 6, 2)

    def forward(self, x):
        y = self.conv(x)
        if self.training:
            y = y * 0.5
        return self.head(y.flatten(1))


class _BatchMix(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(2, 4, 3)
        self.head = nn.Linear(4 * 6, 2)

    def forward(self, x):
        y = self.conv(x)
        y = y - y.mean(0, keepdim=True)  # mixes the samples of a batch
        return self.head(y.flatten(1))


def _freeze_all_but_head(model):
    for name, p in model.named_parameters():
        p.requires_grad_(name.startswith("head."))
    return model


def test_random_module_stays_in_the_suffix_and_training_matches():
    x = torch.randn(10, 2, 8, generator=torch.Generator().manual_seed(0))
    y = torch.arange(10) % 2
    base = _freeze_all_but_head(_Drop())
    split, plan = find_prefix(base)
    assert plan.used and plan.prefix_modules == ("conv",)
    assert "Dropout" in plan.reason
    runs = []
    for cached in (False, True):
        model = copy.deepcopy(base)
        cache, _ = build_prefix_cache(model, x, x, enabled=cached)
        torch.manual_seed(5)  # dropout draws from the global generator, identically in both
        hist = train_protocol(
            model, (x, y), (x, y), Protocol(epochs=3, average_last=1),
            torch.Generator().manual_seed(1), cache=cache,
        )  # fmt: skip
        runs.append((hist, model.head.weight.detach().clone()))
    assert runs[0][0][-1]["train_loss"] == pytest.approx(runs[1][0][-1]["train_loss"], rel=1e-5)
    torch.testing.assert_close(runs[0][1], runs[1][1])


def test_mode_dependent_forward_and_batch_mixing_are_not_cached():
    x = torch.randn(6, 2, 8)
    cache, plan = build_prefix_cache(_freeze_all_but_head(_Branchy()), x, x)
    assert cache is None and "self.training" in plan.reason
    cache, plan = build_prefix_cache(_freeze_all_but_head(_BatchMix()), x, x)
    assert cache is None and "depends on the other samples" in plan.reason


def test_cache_rows_must_match_the_data():
    model = models.build("cct2", seed=0, **TINY)
    apply_strategy(model, "lp")
    (xa, ya), (xb, _) = _data(6, 0), _data(4, 1)
    cache, _ = build_prefix_cache(model, xa, xb)
    from edgetrain.errors import ConfigError

    with pytest.raises(ConfigError, match="prefix cache rows"):
        train_protocol(
            model, (xa, ya), _data(5, 2), Protocol(epochs=1, average_last=1),
            torch.Generator().manual_seed(0), cache=cache,
        )  # fmt: skip
