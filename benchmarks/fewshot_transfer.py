"""Few-shot transfer with fine-tuning strategies: TrainDeeploy Table I, offline.

    python benchmarks/fewshot_transfer.py            # >= 5 seeds, the figures we quote
    python benchmarks/fewshot_transfer.py --quick    # minutes on 2 cores (tests run it smaller)

TrainDeeploy (§VI-A, Table I) fine-tunes CCT-2 pretrained on CIFAR-10 on 50 shots
of MNIST and EuroSAT. Those data sets are not available offline, so the pairs here
are the offline ones (issue 4):

* ``MNIST 0-4 -> 5-9``: CCT-2 pretrained on MNIST digits 0-4, 50-shot on digits 5-9
  (new classes, same domain);
* ``MNIST -> 8x8 digits``: CCT-2 pretrained on all MNIST digits, 50-shot on
  scikit-learn's 8x8 digits resized to the MNIST side (a domain shift);
* personalisation: LeNet pretrained on the smartwatch windows of subjects 1-8,
  adapted with a few windows per class of a held-out subject vs. no adaptation.

Protocol per run: k shots per class, SGD, batch 8, lr 0.01 cosine to 0.0005,
accuracy = mean of the last five epochs, repeated over seeds (mean +- std). The
paper trains 100 epochs; this script defaults to fewer (see ``--epochs``) so that
a 2-core machine finishes, and prints what it ran with. Pretrained sources are
cached in ``--cache`` and reused. Training FLOPs are counted per sample (batch-1
forward + backward, torch.utils.flop_counter, equal to the planner's
``flops_train``); step times are measured on this CPU next to the planner's
estimate for the target SoC (simulated, labelled as such).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from edgetrain.transfer import (
    DataRef,
    FinetuneConfig,
    PretrainSettings,
    Protocol,
    mean_std,
    pretrain,
    run_finetune,
)
from edgetrain.transfer.options import parse_options

STRATEGIES = ["full", "lp", "ft-1", "lora-1", "ft-2", "lora-2"]
COMPONENTS = {  # TrainDeeploy Table I "Training Components" / "LoRA"
    "full": ("Entire model", False),
    "lp": ("Classifier head", False),
    "ft-1": ("Last attention block", False),
    "lora-1": ("Last attention block", True),
    "ft-2": ("Last 2 attention blocks", False),
    "lora-2": ("Last 2 attention blocks", True),
}
PAPER_TABLE_I = {  # CIFAR-10 -> MNIST, CIFAR-10 -> EuroSAT accuracy (%); FLOPs (M); MB
    "full": (92.83, 64.85, 201, 1.12),
    "lp": (88.34, 76.70, 71, 0.005),
    "ft-1": (93.54, 78.94, 96, 0.38),
    "lora-1": (95.38, 77.00, 86, 0.026),
    "ft-2": (94.62, 81.52, 126, 0.76),
    "lora-2": (96.00, 80.50, 104, 0.05),
}


@dataclass(frozen=True)
class Settings:
    seeds: int
    epochs: int
    shots: int
    test_size: int
    size: int
    pretrain_epochs: int
    pretrain_limit: int | None
    model_options: dict[str, Any]
    strategies: list[str]
    personal_shots: int
    personal_epochs: int
    personal_strategies: list[str]
    held_out: list[int]
    timing_steps: int


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, Settings]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny epochs/seeds/subsets (minutes)")
    p.add_argument("--seeds", type=int)
    p.add_argument("--epochs", type=int, help="fine-tuning epochs (paper: 100)")
    p.add_argument("--shots", type=int, default=50)
    p.add_argument("--test-size", type=int, help="cap on test samples per run (stratified)")
    p.add_argument("--size", type=int, default=28, help="image side for every image data set")
    p.add_argument("--pretrain-epochs", type=int)
    p.add_argument("--pretrain-limit", type=int, help="cap on pretraining samples")
    p.add_argument("--model-opt", action="append", default=[], help="CCT-2 option KEY=VALUE")
    p.add_argument("--strategies", default=",".join(STRATEGIES))
    p.add_argument("--targets", default="digits59,sk8x8", help="comma list of digits59, sk8x8")
    p.add_argument("--personal-shots", type=int, default=3)
    p.add_argument("--personal-strategies", default="lp,ft-1,full")
    p.add_argument("--no-personalisation", action="store_true")
    p.add_argument("--no-plan", action="store_true", help="skip the planner's target estimate")
    p.add_argument("--cache", type=Path, default=Path("runs/bench-fewshot"))
    p.add_argument("--json", type=Path, help="also write all results to this JSON file")
    args = p.parse_args(argv)
    quick = args.quick
    settings = Settings(
        seeds=args.seeds or (2 if quick else 5),
        epochs=args.epochs or (5 if quick else 20),
        shots=args.shots if not quick or args.shots != 50 else 10,
        test_size=args.test_size or (200 if quick else 1000),
        size=args.size,
        pretrain_epochs=args.pretrain_epochs or (1 if quick else 4),
        pretrain_limit=args.pretrain_limit or (600 if quick else None),
        model_options=parse_options(args.model_opt, "--model-opt"),
        strategies=[s.strip() for s in args.strategies.split(",") if s.strip()],
        personal_shots=args.personal_shots,
        personal_epochs=args.epochs or (5 if quick else 20),
        personal_strategies=[s.strip() for s in args.personal_strategies.split(",") if s.strip()],
        held_out=[9, 10],
        timing_steps=5 if quick else 30,
    )
    return args, settings


def cached_pretrain(
    cache: Path, label: str, model: str, data: DataRef, options: dict, settings: PretrainSettings
) -> Path:
    """Pretrain once per (model, data, options, settings); later calls reuse the run dir."""
    key = json.dumps(
        [model, data.to_json(), options, settings.to_json()], sort_keys=True, default=str
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    run = cache / f"{label}-{digest}"
    if (run / "card.json").is_file() and (run / "model.safetensors").is_file():
        print(f"  reusing pretrained {label}: {run}", file=sys.stderr)
        return run
    began = time.perf_counter()
    result = pretrain(
        model,
        data,
        model_options=options,
        settings=settings,
        seed=0,
        output_root=cache,
        name=run.name,
    )
    print(
        f"  pretrained {label} in {time.perf_counter() - began:.0f} s: "
        f"accuracy {result.card.accuracy:.4f} ({result.run_dir})",
        file=sys.stderr,
    )
    return result.run_dir


def plan_estimates(strategies: list[str], options: dict) -> dict[str, dict | None]:
    """The planner's per-strategy target latency (simulated) and training FLOPs."""
    try:
        from edgetrain.memory import plan_training
    except ImportError as exc:
        print(f"  planner unavailable: {exc}", file=sys.stderr)
        return {s: None for s in strategies}
    out: dict[str, dict | None] = {}
    for s in strategies:
        plan = plan_training("cct2", s, batch=1, optimizer="sgd", model_options=options).to_json()
        out[s] = {
            "latency_ms": plan.get("latency_ms"),
            "flops_train": plan.get("flops_train"),
            "target": plan.get("target"),
        }
    return out


