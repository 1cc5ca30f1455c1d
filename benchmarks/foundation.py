"""Foundation figures (issue #2): zoo parameter counts vs the papers, the fleet's memory mix,
shipped data sets, and the demo's accuracy and wall time.

    .venv/bin/python benchmarks/foundation.py            # full (runs the demo: ~1-2 min on 2 cores)
    .venv/bin/python benchmarks/foundation.py --quick    # 1 demo epoch, 2 000-device fleet
"""

from __future__ import annotations

import argparse
import tempfile
import time

from edgetrain.config import DEMO_CONFIG, parse_config
from edgetrain.data import catalog as data_catalog
from edgetrain.devices import FEDHYBRID_MEMORY_MIX, generate_fleet, memory_shares
from edgetrain.engine.local import run_local
from edgetrain.models import catalog as model_catalog


def zoo_table() -> None:
    print("\n== model zoo (default options) ==")
    print(f"{'model':<14}{'params':>12}{'paper':>12}{'deviation':>11}{'fwd MFLOPs':>12}")
    for row in model_catalog():
        paper = row["paper_params"]
        dev = f"{100 * (row['params'] - paper) / paper:+.1f}%" if paper else "-"
        print(
            f"{row['name']:<14}{row['params']:>12,}{(paper or 0):>12,}{dev:>11}"
            f"{row['flops_forward'] / 1e6:>12.1f}"
        )


def fleet_table(n: int) -> None:
    print(f"\n== FedHybrid memory mix over {n:,} generated devices (seed 0) ==")
    shares = memory_shares(generate_fleet(n, seed=0))
    print(f"{'GB':>4}{'target':>9}{'measured':>10}{'gap (pts)':>11}")
    for gb, target in FEDHYBRID_MEMORY_MIX.items():
        got = shares.get(float(gb), 0.0)
        print(f"{gb:>4}{target:>9.3f}{got:>10.4f}{100 * (got - target):>+11.2f}")


def data_table() -> None:
    print("\n== shipped data sets ==")
    for row in data_catalog():
        print(
            f"{row['name']:<13}{row['samples']:>6} x {str(row['shape']):<14}"
            f"{row['classes']:>3} classes  subjects={row['subjects']}"
        )


def demo(epochs: int | None) -> None:
    cfg = dict(DEMO_CONFIG)
    if epochs:
        cfg["train"] = dict(cfg["train"], epochs=epochs)
    with tempfile.TemporaryDirectory() as tmp:
        cfg["output_root"] = tmp
        start = time.perf_counter()
        result = run_local(parse_config(cfg))
        wall = time.perf_counter() - start
    print("\n== demo: LeNet on watch, held-out subjects ==")
    print(
        f"epochs={len(result.history)}  test accuracy={result.test_accuracy:.4f} "
        f"(chance {1 / 7:.3f})  wall={wall:.1f} s"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small settings for a smoke test")
    args = ap.parse_args()
    zoo_table()
    fleet_table(2_000 if args.quick else 10_000)
    data_table()
    demo(1 if args.quick else None)


if __name__ == "__main__":
    main()
