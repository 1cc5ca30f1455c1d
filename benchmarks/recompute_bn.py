"""Recomputed units' BatchNorms from their forward's batch statistics vs by the kernel.

The executor recomputes a unit's BatchNorm outputs with one fused multiply-add from
the batch statistics the unit's forward computed (``PlanExecutor._wrap_batchnorm``)
instead of running the kernel again.  This script times the same plan -- every
block of the model recomputed -- both ways, paired: each planned step between two
unplanned steps, the two variants alternating in mirrored order, process CPU time.
It also checks that both give the unplanned step's loss and gradients bit for bit.

    OMP_NUM_THREADS=1 python benchmarks/recompute_bn.py --rounds 8
    python benchmarks/recompute_bn.py --quick     # tiny MobileNetV2, smoke-sized
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time

import torch
from torch import nn

from edgetrain import models
from edgetrain.engine.budget import ExecutionPlan, PlanExecutor, UnitDecision
from edgetrain.engine.budget import executor as executor_mod


def measure(batch: int, options: dict, rounds: int) -> dict:
    torch.manual_seed(0)
    net = models.build("mobilenetv2", seed=0, **options)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(batch, 3, 32, 32, generator=gen)
    y = torch.randint(0, 10, (batch,), generator=gen)

    def loss_fn(out):
        return nn.functional.cross_entropy(out, y)

    blocks = [f"features.{i}" for i in range(len(net.features))]
    plan = ExecutionPlan("recompute", 1, 1, 1, 0.0, [UnitDecision(b, "recompute") for b in blocks])
    none = ExecutionPlan("none", 1, 1, 1, 0.0, [])
    state = copy.deepcopy(net.state_dict())
    real = executor_mod.batchnorm_from_stats_ok

    def step(p: ExecutionPlan, from_stats: bool) -> tuple[float, torch.Tensor, list]:
        executor_mod.batchnorm_from_stats_ok = real if from_stats else (lambda m, t: False)
        try:
            net.load_state_dict(state)
            net.zero_grad(set_to_none=True)
            with PlanExecutor(net, p, account=False) as ex:
                t = time.process_time()
                loss = ex.step((x,), loss_fn)
                dt = time.process_time() - t
        finally:
            executor_mod.batchnorm_from_stats_ok = real
        return dt, loss.detach(), [q.grad.clone() for q in net.parameters()]

    _, l0, g0 = step(none, True)
    exact = {}
    for k, flag in (("stats", True), ("kernel", False)):
        _, lk, gk = step(plan, flag)
        exact[k] = torch.equal(l0, lk) and all(
            torch.equal(a, b) for a, b in zip(g0, gk, strict=True)
        )
    extra: dict[str, list[float]] = {"stats": [], "kernel": []}
    for r in range(rounds):
        for k in ("stats", "kernel") if r % 2 == 0 else ("kernel", "stats"):
            before = step(none, True)[0]
            planned = step(plan, k == "stats")[0]
            after = step(none, True)[0]
            extra[k].append(planned - (before + after) / 2)
    pairs = [s / k for s, k in zip(extra["stats"], extra["kernel"], strict=True) if k > 0]
    return {
        "model": "mobilenetv2", "batch": batch, "options": options, "units": len(blocks),
        "rounds": rounds, "bit_identical": exact,
        "extra_ms": {k: [round(v * 1e3, 2) for v in vs] for k, vs in extra.items()},
        "median_extra_ms": {k: round(statistics.median(vs) * 1e3, 2) for k, vs in extra.items()},
        "stats_over_kernel": round(statistics.median(pairs), 3) if pairs else None,
    }  # fmt: skip


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--quick", action="store_true", help="width 0.35, batch 4, 2 rounds")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    options: dict = {"input_size": 32}
    if a.quick:
        a.batch, a.rounds, options = 4, 2, {"width_mult": 0.35, "input_size": 32}
    out = measure(a.batch, options, a.rounds)
    if a.json:
        print(json.dumps(out, indent=1))
    else:
        m = out["median_extra_ms"]
        print(f"mobilenetv2 b{out['batch']}, {out['units']} blocks recomputed, {a.rounds} rounds")
        print(f"  BatchNorm from statistics: +{m['stats']:.1f} ms over the unplanned step")
        print(f"  BatchNorm by the kernel:   +{m['kernel']:.1f} ms")
        print(f"  paired ratio (median): {out['stats_over_kernel']}")
        print(f"  bit-identical to unplanned: {out['bit_identical']}")
    return out


if __name__ == "__main__":
    main()
