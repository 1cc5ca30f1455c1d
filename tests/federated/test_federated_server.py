"""The round loop: resume == uninterrupted, dropouts, deadlines, memory outcomes, configs."""

import os
import re
from pathlib import Path

import pytest
import torch

from edgetrain.config import parse_config
from edgetrain.errors import ConfigError
from edgetrain.federated import FederatedConfig, FederatedServer, build_environment
from edgetrain.federated.server import make_plan_service
from edgetrain.runs import RunDir, load_state, read_metadata, save_state
from fed_small import small_fleet_config

_cfg = small_fleet_config


@pytest.fixture(scope="module")
def env():
    return build_environment(_cfg())


@pytest.fixture(scope="module")
def plans(env):
    return make_plan_service(env)


def _strip(recs):
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in recs]


@pytest.mark.parametrize(("method", "agg"), [("fedhybrid", "fedyogi"), ("oort", "fedprox")])
def test_resume_equals_uninterrupted(env, plans, tmp_path, method, agg):
    full = FederatedServer(env, method, agg, RunDir.create("a", tmp_path), plans).run(4)
    rd = RunDir.create("b", tmp_path)
    FederatedServer(env, method, agg, rd, plans).run(4, stop_after=2)  # "killed" after round 2
    resumed = FederatedServer(env, method, agg, rd, plans)
    assert resumed.resume() and resumed.round == 2
    recs = resumed.run(4)
    assert _strip(recs) == _strip(full)
    assert [m["round"] for m in rd.metrics()] == [1, 2, 3, 4]
    assert (rd.path / "checkpoint" / "global.safetensors").exists()
    with pytest.raises(ConfigError, match="checkpoint"):
        FederatedServer(env, "random", agg, rd, plans).resume()


class _Crash(Exception):
    """Stands for the process dying at this point of the checkpoint write."""


def _crash_at(monkeypatch, server, point):
    """Make ``server``'s round-2 checkpoint die at ``point``: ("replace", k) before the k-th
    atomic rename of that checkpoint (its temp file written, the rename not done),
    "after-metrics" once round 2's metrics line is written, "after-commit" right after the
    checkpoint file is in place. Returns the list the renames of round 2 are recorded in."""
    import edgetrain.federated.server as srv_mod

    real_replace, renamed = os.replace, []

    def replace(src, dst, **kw):
        if server.round == 2 and Path(dst).is_relative_to(server.run_dir.path):
            if point == ("replace", len(renamed)):
                raise _Crash(f"before renaming to {dst}")
            renamed.append(Path(dst).name)
        return real_replace(src, dst, **kw)

    monkeypatch.setattr(os, "replace", replace)
    log = RunDir.log_metrics

    def log_then_crash(self, rec):
        log(self, rec)
        if point == "after-metrics" and rec["round"] == 2:
            raise _Crash("after the metrics line")

    monkeypatch.setattr(RunDir, "log_metrics", log_then_crash)
    note = srv_mod.note_checkpoint

    def note_then_crash(path, what):
        note(path, what)
        if point == "after-commit" and server.round == 2:
            raise _Crash("after the commit")

    monkeypatch.setattr(srv_mod, "note_checkpoint", note_then_crash)
    return renamed


def test_a_crash_at_any_point_of_the_checkpoint_write_resumes_to_the_same_metrics(
    env, plans, tmp_path, monkeypatch
):
    method, agg = "fedhybrid", "fedyogi"  # plans.json and the aggregator's tensors are saved
    full = _strip(FederatedServer(env, method, agg, RunDir.create("full", tmp_path), plans).run(3))
    # the renames of one round's checkpoint, in order: the commit (global.safetensors) last
    with monkeypatch.context() as m:
        probe = FederatedServer(env, method, agg, RunDir.create("probe", tmp_path), plans)
        order = _crash_at(m, probe, None)
        probe.run(3)
    assert order[-1] == "global.safetensors" and "model.safetensors" in order, order
    points = ["after-metrics", *[("replace", k) for k in range(len(order))], "after-commit"]
    for i, point in enumerate(points):
        rd = RunDir.create(f"crash{i}", tmp_path)
        with monkeypatch.context() as m:
            dying = FederatedServer(env, method, agg, rd, plans)
            _crash_at(m, dying, point)
            with pytest.raises(_Crash):
                dying.run(3)
        committed = point == "after-commit"
        resumed = FederatedServer(env, method, agg, rd, plans)
        assert resumed.resume() and resumed.round == (2 if committed else 1), point
        assert _strip(resumed.run(3)) == full, point
        assert [m["round"] for m in rd.metrics()] == [1, 2, 3], point