def run_transfer(st: Settings, cache: Path, targets: list[str], runs_root: Path) -> dict:
    image = {"size": st.size}
    cct = {"in_channels": 1, "input_size": st.size, **st.model_options}
    pre = PretrainSettings(epochs=st.pretrain_epochs, limit=st.pretrain_limit, lr=2e-3)
    pairs = {}
    if "digits59" in targets:
        src = cached_pretrain(
            cache,
            "cct2-mnist04",
            "cct2",
            DataRef("mnist5k", {**image, "digits": [0, 1, 2, 3, 4]}),
            cct,
            pre,
        )
        pairs["digits59"] = (
            "MNIST 0-4 -> 5-9",
            src,
            DataRef("mnist5k", {**image, "digits": [5, 6, 7, 8, 9]}),
        )
    if "sk8x8" in targets:
        src = cached_pretrain(cache, "cct2-mnist", "cct2", DataRef("mnist5k", image), cct, pre)
        pairs["sk8x8"] = ("MNIST -> 8x8 digits", src, DataRef("digits", image))
    protocol = Protocol(epochs=st.epochs)
    results: dict[str, dict[str, Any]] = {}
    for strategy in st.strategies:
        results[strategy] = {}
        for key, (label, src, target) in pairs.items():
            accs, runs = [], []
            for seed in range(st.seeds):
                r = run_finetune(
                    FinetuneConfig(
                        source=str(src),
                        strategy=strategy,
                        data=target,
                        shots=st.shots,
                        protocol=protocol,
                        seed=seed,
                        test_size=st.test_size,
                        timing_steps=st.timing_steps,
                        plan=False,
                    ),
                    output_root=runs_root,
                    name=f"{key}-{strategy}-s{seed}",
                )
                accs.append(r.accuracy)
                runs.append(r)
            mean, std = mean_std(accs)
            first = runs[0]
            results[strategy][key] = {
                "label": label,
                "accuracies": accs,
                "mean": mean,
                "std": std,
                "trained_params": first.trained_params,
                "trained_param_bytes": first.trained_param_bytes,
                "flops_train": first.flops_train_counted,
                "step_time_ms": [r.step_time_ms for r in runs],
                "wall_s": sum(r.wall_s for r in runs),
            }
            print(
                f"  {strategy:7s} {label:22s} {100 * mean:6.2f} +- {100 * std:4.2f} "
                f"({st.seeds} seeds, {results[strategy][key]['wall_s']:.0f} s)",
                file=sys.stderr,
            )
    return {"pairs": {k: v[0] for k, v in pairs.items()}, "results": results, "cct_options": cct}


