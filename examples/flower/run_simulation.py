"""Run an edgetrain federated config on Flower's simulation engine.

    pip install -e '.[flower]'            # flwr[simulation]; Python >= 3.11
    python examples/flower/run_simulation.py examples/flower/flower-mnist.yaml \
        [--method fedhybrid|random|oort|oort+recompute|...] [--num-cpus 2] [--json out.json]

Flower's ``ServerApp`` runs :class:`edgetrain.integrations.flower.EdgetrainStrategy`
(edgetrain's selector picks the nodes, each node below M_G gets its execution plan in the
train ConfigRecord, edgetrain's aggregator combines the replies); every Flower node is one
client of the config's fleet. Prints one line per round: selected clients, plans shipped,
clients aggregated, simulated round time and the global model's test accuracy.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from edgetrain.errors import EdgetrainError
from edgetrain.federated.config import FederatedConfig


def main(argv: list[str] | None = None) -> int:
    here = Path(__file__).resolve().parent
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config", nargs="?", default=str(here / "flower-mnist.yaml"))
    ap.add_argument("--method", default=None, help="edgetrain method (default: the config's)")
    ap.add_argument("--num-cpus", type=int, default=2, help="CPUs for the Ray backend")
    ap.add_argument("--json", default=None, help="write the per-round record to this file")
    args = ap.parse_args(argv)
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    try:
        from edgetrain.config import load_config
        from edgetrain.integrations.flower import simulate

        cfg = load_config(args.config, FederatedConfig)
        result = simulate(cfg, args.method, num_cpus=args.num_cpus)
    except EdgetrainError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"method {result.method}: {len(result.rounds)} rounds on Flower's simulation engine")
    print(f"round 0: test accuracy {result.accuracy.get(0, float('nan')):.3f}")
    for r in result.rounds:
        plans = ", ".join(
            f"{c}->{p['fraction']:.2f}{'' if p['feasible'] else ' (infeasible)'}"
            for c, p in sorted(r.plans.items())
        )
        print(
            f"round {r.round}: selected {r.selected}  plans [{plans}]  "
            f"aggregated {r.aggregated}  trained under plan {r.planned}  "
            f"sim {r.round_time_s:.2f}s  test accuracy {result.accuracy.get(r.round, float('nan')):.3f}"
        )
    print(f"simulated time {result.sim_time_s:.2f}s")
    if args.json:
        Path(args.json).write_text(json.dumps(result.to_json(), indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
