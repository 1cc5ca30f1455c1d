"""benchmarks/plan_speed.py: plans of a saved profile timed, the simulator's calls counted."""

from __future__ import annotations

import hashlib
import json

import torch
from torch import nn

from bench_loader import load_benchmark
from edgetrain.engine.budget import plan, profile_model
from edgetrain.engine.budget.profile_io import save_profile
from edgetrain.engine.budget.runner import codecs_for


def _saved_profile(path):
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64),
        nn.Tanh(), nn.Linear(64, 3),
    )  # fmt: skip
    x, y = torch.randn(32, 16), torch.randint(0, 3, (32,))
    prof = profile_model(
        model, (x,), lambda out: nn.functional.cross_entropy(out, y),
        codecs=codecs_for("hybrid"), alloc_timeline=True, repeats=1, in_situ_steps=2,
    )  # fmt: skip
    save_profile(path, prof, {"test": "plan_speed"})
    return prof


def test_plan_speed_on_a_saved_profile(tmp_path, capsys):
    path = tmp_path / "p.json"
    prof = _saved_profile(path)
    mod = load_benchmark("plan_speed")
    argv = ["--profile", str(path), "--budgets", "0.7,0.01", "--json"]
    assert mod.main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {(r["scope"], r["budget"]): r for r in out["rows"]}
    assert set(rows) == {("saved", 0.7), ("all", 0.7), ("saved", 0.01), ("all", 0.01)}
    ok = rows[("saved", 0.7)]
    assert ok["sim_calls"] > 0 and ok["sim_us"] > 0 and ok["plan_s"] > 0
    # the digest is the plan's JSON: the same plan as planning the profile here
    want = plan(prof, int(0.7 * prof.total_saved_bytes), "hybrid")
    assert ok["decisions"] == {k: v for k, v in want.decision_counts().items() if v}
    text = json.dumps(want.to_json(), sort_keys=True)
    assert ok["digest"] == hashlib.sha256(text.encode()).hexdigest()[:12]
    assert "below what method 'hybrid' can reach" in rows[("saved", 0.01)]["infeasible"]
    assert "digest" not in rows[("all", 0.01)]
    mod.main(["--profile", str(path), "--budgets", "0.7", "--scopes", "saved"])
    assert "us/sim" in capsys.readouterr().out