def run_personalisation(st: Settings, cache: Path, runs_root: Path) -> dict:
    """LeNet on 8 subjects -> a held-out subject: no adaptation vs a few windows."""
    pre = PretrainSettings(
        epochs=max(st.pretrain_epochs * 3, 3), lr=2e-3, batch_size=32, limit=st.pretrain_limit
    )
    src = cached_pretrain(
        cache,
        "lenet-watch-s1-8",
        "lenet",
        DataRef("watch", {}, exclude_groups=tuple(st.held_out)),
        {},
        pre,
    )
    protocol = Protocol(epochs=st.personal_epochs)
    out: dict[str, Any] = {"source": str(src), "subjects": {}}
    for subject in st.held_out:
        rows: dict[str, Any] = {}
        for strategy in st.personal_strategies:
            accs, base = [], []
            for seed in range(st.seeds):
                r = run_finetune(
                    FinetuneConfig(
                        source=str(src),
                        strategy=strategy,
                        data=DataRef("watch", {}, groups=(subject,)),
                        shots=st.personal_shots,
                        protocol=protocol,
                        seed=seed,
                        head="keep",
                        timing_steps=st.timing_steps,
                        plan=False,
                    ),
                    output_root=runs_root,
                    name=f"watch-s{subject}-{strategy}-seed{seed}",
                )
                accs.append(r.accuracy)
                base.append(r.no_adaptation_accuracy)
            rows[strategy] = {
                "accuracies": accs,
                "no_adaptation": base,
                "mean": mean_std(accs),
                "no_adaptation_mean": mean_std(base),
            }
        out["subjects"][subject] = rows
        base_m, base_s = next(iter(rows.values()))["no_adaptation_mean"]
        best = ", ".join(f"{s} {100 * v['mean'][0]:.1f}" for s, v in rows.items())
        print(
            f"  subject {subject}: no adaptation {100 * base_m:.1f} +- {100 * base_s:.1f}; {best}",
            file=sys.stderr,
        )
    return out


