import pytest
import torch
from torch import nn

from edgetrain.checkpoint import complete_checkpoints
from edgetrain.errors import ConfigError, ModelError
from edgetrain.transfer import Protocol, latest_checkpoint, train_protocol


class Stop(Exception):
    pass


def _net(hidden=16):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, hidden), nn.Dropout(0.2), nn.ReLU(), nn.Linear(hidden, 3))


def _data():
    g = torch.Generator().manual_seed(1)
    y = torch.randint(0, 3, (40,), generator=g)
    x = torch.randn(40, 6, generator=g) + y[:, None].float()
    return (x[:30], y[:30]), (x[30:], y[30:])


def _strip(history):
    return [{k: v for k, v in h.items() if k != "seconds"} for h in history]


@pytest.mark.parametrize("optimizer", ["sgd-momentum", "adam"])
def test_interrupted_run_resumes_to_identical_metrics_and_weights(tmp_path, optimizer):
    train, test = _data()
    protocol = Protocol(epochs=5, batch_size=8, lr=0.05, optimizer=optimizer, average_last=5)

    ref = _net()
    full = train_protocol(ref, train, test, protocol, torch.Generator().manual_seed(7))

    def stop_after_2(record):
        if record["epoch"] == 2:
            raise Stop

    run = tmp_path / "run"
    first = _net()
    with pytest.raises(Stop):
        train_protocol(
            first,
            train,
            test,
            protocol,
            torch.Generator().manual_seed(7),
            checkpoint_dir=run,
            on_epoch=stop_after_2,
        )
    assert [p.name for p in complete_checkpoints(run)] == ["epoch-0002"]  # older ones dropped
    torch.manual_seed(12345)  # disturb the global RNG: resume must restore it (dropout)
    resumed_model = _net()
    resumed = train_protocol(
        resumed_model,
        train,
        test,
        protocol,
        torch.Generator().manual_seed(999),
        checkpoint_dir=run,
        resume=True,
    )
    assert _strip(resumed) == _strip(full)
    for a, b in zip(ref.state_dict().values(), resumed_model.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert latest_checkpoint(run).epoch == 5


def test_mismatched_checkpoint_lists_every_problem_and_loads_nothing(tmp_path):
    train, test = _data()
    protocol = Protocol(epochs=1, batch_size=8, optimizer="sgd-momentum", average_last=1)
    train_protocol(
        _net(16),
        train,
        test,
        protocol,
        torch.Generator().manual_seed(0),
        strategy="ft-1",
        checkpoint_dir=tmp_path,
    )
    other = _net(8)
    before = {k: v.clone() for k, v in other.state_dict().items()}
    with pytest.raises(ModelError) as err:
        train_protocol(
            other,
            train,
            test,
            protocol.with_(epochs=2),
            torch.Generator().manual_seed(0),
            strategy="lora-1",
            checkpoint_dir=tmp_path,
            resume=True,
        )
    msg = str(err.value)
    assert "strategy: checkpoint 'ft-1' vs run 'lora-1'" in msg
    assert "optimizer state optim/0.weight/momentum_buffer: (16, 6) vs parameter (8, 6)" in msg
    for k, v in other.state_dict().items():
        assert torch.equal(v, before[k])

    frozen = _net(16)
    frozen[0].weight.requires_grad_(False)
    with pytest.raises(ModelError, match=r"trained in checkpoint only: 0\.weight"):
        train_protocol(
            frozen,
            train,
            test,
            protocol.with_(epochs=2),
            torch.Generator().manual_seed(0),
            strategy="ft-1",
            checkpoint_dir=tmp_path,
            resume=True,
        )


def test_resume_without_checkpoint_is_a_config_error(tmp_path):
    train, test = _data()
    with pytest.raises(ConfigError, match="no complete checkpoint"):
        train_protocol(
            _net(),
            train,
            test,
            Protocol(epochs=1),
            torch.Generator(),
            checkpoint_dir=tmp_path,
            resume=True,
        )
