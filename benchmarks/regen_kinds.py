"""In-step cost of each kind of regeneration, against the profile's factors.

The budget planner prices a regeneration at its isolated cost (the executor's own
no-grad regeneration, timed alone) times an in-step factor that the profile measures
once per kind (``edgetrain.engine.budget.profile.regen_kind``).  This script checks
that split: it profiles a model, groups its regeneration candidates by how the executor
runs them (leaf forwards -- a convolution again; BatchNorm from its batch statistics;
BatchNorm -> ReLU6 chains; clamps in place), and times, paired with the unplanned step
(each plan step between two unplanned ones, mirrored order), a set of each group that
can run together, and the set of all of them.  A group's ratio is its measured in-step
overhead over its summed isolated price.

    OMP_NUM_THREADS=1 python benchmarks/regen_kinds.py --model mobilenetv2 --batch 32 --repeats 3
    python benchmarks/regen_kinds.py --quick        # tiny MobileNetV2, smoke-sized

Process CPU time, one thread recommended; run it alone (the differences are a few ms).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from torch import nn

from edgetrain import models
from edgetrain.engine.budget import codecs_for, profile_model
from edgetrain.engine.budget.plan import ExecutionPlan, UnitDecision
from edgetrain.engine.budget.profile import (
    RegenProfile,
    _regen_set,
    _time_schedule,
    paired_extra,
    paired_schedule,
)


def group_of(model: nn.Module, r: RegenProfile) -> str:
    """Finer than ``regen_kind``: the four ways the executor regenerates."""
    if r.chain:
        return "bn-chain" if r.kind == "elementwise" else "chain"
    if r.kind == "forward":
        return "forward:" + type(model.get_submodule(r.name)).__name__
    if isinstance(model.get_submodule(r.name), nn.modules.batchnorm._BatchNorm):
        return "bn-stats"
    return "clamp-inplace"


def _plan(rs: list[RegenProfile]) -> ExecutionPlan:
    return ExecutionPlan(
        "recompute", 1, 1, 1, 0.0,
        [UnitDecision(name=r.name, decision="regen", chain=list(r.chain) or None) for r in rs],
    )  # fmt: skip


def measure(model_name: str, batch: int, size: int, options: dict, repeats: int, rounds: int):
    torch.manual_seed(0)
    net = models.build(model_name, seed=0, **options)
    x = torch.randn(batch, 3, size, size)
    y = torch.randint(0, 10, (batch,))

    def loss_fn(out):
        return nn.functional.cross_entropy(out, y)

    t0 = time.process_time()
    prof = profile_model(net, (x,), loss_fn, codecs=codecs_for("hybrid"))
    profile_s = time.process_time() - t0
    groups: dict[str, list[RegenProfile]] = {}
    for r in prof.regens:
        groups.setdefault(group_of(net, r), []).append(r)
    sets = {g: _regen_set(rs) for g, rs in sorted(groups.items())}
    sets["all"] = _regen_set(prof.regens)
    price = {g: sum(r.fwd_s * max(r.saves, 1) for r in rs) for g, rs in sets.items()}
    plans = {"none": ExecutionPlan("none", 1, 1, 1, 0.0, [])}
    plans.update({g: _plan(rs) for g, rs in sets.items() if rs})
    kinds = [k for k in plans if k != "none"]
    extras: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(repeats):
        order = paired_schedule(kinds, rounds)
        extra = paired_extra(order, _time_schedule(net, plans, order, (x,), loss_fn))
        for k in kinds:
            extras[k].append(extra[k])
    rows = []
    for g in kinds:
        rs = sets[g]
        ratios = [e / price[g] for e in extras[g]]
        rows.append({
            "group": g,
            "candidates": len(groups.get(g, prof.regens)),
            "timed_set": len(rs),
            "kinds": sorted({r.kind for r in rs}),
            "isolated_price_ms": round(price[g] * 1e3, 3),
            "in_step_ms": [round(e * 1e3, 2) for e in extras[g]],
            "ratio": [round(v, 3) for v in ratios],
            "ratio_median": round(statistics.median(ratios), 3),
            "profile_factor": sorted({round(r.scale, 3) for r in rs}),
        })  # fmt: skip
    return {
        "model": model_name, "batch": batch, "options": options,
        "profile_s": round(profile_s, 1), "repeats": repeats, "rounds": rounds, "rows": rows,
    }  # fmt: skip


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="mobilenetv2")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--size", type=int, default=32, help="input height and width")
    ap.add_argument("--repeats", type=int, default=3, help="paired measurements per group")
    ap.add_argument("--rounds", type=int, default=6, help="paired steps per group per repeat")
    ap.add_argument("--quick", action="store_true", help="MobileNetV2 width 0.35, batch 4")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    options: dict = {"input_size": a.size} if a.model == "mobilenetv2" else {}
    if a.quick:
        a.model, a.batch, a.repeats, a.rounds = "mobilenetv2", 4, 1, 1
        options = {"width_mult": 0.35, "input_size": a.size}
    out = measure(a.model, a.batch, a.size, options, a.repeats, a.rounds)
    if a.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"{out['model']} b{out['batch']}: profile {out['profile_s']} CPU s")
        print(f"{'group':<22} {'set':>4} {'isolated ms':>11}  in-step ms / ratio per repeat"
              "  [median]  profile factor")  # fmt: skip
        for r in out["rows"]:
            per = ", ".join(
                f"{e:+.1f}/{q:.2f}" for e, q in zip(r["in_step_ms"], r["ratio"], strict=True)
            )
            print(f"{r['group']:<22} {r['timed_set']:>4} {r['isolated_price_ms']:>11.2f}  {per}"
                  f"  [{r['ratio_median']:.2f}]  {r['profile_factor']}")  # fmt: skip
    return out


if __name__ == "__main__":
    main()
