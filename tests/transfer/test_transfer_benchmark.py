"""The few-shot benchmark's --quick mode runs end to end and prints Table I's layout."""

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "fewshot_transfer.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("fewshot_transfer", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["fewshot_transfer"] = module  # dataclasses resolve annotations through it
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop("fewshot_transfer", None)


def test_quick_benchmark_prints_table_i_layout(bench, tmp_path, capsys):
    out = bench.main(
        [
            "--quick",
            "--size",
            "8",
            "--model-opt",
            "embed_dim=16",
            "--model-opt",
            "mlp_dim=16",
            "--seeds",
            "2",
            "--epochs",
            "2",
            "--shots",
            "3",
            "--test-size",
            "20",
            "--pretrain-limit",
            "60",
            "--personal-shots",
            "1",
            "--personal-strategies",
            "lp",
            "--held-out",
            "9,10",
            "--timing-rounds",
            "1",
            "--no-plan",
            "--cache",
            str(tmp_path / "cache"),
            "--json",
            str(tmp_path / "r.json"),
            "--results",
            str(tmp_path / "runs.jsonl"),
        ]
    )
    text = capsys.readouterr().out
    assert "MNIST 0-4 -> 5-9" in text and "MNIST -> 8x8 digits" in text
    for strategy in ["full", "lp", "ft-1", "lora-1", "ft-2", "lora-2"]:
        per = out["transfer"]["results"][strategy]
        assert set(per) == {"digits59", "sk8x8"}
        assert all(len(v["accuracies"]) == 2 for v in per.values())
        assert any(line.startswith(f"{strategy} ") for line in text.splitlines())
    res = out["transfer"]["results"]
    # trained bytes follow the strategies: lp < lora-1 < ft-1 < ft-2 < full
    b = {s: res[s]["digits59"]["trained_param_bytes"] for s in res}
    assert b["lp"] < b["lora-1"] < b["ft-1"] < b["ft-2"] < b["full"]
    assert b["lora-1"] < b["lora-2"] < b["ft-2"]
    f = {s: res[s]["digits59"]["flops_train"] for s in res}
    assert f["lp"] < f["ft-1"] < f["ft-2"] < f["full"]
    # every strategy but full trains on cached frozen-prefix activations, recorded per run
    for strategy, per in res.items():
        assert per["digits59"]["prefix_cache"]["used"] is (strategy != "full")
    timing = out["timing"]["strategies"]
    assert timing["full"]["step_speedup"] == 1.0 and not timing["full"]["prefix_cache"]
    assert all(timing[s]["median_ms"]["step8_cached"] > 0 for s in timing if s != "full")
    assert "Per-strategy CPU times" in text and "run x" in text
    assert "Frozen tokenizer vs full fine-tuning" in text and "(n=2)" in text
    lenet = out["personalisation"]["models"]["lenet"]
    assert set(lenet["subjects"]) == {9, 10}
    assert len(lenet["summary"]["lp"]["gain"]) == 2 and "gain vs no adaptation" in text
    assert (tmp_path / "r.json").is_file()
    # the pretrained sources are cached and reused; one watch source per held-out subject
    cached = sorted(p.name for p in (tmp_path / "cache").iterdir() if p.name != "finetunes")
    assert len(cached) == 4
    assert sum(name.startswith("lenet-watch-without-s") for name in cached) == 2
    # every run was logged; a rerun with the same settings trains nothing new
    logged = (tmp_path / "runs.jsonl").read_text().splitlines()
    assert len(logged) == 6 * 2 * 2 + 2 * 2
    again = bench.main(
        ["--quick", "--size", "8", "--model-opt", "embed_dim=16", "--model-opt", "mlp_dim=16",
         "--seeds", "2", "--epochs", "2", "--shots", "3", "--test-size", "20",
         "--pretrain-limit", "60", "--personal-shots", "1", "--personal-strategies", "lp",
         "--held-out", "9,10", "--no-timing", "--no-plan", "--cache", str(tmp_path / "cache"),
         "--results", str(tmp_path / "runs.jsonl")]
    )  # fmt: skip
    assert len((tmp_path / "runs.jsonl").read_text().splitlines()) == len(logged)
    assert (
        again["transfer"]["results"]["lp"]["sk8x8"]["accuracies"]
        == (res["lp"]["sk8x8"]["accuracies"])
    )
