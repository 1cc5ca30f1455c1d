"""How well the all-allocation memory model (``scope="all"``) predicts a step's real peak.

For each model and method: one fresh profile (with its measured allocation timeline),
then for each budget -- fractions of the unplanned step's measured all-allocation peak,
and the method's minimum feasible all-allocation budget -- a plan made by
``plan(profile, budget, method, scope="all")`` and one untimed step of it under the
torch profiler's allocation events (``step_alloc_peak``: frees matched by pointer).
Prints predicted vs measured bytes, their relative error (negative = the model
over-predicts, the safe side) and whether the measured peak is within the budget.

    OMP_NUM_THREADS=1 python benchmarks/budget_alloc_model.py --models bert-small:8 --budgets 0.9,0.8,0.75
    OMP_NUM_THREADS=1 python benchmarks/budget_alloc_model.py --models mobilenetv2:8 --budgets 0.8,0.5,0.3,0.25
    python benchmarks/budget_alloc_model.py --quick --json      # tiny (a test runs it)

Measured bytes are real (this CPU's allocator, deterministic for a fixed step); no time
is measured here.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from edgetrain.commands.budget import zoo_task
from edgetrain.engine.budget import minimum_budget, plan, profile_model
from edgetrain.engine.budget.accountant import step_alloc_peak
from edgetrain.engine.budget.planner import simulate_all
from edgetrain.engine.budget.runner import codecs_for, none_plan
from edgetrain.errors import BudgetError


def measure(name: str, batch: int, budgets: list[str], methods: list[str], steps: int) -> dict:
    """Rows of predicted vs measured all-allocation peaks for one model."""
    model, inputs, loss_fn = zoo_task(name, batch, 0)
    t0 = time.perf_counter()
    codecs = {**codecs_for("hybrid"), **codecs_for("compress")}
    prof = profile_model(
        model, inputs, loss_fn, codecs=codecs, alloc_timeline=True, in_situ_steps=steps
    )
    profile_s = time.perf_counter() - t0
    unplanned = step_alloc_peak(model, none_plan(prof), inputs, loss_fn)[0]
    rows = [
        {
            "method": "none",
            "budget": None,
            "predicted": int(simulate_all(prof, {}).max()),
            "measured": unplanned,
        }
    ]
    for method in methods:
        least = minimum_budget(prof, method, scope="all")
        for b in budgets:
            budget = least if b == "min" else int(float(b) * unplanned)
            row = {"method": method, "budget": b, "budget_bytes": budget, "min_bytes": least}
            try:
                p = plan(prof, budget, method, scope="all")
            except BudgetError:
                rows.append({**row, "feasible": False})
                continue
            got = step_alloc_peak(model, p, inputs, loss_fn)[0]
            decisions = {k: v for k, v in p.decision_counts().items() if v and k != "keep"}
            rows.append(
                {
                    **row,
                    "feasible": True,
                    "predicted": p.predicted_peak_bytes,
                    "measured": got,
                    "within_budget": got <= budget,
                    "decisions": decisions,
                }
            )
    for r in rows:
        if r.get("predicted"):
            r["error"] = (r["measured"] - r["predicted"]) / r["predicted"]
    return {
        "model": name,
        "batch": batch,
        "profile_s": profile_s,
        "unplanned_alloc_peak": unplanned,
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="bert-small:8,mobilenetv2:8", help="name:batch,...")
    ap.add_argument("--budgets", default="0.9,0.75,0.5,min", help="fractions and/or 'min'")
    ap.add_argument("--methods", default="hybrid,recompute,compress")
    ap.add_argument("--steps", type=int, default=10, help="in-situ profile steps")
    ap.add_argument("--quick", action="store_true", help="tiny: mobilenetv2 b2, hybrid only")
    ap.add_argument("--json", action="store_true", help="print one JSON list")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    if a.quick:
        a.models, a.budgets, a.methods, a.steps = "mobilenetv2:2", "0.8,min", "hybrid", 2
    budgets = [b.strip() for b in a.budgets.split(",") if b.strip()]
    methods = [m.strip() for m in a.methods.split(",") if m.strip()]
    out = []
    for spec in a.models.split(","):
        name, _, batch = spec.partition(":")
        res = measure(name, int(batch or 8), budgets, methods, a.steps)
        out.append(res)
        if a.json:
            continue
        print(f"[{name} b{res['batch']}] profiled in {res['profile_s']:.1f}s; "
              f"unplanned all-allocation peak {res['unplanned_alloc_peak']:,} B")  # fmt: skip
        print(
            f"  {'method':10} {'budget':>6} {'predicted':>13} {'measured':>13} {'error':>8}  within"
        )
        for r in res["rows"]:
            if r.get("feasible") is False:
                print(f"  {r['method']:10} {r['budget']:>6} infeasible (min {r['min_bytes']:,} B)")
                continue
            within = "" if r["budget"] is None else str(r["within_budget"])
            dec = " ".join(f"{k}:{v}" for k, v in r.get("decisions", {}).items())
            print(f"  {r['method']:10} {str(r['budget'] or '-'):>6} {r['predicted']:>13,} "
                  f"{r['measured']:>13,} {r['error']:>+8.2%}  {within} {dec}")  # fmt: skip
    if a.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