def test_a_run_directory_of_the_earlier_two_file_checkpoint_still_resumes(env, plans, tmp_path):
    """Before, the round state was checkpoint/state.json next to global.safetensors (which
    held only the tensors and {"round": N}); such a run directory is still continued."""
    full = _strip(
        FederatedServer(env, "oort", "fedprox", RunDir.create("a", tmp_path), plans).run(3)
    )
    rd = RunDir.create("b", tmp_path)
    FederatedServer(env, "oort", "fedprox", rd, plans).run(3, stop_after=2)
    ck = rd.path / "checkpoint"
    meta = read_metadata(ck / "global.safetensors")
    (ck / "state.json").write_text(meta["state"])  # the earlier layout
    save_state(ck / "global.safetensors", load_state(ck / "global.safetensors"), {"round": "2"})
    resumed = FederatedServer(env, "oort", "fedprox", rd, plans)
    assert resumed.resume() and resumed.round == 2
    assert _strip(resumed.run(3)) == full
    # the next checkpoint is written the new way and the stale state.json is gone
    assert not (ck / "state.json").exists()
    assert '"round": 3' in read_metadata(ck / "global.safetensors")["state"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("not json", "plans.json is not valid JSON"),
        ('{"strategy": "hybrid"}', "plans.json is not a JSON list of planner results"),
        ('[{"strategy": "hybrid"}]', "row 0 lacks fraction, feasible, overhead_factor"),
        (
            '[{"strategy": "hybrid", "fraction": "x", "feasible": true, "overhead_factor": 1}]',
            "row 0 has a non-numeric fraction or overhead_factor",
        ),
        (
            '[{"strategy": "hybrid", "fraction": 0.5, "feasible": true, "overhead_factor": 1,'
            ' "micro_batches": "two"}]',
            "a planner result could not be read (ValueError",
        ),
    ],
)
def test_a_damaged_plans_json_is_refused_by_the_server_itself(env, tmp_path, text, expected):
    """Called from Python (not the command), the server checks the run's plans.json where it
    reads it: one RunDirError naming the file; the plan service and the file unchanged."""
    from edgetrain.errors import RunDirError

    service = make_plan_service(env)
    before = dict(service.table)
    rd = RunDir.create("r", tmp_path)
    (rd.path / "plans.json").write_text(text)
    with pytest.raises(RunDirError, match=re.escape(expected)):
        FederatedServer(env, "fedhybrid", "fedavg", rd, service)
    assert service.table == before
    assert (rd.path / "plans.json").read_text() == text


def test_outcomes_follow_memory(env, plans):
    rnd = FederatedServer(env, "random", "fedavg", None, plans)
    fh = FederatedServer(env, "fedhybrid-noselector", "fedavg", None, plans)
    rescued = 0
    for cid in range(len(env.fleet)):
        a, b = rnd._client_round(1, cid), fh._client_round(1, cid)
        # without a plan the demand is M_G: killed above physical memory, else it trains
        if env.m_g > env.hard_limits[cid]:
            assert a.outcome == "killed" and a.cost is None
        else:
            assert a.outcome in ("fit", "pressure", "late") and a.cost is not None
            # the default deadline is 2 x the slowest check-in estimate of the fleet: only
            # a client slowed down by page reclaim can miss it
            assert (a.outcome == "late") == (a.cost.total_s > rnd.deadline_s)
            assert a.outcome != "late" or a.pressure > 1.0
        if b.plan is not None and b.plan.feasible:
            demand = b.plan.fraction * env.m_g
            assert b.outcome == ("killed" if demand > env.hard_limits[cid] else b.outcome)
            if demand <= env.hard_limits[cid]:
                assert b.outcome in ("planned", "pressure")
                rescued += a.outcome == "killed"
    assert rescued > 0  # plans let clients train that physical memory kills otherwise
    rec = rnd.run(3)
    fhr = fh.run(3)
    for a, b in zip(rec, fhr, strict=True):
        assert a["selected"] == b["selected"]  # same random selections
        assert b["n_aggregated"] >= a["n_aggregated"]
    for r in rec + fhr:
        # over-commitment 1.3 (FedScale's default): int(1.3 x 4) = 5 selected, <= 4 aggregated
        assert sum(r["outcomes"].values()) == r["n_selected"] == 5
        assert sum(v["selected"] for v in r["participation"].values()) == 5
        assert r["n_aggregated"] == min(4, r["n_reported"])
        assert r["n_surplus"] == r["n_reported"] - r["n_aggregated"]
        assert r["accuracy"] is not None and 0 <= r["accuracy"] <= 1
        assert r["energy_j"] > 0 and r["sim_time_s"] > 0
        assert {"regenerations", "regenerations_total", "page_faults"} <= set(r)
        assert 0 <= r["planned_aggregated"] <= min(r["n_aggregated"], r["outcomes"]["planned"]
                                                    + r["outcomes"]["pressure"])  # fmt: skip
    assert all(r["planned_aggregated"] == 0 for r in rec)  # Random + no technique: no plans


