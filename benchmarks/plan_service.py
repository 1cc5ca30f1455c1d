"""Server-side plan generation time: per-client planning vs k-means clusters + plan cache.

FedHybrid §5.5 / Fig. 20(b): clustering and caching make server plan generation up to
647x faster than generating plans individually. We time, for 100 / 1 000 / 10 000 clients
of a fleet with FedHybrid's memory mix (budgets from edgetrain.sim.memory, M_G = the
fleet's 40% budget quantile), the hybrid planner (edgetrain.engine.budget) on MobileNetV2:

* individual: one planner run per client at its exact budget fraction. Measured on the
  first ``--sample`` clients and extrapolated linearly above that (marked "~");
* clustered: k-means over (budget, log compute), one plan per (cluster, device class) for
  the weakest member, cached by (model, strategy, budget bucket, device class). Measured
  in full, from an empty cache. Profiling (once per model and strategy) is excluded from
  both and printed separately.

``--refine`` plans with the planner's local search (``PlanService(refine=True)``; the
service's default is the greedy walks alone, see :class:`edgetrain.federated.plans.PlanService`).

Times are CPU seconds of the one benchmark thread (``time.process_time``, torch pinned to
one thread), so neighbours on a shared machine do not distort the ratio. The clustered
column is split into the planner runs and the rest (k-means, cache, bookkeeping).

    .venv/bin/python benchmarks/plan_service.py [--quick] [--json] [--sizes 100,1000,10000]
        [--refine]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import torch

from edgetrain import models
from edgetrain.devices import generate_fleet
from edgetrain.federated.plans import PlanService
from edgetrain.sim.memory import MemoryModel


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--sample", type=int, default=20, help="clients timed individually")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--sizes", default=None, help="fleet sizes, e.g. 100,1000,10000,50000")
    ap.add_argument(
        "--refine",
        action="store_true",
        help="plan with the planner's local search (PlanService(refine=True))",
    )
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    sizes = (100, 1000) if args.quick else (100, 1000, 10_000)
    if args.sizes:
        sizes = tuple(int(v) for v in args.sizes.split(","))
    opts = {"width_mult": 0.1 if args.quick else 0.25, "in_channels": 1, "input_size": 28}
    model = models.build("mobilenetv2", seed=0, **opts)
    gen = torch.Generator().manual_seed(0)
    x = models.example_input(model, 4, gen)
    y = torch.randint(0, 10, (4,), generator=gen)
    base = PlanService(model, x, y, "mobilenetv2", repeats=1, refine=args.refine)
    t0 = time.process_time()
    prof = base.profile("hybrid")
    profile_s = time.process_time() - t0
    mm = MemoryModel()
    from sklearn.cluster import KMeans  # noqa: F401  (import once, outside the timings)

    rows = []
    for n in sizes:
        fleet = generate_fleet(n, seed=0)
        budgets = np.array(
            [mm.user_budget(p, np.random.default_rng([0, i, 11])) for i, p in enumerate(fleet)]
        )
        m_g = float(np.quantile(budgets, 0.4))
        frac = np.minimum(budgets / m_g, 1.0)
        comp = np.array([p.compute_flops for p in fleet])
        cls = [p.device_class for p in fleet]
        need = frac < 1.0
        f_need, c_need = frac[need], comp[need]
        cl_need = [c for c, k in zip(cls, need, strict=True) if k]
        # individual
        svc = PlanService(model, x, y, "mobilenetv2", repeats=1, refine=args.refine)
        svc._profiles["hybrid"] = prof
        m = min(args.sample, len(f_need))
        t0 = time.process_time()
        svc.plans_for_clients("hybrid", f_need[:m], c_need[:m], cl_need[:m], cluster=False)
        per = (time.process_time() - t0) / max(m, 1)
        indiv = per * len(f_need)
        # clustered + cache
        svc2 = PlanService(model, x, y, "mobilenetv2", repeats=1, refine=args.refine)
        svc2._profiles["hybrid"] = prof
        t0 = time.process_time()
        svc2.plans_for_clients("hybrid", f_need, c_need, cl_need, cluster=True, seed=0)
        clus = time.process_time() - t0
        planner = sum(o.plan_s for o in svc2.table.values())  # CPU s of the planner runs
        rows.append({
            "clients": n, "needing_plans": int(need.sum()), "individual_s": indiv,
            "individual_extrapolated": m < len(f_need), "clustered_s": clus,
            "planner_calls_clustered": svc2.planner_calls, "speedup": indiv / clus,
            "clustered_planner_s": planner, "clustered_other_s": clus - planner,
            "individual_per_plan_s": per,
            "clustered_per_plan_s": planner / max(svc2.planner_calls, 1),
        })  # fmt: skip
    out = {"profile_s": profile_s, "model": "mobilenetv2", "options": opts, "rows": rows,
           "refine": args.refine}  # fmt: skip
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"profiling MobileNetV2 once (excluded below): {profile_s:.2f} s"
          + (" (planner: local search on)" if args.refine else ""))  # fmt: skip
    print(f"{'clients':>8}{'need plan':>10}{'individual s':>15}{'clustered s':>13}"
          f"{'of it planner':>15}{'planner runs':>14}{'speedup':>10}")  # fmt: skip
    for r in rows:
        mark = "~" if r["individual_extrapolated"] else " "
        print(f"{r['clients']:>8}{r['needing_plans']:>10}{mark:>3}{r['individual_s']:>12.2f}"
              f"{r['clustered_s']:>13.2f}{r['clustered_planner_s']:>15.2f}"
              f"{r['planner_calls_clustered']:>14}"
              f"{r['speedup']:>9.0f}x")  # fmt: skip
    print("(CPU seconds of one thread; paper, FedHybrid Fig. 20(b): up to 647x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
