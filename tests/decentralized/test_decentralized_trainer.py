"""In-process decentralized training: real accuracy, Σθ, faults, determinism, report."""

from __future__ import annotations

import json

import pytest
import torch

from edgetrain import data
from edgetrain.decentralized.broadcast import binomial_broadcast, broadcast_rounds
from edgetrain.decentralized.costs import energy_variance, link_time_s, simulate_iteration
from edgetrain.decentralized.faults import DeviceCache, Fault
from edgetrain.decentralized.resources import DeviceStatus
from edgetrain.decentralized.schedulers import RingScheduler, TreeScheduler
from edgetrain.decentralized.trainer import ChainConfig, run_chain
from edgetrain.devices import phones
from edgetrain.errors import ConfigError
from edgetrain.runs import RunDir


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    return data.synthetic_sensor(
        480, channels=3, length=32, classes=3, seed=0, subjects=4, noise=0.3
    )


def _cfg(**kw):
    base = dict(
        devices=4,
        scheduler="ring",
        epochs=3,
        batch_size=16,
        lr=0.1,
        data="synthetic",
        setting="per-person",
        first_episodes=20,
        relearn_episodes=5,
    )
    base.update(kw)
    return ChainConfig(**base)


def test_chain_matches_central_and_beats_neighbor_memory(tiny):
    chain = run_chain(_cfg(aggregation="chain"), dataset=tiny)
    central = run_chain(_cfg(aggregation="central"), dataset=tiny)
    for k, v in chain.final_state.items():
        torch.testing.assert_close(v, central.final_state[k], rtol=1e-4, atol=1e-5)
    assert abs(chain.accuracy - central.accuracy) <= 1.0
    assert chain.peak_model_copies == 2 and central.peak_model_copies == 4
    assert all(e["sum_theta_ok"] for e in chain.epochs)
    assert chain.accuracy > 60.0  # 3 classes: well above chance after 3 epochs


def test_float64_wire_run_is_bit_identical_to_central_and_sends_twice_the_bytes(tiny):
    """float64 messages: the trajectory equals Central's bit for bit (no rounding to
    amplify); the reduce transfers carry 8 bytes per parameter, so the clock is slower."""
    exact = run_chain(_cfg(aggregation="chain", wire="float64", busy="none"), dataset=tiny)
    f32 = run_chain(_cfg(aggregation="chain", busy="none"), dataset=tiny)
    central = run_chain(_cfg(aggregation="central", busy="none"), dataset=tiny)
    for k, v in exact.final_state.items():
        assert v.dtype == central.final_state[k].dtype
        assert torch.equal(v, central.final_state[k]), k
    assert exact.accuracy == central.accuracy
    assert exact.sim_time_s > 1.5 * f32.sim_time_s
    with pytest.raises(ConfigError, match="wire 'float16'"):
        _cfg(wire="float16").check()


def test_same_seed_same_metrics(tiny):
    a = run_chain(_cfg(scheduler="chain", epochs=2), dataset=tiny)
    b = run_chain(_cfg(scheduler="chain", epochs=2), dataset=tiny)
    strip = lambda es: [{k: v for k, v in e.items() if k != "wall_s"} for e in es]  # noqa: E731
    assert strip(a.epochs) == strip(b.epochs)


def test_aggregations_per_epoch_cut_one_epoch_of_local_steps(tiny):
    """k aggregations per epoch cut each device's epoch of batches into k segments and
    restart from the aggregate after each; nothing else changes. With one device the
    aggregate is the device's own model, so k = 1 and k = 3 must walk the same SGD
    trajectory (plain SGD: no optimiser state for an aggregation to reset): a segment that
    re-ran the whole epoch, trained from a stale global model or lost a batch, or an
    evaluation taken before the epoch's last aggregation, would part the two runs."""
    one = run_chain(_cfg(devices=1, aggs_per_epoch=1, busy="none"), dataset=tiny)
    three = run_chain(_cfg(devices=1, aggs_per_epoch=3, busy="none"), dataset=tiny)
    for k, v in one.final_state.items():
        torch.testing.assert_close(three.final_state[k], v, rtol=0, atol=1e-6)
    assert [e["loss"] for e in three.epochs] == pytest.approx(
        [e["loss"] for e in one.epochs], abs=1e-5
    )
    assert [len(e["schedule"]) for e in three.epochs] == [3, 3, 3]
    # with four devices the k = 3 run aggregates three times an epoch and lands elsewhere
    four1 = run_chain(_cfg(aggs_per_epoch=1, busy="none"), dataset=tiny)
    four3 = run_chain(_cfg(aggs_per_epoch=3, busy="none"), dataset=tiny)
    w = "classifier.weight"
    assert not torch.allclose(four1.final_state[w], four3.final_state[w], atol=1e-4)