def test_regeneration_rule_fires_mid_round_and_is_counted(env, plans, monkeypatch):
    """A budget that collapses mid-round: FedHybrid regenerates, the ablation does not."""
    import numpy as np

    from edgetrain.federated import server as srv
    from edgetrain.sim.round_memory import BudgetTrace, ClientMemoryState

    cid = next(c for c in range(len(env.fleet)) if env.m_g < env.hard_limits[c])
    b0 = 0.8 * env.m_g
    trace = np.array([b0] * 10 + [0.3 * env.m_g] * 4000)  # collapses as the round starts

    def fake_trace(mm, p, ub, seed, warmup_s, horizon_s):
        return BudgetTrace(trace, np.ones_like(trace), 10)

    monkeypatch.setattr(srv, "budget_trace", fake_trace)
    out = {}
    for method in ("fedhybrid", "fedhybrid-nopredictor"):
        s = FederatedServer(env, method, "fedavg", None, plans)
        s.deadline_s = None  # the memory mechanism is under test, not the deadline
        s.client_mem[cid] = ClientMemoryState(window_s=2.0, faults=[0], static_budget=b0)
        out[method] = (s._client_round(1, cid), s.client_mem[cid])
    c, st = out["fedhybrid"]
    assert c.regenerated and st.regenerations == 1 and st.window_s == pytest.approx(1.8)
    assert c.plan.fraction < 0.8  # the new plan is for the collapsed budget
    # lmkd killed it more than TP2 = 3 times: the rule regenerates before the round
    s = FederatedServer(env, "fedhybrid", "fedavg", None, plans)
    s.client_mem[cid] = ClientMemoryState(window_s=2.0, kills=4)
    k = s._client_round(1, cid)
    assert k.regenerated and s.client_mem[cid].kills == 0
    assert s.client_mem[cid].window_s == pytest.approx(1.8)
    n, nst = out["fedhybrid-nopredictor"]
    assert not n.regenerated and nst.regenerations == 0
    assert n.outcome == "pressure" and n.cost.total_s > c.cost.total_s
    assert n.pages > c.pages


def test_without_optimizer_clients_plan_on_device(env, plans):
    cid = next(
        c for c in range(len(env.fleet))
        if env.budgets[c] < env.m_g and 0.5 * env.m_g < env.hard_limits[c]
    )  # fmt: skip
    srv = FederatedServer(env, "fedhybrid-nocompress", "fedavg", None, plans)
    own = FederatedServer(env, "fedhybrid-nooptimizer", "fedavg", None, plans)
    a, b = srv._client_round(1, cid), own._client_round(1, cid)
    assert a.plan.strategy == "recompute"
    assert b.plan.strategy == "melon"  # Melon's plan generation (FedHybrid §5.4)
    # the server's plan is for a 5% bucket, the client's own for its exact budget (0.1%)
    assert round(a.plan.fraction / 0.1, 6) % 1 == 0 or a.plan.fraction == 1.0
    assert b.plan.fraction >= a.plan.fraction
    assert b.plan.plan_s > 0
    if b.cost is not None and a.cost is not None and b.plan.fraction == a.plan.fraction:
        assert b.cost.compute_s > a.cost.compute_s  # it paid 9x the planner time on device


