"""The simulated clock and memory model: calibration points and hand-computed costs."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgetrain.devices import energy_j, generate_fleet, transfer_time_s
from edgetrain.errors import ConfigError
from edgetrain.sim import MemoryModel, client_cost, pressure_factor
from edgetrain.sim.clock import PRESSURE_RUNNING_SHARE, TRAIN_FLOPS_PER_FORWARD


def test_pressure_factor_calibration_points():
    # fits -> 1; demand = 2 x budget (FedHybrid §2: batch 32 vs 16 on the 8 GB S22) -> 6.1
    assert pressure_factor(4e9, 5e9) == 1.0
    assert pressure_factor(10e9, 5e9) == pytest.approx(6.1)
    assert pressure_factor(7.5e9, 5e9) == pytest.approx(1 + 5.1 * 0.5)
    assert pressure_factor(50e9, 5e9) == pytest.approx(6.1)  # capped; the LMK decides beyond


@given(st.floats(1e6, 1e11), st.floats(1e6, 1e11))
def test_pressure_factor_bounds(d, m):
    f = pressure_factor(d, m)
    assert 1.0 <= f <= 6.1 + 1e-12
    assert (f == 1.0) == (d <= m)


def test_client_cost_hand_computed():
    dev = generate_fleet(1, seed=3)[0]
    c = client_cost(dev, samples=160, flops_per_sample=3e8, model_bytes=1.4e7,
                    overhead_factor=1.25, pressure=2.0)  # fmt: skip
    base = 160 * 3e8 * TRAIN_FLOPS_PER_FORWARD / dev.compute_flops
    assert c.compute_s == pytest.approx(base * 1.25 * 2.0)
    assert c.penalty_s == pytest.approx(base * 1.25)
    assert c.download_s == pytest.approx(transfer_time_s(dev, 1.4e7))
    assert c.total_s == pytest.approx(c.download_s + c.compute_s + c.upload_s)
    want = energy_j(
        dev,
        compute_s=base * 1.25 + PRESSURE_RUNNING_SHARE * base * 1.25,
        idle_s=(1 - PRESSURE_RUNNING_SHARE) * base * 1.25,
        tx_bytes=1.4e7,
        rx_bytes=1.4e7,
    )
    assert c.energy_j == pytest.approx(want)
    with pytest.raises(ConfigError):
        client_cost(dev, samples=1, flops_per_sample=1, model_bytes=1, overhead_factor=0.5)


def test_a_truncated_cost_pays_setup_and_transfers_whole_and_a_share_of_training():
    dev = generate_fleet(1, seed=3)[0]
    c = client_cost(dev, samples=160, flops_per_sample=3e8, model_bytes=1.4e7,
                    overhead_factor=1.25, pressure=2.0, extra_compute_s=7.0)  # fmt: skip
    assert c.setup_s == 7.0
    # the training energy is the compute + page-reclaim part, without set-up or radio
    radio = energy_j(dev, tx_bytes=1.4e7, rx_bytes=1.4e7)
    setup = energy_j(dev, compute_s=7.0)
    assert c.train_energy_j == pytest.approx(c.energy_j - radio - setup)
    full = c.truncated(1.0)
    assert full.total_s == pytest.approx(c.total_s) and full.energy_j == pytest.approx(c.energy_j)
    q = c.truncated(0.25)
    assert q.compute_s == pytest.approx(7.0 + 0.25 * (c.compute_s - 7.0))
    assert q.penalty_s == pytest.approx(0.25 * c.penalty_s)
    assert (q.download_s, q.upload_s) == (c.download_s, c.upload_s)
    assert q.energy_j == pytest.approx(radio + setup + 0.25 * c.train_energy_j)
    none = c.truncated(0.0)
    assert none.compute_s == pytest.approx(7.0) and none.energy_j == pytest.approx(radio + setup)
    with pytest.raises(ConfigError, match=r"share must be in \[0, 1\]"):
        c.truncated(1.5)


def test_memory_model_orders_devices_and_kills_only_above_hard_limit():
    fleet = generate_fleet(200, seed=0)
    mm = MemoryModel()
    by_gb: dict[float, float] = {}
    for p in fleet:
        b, h = mm.expected_budget(p), mm.hard_limit(p)
        assert 0 < b < p.memory_bytes
        assert h > b  # evicting cached apps makes physical memory larger than the budget
        assert h < p.memory_bytes  # the kill limit is physical memory: swap does not raise it
        by_gb[p.memory_gb] = b
    gbs = sorted(by_gb)
    assert all(by_gb[a] < by_gb[b] for a, b in zip(gbs, gbs[1:], strict=False))
    rng = np.random.default_rng(0)
    reads = [mm.measured_budget(fleet[0], rng) for _ in range(400)]
    # the instantaneous reading scatters around the predictor's smoothed budget
    assert np.std(reads) > 0
    assert abs(np.median(reads) - mm.expected_budget(fleet[0])) < 0.1 * mm.expected_budget(fleet[0])
    assert math.isfinite(max(reads))


def test_user_budgets_vary_within_a_class_and_readings_scatter_around_them():
    p = generate_fleet(1, seed=1)[0]
    mm = MemoryModel()
    users = [mm.user_budget(p, np.random.default_rng([0, i])) for i in range(50)]
    assert np.std(users) > 0 and all(0 < u < p.memory_bytes for u in users)
    assert mm.user_budget(p, np.random.default_rng([0, 3])) == users[3]  # seeded per user
    rng = np.random.default_rng(5)
    reads = [mm.measured_budget(p, rng, mean=users[0]) for _ in range(300)]
    assert abs(np.median(reads) - users[0]) < 0.1 * users[0]
