"""Energy and battery arithmetic on hand-computed cases."""

from __future__ import annotations

import dataclasses

import pytest

from edgetrain.devices import Battery, battery_drain, energy_j, get_device, transfer_time_s
from edgetrain.errors import ConfigError


def test_energy_by_hand_wifi():
    p = get_device("pixel-2-xl")  # 3.0 W compute, 0.25 W idle, Wi-Fi 100 Mbit/s 1.2/0.9 W
    e = energy_j(p, compute_s=10, tx_bytes=1_000_000, rx_bytes=1_000_000, idle_s=100)
    # 10*3.0 + 100*0.25 + (8e6/100e6)*1.2 + (8e6/100e6)*0.9
    assert e == pytest.approx(30 + 25 + 0.096 + 0.072)


def test_energy_by_hand_bluetooth():
    p = get_device("oneplus-6")
    e = energy_j(p, tx_bytes=2_100_000 / 8, rx_bytes=2_100_000 / 8, link="bluetooth")
    assert e == pytest.approx(1.0 * 0.10 + 1.0 * 0.10)  # one second each way at 0.1 W
    assert transfer_time_s(p, 46.4e6, "bluetooth") == pytest.approx(46.4e6 * 8 / 2.1e6)
    assert transfer_time_s(p, 46.4e6, "wifi_direct") < transfer_time_s(p, 46.4e6, "wifi")


def test_energy_errors():
    p = get_device("pixel-6")
    with pytest.raises(ConfigError, match="unknown link"):
        energy_j(p, tx_bytes=1, link="lora")
    with pytest.raises(ConfigError, match="compute_s"):
        energy_j(p, compute_s=-1)
    no_bt = dataclasses.replace(p, bluetooth_bps=None)
    with pytest.raises(ConfigError, match="no 'bluetooth' link"):
        energy_j(no_bt, tx_bytes=1, link="bluetooth")


def test_battery_drain_by_hand():
    p = get_device("galaxy-s22")  # 3.85 V
    assert battery_drain(p, 3.6 * 3.85) == pytest.approx(1.0)
    assert battery_drain(p, p.battery_energy_j) == pytest.approx(p.battery_mah)
    with pytest.raises(ConfigError):
        battery_drain(p, -1.0)


def test_battery_tracks_level():
    p = get_device("honor-8")  # 3000 mAh
    b = Battery(p)
    assert b.percent == 100.0
    drawn = b.drain(3.6 * 3.85 * 300)  # 300 mAh
    assert drawn == pytest.approx(300.0)
    assert b.level_mah == pytest.approx(2700.0) and b.percent == pytest.approx(90.0)
    assert b.charge(1000.0) == pytest.approx(300.0)  # capped at capacity
    assert b.level_mah == pytest.approx(3000.0)
    mah = b.spend(compute_s=3600.0)  # one hour at 3.0 W = 10800 J
    assert mah == pytest.approx(10800 / (3.6 * 3.85))
    assert b.drain(1e9) == pytest.approx(b.capacity_mah - mah)  # cannot go below empty
    assert b.empty and b.level_mah == 0.0
    assert b.consumed_mah == pytest.approx(3300.0)
    with pytest.raises(ConfigError):
        Battery(p, level_mah=4000.0)
