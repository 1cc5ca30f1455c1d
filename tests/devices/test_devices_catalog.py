"""Catalogue values against the papers' tables, SoC targets, lookups and serialisation."""

from __future__ import annotations

import json

import pytest

from edgetrain.devices import (
    PULP,
    STM32,
    DeviceProfile,
    catalog,
    get_device,
    get_target,
    kernel_watermarks,
    peak_cpu_flops,
    phones,
    soc_targets,
)
from edgetrain.errors import ConfigError, EdgetrainError

GIB = 1024**3


@pytest.mark.parametrize(
    ("name", "ram_gb", "soc", "battery"),
    [
        # MDLdroid Table 2 (RAM, CPU, Battery mAh)
        ("oneplus-6", 8, "Snapdragon 845", 3300),
        ("pixel-2-xl", 4, "Snapdragon 835", 3520),
        ("honor-8", 4, "HiSilicon Kirin 950", 3000),
    ],
)
def test_mdldroid_table2(name, ram_gb, soc, battery):
    p = get_device(name)
    assert p.memory_bytes == ram_gb * GIB
    assert p.soc == soc
    assert p.battery_mah == battery
    assert p.catalogue == "mdldroid"
    assert p.sources["battery_mah"] == "MDLdroid Table 2"


@pytest.mark.parametrize(
    ("name", "ram_gb", "soc"),
    [
        # FedHybrid Table 2 (Mem, SoC)
        ("galaxy-s23-ultra", 8, "Snapdragon 8 Gen 2"),
        ("galaxy-s22", 8, "Snapdragon 8 Gen 1"),
        ("oneplus-10-pro", 12, "Snapdragon 8 Gen 1"),
        ("pixel-6", 8, "Google Tensor"),
        ("redmi-note-10", 6, "Snapdragon 678"),
        ("honor-v30-pro", 8, "Kirin 990"),
        ("realme-gt-neo-2", 8, "Snapdragon 870"),
    ],
)
def test_fedhybrid_table2(name, ram_gb, soc):
    p = get_device(name)
    assert p.memory_bytes == ram_gb * GIB
    assert p.soc == soc
    assert p.catalogue == "fedhybrid"
    assert p.swap_kind == "zram"  # FedHybrid §5.2
    assert p.sources["battery_mah"].startswith("derived")


def test_profiles_and_targets_are_hashable():
    assert len(set(phones()) | set(phones("mdldroid"))) == 10
    assert len({PULP, STM32, get_target("pulp")}) == 2


def test_catalogue_selection_and_errors():
    assert [p.name for p in phones("mdldroid")] == ["oneplus-6", "pixel-2-xl", "honor-8"]
    assert len(phones("fedhybrid")) == 7
    assert len(phones()) == 10
    with pytest.raises(ConfigError, match="mdldroid"):
        phones("carat")


def test_unknown_device_lists_names():
    with pytest.raises(ConfigError) as exc:
        get_device("nokia-3310")
    assert "nokia-3310" in str(exc.value) and "pixel-2-xl" in str(exc.value)
    assert isinstance(exc.value, EdgetrainError)
    assert get_device("Pixel 2 XL") is get_device("PIXEL-2-XL")


def test_compute_derivation_by_hand():
    # Pixel 2 XL, Snapdragon 835: 4 x A73 @ 2.45 GHz x 16 + 4 x A53 @ 1.9 GHz x 4 FLOP/cycle
    peak = 4 * 2.45e9 * 16 + 4 * 1.9e9 * 4
    assert peak_cpu_flops(((4, 2.45, "A73"), (4, 1.9, "A53"))) == pytest.approx(peak)
    assert get_device("pixel-2-xl").compute_flops == pytest.approx(0.10 * peak)
    # S22 and OnePlus 10 Pro share a SoC: FedHybrid Fig. 2(a) "comparable computation capability"
    assert get_device("galaxy-s22").compute_flops == get_device("oneplus-10-pro").compute_flops
    # every phone lands in Das et al.'s 10-35 GFLOP/s range for CPU training
    for p in phones():
        assert 10e9 <= p.compute_flops <= 35e9, p.name
    with pytest.raises(ConfigError, match="core type"):
        peak_cpu_flops(((1, 1.0, "M1"),))


