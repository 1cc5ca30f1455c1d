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


def _flat_bn(d_in=2):
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(d_in, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(), torch.nn.Linear(8, 3)
    )


def test_a_batch_of_one_that_batchnorm_cannot_train_is_refused_before_the_first_step():
    x, y = _blobs(n=40)
    model = _flat_bn()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    # 17 training samples in batches of 16 end each epoch with a batch of one
    with pytest.raises(
        ConfigError, match=r"the batch size leaves a batch of one sample on the training split, "
    ) as info:
        train_classifier(
            model, x[:17], y[:17], x[20:], y[20:], epochs=1, batch_size=16, lr=0.05,
            generator=torch.Generator().manual_seed(0),
        )  # fmt: skip
    assert "n % batch_size != 1" in str(info.value)
    # the probe ran on a copy: weights and running statistics are untouched
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    # 18 samples leave a batch of two: trains
    hist = train_classifier(
        model, x[:18], y[:18], x[20:], y[20:], epochs=1, batch_size=16, lr=0.05,
        generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    assert len(hist) == 1


@pytest.mark.parametrize(
    ("n", "batch", "steps", "drawn"),
    [
        (17, 16, None, True),  # an epoch ends with one sample
        (17, 16, 1, False),  # one step never reaches the tail
        (17, 16, 2, True),
        (9, 8, 2, True),
        (33, 16, 2, False),  # the tail is the 3rd step's batch
        (1, 16, 5, True),  # a one-sample partition
        (5, 1, 1, True),  # every batch is one sample
        (18, 16, None, False),
        (0, 16, None, False),
    ],
)
def test_a_batch_of_one_is_drawn_only_where_the_last_batch_is_reached(n, batch, steps, drawn):
    from edgetrain.engine.trainer import batches, draws_one_sample_batch

    assert draws_one_sample_batch(n, batch, steps) is drawn
    if n:  # against the batches themselves, cycled as local training cycles them
        sizes, gen = [], torch.Generator().manual_seed(0)
        while len(sizes) < (steps or -(-n // batch)):
            sizes += [len(b) for b in batches(n, batch, gen)]
        assert (1 in sizes[: steps or len(sizes)]) is drawn


def test_check_one_sample_batches_names_every_holder_that_draws_one():
    from edgetrain.engine.trainer import check_one_sample_batches

    x = torch.randn(4, 2)
    check_one_sample_batches(_flat_bn(), x, [(16, 16, None), (17, 16, 1)], "clients")
    with pytest.raises(ConfigError) as info:
        check_one_sample_batches(
            _flat_bn(), x, [(17, 16, 1), (1, 16, 5), (33, 16, 3), (18, 16, None)], "clients"
        )
    assert "on 2 clients (1, 2)" in str(info.value)


def test_batchnorm_that_trains_on_one_sample_is_not_refused():
    from edgetrain.engine.trainer import check_one_sample_batches

    # BatchNorm over (N, C, L) has L values per channel: one sample trains
    model = torch.nn.Sequential(torch.nn.Conv1d(2, 4, 3), torch.nn.BatchNorm1d(4))
    check_one_sample_batches(model, torch.randn(3, 2, 8), [(17, 16, None)], "clients")
