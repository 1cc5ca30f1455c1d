import math

import pytest
import torch

from edgetrain.engine.trainer import cosine_lr, evaluate, make_optimizer, train_classifier
from edgetrain.errors import ConfigError


def _blobs(n=200, seed=0):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 3, (n,), generator=g)
    centers = torch.tensor([[2.0, 0.0], [-2.0, 0.0], [0.0, 2.5]])
    x = centers[y] + 0.4 * torch.randn(n, 2, generator=g)
    return x, y


def _fit(seed):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(2, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    x, y = _blobs()
    return train_classifier(
        model,
        x[:150],
        y[:150],
        x[150:],
        y[150:],
        epochs=5,
        batch_size=16,
        lr=0.05,
        optimizer="sgd-momentum",
        schedule="cosine",
        generator=torch.Generator().manual_seed(seed),
    )


def test_training_learns_and_is_deterministic():
    h1, h2 = _fit(3), _fit(3)
    assert h1[-1].test_accuracy > 0.9
    assert h1[-1].train_loss < h1[0].train_loss
    assert [m.test_loss for m in h1] == [m.test_loss for m in h2]
    assert h1[-1].lr == pytest.approx(0.05 * 0.05, rel=1e-6)


def test_evaluate_counts_correctly():
    model = torch.nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.eye(2))
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    y = torch.tensor([0, 1, 1, 1])
    loss, acc = evaluate(model, x, y, batch_size=3)
    assert acc == 0.75
    expected = torch.nn.functional.cross_entropy(model(x), y).item()
    assert loss == pytest.approx(expected, rel=1e-6)


def test_cosine_schedule_endpoints():
    assert cosine_lr(0.01, 0.0005, 0, 100) == pytest.approx(0.01)
    assert cosine_lr(0.01, 0.0005, 99, 100) == pytest.approx(0.0005)
    mid = cosine_lr(0.01, 0.0005, 50, 101)
    assert mid == pytest.approx(0.0005 + 0.5 * 0.0095 * (1 + math.cos(math.pi * 0.5)))


def test_optimizer_errors():
    model = torch.nn.Linear(2, 2)
    with pytest.raises(ConfigError, match="accepted: sgd, sgd-momentum, adam"):
        make_optimizer(model.parameters(), "lion", 0.1)
    for p in model.parameters():
        p.requires_grad_(False)
    with pytest.raises(ConfigError, match="no trainable parameters"):
        make_optimizer(model.parameters(), "sgd", 0.1)


def test_divergence_is_a_clear_error():
    model = torch.nn.Linear(2, 3)
    x, y = _blobs(40)
    with pytest.raises(ConfigError, match="diverged"):
        train_classifier(model, x * 1e30, y, x, y, epochs=2, batch_size=8, lr=1.0, optimizer="sgd")
