"""Every valid schedule, per-device energy by part, and eq. 6 vs eq. 7 at N = 3."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgetrain import devices
from edgetrain.decentralized.costs import (
    ENERGY_PARTS,
    REDUCE_PARTS,
    energy_variance,
    simulate_iteration,
)
from edgetrain.decentralized.env import ChainSchedulingEnv, RewardConfig, replay_return
from edgetrain.decentralized.resources import DeviceStatus, random_statuses
from edgetrain.decentralized.schedule import Schedule, all_schedules
from edgetrain.errors import ConfigError

PHONES = devices.phones("mdldroid")
N_PARAMS = 50_000


def _fleet(n: int):
    prof = {d: PHONES[d % len(PHONES)] for d in range(n)}
    flops = dict.fromkeys(range(n), 1e9)
    return prof, flops


def _run(sched: Schedule, statuses, n: int, link: str = "bluetooth"):
    prof, flops = _fleet(n)
    return simulate_iteration(sched, statuses, prof, flops, N_PARAMS, 4 * N_PARAMS, "chain", link)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_all_schedules_counts_every_valid_reduce_once(n):
    every = list(all_schedules(range(n)))
    assert len(every) == math.factorial(n) * math.factorial(max(n - 1, 0))
    assert len({s.pairs for s in every}) == len(every)  # no duplicates
    # each is a valid reduce (Schedule validates on construction) with N-1 pairs
    assert all(len(s.pairs) == n - 1 for s in every)


def test_all_schedules_rejects_repeated_devices():
    with pytest.raises(ConfigError, match="distinct"):
        list(all_schedules([0, 0, 1]))


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 5), pick=st.integers(0, 10**6), seed=st.integers(0, 10_000))
def test_energy_parts_sum_to_the_device_energy(n, pick, seed):
    every = list(all_schedules(range(n)))
    sched = every[pick % len(every)]
    statuses = random_statuses(n, np.random.default_rng(seed), 0.5)
    cost = _run(sched, statuses, n)
    for d in range(n):
        parts = cost.energy_parts[d]
        assert set(parts) == set(ENERGY_PARTS)
        assert all(v >= 0 for v in parts.values())
        assert sum(parts.values()) == pytest.approx(cost.energy_j[d], rel=1e-12)
        assert sum(v for k, v in parts.items() if k != "train") == pytest.approx(
            cost.agg_energy_j[d], rel=1e-12
        )
    # the reduce parts are exactly the schedule's pairs: sender tx, receiver rx + eq. 3
    prof, _ = _fleet(n)
    want = {d: dict.fromkeys(REDUCE_PARTS, 0.0) for d in range(n)}
    for p in sched.pairs:
        dt = (
            8
            * 4
            * N_PARAMS
            / min(prof[p.sender].link_bps("bluetooth"), prof[p.receiver].link_bps("bluetooth"))
        )
        want[p.sender]["reduce_tx"] += prof[p.sender].link_power("bluetooth")[0] * dt
        want[p.receiver]["reduce_rx"] += prof[p.receiver].link_power("bluetooth")[1] * dt
        want[p.receiver]["aggregate"] += (
            prof[p.receiver].power_compute_w * 4 * N_PARAMS / prof[p.receiver].compute_flops
        )
    for d in range(n):
        for k in REDUCE_PARTS:
            assert cost.energy_parts[d][k] == pytest.approx(want[d][k], rel=1e-9, abs=1e-15)
    assert cost.part_variance(list(ENERGY_PARTS[1:])) == pytest.approx(cost.energy_variance)


def test_part_variance_names_unknown_parts():
    cost = _run(next(iter(all_schedules(range(3)))), [DeviceStatus(d) for d in range(3)], 3)
    with pytest.raises(ConfigError, match="unknown energy parts"):
        cost.part_variance(["radio"])


def test_n3_eq7_best_return_ties_schedules_of_both_variance_levels():
    """The N = 3 diagnosis, pinned: every valid schedule spends the same reduce energy
    up to the (tiny) aggregation compute, so eq. 6's variance is set by the broadcast's
    forwarders (the resource ranking of §3.2.3); eq. 7's best return is shared by
    schedules at the least variance and by schedules four times above it."""
    statuses = [
        DeviceStatus(0, battery_frac=0.9),
        DeviceStatus(1, battery_frac=0.5),
        DeviceStatus(2, battery_frac=0.7),
    ]
    every = list(all_schedules(range(3)))
    costs = [_run(s, statuses, 3) for s in every]
    reduce_radio = {
        tuple(
            sorted(
                round(c.energy_parts[d]["reduce_tx"] + c.energy_parts[d]["reduce_rx"], 9)
                for d in range(3)
            )
        )
        for c in costs
    }
    assert len(reduce_radio) == 1  # one multiset of reduce transfer energies
    reduce_var = [c.part_variance(REDUCE_PARTS) for c in costs]
    assert max(reduce_var) - min(reduce_var) < 5e-3 * min(reduce_var)  # aggregation only
    full = [c.energy_variance for c in costs]
    levels = sorted({round(v, 6) for v in full})
    assert len(levels) >= 2 and levels[-1] > 3.5 * levels[0]
    env = ChainSchedulingEnv(3, statuses, reward=RewardConfig())
    rets = [replay_return(env, s) for s in every]
    best = max(rets)
    tied = [v for v, r in zip(full, rets, strict=True) if r >= best - 1e-9]
    assert len(tied) >= 2
    assert min(tied) == pytest.approx(min(full))
    assert max(tied) > 3.5 * min(full)

    # 2 reduce + 2 broadcast transfers = 8 transfer ends: the least variance splits them
    # (3, 3, 2) over the devices, the high level (4, 2, 2)
    def ends(c):
        return sorted((c.tx_bytes[d] + c.rx_bytes[d]) // (4 * N_PARAMS) for d in range(3))

    assert ends(costs[int(np.argmin(full))]) == [2, 3, 3]
    assert ends(costs[int(np.argmax(full))]) == [2, 2, 4]
    assert energy_variance({0: 1.0, 1: 3.0}) == 1.0
