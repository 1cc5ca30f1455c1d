"""End-to-end pretrain -> fine-tune -> resume -> reload on a tiny real CCT-2 (8x8 digits)."""

import json

import pytest
import torch

from edgetrain.engine.trainer import evaluate
from edgetrain.errors import DataError, ModelError
from edgetrain.finetune import load_adapter
from edgetrain.runs import save_state
from edgetrain.transfer import (
    DataRef,
    FinetuneConfig,
    PretrainSettings,
    Protocol,
    load_finetuned,
    load_pretrained,
    prepare,
    pretrain,
    resume_finetune,
    run_finetune,
)

TINY = {"embed_dim": 16, "mlp_dim": 16}
SOURCE = DataRef("digits", {"digits": [0, 1, 2, 3, 4]})
TARGET = DataRef("digits", {"digits": [5, 6, 7, 8, 9]})


class Stop(Exception):
    pass


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    result = pretrain(
        "cct2",
        SOURCE,
        model_options=TINY,
        settings=PretrainSettings(epochs=2, limit=200, lr=5e-3),
        seed=0,
        output_root=root,
        name="src",
    )
    return result


def _config(pre, strategy="lora-1", **kw):
    base = dict(
        source=str(pre.run_dir),
        strategy=strategy,
        data=TARGET,
        shots=6,
        protocol=Protocol(epochs=4, average_last=2, lr=0.05),
        seed=1,
        test_size=60,
        timing_steps=3,
        plan=False,
    )
    base.update(kw)
    return FinetuneConfig(**base)


def test_pretrain_writes_weights_and_card(source):
    card = json.loads((source.run_dir / "card.json").read_text())
    assert card["model"] == "cct2" and card["classes"] == ["0", "1", "2", "3", "4"]
    assert card["model_options"] == {"num_classes": 5, "in_channels": 1, "input_size": 8, **TINY}
    assert card["data"]["options"] == {"digits": [0, 1, 2, 3, 4]} and card["seed"] == 0
    assert 0.0 <= card["accuracy"] <= 1.0 and card["accuracy"] == source.card.accuracy
    assert source.trained_param_bytes == 4 * sum(
        v.numel() for v in load_pretrained(source.run_dir).state.values()
    )
    # a bare safetensors file carries its card in the header metadata
    assert load_pretrained(source.run_dir / "model.safetensors").card == source.card


def test_lora_finetune_stores_only_the_adapter_and_reloads_exactly(source, tmp_path):
    result = run_finetune(_config(source, plan=True), output_root=tmp_path)
    hist = result.history
    assert result.accuracy == pytest.approx(
        (hist[-1]["test_accuracy"] + hist[-2]["test_accuracy"]) / 2
    )
    assert result.new_head and result.no_adaptation_accuracy is None  # 0-4 -> 5-9: new head
    assert (result.train_samples, result.test_samples) == (30, 60)
    cfg = json.loads((result.run_dir / "adapter" / "adapter_config.json").read_text())
    assert cfg["peft_type"] == "LORA" and cfg["r"] == 4
    keys = set(load_pretrained_keys(result.run_dir / "adapter" / "adapter_model.safetensors"))
    assert keys == {
        "base_model.model.encoder.1.attn.q.lora_A.weight",
        "base_model.model.encoder.1.attn.q.lora_B.weight",
        "base_model.model.encoder.1.attn.k.lora_A.weight",
        "base_model.model.encoder.1.attn.k.lora_B.weight",
        "base_model.model.encoder.1.attn.v.lora_A.weight",
        "base_model.model.encoder.1.attn.v.lora_B.weight",
        "base_model.model.encoder.1.attn.out.lora_A.weight",
        "base_model.model.encoder.1.attn.out.lora_B.weight",
        "base_model.model.encoder.1.fc1.lora_A.weight",
        "base_model.model.encoder.1.fc1.lora_B.weight",
        "base_model.model.encoder.1.fc2.lora_A.weight",
        "base_model.model.encoder.1.fc2.lora_B.weight",
        "base_model.model.fc.weight",
        "base_model.model.fc.bias",
    }
    assert result.trained_param_bytes == 4 * result.trained_params
    assert result.step_time_ms > 0 and result.flops_train_counted > 0
    # the planner counts the same training FLOPs as torch's counter and estimates latency
    assert result.plan["flops_train"] == result.flops_train_counted
    assert result.target_latency_ms["cores"] > result.target_latency_ms["accelerated"] > 0
    # base model + stored adapter reproduce the fine-tuned model's last-epoch accuracy
    model, prep = load_finetuned(result.run_dir)
    _, acc = evaluate(model, prep.test.x, prep.test.y)
    assert acc == hist[-1]["test_accuracy"]
    lines = (result.run_dir / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["epoch"] for x in lines] == [1, 2, 3, 4]


def test_lp_keeps_changed_weights_only_and_adapter_mismatch_is_listed(source, tmp_path):
    lp = run_finetune(_config(source, "lp"), output_root=tmp_path)
    keys = set(load_pretrained_keys(lp.run_dir / "adapter" / "adapter_model.safetensors"))
    assert keys == {"base_model.model.fc.weight", "base_model.model.fc.bias"}
    assert lp.trained_param_bytes == 4 * (16 * 5 + 5)
    # an lp artifact offered to a lora-2 model: every mismatch named, nothing loaded
    prep = prepare(_config(source, "lora-2"))
    before = {k: v.clone() for k, v in prep.model.state_dict().items()}
    with pytest.raises(ModelError, match=r"strategy: adapter 'lp' vs model 'lora-2'"):
        load_adapter(prep.model, lp.run_dir / "adapter")
    assert all(torch.equal(v, before[k]) for k, v in prep.model.state_dict().items())