def test_every_profile_cites_its_numbers():
    keys = [
        "memory_bytes",
        "compute_flops",
        "link_bandwidth_bps",
        "battery_mah",
        "swap_kind",
        "low_watermark_bytes",
        "power_compute_w",
        "power_idle_w",
        "power_tx_w",
        "power_rx_w",
    ]
    for p in phones():
        for k in keys:
            assert p.sources.get(k), (p.name, k)
        assert p.sources["compute_flops"].startswith("derived")


def test_kernel_watermarks_by_hand():
    # 4 GiB = 4194304 KiB: min = sqrt(16 * 4194304) = 8192 KiB; gap = max(2048, 4194) KiB
    w = kernel_watermarks(4 * GIB)
    assert w.min_bytes == 8192 * 1024
    assert w.low_bytes == (8192 + 4194) * 1024
    assert w.high_bytes == (8192 + 2 * 4194) * 1024
    assert get_device("pixel-2-xl").low_watermark_bytes == w.high_bytes
    # tiny RAM clamps min_free_kbytes at 128 KiB
    assert kernel_watermarks(1024 * 1024).min_bytes == 128 * 1024
    with pytest.raises(ConfigError):
        kernel_watermarks(0)


def test_safe_memory_uses_swap_alpha():
    p = get_device("pixel-6")  # zram: alpha = 2 (FedHybrid §4.4.2)
    assert p.safe_memory(1 * GIB) == 1 * GIB - 2 * p.low_watermark_bytes
    assert p.safe_memory(0) == 0.0


def test_pulp_target_matches_traindeeploy():
    t = get_target("pulp")
    assert t is PULP
    assert [x.name for x in t.tiers] == ["L1", "L2", "L3"]
    assert t.tier("l1").capacity_bytes == 128 * 1024
    assert t.tier("L2").capacity_bytes == 2 * 1024**2
    assert t.tier("L3").capacity_bytes == 32 * 1024**2
    assert (t.cores, t.fpus, t.freq_hz, t.gemm_array) == (8, 4, 360e6, (12, 4))
    assert t.core_peak_flops == pytest.approx(4 * 2 * 360e6)
    assert t.gemm_peak_flops == pytest.approx(12 * 4 * 2 * 360e6)
    caps = [x.capacity_bytes for x in t.tiers]
    assert caps == sorted(caps)
    bws = [x.bandwidth_bytes_per_cycle for x in t.tiers]
    assert bws == sorted(bws, reverse=True)
    assert set(t.dma_bytes_per_cycle) == {"l3_l2", "l2_l1"}
    with pytest.raises(ConfigError, match="L1"):
        t.tier("L4")


def test_stm32_target():
    t = get_target("STM32")
    assert t is STM32
    # TrainDeeploy Table II (TTE on STM32F7): 320 KB SRAM + 1 MB Flash
    assert t.tier("L1").capacity_bytes + t.tier("L2").capacity_bytes == 320 * 1024
    assert t.tier("L3").capacity_bytes == 1024**2 and not t.tier("L3").writable
    assert t.gemm_array is None and t.gemm_peak_flops == 0.0
    assert [s.name for s in soc_targets()] == ["pulp", "stm32"]
    with pytest.raises(ConfigError, match="pulp"):
        get_target("gap9")


def test_catalog_rows_are_json():
    rows = catalog()
    assert [r["kind"] for r in rows].count("phone") == 10
    assert [r["kind"] for r in rows].count("soc") == 2
    for r in rows:
        for k in ("name", "kind", "memory_bytes", "compute_flops", "battery_mah"):
            assert k in r
    back = json.loads(json.dumps(rows))
    assert back[0]["name"] == "oneplus-6" and back[0]["memory_bytes"] == 8 * GIB
    assert len({r["name"] for r in rows}) == len(rows)


def test_profile_round_trip_and_validation():
    p = get_device("oneplus-6")
    back = DeviceProfile.from_dict(json.loads(json.dumps(p.to_dict())))
    assert back == p
    with pytest.raises(ConfigError, match="unknown DeviceProfile fields"):
        DeviceProfile.from_dict({**p.to_dict(), "colour": "red"})
    bad = p.to_dict()
    bad["swap_kind"] = "floppy"
    with pytest.raises(ConfigError, match="swap_kind"):
        DeviceProfile.from_dict(bad)
    bad = p.to_dict()
    bad["memory_bytes"] = 0
    with pytest.raises(ConfigError, match="memory_bytes"):
        DeviceProfile.from_dict(bad)
