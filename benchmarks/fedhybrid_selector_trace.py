"""Fig. 17's selector ablation read apart: what a round costs and how many rounds it takes.

Runs Random (the target), FedHybrid and FedHybrid without its selector (``fedhybrid-noselector``:
its plans, predictor and regeneration under Random's choice among the clients the plans fit) on
one task and seed of ``benchmarks/fedhybrid_tta.py`` (same fleet, partition, plans, FedProx),
and prints per method (round 39, issue 6):

* simulated seconds per round and rounds to the target (Random's best accuracy);
* ``repeat``: the mean share of a round's aggregated clients aggregated the round before;
* ``coverage``: the share of the training samples held by the clients aggregated at least once
  up to the target;
* ``covered skew``: total variation between the labels those clients hold and the training
  split's; ``cohort skew`` / ``classes``: the same for one round's aggregated samples, and their
  effective number of classes (exp entropy), averaged over the rounds up to the target;
* ``mean acc``: test accuracy averaged over the task's rounds (40 MNIST, 80 BBC News).

    python benchmarks/fedhybrid_selector_trace.py --task mnist --seed N          # ~30 s
    python benchmarks/fedhybrid_selector_trace.py --task bbc-bert --seed N       # ~7 min
    python benchmarks/fedhybrid_selector_trace.py --task bbc-bert --seed N --json
    python benchmarks/fedhybrid_selector_trace.py --task mnist --seed N --ucb-c 0.1  # round 39

Time is simulated (``edgetrain.sim``); accuracy and labels are real. The plans are the task's
kept file (``--plans pinned``, as fedhybrid_tta.py), so the rows equal that benchmark's.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fedhybrid_tta as tta  # noqa: E402
from edgetrain.federated.api import compare, exposure  # noqa: E402
from edgetrain.federated.environment import build_environment  # noqa: E402

METHODS = ("random", "fedhybrid", "fedhybrid-noselector")


def label_skew(counts: np.ndarray, share: np.ndarray) -> float:
    """Total variation between the label distribution of ``counts`` and ``share``."""
    p = counts / counts.sum()
    return float(0.5 * np.abs(p - share).sum())


def effective_classes(counts: np.ndarray) -> float:
    """exp(entropy) of the label distribution of ``counts``."""
    p = counts[counts > 0] / counts.sum()
    return float(math.exp(-(p * np.log(p)).sum()))


def trace(recs: list[dict], client_labels: np.ndarray, target: float, horizon: int) -> dict:
    """One method's figures from its per-round records (see the module doc)."""
    share = client_labels.sum(0) / client_labels.sum()
    acc = [r["accuracy"] for r in recs]
    hit = next((i + 1 for i, a in enumerate(acc) if a >= target - 1e-12), None)
    end = hit or len(recs)
    # repeats and coverage as every compare() row counts them (edgetrain's exposure)
    reach = exposure(recs[:end], None, client_labels.sum(1).astype(int).tolist())
    seen = {int(c) for r in recs[:end] for c in r["aggregated"]}
    skews, classes = [], []
    for r in recs[:end]:
        lab = np.asarray(r.get("aggregated_labels") or [], dtype=float)
        if lab.size and lab.sum() > 0:
            skews.append(label_skew(lab, share))
            classes.append(effective_classes(lab))
    covered = client_labels[sorted(seen)].sum(0)
    return {
        "s_per_round": recs[end - 1]["sim_time_s"] / end,
        "rounds_to_target": hit,
        "repeat": reach["repeat_share"],
        "coverage": reach["data_coverage"],
        "covered_skew": label_skew(covered, share) if covered.sum() else None,
        "cohort_skew": float(np.mean(skews)) if skews else None,
        "cohort_classes": float(np.mean(classes)) if classes else None,
        "mean_acc": float(np.mean(acc[:horizon])),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", choices=tta.TASKS, default="mnist")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="tiny scale (seconds, for tests)")
    ap.add_argument("--rounds", type=int, default=None, help="rounds (default: the task's)")
    ap.add_argument("--plans", default="pinned", help="as fedhybrid_tta.py --plans")
    ap.add_argument("--json", action="store_true", help="print one JSON object only")
    ap.add_argument(
        "--ucb-c", type=float, default=None,
        help="as fedhybrid_tta.py --ucb-c (default: the config's, 1.5; round 39 traced 0.1)",
    )  # fmt: skip
    args = ap.parse_args(argv)
    plans = tta.plans_file(args.plans, args.task, args.quick)
    semantics = None if args.ucb_c is None else {"fedhybrid_ucb_c": args.ucb_c}
    cfg = tta.task_config(
        args.quick, "fedprox", args.seed, args.rounds, plans=plans, task=args.task,
        semantics=semantics,
    )  # fmt: skip
    env = build_environment(cfg)
    # the benchmark's own horizon: BBC News runs on to 1.5x its rounds, MNIST to 3x
    extend = 3.0 if args.task == "mnist" else 1.5
    rows, recs = compare(cfg, METHODS, env=env, extend_factor=extend)
    ys = env.train.y.numpy()
    n_cls = int(max(ys.max(), env.test.y.numpy().max())) + 1
    client_labels = np.array([np.bincount(ys[p], minlength=n_cls) for p in env.parts], float)
    target = rows[0]["target_accuracy"]
    horizon = cfg.federated.rounds
    out = {
        "task": args.task,
        "seed": args.seed,
        "ucb_c": cfg.federated.fedhybrid_ucb_c,
        "target_accuracy": target,
        "rows": {
            m: {
                "time_to_target_s": r["time_to_target_s"],
                "speedup_vs_random": r["speedup_vs_random"],
                **trace(recs[m], client_labels, target, horizon),
            }
            for m, r in zip(METHODS, rows, strict=True)
        },
    }
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(
        f"Fig. 17's selector ablation, traced -- {tta.TASK_TITLES[args.task]}, seed {args.seed}"
        f", UCB constant c = {cfg.federated.fedhybrid_ucb_c:g}"
    )
    print(f"target = Random's best accuracy {100 * target:.2f}%; mean acc over rounds 1-{horizon}")
    head = ("method", "speedup", "s/round", "rounds", "repeat", "coverage", "covered skew",
            "cohort skew", "classes", "mean acc")  # fmt: skip
    print(f"{head[0]:<22}" + "  ".join(f"{h:>12}" for h in head[1:]))

    def cell(v, fmt: str) -> str:
        return f"{'-' if v is None else format(v, fmt):>12}"

    for m, r in out["rows"].items():
        print(
            f"{m:<22}{cell(r['speedup_vs_random'], '.2f')}  {cell(r['s_per_round'], '.1f')}"
            f"  {cell(r['rounds_to_target'], 'd')}  {cell(r['repeat'], '.2f')}"
            f"  {cell(r['coverage'], '.2f')}  {cell(r['covered_skew'], '.3f')}"
            f"  {cell(r['cohort_skew'], '.3f')}  {cell(r['cohort_classes'], '.2f')}"
            f"  {cell(100 * r['mean_acc'], '.1f')}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
