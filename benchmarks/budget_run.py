"""Whole training runs under a memory budget: accuracy, measured peak and time vs unplanned.

``edgetrain budget`` measures one step; this trains a model for epochs with every step
under the plan (``edgetrain run`` with a ``budget`` section,
:mod:`edgetrain.engine.budget.train`) at several budgets and methods, from the same seed,
and prints per run:

* the final test accuracy and loss, and whether every epoch's train loss, test loss and
  the final weights are **bit-identical** to the unplanned run's (they must be for keep /
  recompute / regen / mask plans; a compressed plan is within its codec's bound instead);
* the measured peak of the budget's scope (the first step of each epoch, in the real
  training step) over the budget, the most of any epoch;
* time: the median epoch's wall seconds over the unplanned run's median epoch (epoch 1
  is left out, it holds the profiling), and the profiling + planning seconds;
* the per-epoch checkpoint (model, Adam's state, RNG; ``edgetrain run --resume``): its
  size and the median seconds to write it, beside the median epoch;
* with ``--resume-check``: each budgeted run once more, stopped in the first step of its
  middle epoch and continued with :func:`resume_local`, and whether its losses and final
  weights equal the uninterrupted run's; the resume reads the run's own ``profile.json``
  back and plans again, and its profiling + planning seconds are printed beside the first
  session's (``resume s`` / ``plan s``; in one process the op costs are cached per
  signature, so a second profile is cheap there);
* with ``--fresh-resume``: each budgeted run once more, stopped the same way and resumed in
  a new process (``edgetrain run --resume``, as after a crash), once with its
  ``profile.json`` and once from a copy without it: each resume's wall and profiling +
  planning seconds, and whether it ends as the uninterrupted run.

Runs are sequential in one process, torch pinned to one thread; the ratio of medians over
epochs is what to read (the machine is shared).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/budget_run.py [--quick] [--json]
        [--model mobilenetv2 --width 1.0 --data mnist5k --epochs 4 --batch 32 --lr 0.002]
        [--budgets 0.5,0.3 --methods recompute,hybrid --scope saved] [--resume-check]
        [--fresh-resume]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

import edgetrain.engine.trainer as trainer
from edgetrain.config import parse_config
from edgetrain.engine.local import resume_local, run_local
from edgetrain.runs import load_state


class _Stop(Exception):
    """Stands for the process dying mid-run (``--resume-check``)."""


#: seconds of every checkpoint write, per run (the trainer's save_checkpoint, timed)
_CKPT_S: list[float] = []
_save = trainer.save_checkpoint


def _timed_save(*args, **kwargs):
    t0 = time.perf_counter()
    try:
        return _save(*args, **kwargs)
    finally:
        _CKPT_S.append(time.perf_counter() - t0)


def _checkpoint_cost(run_dir) -> dict:
    """The run's checkpoint writes: median seconds, and the size of the last one."""
    size = sum(f.stat().st_size for f in (run_dir / "checkpoints").rglob("*") if f.is_file())
    out = {
        "checkpoint_s": statistics.median(_CKPT_S) if _CKPT_S else None,
        "checkpoint_mb": size / 1e6,
    }
    _CKPT_S.clear()
    return out


def _same_run(a, b) -> bool:
    """Every epoch's losses and the final weights of two runs are equal."""
    sa = load_state(a.run_dir / "model.safetensors")
    sb = load_state(b.run_dir / "model.safetensors")
    return (
        [(m.train_loss, m.test_loss) for m in a.history]
        == [(m.train_loss, m.test_loss) for m in b.history]
        and sa.keys() == sb.keys()
        and all(torch.equal(sa[k], sb[k]) for k in sa)
    )


def _stopped_and_resumed(config):
    """``config``'s run, stopped in the first step of its middle epoch, then resumed."""
    return resume_local(_stopped(config))


