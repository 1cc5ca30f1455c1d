"""FedHybrid Tables 3-4 and Fig. 17 on edgetrain's simulated fleet: time to accuracy.

For each task and aggregator, every method runs on the identical fleet, partition and
seed; the target is the best accuracy Random reaches; we print the speedup of each
method's (simulated) time to that target over Random's, and its final accuracy, in the
layout of Tables 3 and 4, then the Fig. 17 ablations, then the scale figure (wall seconds
per round and peak RSS for 1 000 clients x 100 per round, in-process).

    .venv/bin/python benchmarks/fedhybrid_tta.py            # the full run (long)
    .venv/bin/python benchmarks/fedhybrid_tta.py --quick    # tiny scale (a test runs it)
    # the rules before round 4: eq. 1's MemStat, no over-commitment, failures known at once
    .venv/bin/python benchmarks/fedhybrid_tta.py --memstat eq1 --overcommit 1 \
        --failure-report immediate --straggler-feedback none
    # the rules before round 5: Table 4 baselines as per-client plans of one technique,
    # "without optimizer" with the recompute planner alone
    .venv/bin/python benchmarks/fedhybrid_tta.py --baseline-plans per_client \
        --device-plan-generator recompute
    # FedHybrid §5.1's local work (CV): 10 local epochs, batch 64 (capped at the partition)
    .venv/bin/python benchmarks/fedhybrid_tta.py --local-epochs 10 --batch 64

Round semantics (defaults, see edgetrain.federated.config): every selector picks
int(1.3 x k) clients, the round closes at the k-th report or at the deadline (2 x the
fleet's slowest check-in estimate), and a killed client is only known to have failed at
the deadline; the time-to-accuracy ratios depend on that deadline (``--deadline-factor``).

Training is real (LeNet-1D over MNIST-5k rows as a proxy, so the 2-core CPU can afford
it); plans, M_G and the clock model the phone workload: MobileNetV2 plans (profiled and
planned by edgetrain.engine.budget), MobileNetV2's 0.3 G multiply-adds per 224 px image
(Sandler et al. 2018, Table 6: 300 M MAdds -> 0.6 GFLOPs) and 3.4 M float32 parameters
(13.6 MB) per transfer.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time

from edgetrain.config import parse_config
from edgetrain.federated import FederatedConfig, FederatedServer, build_environment, compare
from edgetrain.federated.methods import COMPARE_METHODS
from edgetrain.federated.plans import ON_DEVICE_PLAN_SLOWDOWN

PHONE_CLOCK = {"flops_per_sample": 6.0e8, "model_bytes": 1.36e7}
PLAN_MODEL = {
    "name": "mobilenetv2",
    "options": {"width_mult": 0.25, "in_channels": 1, "input_size": 28},
}
QUICK_PLAN_MODEL = {
    "name": "mobilenetv2",
    "options": {"width_mult": 0.1, "in_channels": 1, "input_size": 16},
}
ABLATIONS = (
    "fedhybrid", "fedhybrid-noselector", "fedhybrid-nooptimizer", "fedhybrid-nocompress",
    "fedhybrid-nopredictor",
)  # fmt: skip
# round 6: the three component ablations under Random selection (compare with
# fedhybrid-noselector): there the plan machinery acts on ~1/3 of the selections
MECHANISM_CHECKS = (
    "fedhybrid-noselector-nooptimizer", "fedhybrid-noselector-nocompress",
    "fedhybrid-noselector-nopredictor",
)  # fmt: skip


def task_config(
    quick: bool,
    aggregator: str,
    seed: int,
    rounds: int | None = None,
    m_g: str | None = None,
    semantics: dict | None = None,
    local_epochs: int | None = None,
    batch: int | None = None,
    plans: str | None = None,
) -> FederatedConfig:
    """The benchmark task; ``semantics`` overrides federated fields (memstat, overcommit,
    failure_report, deadline_factor, straggler_feedback, baseline_plans,
    baseline_plan_charge, device_plan_generator) to reproduce older behaviour.

    ``local_epochs`` / ``batch``: the local work of every method alike (default 5 steps of
    batch 16; FedHybrid §5.1's CV setting is ``local_epochs=10, batch=64``: 10 epochs over
    the client's partition in batches of min(64, n_k)).

    ``plans``: a plans file saved by an earlier run (``--save-plans``, or a run directory's
    ``plans.json``) whose planner results every method reuses, so a rerun in another
    process makes the same plans (they are otherwise made from op costs profiled here)."""
    scale = (
        {"clients": 12, "rounds": 3, "per_round": 4, "samples": 400, "steps": 1}
        if quick
        else {"clients": 100, "rounds": 40, "per_round": 10, "samples": 3000, "steps": 5}
    )
    if rounds is not None:
        scale["rounds"] = rounds
    d = {
        "name": f"tta-{aggregator}",
        "seed": seed,
        "data": {"name": "mnist5k", "reshape": [28, 28], "max_samples": scale["samples"]},
        "model": {"name": "lenet", "options": {"in_channels": 28, "length": 28, "num_classes": 10}},
        "fleet": {"clients": scale["clients"]},
        "partition": {"scheme": "dirichlet", "alpha": 0.1},
        "federated": {
            "rounds": scale["rounds"], "clients_per_round": scale["per_round"],
            "local_steps": scale["steps"], "batch_size": batch or 16, "lr": 0.05,
            "local_epochs": local_epochs,
            "aggregator": aggregator, "mu": 0.01, "yogi": {"eta": 0.01, "tau": 1e-3},
            **(semantics or {}),
        },
        "memory": {"m_g": m_g or "share:0.4", "plan_batch": 2 if quick else 8,
                   "bucket": 0.1 if quick else 0.05,
                   "plan_model": QUICK_PLAN_MODEL if quick else PLAN_MODEL, "plans": plans},
        "clock": PHONE_CLOCK,
    }  # fmt: skip
    return parse_config(d, schema=FederatedConfig)


def fmt_speed(r: dict) -> str:
    sp = r.get("speedup_vs_random")
    return "-" if sp is None else f"{sp:.2f}x"


def curves(recs: dict[str, list[dict]]) -> dict[str, list[list[float]]]:
    """Per method, [simulated s, test accuracy] after every round: accuracy at a common
    round or time (not only the final and best rounds) can be read from the JSON."""
    return {m: [[r["sim_time_s"], r["accuracy"]] for r in rs] for m, rs in recs.items()}


def scale_figure(quick: bool) -> dict:
    """Wall seconds per round and peak RSS for N clients x K per round (in-process)."""
    n, k, rounds = (200, 20, 2) if quick else (1000, 100, 3)
    cfg = parse_config(
        {
            "name": "scale",
            "data": {"name": "mnist5k", "reshape": [28, 28]},
            "fleet": {"clients": n},
            "federated": {
                "rounds": rounds,
                "clients_per_round": k,
                "local_steps": 5,
                "batch_size": 16,
                "method": "fedhybrid",
            },
            "memory": {"plan_model": PLAN_MODEL, "plan_batch": 4},
            "clock": PHONE_CLOCK,
        },  # fmt: skip
        schema=FederatedConfig,
    )
    env = build_environment(cfg)
    server = FederatedServer(env)
    walls = [server.run_round()["wall_s"] for _ in range(rounds)]
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"clients": n, "per_round": k, "wall_s_per_round": sum(walls) / len(walls),
            "peak_rss_mb": rss / 2**20}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny scale (seconds, for tests)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--aggregators", default="fedprox,fedyogi")
    ap.add_argument("--json", action="store_true", help="print one JSON object only")
    ap.add_argument("--out", default=None, help="also write the JSON object to this file")
    ap.add_argument("--no-scale", action="store_true", help="skip the scale figure")
    ap.add_argument("--no-ablations", action="store_true", help="skip the Fig. 17 ablations")
    ap.add_argument("--rounds", type=int, default=None, help="rounds (default 40; quick 3)")
    ap.add_argument(
        "--m-g", default=None,
        help="M_G override, e.g. 100MB: every client fits (Oort-Oracle of FedHybrid Fig. 1)",
    )  # fmt: skip
    ap.add_argument(
        "--methods", default=",".join(COMPARE_METHODS), help="methods of the tables"
    )  # fmt: skip
    ap.add_argument(
        "--extend", type=float, default=3.0,
        help="a method below the target runs on up to EXTEND x rounds (within Random's time)",
    )  # fmt: skip
    ap.add_argument("--memstat", choices=("eq4", "eq1"), default=None, help="FedHybrid MemStat")
    ap.add_argument("--overcommit", type=float, default=None, help="selected / per round")
    ap.add_argument("--failure-report", choices=("deadline", "immediate"), default=None)
    ap.add_argument("--deadline-factor", type=float, default=None)
    ap.add_argument("--straggler-feedback", choices=("average", "none"), default=None)
    ap.add_argument(
        "--baseline-plans", choices=("uniform", "per_client"), default=None,
        help="Table 4 baselines: one fleet-wide Melon/Capuchin/GACT plan, or per-client plans",
    )  # fmt: skip
    ap.add_argument(
        "--baseline-plan-charge", choices=("round", "once", "none"), default=None,
        help="when a uniform baseline's client pays its on-device plan generation",
    )  # fmt: skip
    ap.add_argument(
        "--device-plan-generator", choices=("melon", "recompute"), default=None,
        help="Fig. 17 'without optimizer': the plan generation clients run on the device",
    )  # fmt: skip
    ap.add_argument(
        "--local-epochs", type=int, default=None,
        help="local work: this many epochs over each client's partition (FedHybrid §5.1: 10) "
        "instead of 5 steps; every method alike",
    )  # fmt: skip
    ap.add_argument(
        "--batch", type=int, default=None,
        help="local batch size (default 16; FedHybrid §5.1 CV: 64, capped at the partition)",
    )  # fmt: skip
    ap.add_argument(
        "--plans", default=None,
        help="reuse the planner results in this file (written by --save-plans): the same "
        "plans, hence the same metrics, in any process",
    )  # fmt: skip
    ap.add_argument("--save-plans", default=None, help="write the planner results to this file")
    ap.add_argument(
        "--mechanism-checks", action="store_true",
        help="also run the optimizer / compression / predictor ablations under Random "
        "selection (compare with fedhybrid-noselector)",
    )  # fmt: skip
    args = ap.parse_args(argv)
    semantics = {
        k: v
        for k, v in {
            "memstat": args.memstat,
            "overcommit": args.overcommit,
            "failure_report": args.failure_report,
            "deadline_factor": args.deadline_factor,
            "straggler_feedback": args.straggler_feedback,
            "baseline_plans": args.baseline_plans,
            "baseline_plan_charge": args.baseline_plan_charge,
            "device_plan_generator": args.device_plan_generator,
        }.items()
        if v is not None
    }
    out: dict = {
        "tables": {}, "ablations": {}, "semantics": semantics,
        "local_work": {"local_epochs": args.local_epochs, "batch": args.batch or 16},
        "curves": {},
    }  # fmt: skip
    t0 = time.perf_counter()
    saved: dict[tuple[str, float], dict] = {}  # planner results of every aggregator's runs
    for agg in args.aggregators.split(","):
        cfg = task_config(
            args.quick, agg, args.seed, args.rounds, args.m_g, semantics,
            local_epochs=args.local_epochs, batch=args.batch, plans=args.plans,
        )  # fmt: skip
        env = build_environment(cfg)
        methods = tuple(args.methods.split(","))
        rows, recs = compare(cfg, methods, env=env, extend_factor=args.extend)
        out["tables"][agg] = rows
        out["curves"][agg] = curves(recs)
        if env.plan_service is not None:  # Table 4 baselines: the fleet-wide plans
            out["uniform_plans"] = [
                {**o.to_dict(), "device_plan_s": ON_DEVICE_PLAN_SLOWDOWN * o.plan_s}
                for (name, _), o in sorted(env.plan_service.table.items())
                if name in ("melon", "capuchin", "gact")
            ]
        if agg == "fedprox" and not args.no_ablations:
            done = {r["method"]: (recs[r["method"]], r["wall_s"]) for r in rows if "wall_s" in r}
            names = ("random",) + ABLATIONS + (MECHANISM_CHECKS if args.mechanism_checks else ())
            abl, abl_recs = compare(cfg, names, env=env, cached=done, extend_factor=args.extend)
            out["ablations"][agg] = abl
            out["curves"][agg].update(curves(abl_recs))
        if env.plan_service is not None:
            for r in env.plan_service.to_json():
                saved[(r["strategy"], r["fraction"])] = r
    if args.save_plans:
        with open(args.save_plans, "w") as fh:
            json.dump([saved[k] for k in sorted(saved)], fh, indent=1)
    if not args.no_scale:
        out["scale"] = scale_figure(args.quick)
    out["wall_s"] = time.perf_counter() - t0
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(out, fh)
    if args.json:
        print(json.dumps(out))
        return 0
    for agg, rows in out["tables"].items():
        print(f"\nTable 3/4 layout -- MNIST-5k (LeNet proxy, MobileNetV2 plans/clock), +{agg}")
        print(f"{'method':<18}{'speedup':>10}{'final acc':>11}{'best acc':>10}{'TTA (h)':>10}"
              f"{'rounds':>8}{'s/round':>9}")  # fmt: skip
        for r in rows:
            if "skipped" in r:
                print(f"{r['method']:<18}{'skipped: ' + r['skipped'][:50]}")
                continue
            tta = r["time_to_target_s"]
            print(f"{r['method']:<18}{fmt_speed(r):>10}{100 * r['final_accuracy']:>10.2f}%"
                  f"{100 * r['best_accuracy']:>9.2f}%"
                  f"{'-' if tta is None else f'{tta / 3600:.2f}':>10}"
                  f"{r['rounds']:>8}{r['sim_time_s'] / max(1, r['rounds']):>9.1f}")  # fmt: skip
        print(f"target = Random's best accuracy {100 * rows[0]['target_accuracy']:.2f}%")
    for u in out.get("uniform_plans", []):
        print(f"  {u['strategy']:<9} for {u['fraction']:.3f} M_G: demand "
              f"{u['demand'] if u['demand'] is not None else u['fraction']:.3f} M_G, "
              f"x{u['overhead_factor']:.2f} per step, {u['micro_batches']} micro-batch(es), "
              f"{u['device_plan_s']:.1f} s to plan on the device")  # fmt: skip
    for agg, rows in out["ablations"].items():
        print(f"\nFig. 17 ablations (+{agg}): speedup vs Random; 'x ref' = time to target over "
              "fedhybrid's (fedhybrid-noselector's for the -noselector-* checks); up to the "
              "target: client-rounds planned / under pressure / killed / late, aggregated "
              "updates trained under a plan, regenerations, compressed aggregated / planned "
              "client-rounds, believed budget > the round's lowest + 1 % M_G, mean |believed - "
              "true| budget in % M_G")  # fmt: skip
        tta = {r["method"]: r.get("time_to_target_s") for r in rows}
        for r in rows:
            ref = "fedhybrid-noselector" if "-noselector-" in r["method"] else "fedhybrid"
            ratio = (
                f"x{r['time_to_target_s'] / tta[ref]:.2f}"
                if r["method"] not in ("random", ref) and r["time_to_target_s"] and tta.get(ref)
                else "-"
            )
            e = r.get("exposure", {})
            be = e.get("budget_err_pct")
            err = "-" if be is None else f"{be:.2f}%"
            print(f"  {r['method']:<34}{fmt_speed(r):>8}{ratio:>7}"
                  f"  final {100 * r['final_accuracy']:.2f}%"
                  f"  planned {e.get('planned', 0)} pressure {e.get('pressure', 0)}"
                  f" killed {e.get('killed', 0)} late {e.get('late', 0)}"
                  f" agg-planned {e.get('planned_aggregated', 0)}"
                  f" regen {e.get('regenerations', 0)} compressed {e.get('compressed_clients', 0)}"
                  f"/{e.get('compress_planned', 0)} budget-over {e.get('budget_over', 0)}"
                  f" err {err}"
                  f" (rounds {e.get('rounds', 0)})")  # fmt: skip
    for agg, rows in out["tables"].items():
        print(f"\nparticipation by memory class (+{agg}): completed / selected")
        for r in rows:
            if "participation" in r:
                cells = "  ".join(f"{c} {v[1]}/{v[0]}" for c, v in r["participation"].items())
                print(f"  {r['method']:<18}{cells}")
    if "scale" in out:
        s = out["scale"]
        print(f"\nscale: {s['clients']} clients x {s['per_round']} per round in-process: "
              f"{s['wall_s_per_round']:.1f} wall s/round, peak RSS {s['peak_rss_mb']:.0f} MB")  # fmt: skip
    print(f"\ntotal wall {out['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