def print_tables(st: Settings, transfer: dict, personal: dict | None, plans: dict) -> None:
    pairs = transfer["pairs"]
    keys = list(pairs)
    print(
        f"\nTable I layout: {st.shots}-shot transfer, CCT-2 {st.size}x{st.size}, "
        f"{st.epochs} epochs (paper: 100), SGD batch 8, lr 0.01 cosine -> 0.0005, "
        f"accuracy = mean of last 5 epochs, mean +- std over {st.seeds} seeds"
    )
    head = ["Strategy", "Training components", "LoRA"] + [pairs[k] for k in keys]
    head += ["FLOPs (M)", "Trained param (MB)", "paper MNIST / EuroSAT / FLOPs / MB"]
    rows = []
    for s, per in transfer["results"].items():
        comp, lora = COMPONENTS.get(s, ("", False))
        any_key = next(iter(per.values()))
        paper = PAPER_TABLE_I.get(s)
        rows.append(
            [s, comp, "yes" if lora else "no"]
            + [f"{100 * per[k]['mean']:.2f} +- {100 * per[k]['std']:.2f}" for k in keys]
            + [
                f"{any_key['flops_train'] / 1e6:.1f}",
                f"{any_key['trained_param_bytes'] / 1e6:.4f}",
                "" if paper is None else f"{paper[0]} / {paper[1]} / {paper[2]} / {paper[3]}",
            ]
        )
    _print_grid(head, rows)

    print(
        "\nBatch-1 training step: measured median on this CPU "
        f"(torch {torch.__version__}, {torch.get_num_threads()} thread(s)) vs. the planner's "
        "target estimate (SIMULATED, analytical cost model)"
    )
    head = [
        "Strategy",
        "CPU step (ms, median over seeds)",
        "target cores (ms)",
        "target accelerated (ms)",
        "planner FLOPs (M)",
    ]
    rows = []
    for s, per in transfer["results"].items():
        times = sorted(t for v in per.values() for t in v["step_time_ms"])
        plan = plans.get(s) or {}
        lat = plan.get("latency_ms") or {}
        rows.append(
            [
                s,
                f"{times[len(times) // 2]:.2f}",
                _fmt(lat.get("cores")),
                _fmt(lat.get("accelerated")),
                _fmt(None if plan.get("flops_train") is None else plan["flops_train"] / 1e6),
            ]
        )
    _print_grid(head, rows)

    if personal:
        print(
            f"\nPersonalisation: LeNet pretrained on watch subjects 1-8, {st.personal_shots} "
            f"windows per class of the held-out subject, {st.personal_epochs} epochs, "
            f"{st.seeds} seeds; test = that subject's other windows"
        )
        head = ["Subject", "no adaptation"] + st.personal_strategies
        rows = []
        for subject, per in personal["subjects"].items():
            base = next(iter(per.values()))["no_adaptation_mean"]
            rows.append(
                [str(subject), f"{100 * base[0]:.2f} +- {100 * base[1]:.2f}"]
                + [
                    f"{100 * per[s]['mean'][0]:.2f} +- {100 * per[s]['mean'][1]:.2f}"
                    for s in st.personal_strategies
                ]
            )
        _print_grid(head, rows)


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _print_grid(head: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    line = " | ".join(h.ljust(w) for h, w in zip(head, widths, strict=True))
    print(line)
    print("-+-".join("-" * w for w in widths))
    for r in rows:
        print(" | ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)))


def main(argv: list[str] | None = None) -> dict:
    args, st = parse_args(argv)
    began = time.perf_counter()
    cache = args.cache
    runs_root = cache / "finetunes" / time.strftime("%Y%m%d-%H%M%S")
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    print(f"settings: {st}", file=sys.stderr)
    transfer = run_transfer(st, cache, targets, runs_root)
    plans = (
        {}
        if args.no_plan
        else plan_estimates(st.strategies, {**transfer["cct_options"], "num_classes": 5})
    )
    personal = None if args.no_personalisation else run_personalisation(st, cache, runs_root)
    print_tables(st, transfer, personal, plans)
    out = {
        "settings": st.__dict__,
        "transfer": transfer,
        "plans": plans,
        "personalisation": personal,
        "wall_s": time.perf_counter() - began,
    }
    print(f"\ntotal {out['wall_s']:.0f} s; fine-tune run directories under {runs_root}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1, default=str))
    return out


if __name__ == "__main__":
    main()