def test_more_aggregations_than_batches_is_refused(tiny):
    """A device with fewer batches per epoch than aggregations would train nothing in
    some segments and send a zero delta (seen with one person's windows spread over four
    devices: 3 batches each, 10 aggregations per epoch)."""
    cfg = _cfg(devices=4, setting="individual", batch_size=16, aggs_per_epoch=10)
    with pytest.raises(ConfigError, match="exceeds the 2 batches"):
        run_chain(cfg, dataset=tiny)
    run_chain(_cfg(devices=4, setting="individual", aggs_per_epoch=2, epochs=1), dataset=tiny)


def test_fault_kill_and_rejoin(tiny, tmp_path):
    clean = run_chain(_cfg(epochs=4), dataset=tiny)
    rd = RunDir.create("fault", tmp_path)
    faulty = run_chain(_cfg(epochs=4, faults=[Fault(2, 1, 3)]), run_dir=rd, dataset=tiny)
    events = [ev for e in faulty.epochs for ev in e["events"]]
    assert {"event": "lost", "device": 2, "iteration": 1} in events
    rejoin = next(ev for ev in events if ev["event"] == "rejoin")
    assert (
        rejoin["device"] == 2 and rejoin["last_iteration"] == 1 and rejoin["current_iteration"] == 3
    )
    assert faulty.epochs[1]["schedule"][0] and all(
        2 not in p for p in faulty.epochs[1]["schedule"][0]
    )
    assert all(e["sum_theta_ok"] for e in faulty.epochs)
    assert abs(faulty.accuracy - clean.accuracy) <= 1.0
    cache = DeviceCache(rd.path / "cache")
    assert cache.record(2)["iteration"] == 4
    assert set(cache.params(2)) == set(faulty.final_state)
    lines = (rd.path / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 4 and "accuracy" in json.loads(lines[0])
    assert (rd.path / "model.safetensors").exists()
    assert "data:image/png;base64," in (rd.path / "report.html").read_text()


def test_fault_parse_and_config_errors():
    assert Fault.parse("2@3:5") == Fault(2, 3, 5)
    assert Fault.parse("1@2") == Fault(1, 2, None)
    with pytest.raises(ConfigError, match="DEVICE@LOST"):
        Fault.parse("two")
    with pytest.raises(ConfigError, match="scheduler"):
        ChainConfig(scheduler="star").check()
    with pytest.raises(ConfigError, match="per-person"):
        run_chain(
            ChainConfig(devices=7, setting="per-person"),
            dataset=data.synthetic_sensor(60, 3, 32, 3, subjects=3),
        )


def test_broadcast_is_log_rounds_and_resource_aware():
    st = [DeviceStatus(d, battery_frac=0.1 * (d + 1), in_use=(d == 8)) for d in range(9)]
    rounds = binomial_broadcast(0, st)
    assert len(rounds) == broadcast_rounds(9) == 4
    reached = {p.receiver for r in rounds for p in r}
    assert reached == set(range(1, 9))
    assert rounds[0][0].receiver == 7  # richest free device first; busy 8 goes last
    assert rounds[-1][-1].receiver == 8


def test_cost_model_tree_faster_ring_balanced():
    ph = phones("mdldroid")
    n = 8
    st = [DeviceStatus(d) for d in range(n)]
    prof = {d: ph[d % 3] for d in range(n)}
    fl = dict.fromkeys(range(n), 1e9)
    ring = simulate_iteration(RingScheduler().schedule(st), st, prof, fl, 10_000, 40_000)
    tree = simulate_iteration(TreeScheduler().schedule(st), st, prof, fl, 10_000, 40_000)
    assert tree.time_s < ring.time_s
    assert ring.energy_variance < tree.energy_variance
    assert tree.broadcast_rounds == 3 and tree.reduce_rounds == 3 and ring.reduce_rounds == 7
    # a busy device delays a ring by the busy time
    st_b = [DeviceStatus(d, in_use=d == 1) for d in range(n)]
    ring_b = simulate_iteration(
        RingScheduler().schedule(st_b), st_b, prof, fl, 10_000, 40_000, busy_s=50.0
    )
    assert ring_b.time_s > ring.time_s + 40.0
    assert energy_variance({0: 1.0, 1: 3.0}) == 1.0


def test_ring_is_a_synchronous_collective_and_f_is_eq5_minus_training():
    """Ring-Allreduce starts when its last member is ready: with one busy device its
    scheduler latency f is T_b + T_a (eq. 5's no-overlap worst case); the pipelined
    ring-order chain overlaps the busy time with the transfers ahead of it."""
    ph = phones("mdldroid")
    n, busy = 6, 50.0
    prof = {d: ph[0] for d in range(n)}
    fl = dict.fromkeys(range(n), 1e9)
    st = [DeviceStatus(d, in_use=d == 3) for d in range(n)]
    args = (st, prof, fl, 10_000, 40_000)
    sync = simulate_iteration(RingScheduler().schedule(st), *args, busy_s=busy)
    pipe = simulate_iteration(RingScheduler(synchronous=False).schedule(st), *args, busy_s=busy)
    free = simulate_iteration(RingScheduler().schedule(st), *args, busy_s=0.0)
    t_tr = 1e9 / ph[0].compute_flops
    assert sync.train_time_s == pytest.approx(t_tr)
    assert sync.sched_latency_s == pytest.approx(sync.eq5_time_s - t_tr)
    t_a = free.sched_latency_s  # N-1 sequential transfers + aggregations
    assert sync.sched_latency_s == pytest.approx(busy + t_a)
    c = link_time_s(ph[0], ph[0], 40_000, "bluetooth")
    # in the pipelined ring pairs 0->1 and 1->2 run while device 3 is busy: 2 of the
    # N-1 = 5 pair steps (transfer + aggregation) are hidden
    assert pipe.sched_latency_s == pytest.approx(busy + t_a * 3 / 5, rel=1e-9)
    assert t_a == pytest.approx(5 * c, rel=0.05)
    assert sync.energy_j == pipe.energy_j  # the same transfers, only later
    tree = simulate_iteration(TreeScheduler().schedule(st), *args, busy_s=busy)
    assert tree.sched_latency_s < sync.sched_latency_s


def test_reduce_bytes_are_what_the_reduce_sends():
    ph = phones("mdldroid")
    n = 4
    st = [DeviceStatus(d) for d in range(n)]
    prof = {d: ph[0] for d in range(n)}
    fl = dict.fromkeys(range(n), 1e9)
    sched = RingScheduler().schedule(st)
    one = simulate_iteration(sched, st, prof, fl, 10_000, 40_000)
    two = simulate_iteration(sched, st, prof, fl, 10_000, 40_000, reduce_bytes=80_000)
    # device 1 receives one reduce message and sends one; the broadcast stays 40 kB
    assert two.rx_bytes[1] - one.rx_bytes[1] == 40_000
    assert sum(two.tx_bytes.values()) - sum(one.tx_bytes.values()) == (n - 1) * 40_000
    c = link_time_s(ph[0], ph[0], 40_000, "bluetooth")
    assert two.eq5_time_s - one.eq5_time_s == pytest.approx((n - 1) * c)


def test_device_actor_body_sends_and_holds_the_wire_precision(tiny):
    """The Ray actor body (a plain class) sends float64 messages when asked, keeps the
    partial aggregate in float64 and equals the in-process ChainSGD."""
    from edgetrain.decentralized.aggregation import ChainSGD, mean_of_sum
    from edgetrain.decentralized.ray_executor import _Device, from_bytes, to_bytes
    from edgetrain.decentralized.schedule import Schedule
    from edgetrain.decentralized.trainer import build_fleet
    from edgetrain.models import build

    cfg = _cfg(devices=3)
    fleet = build_fleet(cfg, tiny)
    kw = {"in_channels": 3, "length": 32, "num_classes": 3, "seed": 0}
    glob = build("lenet", **kw).state_dict()
    devs = [_Device(d, *fleet.parts[d], "lenet", kw, 0.1, 0.0) for d in range(3)]
    for d in devs:
        d.train(to_bytes(glob, 1.0), [torch.arange(8)])
    deltas = {d.device: dict(d.msg.delta) for d in devs}
    blob = devs[0].message("float64")
    assert all(v.dtype == torch.float64 for v in from_bytes(blob).delta.values())
    devs[1].receive(blob, True, "float64")
    devs[2].receive(devs[1].message("float64"), True, "float64")
    got = from_bytes(devs[2].message("float64"))
    assert got.theta == 3.0
    ref = ChainSGD("float64").reduce(deltas, Schedule.of(range(3), [(0, 1), (1, 2)]))
    mean = mean_of_sum(got)  # the float64 wire carries θ·W; the MA divides once
    for k, v in ref.aggregate.items():
        assert torch.equal(mean[k].to(v.dtype), v), k
        # the message holds the sum of the three deltas, not their mean
        torch.testing.assert_close(got.delta[k], sum(deltas[d][k].double() for d in range(3)))