def test_dropouts_and_deadline_still_complete_rounds(plans):
    env = build_environment(_cfg(federated={"dropout": 0.9, "rounds": 3}))
    recs = FederatedServer(env, "random", "fedavg", None, plans).run(3)
    assert sum(r["outcomes"]["dropped"] for r in recs) >= 6
    assert len(recs) == 3 and all(r["accuracy"] is not None for r in recs)
    env2 = build_environment(_cfg(federated={"deadline_s": 1e-3}))
    recs2 = FederatedServer(env2, "random", "fedavg", None, plans).run(2)
    for r in recs2:
        assert r["n_aggregated"] == 0 and r["outcomes"]["late"] > 0
        assert r["round_time_s"] == pytest.approx(1e-3)


def test_config_errors_name_the_field():
    with pytest.raises(ConfigError, match="federated.method"):
        parse_config({"federated": {"method": "fastest"}}, schema=FederatedConfig)
    with pytest.raises(ConfigError, match="m_g"):
        build_environment(_cfg(memory={"m_g": "lots"}))
    with pytest.raises(ConfigError, match="width_mult"):
        FederatedServer(build_environment(_cfg()), "heterofl")


def test_heterofl_trains_width_scaled_submodels():
    cfg = parse_config(
        {
            "seed": 1,
            "model": {
                "name": "mobilenetv2",
                "options": {"width_mult": 0.25, "in_channels": 1, "input_size": 8},
            },
            "data": {"name": "digits", "reshape": None, "max_samples": 200},
            "fleet": {"clients": 8},
            "federated": {"rounds": 1, "clients_per_round": 6, "local_steps": 1, "batch_size": 4},
            "clock": {"flops_per_sample": 6e8, "model_bytes": 1.36e7},
        },
        schema=FederatedConfig,
    )
    env = build_environment(cfg)
    server = FederatedServer(env, "heterofl")
    before = {k: v.clone() for k, v in server.global_state.items()}
    rec = server.run_round()
    assert rec["outcomes"]["submodel"] > 0 and rec["outcomes"]["pressure"] == 0
    assert rec["n_aggregated"] == 6
    small = server._build_width(0.5).state_dict()
    changed = 0
    for k, g in server.global_state.items():
        assert g.shape == before[k].shape  # the global model keeps its full width
        if g.is_floating_point() and small[k].shape != g.shape:
            changed += int(not torch.equal(g, before[k]))
    assert changed > 0


def _cr(cid, outcome, total=None):
    from edgetrain.federated.server import ClientRound
    from edgetrain.sim.clock import ClientCost

    cost = None if total is None else ClientCost(0.0, float(total), 0.0, 0.0, 1.0)
    return ClientRound(cid, outcome, 1.0, 1.0, 1.0, cost, None)


def test_round_closes_at_kth_report_or_at_the_deadline(env, plans):
    """Round semantics, hand-computed: k reports close the round (FedScale's top-k
    completion); a killed client is only known at the deadline (Bonawitz et al. 2019)."""
    from dataclasses import replace

    srv = FederatedServer(env, "random", "fedavg", None, plans)
    srv.deadline_s = 50.0
    rounds = [_cr(0, "fit", 9), _cr(1, "pressure", 3), _cr(2, "killed"), _cr(3, "planned", 5)]
    rep = sorted((c for c in rounds if c.cost is not None), key=lambda c: c.cost.total_s)
    assert srv._round_time(rounds, rep, 2) == 5.0  # 2nd report (3, 5, 9) closes it
    assert srv._round_time(rounds, rep, 3) == 9.0
    assert srv._round_time(rounds, rep, 4) == 50.0  # 3 of 4: the killed one at the deadline
    old = FederatedServer(
        replace(env, config=_cfg(federated={"failure_report": "immediate", "overcommit": 1.0})),
        "random", "fedavg", None, plans,
    )  # fmt: skip
    assert old.deadline_s is None  # no deadline configured, none implied
    assert old._round_time(rounds, rep, 4) == 9.0  # told of the kill at once: slowest report
    old.deadline_s = 50.0
    late = rounds + [_cr(4, "late", 70)]
    assert old._round_time(late, rep, 5) == 50.0
    ok = [_cr(0, "fit", 4), _cr(1, "fit", 6)]
    assert srv._round_time(ok, ok, 3) == 6.0  # fewer selected than k, nobody failed