def _stopped(config) -> Path:
    """The run directory of ``config``'s run, stopped in the first step of its middle epoch."""
    stop_at = None

    def on_step(done, total):
        nonlocal stop_at
        per_epoch = total // config.train.epochs
        stop_at = stop_at or per_epoch * (config.train.epochs // 2) + 1
        if done == stop_at:
            raise _Stop

    with contextlib.suppress(_Stop):
        run_local(config, on_step=on_step)
    return Path(config.output_root) / config.name


def _same_dirs(a: Path, b: Path) -> bool:
    """Every epoch's losses and the final weights of two run directories are equal."""
    sa, sb = load_state(a / "model.safetensors"), load_state(b / "model.safetensors")

    def losses(d):
        return [(e["train_loss"], e["test_loss"]) for e in _events(d, "epoch")]

    return (
        losses(a) == losses(b)
        and sa.keys() == sb.keys()
        and all(torch.equal(sa[k], sb[k]) for k in sa)
    )


def _fresh_resumes(config, whole: Path) -> dict:
    """``config``'s run stopped as :func:`_stopped`, then resumed in a new process
    (``edgetrain run --resume``, as after a crash) twice: from the run directory as it is
    (its ``profile.json`` read back) and from a copy without ``profile.json`` (profiled
    again, as every resume did before round 21).  Per resume: wall seconds of the
    process, seconds of its plan event (profiling + planning), whether it reused the
    profile, whether it ends as the uninterrupted run ``whole``."""
    src = _stopped(config)
    bare = src.with_name(src.name + "-noprofile")
    shutil.copytree(src, bare)
    (bare / "profile.json").unlink()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = {}
    for label, d in (("with_profile", src), ("without_profile", bare)):
        cmd = [sys.executable, "-m", "edgetrain.cli", "run", "--resume", str(d), "--json"]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
        plan = _events(d, "plan")[-1]
        out[label] = {
            "wall_s": wall,
            "plan_s": plan["seconds"],
            "profile_reused": plan["profile"]["reused"],
            "identical": _same_dirs(d, whole),
        }
    return out


def _config(root, name, a, budget=None):
    d = {
        "name": name,
        "seed": a.seed,
        "output_root": root,
        "model": {"name": a.model, "options": {"width_mult": a.width} if a.width else {}},
        "data": {"name": a.data, "test_fraction": 0.25, "max_samples": a.max_samples},
        "train": {"epochs": a.epochs, "batch_size": a.batch, "lr": a.lr, "optimizer": "adam"},
    }
    if budget is not None:
        d["budget"] = budget
    return parse_config(d)


def _events(run_dir, kind):
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r.get("event") == kind]


def _median_epoch_s(result) -> float:
    secs = [m.seconds for m in result.history]
    return statistics.median(secs[1:] if len(secs) > 1 else secs)


def run(a) -> dict:
    torch.set_num_threads(1)
    trainer.save_checkpoint = _timed_save
    root = tempfile.mkdtemp(prefix="edgetrain-budget-run-")
    base = run_local(_config(root, "none", a))
    base_state = load_state(base.run_dir / "model.safetensors")
    base_epoch = _median_epoch_s(base)
    rows = [
        {
            "method": "none",
            "budget": None,
            "accuracy": base.test_accuracy,
            "test_loss": base.test_loss,
            "epoch_s": base_epoch,
            "time_ratio": 1.0,
            **_checkpoint_cost(base.run_dir),
        }
    ]
    for method in a.methods.split(","):
        for b in a.budgets.split(","):
            spec = {"limit": float(b) if b.replace(".", "", 1).isdigit() else b}
            spec.update(method=method, scope=a.scope)
            spec.update(profile_repeats=a.profile_repeats, in_situ_steps=a.in_situ_steps)
            r = run_local(_config(root, f"{method}-{b}", a, spec))
            cost = _checkpoint_cost(r.run_dir)
            plan = _events(r.run_dir, "plan")[0]
            epochs = _events(r.run_dir, "budget")
            state = load_state(r.run_dir / "model.safetensors")
            exact = (
                [m.train_loss for m in r.history] == [m.train_loss for m in base.history]
                and [m.test_loss for m in r.history] == [m.test_loss for m in base.history]
                and all(torch.equal(state[k], base_state[k]) for k in base_state)
            )
            rows.append(
                {
                    "method": method,
                    "budget": b,
                    "scope": a.scope,
                    "budget_bytes": plan["budget_bytes"],
                    "unplanned_peak_bytes": plan["unplanned_peak_bytes"],
                    "decisions": {k: v for k, v in plan["decisions"].items() if v},
                    "peak_to_budget": max(
                        e["measured_peak_bytes"] / e["budget_bytes"] for e in epochs
                    ),  # fmt: skip
                    "within_budget": all(e["within_budget"] for e in epochs),
                    "accuracy": r.test_accuracy,
                    "test_loss": r.test_loss,
                    "bit_identical": exact,
                    "epoch_s": _median_epoch_s(r),
                    "time_ratio": _median_epoch_s(r) / base_epoch,
                    "plan_s": plan["seconds"],
                    "predicted_overhead_s": plan["predicted_overhead_s"],
                    **cost,
                }
            )
            if a.resume_check:
                resumed = _stopped_and_resumed(_config(root, f"{method}-{b}-resumed", a, spec))
                _CKPT_S.clear()
                rows[-1]["resumed_identical"] = _same_run(resumed, r)
                again = _events(resumed.run_dir, "plan")[-1]
                rows[-1]["resume_plan_s"] = again["seconds"]
                rows[-1]["resume_profile_reused"] = again["profile"]["reused"]
            if a.fresh_resume:
                rows[-1]["fresh_resume"] = _fresh_resumes(
                    _config(root, f"{method}-{b}-fresh", a, spec), r.run_dir
                )
                _CKPT_S.clear()
    return {
        "model": a.model,
        "width_mult": a.width,
        "data": a.data,
        "max_samples": a.max_samples,
        "epochs": a.epochs,
        "batch": a.batch,
        "lr": a.lr,
        "seed": a.seed,
        "rows": rows,
    }


