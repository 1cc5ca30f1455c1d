"""ChainSGD == CentralSGD mean for any valid chain schedule; NeighborSGD is not."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from edgetrain.decentralized.aggregation import (
    CentralSGD,
    ChainSGD,
    Message,
    NeighborSGD,
    make_aggregator,
    pair_aggregate,
    pair_sum,
    to_wire,
)
from edgetrain.decentralized.resources import DeviceStatus
from edgetrain.decentralized.schedule import Pair, Schedule
from edgetrain.decentralized.schedulers import RingScheduler, TreeScheduler
from edgetrain.errors import ConfigError


@st.composite
def chain_schedules(draw, max_n: int = 9):
    """Any valid chain reduce: repeatedly pick a live sender and a live receiver."""
    n = draw(st.integers(2, max_n))
    alive = list(range(n))
    pairs = []
    while len(alive) > 1:
        s = draw(st.sampled_from(alive))
        r = draw(st.sampled_from([a for a in alive if a != s]))
        pairs.append((s, r))
        alive.remove(s)
    return Schedule.of(range(n), pairs)


def _deltas(n: int, seed: int) -> dict[int, dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return {
        d: {
            "w": torch.randn(3, 4, generator=g, dtype=torch.float64),
            "b": torch.randn(4, generator=g, dtype=torch.float64),
        }
        for d in range(n)
    }


@settings(max_examples=60, deadline=None)
@given(chain_schedules(), st.integers(0, 2**16))
def test_chain_equals_central_mean_and_theta_conserved(schedule, seed):
    deltas = _deltas(len(schedule.devices), seed)
    chain = ChainSGD().reduce(deltas, schedule)
    central = CentralSGD().reduce(deltas, schedule)
    for k in deltas[0]:
        torch.testing.assert_close(chain.aggregate[k], central.aggregate[k], rtol=1e-10, atol=1e-12)
    assert chain.theta == len(schedule.devices)
    assert max(chain.peak_copies.values()) <= 2
    assert central.peak_copies[central.root] == len(schedule.devices)


@settings(max_examples=40, deadline=None)
@given(chain_schedules(), st.integers(0, 2**16))
def test_neighbor_differs_from_mean_beyond_two_devices(schedule, seed):
    n = len(schedule.devices)
    deltas = _deltas(n, seed)
    neigh = NeighborSGD().reduce(deltas, schedule)
    central = CentralSGD().reduce(deltas, schedule)
    close = torch.allclose(neigh.aggregate["w"], central.aggregate["w"], atol=1e-9)
    # In NeighborSGD every pair halves both sides, so device d ends with weight
    # 2^-(number of pairs its contribution went through); equal to 1/n only when
    # every contribution went through log2(n) pairs.
    depth = dict.fromkeys(schedule.devices, 0)
    holds = {d: {d} for d in schedule.devices}
    for p in schedule.pairs:
        holds[p.receiver] |= holds.pop(p.sender)
        for d in holds[p.receiver]:
            depth[d] += 1
    if len(set(depth.values())) == 1:
        assert close
    else:
        assert not close


def test_pair_aggregate_weights_by_theta():
    a = Message({"x": torch.tensor([0.0])}, 3.0)
    b = Message({"x": torch.tensor([4.0])}, 1.0)
    out = pair_aggregate(a, b)
    assert out.theta == 4.0
    assert out.delta["x"].item() == pytest.approx(1.0)


def test_schedule_validation_errors():
    with pytest.raises(ConfigError, match="already sent"):
        Schedule.of(range(3), [(0, 1), (0, 2)])
    with pytest.raises(ConfigError, match="needs 2 pairs"):
        Schedule.of(range(3), [(0, 1)])
    with pytest.raises(ConfigError, match="itself"):
        Schedule.of(range(2), [(1, 1)])
    with pytest.raises(ConfigError, match="unknown aggregation"):
        make_aggregator("mean")


def test_ring_and_tree_shapes():
    st9 = [DeviceStatus(d) for d in range(9)]
    ring = RingScheduler().schedule(st9)
    tree = TreeScheduler().schedule(st9)
    assert len(ring.rounds()) == 8 and max(ring.receive_counts().values()) == 1
    assert len(tree.rounds()) == 4 and tree.root == 0
    assert tree.receive_counts()[0] == 4
    assert Schedule.of(range(4), [Pair(1, 0), Pair(3, 2), Pair(2, 0)]).rounds() == [
        [Pair(1, 0), Pair(3, 2)],
        [Pair(2, 0)],
    ]


@st.composite
def busy_draws(draw, max_n: int = 9):
    """A fleet of 2..max_n devices, any subset busy, and a random valid chain schedule."""
    n = draw(st.integers(2, max_n))
    busy = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    statuses = [DeviceStatus(d, in_use=b) for d, b in enumerate(busy)]
    return statuses, draw(chain_schedules(max_n=n).filter(lambda s: len(s.devices) == n))


@settings(max_examples=40, deadline=None)
@given(busy_draws(), st.floats(0.0, 200.0))
def test_earliest_pair_is_latency_optimal(draw, busy_s):
    """Golumbic's greedy merge: no valid chain schedule (Tree, Ring or any other)
    finishes the reduce (eq. 5) earlier under the simulated clock."""
    from edgetrain.decentralized.costs import link_time_s, simulate_iteration
    from edgetrain.decentralized.schedulers import EarliestPairScheduler
    from edgetrain.devices import phones

    statuses, other = draw
    n = len(statuses)
    ph = phones("mdldroid")
    prof = {d: ph[d % 3] for d in range(n)}
    flops = dict.fromkeys(range(n), 2e9)
    train_s = {d: flops[d] / prof[d].compute_flops for d in range(n)}
    c = link_time_s(ph[0], ph[0], 400_000, "bluetooth")

    def eq5(s):
        return simulate_iteration(
            s, statuses, prof, flops, 100_000, 400_000, busy_s=busy_s
        ).eq5_time_s

    best = eq5(EarliestPairScheduler(busy_s, c, train_s).schedule(statuses))
    for s in (other, TreeScheduler().schedule(statuses), RingScheduler().schedule(statuses)):
        # 1 ms slack: the greedy ignores the (sub-ms) aggregation compute at receivers
        assert best <= eq5(s) + 1e-3


def test_earliest_pair_puts_busy_devices_last_and_checks_inputs():
    from edgetrain.decentralized.schedulers import EarliestPairScheduler

    st_ = [DeviceStatus(0, in_use=True), DeviceStatus(1), DeviceStatus(2), DeviceStatus(3)]
    s = EarliestPairScheduler(busy_s=100.0, transfer_s=1.0).schedule(st_)
    # the busy device joins only in the last pair, after the free ones reduced in 2 rounds
    assert 0 in (s.pairs[-1].sender, s.pairs[-1].receiver)
    assert 0 not in {d for p in s.pairs[:-1] for d in (p.sender, p.receiver)}
    with pytest.raises(ConfigError):
        EarliestPairScheduler(busy_s=-1.0, transfer_s=1.0)


def _deltas32(n: int, seed: int) -> dict[int, dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return {d: {"w": torch.randn(64, generator=g) * 1e-3} for d in range(n)}


def _ties32(n: int, seed: int) -> dict[int, dict[str, torch.Tensor]]:
    """float32 deltas on a coarse grid (integers × 2^-30): with N a power of two their
    exact mean is often a float32 round-half tie, the hardest case for bit-equality."""
    g = torch.Generator().manual_seed(seed)
    ints = torch.randint(-(2**24), 2**24, (n, 64), generator=g, dtype=torch.int64)
    return {d: {"w": (ints[d].double() * 2.0**-30).float()} for d in range(n)}


@settings(max_examples=60, deadline=None, derandomize=True)
@given(chain_schedules(), st.integers(0, 2**16), st.booleans())
def test_float64_wire_equals_central_to_the_last_bit(schedule, seed, ties):
    """float32 deltas, any chain schedule: float64 messages carrying θ-weighted sums make
    the chain's aggregate equal the float64-accumulated central mean bit for bit, round-
    half ties included; float32 messages round once per pair and stay within N ulps."""
    n = len(schedule.devices)
    deltas = _ties32(n, seed) if ties else _deltas32(n, seed)
    central = CentralSGD().reduce(deltas, schedule).aggregate["w"]
    exact = ChainSGD("float64").reduce(deltas, schedule)
    got = exact.aggregate["w"]
    assert got.dtype == torch.float32
    assert torch.equal(got, central)
    assert exact.theta == n
    f32 = ChainSGD("float32").reduce(deltas, schedule).aggregate["w"]
    ulp = torch.finfo(torch.float32).eps * central.abs().max()
    assert (f32 - central).abs().max() <= n * ulp


def test_float64_sums_fix_the_ties_float64_means_missed():
    """Round 5 carried the float64 *mean* W along the chain: at N = 8 its divisions by
    2…8 move an exact round-half tie by ~1e-16 and the element rounds the other way.
    Carrying θ·W and dividing once at the root does not (same data, same ring)."""
    g = torch.Generator().manual_seed(0)
    deltas = {d: {"w": torch.randn(4096, generator=g) * 1e-3} for d in range(8)}
    ring = RingScheduler().schedule([DeviceStatus(d) for d in range(8)])
    central = CentralSGD().reduce(deltas, ring).aggregate["w"]
    held = {d: Message(to_wire(deltas[d], torch.float64), 1.0) for d in range(8)}
    for p in ring.pairs:
        held[p.receiver] = pair_aggregate(held[p.receiver], held.pop(p.sender))
    means = held[ring.root].delta["w"].float()
    assert int((means != central).sum()) == 8  # the old float64 wire: 8 of 4,096 lost
    assert torch.equal(ChainSGD("float64").reduce(deltas, ring).aggregate["w"], central)
    summed = held[ring.root]
    assert summed.theta == 8.0 and pair_sum(Message({"w": torch.ones(4096)}, 2), summed).theta == 10


def test_wire_precision_is_checked_and_central_control_differs_only_by_rounding():
    with pytest.raises(ConfigError, match="wire precision 'float16'"):
        make_aggregator("chain", wire="float16")
    assert make_aggregator("neighbor", wire="float64").dtype == torch.float64
    deltas = _deltas32(7, 3)
    sched = RingScheduler().schedule([DeviceStatus(d) for d in range(7)])
    ref = CentralSGD().reduce(deltas, sched).aggregate["w"]
    ctl = CentralSGD("float32").reduce(deltas, sched).aggregate["w"]
    torch.testing.assert_close(ctl, ref, rtol=1e-6, atol=1e-9)