def test_overcommit_and_deadline_in_rounds(env, plans):
    from dataclasses import replace

    srv = FederatedServer(env, "random", "fedavg", None, plans)
    # default deadline: 2 x the slowest check-in estimate of the fleet
    assert srv.deadline_s == pytest.approx(2.0 * float(env.est_duration_s().max()))
    recs = srv.run(3)
    for r in recs:
        assert r["n_selected"] == 5 and r["n_aggregated"] <= 4
        if r["n_reported"] < 4:  # a client did not report: the round ran to the deadline
            assert r["round_time_s"] == pytest.approx(srv.deadline_s)
        else:
            assert r["round_time_s"] <= srv.deadline_s
    one = FederatedServer(
        replace(env, config=_cfg(federated={"overcommit": 1.0})), "random", "fedavg", None, plans
    )
    assert all(r["n_selected"] == 4 for r in one.run(2))


def test_records_hold_predictions_and_the_aggregated_label_mix(env, plans):
    srv = FederatedServer(env, "fedhybrid", "fedyogi", None, plans)
    ran: list[list[int]] = []
    run = srv.executor.run

    def spy(state, tasks):
        ran.append([t.cid for t in tasks])
        return run(state, tasks)

    srv.executor.run = spy
    y = env.train.y
    for rec, cids in zip(srv.run(3), ran, strict=True):
        # the histogram is the global model's predictions on the whole test split
        assert sum(rec["pred_hist"]) == len(env.test.y)
        lab = rec["aggregated_labels"]
        assert len(lab) == int(max(int(y.max()), int(env.test.y.max()))) + 1
        idx = torch.as_tensor([i for c in cids for i in env.parts[c]], dtype=torch.long)
        assert lab == torch.bincount(y[idx], minlength=len(lab)).tolist()
        assert sum(lab) == sum(int(env.n_samples[c]) for c in cids)
    model = env.build_model()
    model.load_state_dict(srv.global_state)
    model.eval()
    with torch.no_grad():
        pred = model(env.test.x).argmax(1)
    assert rec["pred_hist"] == torch.bincount(pred, minlength=len(rec["pred_hist"])).tolist()
    assert rec["accuracy"] == pytest.approx(float((pred == env.test.y).float().mean()))


def test_progress_reports_each_plan_bucket_and_each_round(env, plans):
    events = []
    srv = FederatedServer(env, "fedhybrid", "fedavg", None, plans, progress=events.append)
    made = [e for e in events if e["event"] == "plans"]
    # bucket 0.1: buckets 0.1 .. 0.9 planned (or found done), reported from 0 of 9 to 9 of 9
    assert [(e["strategy"], e["done"], e["total"]) for e in made] == [
        ("hybrid", j, 9) for j in range(10)
    ]
    assert all(e["method"] == "fedhybrid" for e in made)
    recs = srv.run(2)
    rounds = [e for e in events if e["event"] == "round"]
    assert [(e["round"], e["rounds"]) for e in rounds] == [(1, 2), (2, 2)]
    assert [(e["accuracy"], e["sim_time_s"]) for e in rounds] == [
        (r["accuracy"], r["sim_time_s"]) for r in recs
    ]
    srv.run_round()  # outside run(): no total to report
    assert events[-1]["round"] == 3 and events[-1]["rounds"] is None
    quiet = FederatedServer(env, "random", "fedavg", None, plans)  # no callback: no events
    quiet.run(1)
    assert len(events) == len(made) + 3


def test_a_client_whose_last_batch_batchnorm_cannot_train_is_named_before_round_one(monkeypatch):
    env = build_environment(_cfg())
    shape = tuple(env.train.x.shape[1:])
    flat = int(torch.tensor(shape).prod())

    def flat_bn_model():
        return torch.nn.Sequential(
            torch.nn.Flatten(), torch.nn.Linear(flat, 8), torch.nn.BatchNorm1d(8),
            torch.nn.ReLU(), torch.nn.Linear(8, 10),
        )  # fmt: skip

    monkeypatch.setattr(env, "build_model", flat_bn_model)
    from edgetrain.engine.trainer import draws_one_sample_batch

    steps, batch, _ = env.local_work(0)
    env.n_samples[0] = batch + 1  # its second step draws the one left over
    assert steps >= 2
    tails = [c for c, n in enumerate(env.n_samples) if draws_one_sample_batch(int(n), batch, steps)]
    with pytest.raises(ConfigError, match=r"leaves a batch of one sample on") as info:
        FederatedServer(env, "random", "fedavg")
    assert f"({', '.join(map(str, tails))}" in str(info.value)
    # with every holder's tail out of reach the same model is accepted
    env.n_samples[:] = 4 * batch
    FederatedServer(env, "random", "fedavg")
