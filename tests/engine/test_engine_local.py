import json

import pytest
import torch

from edgetrain.config import parse_config
from edgetrain.engine.local import model_options_for, run_local
from edgetrain.errors import ConfigError, DataError, ModelError
from edgetrain.runs import load_state


def _cfg(tmp_path, **over):
    base = {
        "name": "t",
        "seed": 1,
        "output_root": str(tmp_path),
        "model": {"name": "lenet"},
        "data": {"name": "basicmotions", "test_fraction": 0.25},
        "train": {"epochs": 3, "batch_size": 8, "lr": 0.003, "optimizer": "adam"},
    }
    base.update(over)
    return parse_config(base)


def test_run_local_writes_a_complete_run_dir_and_is_deterministic(tmp_path):
    r1 = run_local(_cfg(tmp_path))
    r2 = run_local(_cfg(tmp_path))
    assert r1.run_dir != r2.run_dir  # never overwritten
    assert [m.test_loss for m in r1.history] == [m.test_loss for m in r2.history]
    files = {p.name for p in r1.run_dir.iterdir()}
    assert {"config.json", "metrics.jsonl", "model.safetensors", "result.json"} <= files
    lines = (r1.run_dir / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["epoch"] for x in lines] == [1, 2, 3]
    state = load_state(r1.run_dir / "model.safetensors")
    assert all(torch.isfinite(v).all() for v in state.values())
    cfg = json.loads((r1.run_dir / "config.json").read_text())
    assert cfg["resolved"]["model_options"] == {"num_classes": 4, "in_channels": 6, "length": 100}
    assert 0.0 <= r1.test_accuracy <= 1.0


def test_demo_setting_beats_chance_on_held_out_subjects(tmp_path):
    cfg = _cfg(
        tmp_path,
        data={"name": "watch", "split": "by-group", "test_fraction": 0.25},
        train={"epochs": 2, "batch_size": 32, "lr": 0.002, "optimizer": "adam"},
    )
    result = run_local(cfg)
    assert result.test_accuracy > 3 * (1 / 7)  # 7 exercise classes, unseen people


def test_model_options_follow_the_data():
    from edgetrain.data import load

    ds = load("digits")
    assert model_options_for("mobilenetv2", ds, {}) == {
        "num_classes": 10,
        "in_channels": 1,
        "input_size": 8,
    }
    assert model_options_for("mobilenetv2", ds, {"width_mult": 0.5})["width_mult"] == 0.5


def test_bad_names_are_clear_errors(tmp_path):
    with pytest.raises(ModelError, match="lenet"):
        run_local(_cfg(tmp_path, model={"name": "resnet-9000"}))
    with pytest.raises(DataError, match="watch"):
        run_local(_cfg(tmp_path, data={"name": "cifar100"}))
    with pytest.raises(ConfigError):
        parse_config({"train": {"batch_size": 0}})


def test_max_samples_trains_on_a_seeded_subset(tmp_path):
    # data.max_samples (as in the federated config): a seeded random subset, split as usual
    totals = []
    cut = _cfg(tmp_path, data={"name": "basicmotions", "max_samples": 40},
               train={"epochs": 1, "batch_size": 6})  # fmt: skip
    a = run_local(cut, on_step=lambda done, total: totals.append(total))
    b = run_local(cut)
    assert a.history[0].test_loss == b.history[0].test_loss  # the same subset every time
    assert totals[-1] == 5  # 30 of the 40 samples train, in batches of 6
    with pytest.raises(ConfigError, match="max_samples"):
        _cfg(tmp_path, data={"name": "basicmotions", "max_samples": 3})
