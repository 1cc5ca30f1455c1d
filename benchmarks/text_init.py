"""Does BBC News's small BERT learn at FedHybrid's NLP learning rate? Central SGD probe.

The federated BBC task (``benchmarks/fedhybrid_tta.py --task bbc-bert``) trains the small BERT
from random weights at FedHybrid §5.1's lr 0.1, and after 80 rounds every method is near
chance. This script takes the federated task's own environment (its model, its training and
test split for the seed), and trains the model centrally with plain SGD at lr 0.1. It
evaluates the test split every ``--every`` steps, so two settings can be told apart without
any federated noise:

* ``--word-vectors random | ppmi``: the initial word embeddings
  (``model.word_vectors``; ppmi = ``edgetrain.data.text.ppmi_word_vectors`` of the
  training split, no labels);
* ``--clip 0 | 1.0``: each step's gradient clipped to that global L2 norm
  (``federated.clip_grad_norm``; 1.0 is BERT's).

The default runs all four combinations, one after another. Everything is measured for
real; nothing is simulated.

    python benchmarks/text_init.py [--steps 160 --batch 160 --every 20 --seed 0] [--json]
    python benchmarks/text_init.py --quick        # tiny model and data (seconds, for tests)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from edgetrain.federated import build_environment


def _tta():
    spec = importlib.util.spec_from_file_location(
        "fedhybrid_tta", Path(__file__).with_name("fedhybrid_tta.py")
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def probe(
    quick: bool, seed: int, word_vectors: str, clip: float, steps: int, batch: int, every: int
) -> dict:
    """One central run: test accuracy every ``every`` steps (the federated task's split)."""
    cfg = _tta().task_config(quick, "fedprox", seed, task="bbc-bert", word_vectors=word_vectors)
    env = build_environment(cfg)
    model = env.build_model()
    x, y = env.train.x, env.train.y
    xt, yt = env.test.x, env.test.y
    opt = torch.optim.SGD(model.parameters(), lr=cfg.federated.lr)
    rng = np.random.default_rng(seed)
    curve = []
    t0 = time.perf_counter()
    for s in range(1, steps + 1):
        model.train()
        idx = torch.as_tensor(rng.choice(len(x), min(batch, len(x)), replace=False))
        loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        if s % every == 0 or s == steps:
            model.eval()
            with torch.no_grad():
                pred = model(xt).argmax(1)
            share = float(torch.bincount(pred, minlength=5).max()) / len(pred)
            curve.append(
                {
                    "step": s,
                    "train_loss": float(loss.detach()),
                    "test_accuracy": float((pred == yt).float().mean()),
                    "top_class_share": share,
                }
            )
    accs = [c["test_accuracy"] for c in curve]
    return {
        "word_vectors": word_vectors,
        "clip": clip,
        "curve": curve,
        "mean_accuracy": statistics.fmean(accs),
        "min_accuracy": min(accs),
        "final_accuracy": accs[-1],
        "wall_s": time.perf_counter() - t0,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny model and data (for tests)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=None, help="SGD steps (default 160; quick 6)")
    ap.add_argument("--batch", type=int, default=None, help="batch (default 160; quick 16)")
    ap.add_argument("--every", type=int, default=None, help="evaluate every N steps (20; 2)")
    ap.add_argument("--word-vectors", default="random,ppmi", help="comma list: random, ppmi")
    ap.add_argument("--clip", default="0,1.0", help="comma list of norms (0: no clipping)")
    ap.add_argument("--json", action="store_true", help="print one JSON object only")
    args = ap.parse_args(argv)
    steps = args.steps or (6 if args.quick else 160)
    batch = args.batch or (16 if args.quick else 160)
    every = args.every or (2 if args.quick else 20)
    kinds = args.word_vectors.split(",")
    bad = [k for k in kinds if k not in ("random", "ppmi")]
    if bad:
        ap.error(f"--word-vectors {','.join(bad)}: accepted random, ppmi")
    try:
        clips = [float(c) for c in args.clip.split(",")]
    except ValueError:
        ap.error(f"--clip {args.clip!r}: give norms like 0,1.0 (0: no clipping)")
    if any(c < 0 for c in clips):
        ap.error("--clip: norms must be >= 0 (0: no clipping)")
    runs = [probe(args.quick, args.seed, k, c, steps, batch, every) for k in kinds for c in clips]
    out = {"seed": args.seed, "steps": steps, "batch": batch, "lr": 0.1, "runs": runs}
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"BBC News, the federated task's small BERT and split (seed {args.seed}), central SGD "
          f"at lr 0.1, batch {batch}: test accuracy every {every} steps")  # fmt: skip
    for r in runs:
        cells = " ".join(f"{100 * c['test_accuracy']:5.1f}" for c in r["curve"])
        clip = f"clip {r['clip']:g}" if r["clip"] > 0 else "no clip"
        print(f"  {r['word_vectors']:<7}{clip:<10}{cells}   mean {100 * r['mean_accuracy']:.1f}"
              f"  min {100 * r['min_accuracy']:.1f}  ({r['wall_s']:.0f} s)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
