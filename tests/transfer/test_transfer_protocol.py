import math

import pytest
import torch

from edgetrain.errors import ConfigError
from edgetrain.transfer import PAPER, Protocol, final_accuracy, mean_std, train_protocol


def test_paper_protocol_values():
    # TrainDeeploy §VI-A1: 100 epochs, SGD, batch 8, lr 0.01 cosine to 0.0005, last-5 mean
    assert (PAPER.epochs, PAPER.batch_size, PAPER.optimizer) == (100, 8, "sgd")
    assert (PAPER.lr, PAPER.final_lr, PAPER.schedule, PAPER.average_last) == (
        0.01,
        0.0005,
        "cosine",
        5,
    )
    assert [e for e in range(1, 101) if PAPER.evaluates(e)] == [96, 97, 98, 99, 100]
    assert [
        e for e in range(1, 9) if Protocol(epochs=8, average_last=2, eval_every=3).evaluates(e)
    ] == [3, 6, 7, 8]


def test_invalid_protocol_lists_every_problem():
    with pytest.raises(ConfigError, match=r"epochs must be >= 1.*optimizer must be one of"):
        Protocol(epochs=0, optimizer="rmsprop")
    with pytest.raises(ConfigError, match="unknown protocol field"):
        Protocol.from_json({"epochs": 3, "momentun": 0.9})


def test_final_accuracy_and_mean_std():
    hist = [{"epoch": i, "test_accuracy": None} for i in range(1, 4)]
    hist += [
        {"epoch": i, "test_accuracy": a}
        for i, a in zip(range(4, 9), [0.5, 0.6, 0.7, 0.8, 0.9], strict=True)
    ]
    assert final_accuracy(hist, 5) == pytest.approx(0.7)
    assert final_accuracy(hist, 2) == pytest.approx(0.85)
    with pytest.raises(ConfigError, match=r"epochs \[3\] were not evaluated"):
        final_accuracy(hist, 6)
    m, s = mean_std([1.0, 2.0, 3.0, 4.0])
    assert m == 2.5 and s == pytest.approx(math.sqrt(5 / 3))
    assert mean_std([0.3]) == (0.3, 0.0)


def test_cosine_schedule_runs_from_lr_to_final_lr():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(24, 4, generator=g), torch.randint(0, 3, (24,), generator=g)
    seen = []
    hist = train_protocol(
        model,
        (x, y),
        (x, y),
        Protocol(epochs=4, average_last=1),
        torch.Generator().manual_seed(0),
        on_step=lambda d, t: seen.append((d, t)),
    )
    assert seen[-1] == (12, 12)  # 24 samples / batch 8 = 3 steps x 4 epochs
    assert hist[-1]["lr"] == pytest.approx(0.0005)
    assert hist[0]["lr"] < 0.01 and hist[0]["lr"] > hist[1]["lr"] > hist[2]["lr"]
    assert [h["test_accuracy"] is None for h in hist] == [True, True, True, False]
