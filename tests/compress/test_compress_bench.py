"""benchmarks/codec.py's stage profile: every stage is timed, interleaved with a recompute."""

from __future__ import annotations

import torch

from bench_loader import load_benchmark


def test_stage_profile_with_recompute_and_ablation_variants():
    bench = load_benchmark("codec")
    gen = torch.Generator().manual_seed(0)
    x = torch.relu(torch.randn(4, 8, 16, 16, generator=gen))
    calls = []

    def recompute():
        calls.append(1)
        return x * 1.0

    eb = 0.01 * float(x.max() - x.min())
    prof = bench.stage_profile(x, eb, 3, recompute)
    assert len(calls) == 3 and prof["recompute"] >= 0
    labels = {label for _, label in bench._STAGES}
    assert labels | {"encode_total", "decode_total", "recompute"} == set(prof)
    enc = ("range", "sample", "moments", "outlier_share", "quantize", "template", "pack_zstd")
    assert sum(prof[k] for k in enc) <= prof["encode_total"] * 1.05 + 0.05
    assert prof["unpack_zstd"] + prof["dequantize"] <= prof["decode_total"] * 1.05 + 0.05
    assert prof["quantize"] > 0 and prof["unpack_zstd"] > 0 and prof["dequantize"] > 0
    # the patched functions are restored
    from edgetrain.compress import grid, mix

    assert grid.quantize_codes.__module__ == "edgetrain.compress.grid"
    assert mix.read_section.__module__ == "edgetrain.compress.container"
    assert "lz_codes" in bench.ABLATIONS
