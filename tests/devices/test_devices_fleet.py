"""Fleet generator: FedHybrid's memory mix, compute spread, determinism, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgetrain.devices import (
    FEDHYBRID_MEMORY_MIX,
    generate_fleet,
    get_device,
    kernel_watermarks,
    memory_shares,
)
from edgetrain.errors import ConfigError

GIB = 1024**3


@pytest.mark.parametrize("seed", [0, 7])
def test_memory_mix_within_two_points_over_10000(seed):
    fleet = generate_fleet(10_000, seed=seed)
    shares = memory_shares(fleet)
    assert set(shares) == {4.0, 6.0, 8.0, 12.0, 16.0}
    for gb, target in FEDHYBRID_MEMORY_MIX.items():
        assert abs(shares[float(gb)] - target) <= 0.02, (gb, shares[float(gb)], target)


def test_fleet_is_deterministic_and_named():
    a = generate_fleet(50, seed=3)
    b = generate_fleet(50, seed=3)
    c = generate_fleet(50, seed=4)
    assert a == b
    assert a != c
    assert a[0].name == "fleet-00000" and a[-1].name == "fleet-00049"
    assert all(p.catalogue == "fleet" for p in a)


def test_device_fields_follow_memory_class():
    fleet = generate_fleet(2_000, seed=1)
    for p in fleet:
        gb = round(p.memory_gb)
        assert p.device_class == f"phone-{gb}GB"
        assert p.low_watermark_bytes == kernel_watermarks(p.memory_bytes).high_bytes
    sixteen = [p for p in fleet if p.memory_gb == 16]
    assert sixteen and all(p.sources["template"] == "oneplus-10-pro" for p in sixteen)
    six = [p for p in fleet if p.memory_gb == 6]
    assert all(p.sources["template"] == "redmi-note-10" for p in six)


def test_compute_spread():
    flat = generate_fleet(200, seed=2, compute_spread=0.0)
    for p in flat:
        assert p.compute_flops == get_device(p.sources["template"]).compute_flops
    spread = generate_fleet(4_000, seed=2, compute_spread=0.35)
    logs = np.array(
        [
            math.log(p.compute_flops / get_device(p.sources["template"]).compute_flops)
            for p in spread
        ]
    )
    assert abs(logs.mean()) < 0.03
    assert logs.std() == pytest.approx(0.35, rel=0.05)


def test_bad_arguments():
    with pytest.raises(ConfigError, match="sum to 1"):
        generate_fleet(10, memory_mix={4: 0.5, 8: 0.4})
    with pytest.raises(ConfigError, match="empty"):
        generate_fleet(10, memory_mix={})
    with pytest.raises(ConfigError):
        generate_fleet(10, memory_mix={-4: 1.0})
    with pytest.raises(ConfigError):
        generate_fleet(-1)
    with pytest.raises(ConfigError):
        generate_fleet(10, compute_spread=-0.1)
    assert generate_fleet(0) == []


@settings(max_examples=25, deadline=None)
@given(
    weights=st.lists(st.integers(1, 10), min_size=1, max_size=4),
    seed=st.integers(0, 2**31),
    n=st.integers(0, 60),
)
def test_custom_mix_only_yields_its_sizes(weights, seed, n):
    sizes = [2, 3, 6, 24][: len(weights)]
    total = sum(weights)
    mix = {gb: w / total for gb, w in zip(sizes, weights, strict=True)}
    fleet = generate_fleet(n, seed=seed, memory_mix=mix)
    assert len(fleet) == n
    assert {round(p.memory_gb) for p in fleet} <= set(sizes)
    assert all(p.compute_flops > 0 for p in fleet)
