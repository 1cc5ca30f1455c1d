"""How well the all-allocation memory model (``scope="all"``) predicts a step's real peak.

For each model and method: one fresh profile (with its measured allocation timeline),
then for each budget -- fractions of the unplanned step's measured all-allocation peak,
and the method's minimum feasible all-allocation budget -- a plan made by
``plan(profile, budget, method, scope="all")`` and one untimed step of it under the
torch profiler's allocation events (``step_alloc_peak``: frees matched by pointer).
Prints predicted vs measured bytes, their relative error (negative = the model
over-predicts, the safe side) and whether the measured peak is within the budget.

The profiler sees only torch's allocator: a codec's encoded ``bytes`` and the masks'
packed bits (Python / numpy memory) are in no allocation event, yet the step holds them
and the model counts them.  So each plan is also predicted as the profiler sees it
(``seen``: the same model with those bytes left out, ``alloc.torch_visible``), and
``seen_error`` compares the measurement with that: the model's error on what was
measured.  ``predicted - seen`` is what the measurement cannot contain.  ``held`` is
the step's peak as ``step_alloc_peak`` reports it by default (and ``edgetrain budget
--scope all`` as ``measured_alloc_peak_bytes``): the profiler's allocations plus the
buffers the executor holds outside torch (the accountant's ``hold_bytes``: encoded
bytes, packed mask bits; ``accountant.MarkingAccountant``), added at the moments they
are held and released; ``within_budget`` is judged on it.  Numpy-decoded int8 / int4
tensors stay outside both.

    OMP_NUM_THREADS=1 python benchmarks/budget_alloc_model.py --models bert-small:8 --budgets 0.9,0.8,0.75
    OMP_NUM_THREADS=1 python benchmarks/budget_alloc_model.py --models mobilenetv2:8 --budgets 0.8,0.5,0.3,0.25
    python benchmarks/budget_alloc_model.py --quick --json      # tiny (a test runs it)
    python benchmarks/budget_alloc_model.py --quick --out rows.json   # table, and JSON to a file

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
from edgetrain.engine.budget.alloc import plan_states, torch_visible
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
    seen_as = torch_visible(prof)
    rows = [
        {
            "method": "none",
            "budget": None,
            "predicted": int(simulate_all(prof, {}).max()),
            "seen": int(simulate_all(seen_as, {}).max()),
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
            got = step_alloc_peak(model, p, inputs, loss_fn, held=False)[0]
            held = step_alloc_peak(model, p, inputs, loss_fn)[0]
            decisions = {k: v for k, v in p.decision_counts().items() if v and k != "keep"}
            states = plan_states(prof, p)
            if int(simulate_all(prof, states).max()) != p.predicted_peak_bytes:
                raise AssertionError(f"{method} {b}: the plan's states do not replay it")
            rows.append(
                {
                    **row,
                    "feasible": True,
                    "predicted": p.predicted_peak_bytes,
                    "seen": int(simulate_all(seen_as, states).max()),
                    "measured": got,
                    "held": held,
                    "within_budget": held <= budget,
                    "decisions": decisions,
                    # the non-keep states: with any profile of the same model and batch
                    # (its memory terms do not depend on timing) the plan can be rebuilt
                    # and measured again when a row is over its budget
                    "states": sorted([k, *v] for k, v in states.items() if v[0] != "keep"),
                }
            )
    for r in rows:
        if r.get("predicted"):
            r["error"] = (r["measured"] - r["predicted"]) / r["predicted"]
            r["seen_error"] = (r["measured"] - r["seen"]) / r["seen"]
            if "held" in r:
                r["held_error"] = (r["held"] - r["predicted"]) / r["predicted"]
    return {
        "model": name,
        "batch": batch,
        "profile_s": profile_s,
        "unplanned_alloc_peak": unplanned,
        "rows": rows,
    }


def print_table(res: dict) -> None:
    """The printed table of one model's rows (:func:`measure`)."""
    print(f"[{res['model']} b{res['batch']}] profiled in {res['profile_s']:.1f}s; "
          f"unplanned all-allocation peak {res['unplanned_alloc_peak']:,} B")  # fmt: skip
    print(f"  {'method':10} {'budget':>6} {'predicted':>13} {'measured':>13} {'error':>8} "
          f"{'seen':>13} {'seen err':>8} {'held':>13} {'held err':>8}  within")  # fmt: skip
    for r in res["rows"]:
        if r.get("feasible") is False:
            print(f"  {r['method']:10} {r['budget']:>6} infeasible (min {r['min_bytes']:,} B)")
            continue
        within = "" if r["budget"] is None else str(r["within_budget"])
        dec = " ".join(f"{k}:{v}" for k, v in r.get("decisions", {}).items())
        seen = (
            f"{r['seen']:>13,} {r['seen_error']:>+8.2%}" if "seen" in r else f"{'-':>13} {'-':>8}"
        )
        held = (
            f"{r['held']:>13,} {r['held_error']:>+8.2%}" if "held" in r else f"{'-':>13} {'-':>8}"
        )
        print(f"  {r['method']:10} {str(r['budget'] or '-'):>6} {r['predicted']:>13,} "
              f"{r['measured']:>13,} {r['error']:>+8.2%} {seen} {held}  {within} {dec}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="bert-small:8,mobilenetv2:8", help="name:batch,...")
    ap.add_argument("--budgets", default="0.9,0.75,0.5,min", help="fractions and/or 'min'")
    ap.add_argument("--methods", default="hybrid,recompute,compress")
    ap.add_argument("--steps", type=int, default=10, help="in-situ profile steps")
    ap.add_argument("--quick", action="store_true", help="tiny: mobilenetv2 b2, hybrid only")
    ap.add_argument("--json", action="store_true", help="print one JSON list")
    ap.add_argument("--out", help="also write the JSON list to this file")
    ap.add_argument("--table", help="print the tables of a JSON file written before; no run")
    a = ap.parse_args(argv)
    if a.table:
        with open(a.table) as f:
            for res in json.load(f):
                print_table(res)
        return 0
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
        if not a.json:
            print_table(res)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f)
    if a.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