def print_table(out: dict) -> None:
    print(
        f"{out['model']} (width {out['width_mult'] or 1.0}) on {out['data']}, "
        f"{out['epochs']} epochs of batch {out['batch']}, seed {out['seed']}"
        + (f", {out['max_samples']} samples" if out.get("max_samples") else "")
    )
    print(
        f"{'method':<10} {'budget':>7} {'peak/budget':>11} {'accuracy':>9} {'exact':>6} "
        f"{'epoch s':>8} {'time x':>7} {'plan s':>7} {'ckpt s':>7} {'ckpt MB':>8} "
        f"{'resumed':>8} {'resume s':>8}  decisions"
    )
    fresh = [r for r in out["rows"] if "fresh_resume" in r]
    for r in out["rows"]:
        pb = f"{r['peak_to_budget']:.3f}" if "peak_to_budget" in r else "-"
        ex = "-" if r["method"] == "none" else ("yes" if r["bit_identical"] else "no")
        ps = f"{r['plan_s']:.1f}" if "plan_s" in r else "-"
        cs = f"{r['checkpoint_s']:.2f}" if r.get("checkpoint_s") is not None else "-"
        rs = {True: "same", False: "differs"}.get(r.get("resumed_identical"), "-")
        rp = f"{r['resume_plan_s']:.1f}" if "resume_plan_s" in r else "-"
        dec = ", ".join(f"{k} {v}" for k, v in r.get("decisions", {}).items())
        print(
            f"{r['method']:<10} {r['budget'] or '-':>7} {pb:>11} {r['accuracy']:>9.4f} {ex:>6} "
            f"{r['epoch_s']:>8.2f} {r['time_ratio']:>7.3f} {ps:>7} {cs:>7} "
            f"{r['checkpoint_mb']:>8.1f} {rs:>8} {rp:>8}  {dec}"
        )
    if fresh:
        print("\nresumed in a new process (edgetrain run --resume), with and without profile.json")
        print(
            f"{'method':<10} {'budget':>7} {'resume':<16} {'wall s':>7} {'plan s':>7} "
            f"{'reused':>6} {'same as whole':>13}"
        )
        for r in fresh:
            for label, f in r["fresh_resume"].items():
                print(
                    f"{r['method']:<10} {r['budget']:>7} {label:<16} {f['wall_s']:>7.1f} "
                    f"{f['plan_s']:>7.1f} {'yes' if f['profile_reused'] else 'no':>6} "
                    f"{'yes' if f['identical'] else 'no':>13}"
                )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="mobilenetv2")
    p.add_argument("--width", type=float, default=None, help="width_mult (MobileNetV2)")
    p.add_argument("--data", default="mnist5k")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.002, help="Adam's learning rate")
    p.add_argument("--budgets", default="0.5,0.3")
    p.add_argument("--methods", default="recompute,hybrid")
    p.add_argument("--scope", default="saved", choices=["saved", "all"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--resume-check",
        action="store_true",
        help="also stop each budgeted run mid-way, resume it, compare with the whole run",
    )
    p.add_argument(
        "--fresh-resume",
        action="store_true",
        help="also stop each budgeted run mid-way and resume it in a new process twice, "
        "with and without its profile.json (the resume's profiling + planning seconds)",
    )
    p.add_argument(
        "--max-samples", type=int, default=None, help="use at most this many samples of --data"
    )
    p.add_argument("--profile-repeats", type=int, default=3, help="budget.profile_repeats")
    p.add_argument("--in-situ-steps", type=int, default=10, help="budget.in_situ_steps")
    p.add_argument(
        "--quick", action="store_true",
        help="width 0.35 on 400 digits, 2 epochs",
    )  # fmt: skip
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    if a.quick:
        a.width, a.data, a.epochs, a.budgets, a.max_samples = 0.35, "digits", 2, "0.5", 400
    out = run(a)
    if a.json:
        json.dump(out, sys.stdout, indent=1)
        print()
    else:
        print_table(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
