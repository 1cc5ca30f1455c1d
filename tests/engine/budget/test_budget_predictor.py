"""Memory budget predictor: /proc parsing, eq. 10, regeneration rule, recorded and simulated traces."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgetrain.engine.budget.predictor import (
    BudgetPredictor,
    oom_weight,
    predict_series,
    predict_trace,
    read_high_watermark,
    read_meminfo,
    read_page_faults,
    read_swap_kind,
    sample_linux,
    samples_from_json,
)
from edgetrain.errors import ConfigError, DataError

FIXTURE = Path(__file__).parent / "fixtures" / "recorded_memory_trace.json"


@pytest.fixture(scope="module")
def recorded():
    return json.loads(FIXTURE.read_text())


def test_parsers_on_recorded_proc_text(recorded):
    mi = read_meminfo(recorded["meminfo_excerpt"])
    assert mi["MemAvailable"] == 22798128 * 1024 or mi["MemAvailable"] > 0
    assert mi["MemTotal"] >= mi["MemAvailable"]
    # zones DMA, DMA32, Normal: high = 25 + 5301 + 20012 pages
    assert (
        read_high_watermark(recorded["zoneinfo_excerpt"], page_size=4096)
        == (25 + 5301 + 20012) * 4096
    )
    assert read_page_faults(recorded["self_stat"]) > 0
    swaps = "Filename Type Size Used Priority\n/dev/zram0 partition 1048572 0 100\n"
    assert read_swap_kind(swaps) == "zram"
    assert (
        read_swap_kind("Filename Type Size Used Priority\n/swapfile file 4194300 0 -2\n") == "disk"
    )
    assert read_swap_kind("Filename Type Size Used Priority\n") == "none"
    with pytest.raises(DataError, match="MemAvailable"):
        read_meminfo("MemTotal: 10 kB\n")
    stat = "123 (a b) S 1 2 3 4 5 6 70 8 900 10 11"
    assert read_page_faults(stat) == 70 + 900


def test_live_sample_is_consistent():
    s = sample_linux()
    assert s.mem_available_bytes > 0 and s.watermark_high_bytes >= 0
    assert s.m_safe == s.mem_available_bytes - s.alpha * s.watermark_high_bytes
    assert s.weight > 0


def test_oom_weights_favour_important_processes():
    assert oom_weight([0]) == pytest.approx(2001 / 1001)
    assert oom_weight([-1000]) == pytest.approx(2001.0)
    assert oom_weight([-1000]) > oom_weight([0]) > oom_weight([900])
    assert oom_weight([0, 0]) == pytest.approx(2 * oom_weight([0]))
    with pytest.raises(DataError):
        oom_weight([1001])


def test_eq10_on_recorded_trace(recorded):
    samples = samples_from_json(recorded["samples"])
    assert len(samples) == 16
    w = 5
    pred = BudgetPredictor(window=w)
    got = [pred.observe_sample(s) for s in samples]
    m = np.array([s.m_safe for s in samples])
    wt = np.array([s.weight for s in samples])
    for t in range(len(samples)):
        lo = max(0, t - w + 1)
        expect = (wt[lo : t + 1] * m[lo : t + 1]).sum() / wt[lo : t + 1].sum()
        assert got[t] == pytest.approx(expect, rel=1e-12)
    assert np.allclose(predict_series(m, wt, w), got, rtol=1e-12)
    # the moving average damps the recorded fluctuation
    assert np.std(np.diff(got)) <= np.std(np.diff(m)) + 1e-6


@settings(max_examples=40, deadline=None)
@given(
    m=st.lists(st.floats(-1e9, 1e10), min_size=1, max_size=40),
    window=st.integers(1, 50),
    seed=st.integers(0, 1000),
)
def test_prediction_is_within_window_range(m, window, seed):
    w = np.random.default_rng(seed).uniform(0.1, 10, len(m))
    p = predict_series(np.array(m), w, window)
    for t in range(len(m)):
        seg = m[max(0, t - window + 1) : t + 1]
        assert (
            min(seg) - 1e-3 * (abs(min(seg)) + 1) <= p[t] <= max(seg) + 1e-3 * (abs(max(seg)) + 1)
        )


def test_regeneration_rule_and_window_shrink():
    p = BudgetPredictor(window=100, tp1=2.0, tp2=3, ws_adj=0.9)
    for i in range(120):
        p.observe(1e9 + i, 1.0)
    assert not p.end_round(page_faults=1000)  # first round: nothing to compare against
    assert not p.end_round(page_faults=1900)  # 1900 <= 2 x 1000
    assert p.end_round(page_faults=3000)  # 3000 > 2 x mean(1000, 1900)
    assert p.window == 90 and p.regenerations == 1
    assert not p.end_round(page_faults=10, lmk_kills=3)
    assert p.end_round(page_faults=10, lmk_kills=4)  # more than TP2 kills
    assert p.window == 81
    assert p.predict() == pytest.approx(np.mean(1e9 + np.arange(120)[-81:]))
    with pytest.raises(ConfigError):
        BudgetPredictor(window=0)
    with pytest.raises(DataError):
        BudgetPredictor(window=3).predict()


def test_predictor_on_simulated_device_trace():
    from edgetrain.devices import memory_trace, phones

    prof = next(p for p in phones() if p.swap_kind == "zram")
    trace = memory_trace(prof, duration_s=7200, step_s=1.0, seed=3)
    pred = predict_trace(trace, prof.swap_kind, prof.low_watermark_bytes, epoch_s=60)
    m_safe = (
        trace.available_bytes
        - (2.0 if prof.swap_kind == "zram" else 1.0) * prof.low_watermark_bytes
    )
    assert pred.shape == m_safe.shape
    assert np.std(m_safe) > 0 and np.std(pred) < np.std(m_safe)  # spikes are filtered
    with pytest.raises(ConfigError):
        predict_trace(trace, "tape", 0, 60)
