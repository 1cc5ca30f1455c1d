"""Which of a federated fleet's memory-constrained clients the server can give a plan.

FedHybrid's server sends each selected client a plan that fits its predicted budget
(§4.3); a client whose budget ``M_i`` is below the model's unplanned training memory
``M_G`` and below the least budget any plan of a strategy reaches gets no plan: it trains
unplanned and pages or is killed (``edgetrain.sim``).  For each federated config this
script builds the config's fleet and the server's plan service (the same code
``edgetrain federate`` runs), plans every budget bucket below 1 for each strategy, and
reports the least feasible fraction of ``M_G`` and how many of the fleet's clients with
``M_i < M_G`` get a feasible plan at their bucketed budget.  Everything here is measured
on this CPU (profiles, plans); no clock is simulated.

    python benchmarks/plan_coverage.py [--configs examples/federated-bbc-albert.yaml,...]
        [--strategies hybrid,recompute] [--json]

Round 19 measured it for ALBERT, whose one shared encoder layer no plan could evict
before (``docs/results/budget.md``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from edgetrain.config import load_config
from edgetrain.federated.config import FederatedConfig
from edgetrain.federated.environment import build_environment
from edgetrain.federated.plans import bucket_of
from edgetrain.federated.server import make_plan_service

DEFAULT_CONFIGS = "examples/federated-bbc-albert.yaml,examples/federated-bbc-bert.yaml"


def coverage(path: str, strategies: list[str]) -> list[dict]:
    cfg = load_config(path, FederatedConfig)
    env = build_environment(cfg)
    service = make_plan_service(env)
    fractions = env.budgets / env.m_g
    need = fractions < 1.0
    rows = []
    for s in strategies:
        t0 = time.process_time()
        service.precompute(s)
        buckets = sorted(f for (st, f) in service.table if st == s)
        feasible = [f for f in buckets if service.table[(s, f)].feasible]
        least = min(feasible, default=None)
        planned = 0
        for f in fractions[need]:
            b = min(bucket_of(float(f), service.bucket), 1.0)
            if b >= 1.0 or (b > 0 and service.outcome(s, b).feasible):
                planned += 1
        rows.append(
            {
                "config": Path(path).name,
                "model": cfg.model.name,
                "strategy": s,
                "clients": int(len(fractions)),
                "below_m_g": int(need.sum()),
                "planned": planned,
                "least_feasible_fraction": least,
                "buckets_feasible": len(feasible),
                "buckets": len(buckets),
                "plan_cpu_s": round(time.process_time() - t0, 2),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", default=DEFAULT_CONFIGS, help="comma-separated YAML files")
    ap.add_argument("--strategies", default="hybrid,recompute")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    rows = []
    for path in args.configs.split(","):
        rows += coverage(path, args.strategies.split(","))
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    cols = ["config", "strategy", "clients", "below_m_g", "planned", "least_feasible_fraction"]
    print(" | ".join(cols))
    for r in rows:
        print(" | ".join(str(r[c]) for c in cols))
    return 0


if __name__ == "__main__":
    sys.exit(main())
