"""Adapters in PEFT's on-disk format: PEFT interop both ways and all-or-nothing loading."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from edgetrain.errors import ModelError
from edgetrain.finetune import (
    apply_strategy,
    load_adapter,
    lora_modules,
    save_adapter,
    trainable_state_dict,
)
from tiny_models import TinyCCT, batch

peft = pytest.importorskip("peft")


def _train(model, steps=3, lr=0.5):
    """A few real SGD steps so LoRA B and the head move away from their init."""
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=lr)
    for s in range(steps):
        x, y = batch(seed=10 + s)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    base = TinyCCT(seed=5)
    model = copy.deepcopy(base)
    info = apply_strategy(model, "lora-1", seed=2)
    _train(model)
    out = tmp_path_factory.mktemp("adapter")
    save_adapter(model, out, info)
    return base, model, info, out


def test_saved_files_follow_peft_layout(trained):
    base, model, info, out = trained
    cfg = json.loads((out / "adapter_config.json").read_text())
    assert cfg["peft_type"] == "LORA" and cfg["r"] == 4 and cfg["lora_alpha"] == 8
    assert sorted(cfg["target_modules"]) == sorted(info.lora_targets)
    assert cfg["modules_to_save"] == ["fc"]
    tensors = load_file(str(out / "adapter_model.safetensors"))
    assert set(tensors) == {f"base_model.model.{n}" for n in info.trainable}
    assert "base_model.model.encoder.1.attn.q.lora_A.weight" in tensors
    # trained, not at init: B moved off zero
    assert tensors["base_model.model.encoder.1.fc1.lora_B.weight"].abs().sum() > 0


def test_peft_loads_edgetrain_adapter_with_identical_outputs(trained):
    base, model, _, out = trained
    peft_model = peft.PeftModel.from_pretrained(copy.deepcopy(base), str(out))
    peft_model.eval()
    model.eval()
    x, _ = batch(n=5, seed=99)
    with torch.no_grad():
        ours, theirs = model(x), peft_model(x)
    assert not torch.allclose(ours, base(x), atol=1e-4)  # the adapter changes the function
    torch.testing.assert_close(theirs, ours, rtol=0, atol=1e-6)


def test_edgetrain_loads_its_adapter_into_fresh_model(trained):
    base, model, info, out = trained
    fresh = copy.deepcopy(base)
    got = load_adapter(fresh, out)
    assert str(got.spec) == "lora-1" and set(got.trainable) == set(info.trainable)
    x, _ = batch(n=5, seed=98)
    with torch.no_grad():
        torch.testing.assert_close(fresh(x), model(x), rtol=0, atol=0)


def test_edgetrain_loads_peft_saved_adapter(tmp_path):
    base = TinyCCT(seed=7)
    targets = ["encoder.1.attn.q", "encoder.1.fc2"]
    cfg = peft.LoraConfig(r=2, lora_alpha=6, target_modules=targets, modules_to_save=["fc"])
    pm = peft.get_peft_model(copy.deepcopy(base), cfg)
    with torch.no_grad():
        for n, p in pm.named_parameters():
            if "lora_B" in n or "modules_to_save" in n:
                p.add_(0.05)
    pm.save_pretrained(str(tmp_path))
    fresh = copy.deepcopy(base)
    info = load_adapter(fresh, tmp_path)
    assert set(lora_modules(fresh)) == set(targets) and info.spec.rank == 2
    x, _ = batch(seed=4)
    with torch.no_grad():
        torch.testing.assert_close(fresh(x), pm(x), rtol=0, atol=1e-6)


def test_rank_and_strategy_mismatch_lists_every_problem_and_loads_nothing(trained):
    _, _, _, out = trained
    other = TinyCCT(seed=5)
    apply_strategy(other, "lora-1", rank=2)
    before = {k: v.clone() for k, v in trainable_state_dict(other).items()}
    with pytest.raises(ModelError) as err:
        load_adapter(other, out)
    msg = str(err.value)
    assert "LoRA rank: adapter r=4 vs model r=2" in msg
    assert "shape of 'base_model.model.encoder.1.attn.q.lora_A.weight'" in msg
    assert "nothing was loaded" in msg
    assert all(torch.equal(before[k], v) for k, v in trainable_state_dict(other).items())

    ft = TinyCCT(seed=5)
    apply_strategy(ft, "ft-1")
    with pytest.raises(ModelError, match="strategy: adapter 'lora-1' vs model 'ft-1'") as err:
        load_adapter(ft, out)
    assert "unexpected tensor" in str(err.value) and "missing tensor" in str(err.value)


def test_tampered_adapter_names_missing_and_unexpected(trained, tmp_path):
    _, _, _, out = trained
    tensors = load_file(str(out / "adapter_model.safetensors"))
    from safetensors import safe_open

    with safe_open(str(out / "adapter_model.safetensors"), "pt") as f:
        metadata = f.metadata()
    del tensors["base_model.model.fc.bias"]
    tensors["base_model.model.encoder.1.fc1.lora_C.weight"] = torch.zeros(2, 2)
    tensors["base_model.model.fc.weight"] = torch.zeros(4, 8)
    save_file(tensors, str(tmp_path / "adapter_model.safetensors"), metadata=metadata)
    (tmp_path / "adapter_config.json").write_text((out / "adapter_config.json").read_text())
    fresh = TinyCCT(seed=5)
    before = copy.deepcopy(fresh.state_dict())
    with pytest.raises(ModelError) as err:
        load_adapter(fresh, tmp_path)
    msg = str(err.value)
    assert "missing tensor 'base_model.model.fc.bias'" in msg
    assert "unexpected tensor 'base_model.model.encoder.1.fc1.lora_C.weight'" in msg
    assert "shape of 'base_model.model.fc.weight': adapter (4, 8) vs model (3, 8)" in msg
    assert not lora_modules(fresh)  # nothing injected either
    assert all(torch.equal(before[k], v) for k, v in fresh.state_dict().items())


def test_missing_directory_and_wrong_target(tmp_path, trained):
    with pytest.raises(ModelError, match="adapter_config.json"):
        load_adapter(TinyCCT(), tmp_path / "nowhere")
    _, _, _, out = trained
    other = torch.nn.Sequential(torch.nn.Linear(3, 3))
    with pytest.raises(ModelError, match="'encoder.1.attn.q' does not exist"):
        load_adapter(other, out)


def test_ft_adapter_round_trip(tmp_path):
    m = TinyCCT(seed=3)
    apply_strategy(m, "ft-1")
    _train(m, steps=2, lr=0.1)
    save_adapter(m, tmp_path)
    assert json.loads((tmp_path / "adapter_config.json").read_text())["peft_type"] is None
    fresh = TinyCCT(seed=3)
    info = load_adapter(fresh, tmp_path)
    assert str(info.spec) == "ft-1"
    x, _ = batch(seed=5)
    with torch.no_grad():
        torch.testing.assert_close(fresh(x), m(x), rtol=0, atol=0)
    assert {n for n, p in fresh.named_parameters() if p.requires_grad} == set(info.trainable)
