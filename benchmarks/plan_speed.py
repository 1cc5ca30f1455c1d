"""How long the planner takes: ``plan()`` per budget and scope, and the memory simulator's
calls, on one saved model profile.

Planning is pure computation over a profile (no op is timed), so a saved profile
(``edgetrain budget --profile FILE`` or :func:`edgetrain.engine.budget.profile_io.save_profile`)
makes the same plans in any process; this times them.  Hybrid planning is dominated by
the local search (:mod:`edgetrain.engine.budget.refine`), which calls the simulator
(``simulate`` / ``simulate_all``) tens of thousands of times.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/plan_speed.py [--quick] [--json]
        [--profile FILE | --model mobilenetv2 --width 0.35 --batch 32]
        [--budgets 0.5,0.3] [--scopes saved,all] [--methods hybrid] [--repeats 1]

Without ``--profile`` the model is profiled here first (``--save`` keeps that profile).
Per cell it prints the median seconds of ``--repeats`` plans, the simulator's calls and
their mean microseconds, and the plan's decision counts with a digest of its JSON (equal
digests: the same plan, e.g. across versions of the planner run on one profile file).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time

import torch


def _profile(a):
    from edgetrain import data, models
    from edgetrain.engine.budget.profile import profile_model
    from edgetrain.engine.budget.profile_io import every_codec

    ds = data.load("digits")
    net = models.build(
        a.model, width_mult=a.width, in_channels=ds.input_shape[0],
        input_size=ds.input_shape[1], num_classes=ds.num_classes, seed=0,
    )  # fmt: skip
    x, y = ds.x[: a.batch].float(), ds.y[: a.batch]

    def loss_fn(out):
        return torch.nn.functional.cross_entropy(out, y)

    return profile_model(
        net, (x,), loss_fn, codecs=every_codec(), alloc_timeline=True,
        repeats=a.profile_repeats, in_situ_steps=a.in_situ_steps,
    )  # fmt: skip


def run(a) -> dict:
    from edgetrain.engine.budget import planner
    from edgetrain.errors import BudgetError

    torch.set_num_threads(1)
    if a.profile:
        from edgetrain.engine.budget.profile_io import load_profile

        prof, source = load_profile(a.profile), a.profile
    else:
        t0 = time.perf_counter()
        prof = _profile(a)
        source = f"{a.model} width {a.width} batch {a.batch} on digits, profiled in {time.perf_counter() - t0:.1f} s"  # noqa: E501
        if a.save:
            from edgetrain.engine.budget.profile_io import save_profile

            save_profile(a.save, prof, {"benchmark": "plan_speed", "source": source})
    calls = {"simulate": [0, 0.0], "simulate_all": [0, 0.0]}
    real = {n: getattr(planner, n) for n in calls}

    def counted(name):
        def f(*args, **kw):
            t = time.perf_counter()
            try:
                return real[name](*args, **kw)
            finally:
                calls[name][0] += 1
                calls[name][1] += time.perf_counter() - t

        return f

    rows = []
    for scope in a.scopes.split(","):
        full = prof.total_saved_bytes if scope == "saved" else prof.alloc.measured_peak
        for method in a.methods.split(","):
            for frac in [float(b) for b in a.budgets.split(",")]:
                secs, p, err = [], None, None
                for n in calls:
                    calls[n] = [0, 0.0]
                for n in calls:
                    setattr(planner, n, counted(n))
                try:
                    for _ in range(a.repeats):
                        t = time.perf_counter()
                        try:
                            p = planner.plan(prof, int(frac * full), method, scope=scope)
                        except BudgetError as exc:
                            err = str(exc).split(";")[0]
                        secs.append(time.perf_counter() - t)
                finally:
                    for n in calls:
                        setattr(planner, n, real[n])
                sim = calls["simulate"]  # simulate_all calls simulate: its count is all
                row = {
                    "scope": scope, "method": method, "budget": frac,
                    "plan_s": statistics.median(secs),
                    "sim_calls": sim[0] // a.repeats,
                    "sim_us": 1e6 * (calls["simulate_all"][1] or sim[1]) / max(sim[0], 1),
                }  # fmt: skip
                if p is not None:
                    text = json.dumps(p.to_json(), sort_keys=True)
                    row["decisions"] = {k: v for k, v in p.decision_counts().items() if v}
                    row["digest"] = hashlib.sha256(text.encode()).hexdigest()[:12]
                    row["predicted_overhead_ms"] = 1e3 * p.predicted_overhead_s
                else:
                    row["infeasible"] = err
                rows.append(row)
    return {"profile": source, "units": len(prof.units), "rows": rows}


def print_table(out: dict) -> None:
    print(f"profile: {out['profile']} ({out['units']} units)")
    print(f"{'scope':<6} {'method':<10} {'budget':>6} {'plan s':>8} {'sim calls':>10} "
          f"{'us/sim':>7}  {'digest':<12}  decisions")  # fmt: skip
    for r in out["rows"]:
        dec = ", ".join(f"{k} {v}" for k, v in r.get("decisions", {}).items())
        print(f"{r['scope']:<6} {r['method']:<10} {r['budget']:>6} {r['plan_s']:>8.2f} "
              f"{r['sim_calls']:>10} {r['sim_us']:>7.0f}  {r.get('digest', '-'):<12}  "
              f"{dec or r.get('infeasible', '')}")  # fmt: skip


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--profile", default=None, help="a saved model profile (JSON)")
    p.add_argument("--save", default=None, help="write the profile made here to this file")
    p.add_argument("--model", default="mobilenetv2")
    p.add_argument("--width", type=float, default=0.35)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--budgets", default="0.5,0.3")
    p.add_argument("--scopes", default="saved,all")
    p.add_argument("--methods", default="hybrid")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--profile-repeats", type=int, default=3, help="profile_model's repeats")
    p.add_argument("--in-situ-steps", type=int, default=10, help="profile_model's in_situ_steps")
    p.add_argument(
        "--quick", action="store_true",
        help="width 0.1, batch 4, one budget, a one-repeat profile without in-situ steps",
    )  # fmt: skip
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    if a.quick:
        a.width, a.batch, a.budgets = 0.1, 4, "0.6"
        a.profile_repeats, a.in_situ_steps = 1, 0
    out = run(a)
    if a.json:
        json.dump(out, sys.stdout, indent=1)
        print()
    else:
        print_table(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
