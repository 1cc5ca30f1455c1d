"""Ray executor: same metrics as in-process, actor death handled as a lost device."""

from __future__ import annotations

import pytest
import torch

from edgetrain import data
from edgetrain.decentralized.faults import Fault
from edgetrain.decentralized.trainer import ChainConfig, build_fleet, run_chain

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def ray_session():
    torch.set_num_threads(1)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _cfg(**kw):
    base = dict(
        devices=3, scheduler="ring", epochs=3, batch_size=16, data="synthetic", setting="per-person"
    )
    base.update(kw)
    return ChainConfig(**base)


@pytest.fixture(scope="module")
def tiny():
    return data.synthetic_sensor(240, channels=3, length=32, classes=3, seed=0, subjects=3)


def test_ray_matches_inprocess_and_survives_actor_death(ray_session, tiny):
    from edgetrain.decentralized.ray_executor import RayExecutor

    cfg = _cfg()
    fleet = build_fleet(cfg, tiny)
    kw = {"in_channels": 3, "length": 32, "num_classes": 3, "seed": 0}
    ex = RayExecutor.start(fleet.parts, "lenet", kw, cfg.lr, cfg.momentum)
    try:
        local = run_chain(cfg, dataset=tiny)
        remote = run_chain(cfg, dataset=tiny, executor=ex)
        strip = lambda es: [{k: v for k, v in e.items() if k != "wall_s"} for e in es]  # noqa: E731
        assert strip(local.epochs) == strip(remote.epochs)
        for k, v in local.final_state.items():
            assert torch.equal(v, remote.final_state[k])

        # fault injection: device 1's actor is killed at iteration 1 and restarted at 2
        fault_cfg = _cfg(faults=[Fault(1, 1, 2)])
        faulty = run_chain(fault_cfg, dataset=tiny, executor=ex)
        # the same fault handled in-process gives the same run (the issue's "within 1
        # point of fault-free" is checked in-process in test_decentralized_trainer.py)
        assert strip(faulty.epochs) == strip(run_chain(fault_cfg, dataset=tiny).epochs)
        events = [ev for e in faulty.epochs for ev in e["events"]]
        assert {"event": "lost", "device": 1, "iteration": 1} in events
        assert any(ev["event"] == "rejoin" and ev["device"] == 1 for ev in events)
        assert faulty.epochs[1]["schedule"] == [[[0, 2]]]
        assert all(e["sum_theta_ok"] for e in faulty.epochs)

        # an actor that dies unannounced is skipped by train() (actor death = fault)
        ex.kill(2)
        state = {k: v.clone() for k, v in local.final_state.items()}
        seen = ex.train([0, 1, 2], state, {d: [torch.arange(4)] for d in range(3)})
        assert set(seen) == {0, 1}
    finally:
        ex.shutdown()