def test_resume_after_interruption_ends_with_the_same_metrics(source, tmp_path):
    config = _config(
        source,
        "ft-1",
        protocol=Protocol(epochs=4, average_last=2, lr=0.05, optimizer="sgd-momentum"),
    )
    whole = run_finetune(config, output_root=tmp_path, name="whole")

    def stop(record):
        if record["epoch"] == 2:
            raise Stop

    with pytest.raises(Stop):
        run_finetune(config, output_root=tmp_path, name="cut", on_epoch=stop)
    resumed = resume_finetune(tmp_path / "cut")
    assert resumed.resumed_from_epoch == 2

    def strip(h):
        return [{k: v for k, v in r.items() if k != "seconds"} for r in h]

    assert strip(resumed.history) == strip(whole.history)
    assert resumed.accuracy == whole.accuracy
    lines = (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["epoch"] for x in lines] == [1, 2, 3, 4]


def test_sparse_checkpoints_resume_and_cached_run_matches_uncached(source, tmp_path):
    proto = Protocol(epochs=4, average_last=2, lr=0.05)
    plain = run_finetune(
        _config(source, "lora-1", protocol=proto, cache_prefix=False),
        output_root=tmp_path,
        name="plain",
    )
    assert plain.prefix_cache["used"] is False and "disabled" in plain.prefix_cache["reason"]
    config = _config(source, "lora-1", protocol=proto, checkpoint_every=2)

    def stop(record):
        if record["epoch"] == 3:
            raise Stop

    with pytest.raises(Stop):
        run_finetune(config, output_root=tmp_path, name="cut", on_epoch=stop)
    assert sorted(p.name for p in (tmp_path / "cut" / "checkpoints").iterdir()) == ["epoch-0002"]
    resumed = resume_finetune(tmp_path / "cut")
    assert resumed.resumed_from_epoch == 2
    assert resumed.prefix_cache["used"] and resumed.prefix_cache["cached_bytes"] > 0
    saved = json.loads((tmp_path / "cut" / "result.json").read_text())
    assert saved["prefix_cache"]["cut"] == resumed.prefix_cache["cut"]
    for a, b in zip(plain.history, resumed.history, strict=True):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-5)
        assert a["test_accuracy"] == b["test_accuracy"]
    assert resumed.accuracy == plain.accuracy


def test_source_errors_name_the_problem(source, tmp_path):
    with pytest.raises(
        DataError, match=r"shape \[1, 28, 28\] but the model expects \[1, 8, 8\].*size=8"
    ):
        prepare(_config(source, data=DataRef("mnist5k", {"digits": [5, 6, 7, 8, 9]})))
    bare = tmp_path / "bare.safetensors"
    save_state(bare, load_pretrained(source.run_dir).state)
    with pytest.raises(ModelError, match="carries no edgetrain card"):
        load_pretrained(bare)
    # weights that do not fit the model the card names: every mismatch listed
    state = load_pretrained(source.run_dir).state
    state["encoder.0.fc1.weight"] = torch.zeros(3, 3)
    del state["norm.weight"]
    bad = tmp_path / "bad"
    bad.mkdir()
    save_state(bad / "model.safetensors", state)
    (bad / "card.json").write_text((source.run_dir / "card.json").read_text())
    with pytest.raises(
        ModelError, match=r"missing in file: norm\.weight.*encoder\.0\.fc1\.weight: file \(3, 3\)"
    ):
        prepare(_config(source, source=str(bad)))


def load_pretrained_keys(path):
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as fh:
        return list(fh.keys())


def test_an_interrupted_pretrain_resumes_to_the_same_weights(tmp_path, source, capsys):
    from cli_runner import run_cli
    from edgetrain.runs import load_state
    from edgetrain.transfer import resume_pretrain

    def stop_after_epoch_1(m):
        if m.epoch == 1:
            raise Stop

    with pytest.raises(Stop):
        pretrain(
            "cct2",
            SOURCE,
            model_options=TINY,
            settings=PretrainSettings(epochs=2, limit=200, lr=5e-3),
            seed=0,
            output_root=tmp_path,
            name="src",
            on_epoch=stop_after_epoch_1,
        )
    run = tmp_path / "src"
    assert not (run / "model.safetensors").exists()
    code, err = run_cli(["pretrain", "--resume", str(run), "--model", "cct2"], capsys)
    assert code == 2 and "do not combine it with --model" in err
    result = resume_pretrain(run)
    assert [m.test_loss for m in result.history] == [m.test_loss for m in source.history]
    mine, theirs = (
        load_state(run / "model.safetensors"),
        load_state(source.run_dir / "model.safetensors"),
    )
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r.get("epoch", r.get("after_epoch")) for r in rows] == [1, 1, 2]  # epoch, resume, epoch
    code, err = run_cli(["pretrain", "--resume", str(run)], capsys)
    assert code == 2 and "nothing to resume" in err
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "config.json").write_text(json.dumps({"command": "chain"}))
    code, err = run_cli(["pretrain", "--resume", str(tmp_path / "other")], capsys)
    assert code == 2 and "made by `edgetrain chain`" in err
