"""Busy traces (cap) and app-usage memory traces (bounds, session structure, JSON)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgetrain.devices import MemoryTrace, busy_trace, get_device, memory_trace, reclaim_pages
from edgetrain.errors import ConfigError, DataError

GIB = 1024**3


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(0, 30),
    steps=st.integers(0, 80),
    share=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**31),
)
def test_busy_share_never_above_cap(n, steps, share, seed):
    trace = busy_trace(n, steps, max_busy_share=share, seed=seed, mean_busy_steps=5)
    assert trace.shape == (steps, n) and trace.dtype == bool
    if steps:
        assert trace.sum(axis=1).max() <= int(np.floor(share * n + 1e-9))


def test_busy_trace_dynamics():
    tr = busy_trace(200, 500, max_busy_share=0.5, seed=0)
    counts = tr.sum(axis=1)
    assert counts.max() <= 100 and counts.min() > 0
    flips = (tr[1:] != tr[:-1]).mean()
    assert 0.0 < flips < 0.2  # states persist (geometric sojourns), not white noise
    assert np.array_equal(tr, busy_trace(200, 500, max_busy_share=0.5, seed=0))
    assert not busy_trace(10, 10, max_busy_share=0.0).any()
    with pytest.raises(ConfigError):
        busy_trace(10, 10, max_busy_share=1.2)


@pytest.mark.parametrize("name", ["pixel-2-xl", "redmi-note-10", "oneplus-10-pro"])
def test_memory_trace_within_ram(name):
    p = get_device(name)
    tr = memory_trace(p, 1800, seed=3)
    assert len(tr) == 1800
    assert tr.available_bytes.min() >= 0 and tr.available_bytes.max() <= p.memory_bytes
    assert tr.available_bytes.max() < p.memory_bytes  # the OS always holds some


def test_tiny_device_triggers_lmk_and_clips():
    tiny = dataclasses.replace(
        get_device("honor-8"), memory_bytes=2 * GIB, low_watermark_bytes=8 * 1024**2
    )
    tr = memory_trace(tiny, 3600, seed=0)
    assert tr.kills.sum() > 0
    assert tr.available_bytes.min() >= 0 and tr.available_bytes.max() <= tiny.memory_bytes


def test_session_structure():
    p = get_device("oneplus-10-pro")  # 12 GB: no low-memory kills, clean structure
    tr = memory_trace(p, 6 * 3600, seed=11)
    assert tr.kills.sum() == 0
    s = tr.in_session
    assert np.all(tr.foreground[s] == 1) and np.all(tr.foreground[~s] == 0)
    assert set(np.unique(tr.background[s])) <= {3, 4, 5}
    assert len(set(np.unique(tr.background[s]))) >= 2
    sessions = tr.sessions()
    assert len(sessions) >= 20
    durations = np.array([e - b for b, e in sessions if e < 6 * 3600 and b > 0])
    assert 120 <= np.median(durations) <= 190  # FedHybrid Fig. 11(a): ~153 s
    # launch spike: memory at a session's first step is lower than once it has settled
    dips = [
        tr.available_at(b + 10) - tr.available_at(b)
        for b, e in sessions
        if e - b > 20 and b + 10 < 6 * 3600
    ]
    assert np.mean(np.array(dips) > 0) > 0.9
    assert tr.launching[s].any() and not tr.launching[~s].any()
    # FedHybrid's weights: a settled foreground app outweighs home/launch steps
    settled = s & ~tr.launching
    assert tr.oom_weight[settled].min() > tr.oom_weight[~settled].max()


def test_memory_trace_json_round_trip():
    tr = memory_trace(get_device("galaxy-s22"), 600, step_s=2.0, seed=5)
    back = MemoryTrace.from_json(tr.to_json())
    for name in ("t", "available_bytes", "foreground", "background", "in_session", "kills"):
        assert np.array_equal(getattr(back, name), getattr(tr, name))
        assert getattr(back, name).dtype == getattr(tr, name).dtype
    assert back.total_bytes == tr.total_bytes and back.step_s == 2.0 and back.device == "galaxy-s22"
    assert len(back) == 300
    same = memory_trace(get_device("galaxy-s22"), 600, step_s=2.0, seed=5)
    assert np.array_equal(same.available_bytes, tr.available_bytes)


def test_memory_trace_errors():
    with pytest.raises(DataError):
        MemoryTrace.from_json("not json")
    with pytest.raises(DataError, match="format"):
        MemoryTrace.from_json('{"a": 1}')
    tr = memory_trace(get_device("pixel-6"), 20, seed=0)
    bad = tr.to_json().replace('"available_bytes": [', '"available_bytes": [-5, ')
    with pytest.raises(DataError):
        MemoryTrace.from_json(bad)
    with pytest.raises(ConfigError):
        memory_trace(get_device("pixel-6"), 0)


def test_reclaim_pages_by_hand():
    p = get_device("pixel-2-xl")  # zram: alpha = 2
    tr = memory_trace(p, 60, seed=0)
    assert not reclaim_pages(tr, p, 0).any()
    safe = tr.available_bytes - 2 * p.low_watermark_bytes
    footprint = int(safe.max()) + 10 * 4096
    pages = reclaim_pages(tr, p, footprint)
    assert pages.min() >= 10
    i = int(np.argmax(safe))
    assert pages[i] == 10
    assert pages[int(np.argmin(safe))] == np.ceil((footprint - safe.min()) / 4096)
    with pytest.raises(ConfigError):
        reclaim_pages(tr, p, -1)
