"""MDLdroid's busy rule over the five reported quantities."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgetrain.devices import (
    BusyThresholds,
    ResourceState,
    busy_reasons,
    generate_fleet,
    is_busy,
    random_resource_states,
)
from edgetrain.errors import ConfigError

GIB = 1024**3


def _state(**kw):
    base = {
        "free_memory_bytes": 2 * GIB,
        "memory_bytes": 8 * GIB,
        "battery_pct": 80.0,
        "in_use": False,
        "charging": False,
        "cpu_load": 0.2,
    }
    base.update(kw)
    return ResourceState(**base)


def test_busy_reasons():
    assert not is_busy(_state())
    assert busy_reasons(_state(in_use=True)) == ["in_use"]
    assert busy_reasons(_state(cpu_load=0.9)) == ["cpu"]
    assert busy_reasons(_state(free_memory_bytes=GIB // 2)) == ["memory"]  # 6.25% < 10%
    assert busy_reasons(_state(battery_pct=10.0)) == ["battery"]
    assert not is_busy(_state(battery_pct=10.0, charging=True))  # charging lifts the battery rule
    strict = BusyThresholds(min_free_memory_frac=0.3)
    assert is_busy(_state(), strict)  # 25% free < 30%
    assert _state().features() == pytest.approx([0.25, 0.8, 0.0, 0.0, 0.2])


def test_state_validation():
    with pytest.raises(ConfigError):
        _state(free_memory_bytes=9 * GIB)
    with pytest.raises(ConfigError):
        _state(battery_pct=101.0)
    with pytest.raises(ConfigError):
        _state(cpu_load=1.5)


_FLEET = generate_fleet(40, seed=0)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 40),
    share=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**31),
)
def test_random_states_respect_busy_cap(n, share, seed):
    states = random_resource_states(_FLEET[:n], max_busy_share=share, seed=seed)
    assert len(states) == n
    assert sum(is_busy(s) for s in states) <= int(share * n)


def test_random_states_errors_and_determinism():
    with pytest.raises(ConfigError):
        random_resource_states(_FLEET, max_busy_share=1.5)
    assert random_resource_states(_FLEET, seed=5) == random_resource_states(_FLEET, seed=5)
