"""Few-shot transfer with fine-tuning strategies: TrainDeeploy Table I, offline.

    python benchmarks/fewshot_transfer.py            # paper protocol: 100 epochs, 5 seeds
    python benchmarks/fewshot_transfer.py --quick    # minutes on 2 cores (tests run it smaller)
    python benchmarks/fewshot_transfer.py --results out.jsonl ...   # append/resume per run
    python benchmarks/fewshot_transfer.py --timing-only              # step times, speed-ups

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
accuracy = mean of the last five epochs, repeated over seeds (mean +- std), 100
epochs as in the paper. What makes that affordable on 2 cores is frozen-prefix
activation caching (:mod:`edgetrain.transfer.prefix`): every strategy but ``full``
trains only a suffix of CCT-2, so the frozen tokenizer (and frozen blocks) run once
per sample instead of once per step — exactly the same training, recorded per run.
Seeds are the outer loop and every finished run is appended to ``--results``
(JSON lines), so an interrupted benchmark resumes and a partial one prints a table
with the seed count of every cell. Pretrained sources are cached in ``--cache`` and
reused. Personalisation is leave-one-subject-out: for each held-out subject a
source is pretrained on all other subjects. Training FLOPs are counted per sample (batch-1
forward + backward, torch.utils.flop_counter, equal to the planner's
``flops_train``); step times are measured on this CPU next to the planner's
estimate for the target SoC (simulated, labelled as such).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
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
TARGETS = ["digits59", "sk8x8"]  # the offline transfer pairs (see the module docstring)
COMPONENTS = {  # TrainDeeploy Table I "Training Components" / "LoRA"
    "full": ("Entire model", False),
    "lp": ("Classifier head", False),
    "ft-1": ("Last attention block", False),
    "lora-1": ("Last attention block", True),
    "ft-2": ("Last 2 attention blocks", False),
    "lora-2": ("Last 2 attention blocks", True),
}
PAPER_TABLE_I = {  # TrainDeeploy Table I: MNIST (mean, std), EuroSAT (mean, std), FLOPs M, MB
    "full": ((92.83, 0.91), (64.85, 3.11), 201, 1.12),
    "lp": ((88.34, 0.42), (76.70, 0.55), 71, 0.005),
    "ft-1": ((93.54, 0.38), (78.94, 0.44), 96, 0.38),
    "lora-1": ((95.38, 0.29), (77.00, 0.47), 86, 0.026),
    "ft-2": ((94.62, 0.33), (81.52, 0.36), 126, 0.76),
    "lora-2": ((96.00, 0.27), (80.50, 0.41), 104, 0.05),
}
WATCH_SUBJECTS = list(range(1, 11))


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
    personal_models: list[str]
    held_out: list[int]
    timing_steps: int
    cache_prefix: bool
    report_only: bool = False
    first_seed: int = 0  # train seeds first_seed .. seeds-1 (split a long run over processes)


def _ids(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, Settings]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny epochs/seeds/subsets (minutes)")
    p.add_argument("--seeds", type=int)
    p.add_argument("--epochs", type=int, help="fine-tuning epochs (paper and default: 100)")
    p.add_argument("--shots", type=int, default=50)
    p.add_argument("--test-size", type=int, help="cap on test samples per run (stratified)")
    p.add_argument("--size", type=int, default=28, help="image side for every image data set")
    p.add_argument("--pretrain-epochs", type=int)
    p.add_argument("--pretrain-limit", type=int, help="cap on pretraining samples")
    p.add_argument("--model-opt", action="append", default=[], help="CCT-2 option KEY=VALUE")
    p.add_argument("--strategies", default=",".join(STRATEGIES))
    p.add_argument(
        "--targets", default="digits59,sk8x8", help="comma list of digits59, sk8x8 (or none)"
    )
    p.add_argument("--personal-shots", type=int, default=3)
    p.add_argument("--personal-epochs", type=int, help="default: --epochs")
    p.add_argument("--personal-strategies", default="lp,ft-1,full")
    p.add_argument("--personal-models", default="lenet", help="comma list of lenet, alexnet")
    p.add_argument(
        "--held-out",
        default=",".join(map(str, WATCH_SUBJECTS)),
        help="watch subjects adapted to, one at a time (leave-one-subject-out)",
    )
    p.add_argument("--no-personalisation", action="store_true")
    p.add_argument("--no-plan", action="store_true", help="skip the planner's target estimate")
    p.add_argument(
        "--no-cache-prefix", action="store_true", help="train the whole model every step"
    )
    p.add_argument("--no-timing", action="store_true", help="skip the interleaved step timing")
    p.add_argument("--timing-only", action="store_true", help="only the step-time tables")
    p.add_argument("--timing-rounds", type=int, help="interleaved timing rounds (default 7)")
    p.add_argument("--cache", type=Path, default=Path("runs/bench-fewshot"))
    p.add_argument("--results", type=Path, help="append each run here (JSON lines); resumes")
    p.add_argument(
        "--report-only",
        action="store_true",
        help="train nothing: print the tables from the runs already in --results",
    )
    p.add_argument("--json", type=Path, help="also write all results to this JSON file")
    p.add_argument(
        "--first-seed",
        type=int,
        default=0,
        help="train only seeds FIRST..SEEDS-1 (to split a run over processes; each writes its own "
        "--results, concatenate them and print with --report-only)",
    )
    args = p.parse_args(argv)
    quick = args.quick
    epochs = args.epochs or (5 if quick else 100)
    settings = Settings(
        seeds=args.seeds or (2 if quick else 5),
        epochs=epochs,
        shots=args.shots if not quick or args.shots != 50 else 10,
        test_size=args.test_size or (200 if quick else 1000),
        size=args.size,
        pretrain_epochs=args.pretrain_epochs or (1 if quick else 4),
        pretrain_limit=args.pretrain_limit or (600 if quick else None),
        model_options=parse_options(args.model_opt, "--model-opt"),
        strategies=[s.strip() for s in args.strategies.split(",") if s.strip()],
        personal_shots=args.personal_shots,
        personal_epochs=args.personal_epochs or epochs,
        personal_strategies=[s.strip() for s in args.personal_strategies.split(",") if s.strip()],
        personal_models=[m.strip() for m in args.personal_models.split(",") if m.strip()],
        held_out=_ids(args.held_out),
        timing_steps=5 if quick else 30,
        cache_prefix=not args.no_cache_prefix,
        report_only=args.report_only,
        first_seed=args.first_seed,
    )
    if not 0 <= settings.first_seed < settings.seeds:
        p.error(f"--first-seed must be in 0..{settings.seeds - 1}, got {settings.first_seed}")
    return args, settings


class ResultLog:
    """Finished runs as JSON lines; a rerun with the same settings skips them."""

    def __init__(self, path: Path | None):
        self.path = path
        self.rows: dict[str, dict] = {}
        if path is not None and path.is_file():
            for line in path.read_text().splitlines():
                if line.strip():
                    row = json.loads(line)
                    self.rows[row["key"]] = row

    @staticmethod
    def key(*parts: Any) -> str:
        return json.dumps(parts, sort_keys=True, default=str)

    def get(self, key: str) -> dict | None:
        return self.rows.get(key)

    def add(self, key: str, row: dict) -> dict:
        row = {"key": key, **row}
        self.rows[key] = row
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a") as f:
                f.write(json.dumps(row, default=str) + "\n")
        return row


def cached_pretrain(
    cache: Path,
    label: str,
    model: str,
    data: DataRef,
    options: dict,
    settings: PretrainSettings,
    only_cached: bool = False,
) -> Path | None:
    """Pretrain once per (model, data, options, settings); later calls reuse the run dir.

    ``only_cached``: return None instead of pretraining a source that is not cached.
    """
    key = json.dumps(
        [model, data.to_json(), options, settings.to_json()], sort_keys=True, default=str
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    run = cache / f"{label}-{digest}"
    if (run / "card.json").is_file() and (run / "model.safetensors").is_file():
        print(f"  reusing pretrained {label}: {run}", file=sys.stderr)
        return run
    if only_cached:
        return None
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


def _run_row(r) -> dict:
    """What the tables need from one fine-tune (kept small: one JSON line per run)."""
    return {
        "accuracy": r.accuracy,
        "last_epoch_accuracy": r.last_accuracy,
        "final_train_loss": r.history[-1]["train_loss"],
        "final_train_accuracy": r.history[-1]["train_accuracy"],
        "no_adaptation": r.no_adaptation_accuracy,
        "trained_params": r.trained_params,
        "trained_param_bytes": r.trained_param_bytes,
        "flops_train": r.flops_train_counted,
        "step_time_ms": r.step_time_ms,
        "train_s": r.train_s,
        "wall_s": r.wall_s,
        "prefix_cache": {
            k: r.prefix_cache.get(k) for k in ("used", "reason", "cut", "cached_bytes")
        }
        if r.prefix_cache
        else None,
        "run_dir": str(r.run_dir),
    }


def transfer_pairs(st: Settings, cache: Path, targets: list[str]) -> dict[str, tuple]:
    image = {"size": st.size}
    cct = {"in_channels": 1, "input_size": st.size, **st.model_options}
    pre = PretrainSettings(epochs=st.pretrain_epochs, limit=st.pretrain_limit, lr=2e-3)
    pairs: dict[str, tuple] = {}
    if "digits59" in targets:
        src = cached_pretrain(
            cache,
            "cct2-mnist04",
            "cct2",
            DataRef("mnist5k", {**image, "digits": [0, 1, 2, 3, 4]}),
            cct,
            pre,
            st.report_only,
        )
    if "digits59" in targets and src is not None:
        pairs["digits59"] = (
            "MNIST 0-4 -> 5-9",
            src,
            DataRef("mnist5k", {**image, "digits": [5, 6, 7, 8, 9]}),
        )
    if "sk8x8" in targets:
        src = cached_pretrain(
            cache, "cct2-mnist", "cct2", DataRef("mnist5k", image), cct, pre, st.report_only
        )
    if "sk8x8" in targets and src is not None:
        pairs["sk8x8"] = ("MNIST -> 8x8 digits", src, DataRef("digits", image))
    return pairs


def run_transfer(
    st: Settings, cache: Path, targets: list[str], runs_root: Path, log: ResultLog
) -> dict:
    """Seeds outer, then pairs, then strategies: a partial run has every cell at k seeds."""
    cct = {"in_channels": 1, "input_size": st.size, **st.model_options}
    pairs = transfer_pairs(st, cache, targets)
    protocol = Protocol(epochs=st.epochs)
    rows: dict[tuple[str, str], list[dict]] = {}
    for seed in range(st.first_seed, st.seeds):
        for key, (_label, src, target) in pairs.items():
            for strategy in st.strategies:
                lkey = log.key("transfer", key, strategy, seed, str(src), st.epochs, st.shots,
                               st.test_size, st.cache_prefix)  # fmt: skip
                row = log.get(lkey)
                if row is None and st.report_only:
                    continue
                if row is None:
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
                            cache_prefix=st.cache_prefix,
                            checkpoint_every=10,
                        ),
                        output_root=runs_root,
                        name=f"{key}-{strategy}-s{seed}",
                    )
                    row = log.add(lkey, {"pair": key, "strategy": strategy, "seed": seed,
                                         **_run_row(r)})  # fmt: skip
                    print(
                        f"  seed {seed} {key:8s} {strategy:7s} acc {100 * r.accuracy:6.2f}  "
                        f"train {r.train_s:6.1f} s  cache: "
                        f"{'yes' if row['prefix_cache']['used'] else 'no'}",
                        file=sys.stderr,
                    )
                rows.setdefault((strategy, key), []).append(row)
    return summarise_transfer(pairs, rows, cct)


def summarise_transfer(pairs: dict, rows: dict, cct: dict) -> dict:
    results: dict[str, dict[str, Any]] = {}
    for (strategy, key), runs in rows.items():
        accs = [r["accuracy"] for r in runs]
        mean, std = mean_std(accs)
        first = runs[0]
        results.setdefault(strategy, {})[key] = {
            "label": pairs[key][0],
            "accuracies": accs,
            "seeds": len(accs),
            "mean": mean,
            "std": std,
            "trained_params": first["trained_params"],
            "trained_param_bytes": first["trained_param_bytes"],
            "flops_train": first["flops_train"],
            "step_time_ms": [r["step_time_ms"] for r in runs],
            "train_s": [r["train_s"] for r in runs],
            "seed_ids": [r["seed"] for r in runs],
            "final_train_accuracy": [r.get("final_train_accuracy") for r in runs],
            "final_train_loss": [r.get("final_train_loss") for r in runs],
            "prefix_cache": first["prefix_cache"],
            "wall_s": sum(r["wall_s"] for r in runs),
        }
    return {"pairs": {k: v[0] for k, v in pairs.items()}, "results": results, "cct_options": cct}


PERSONAL_PRETRAIN = {  # per model: (epochs multiplier of --pretrain-epochs, lr)
    "lenet": (3, 2e-3),
    "alexnet": (3, 5e-4),
}


def run_personalisation(st: Settings, cache: Path, runs_root: Path, log: ResultLog) -> dict:
    """Leave-one-subject-out: pretrain on the other subjects, adapt to a few windows."""
    out: dict[str, Any] = {"models": {}}
    protocol = Protocol(epochs=st.personal_epochs)
    for model in st.personal_models:
        mult, lr = PERSONAL_PRETRAIN[model]
        pre = PretrainSettings(
            epochs=max(st.pretrain_epochs * mult, 3), lr=lr, batch_size=32, limit=st.pretrain_limit
        )
        subjects: dict[int, dict] = {}
        for subject in st.held_out:
            src = cached_pretrain(
                cache,
                f"{model}-watch-without-s{subject}",
                model,
                DataRef("watch", {}, exclude_groups=(subject,)),
                {},
                pre,
                st.report_only,
            )
            if src is None:
                continue
            rows: dict[str, Any] = {}
            for strategy in st.personal_strategies:
                accs, base = [], []
                for seed in range(st.first_seed, st.seeds):
                    lkey = log.key("personal", model, subject, strategy, seed, str(src),
                                   st.personal_epochs, st.personal_shots, st.cache_prefix)  # fmt: skip
                    row = log.get(lkey)
                    if row is None and st.report_only:
                        continue
                    if row is None:
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
                                cache_prefix=st.cache_prefix,
                                checkpoint_every=10,
                            ),
                            output_root=runs_root,
                            name=f"watch-{model}-s{subject}-{strategy}-seed{seed}",
                        )
                        row = log.add(lkey, {"model": model, "subject": subject,
                                             "strategy": strategy, "seed": seed, **_run_row(r)})  # fmt: skip
                    accs.append(row["accuracy"])
                    base.append(row["no_adaptation"])
                if not accs:
                    continue
                rows[strategy] = {
                    "accuracies": accs,
                    "no_adaptation": base,
                    "mean": mean_std(accs),
                    "no_adaptation_mean": mean_std(base),
                    "gain": sum(a - b for a, b in zip(accs, base, strict=True)) / len(accs),
                }
            if not rows:
                continue
            subjects[subject] = rows
            base_m, _ = next(iter(rows.values()))["no_adaptation_mean"]
            line = ", ".join(f"{s} {100 * v['mean'][0]:.1f}" for s, v in rows.items())
            print(
                f"  {model} subject {subject}: no adaptation {100 * base_m:.1f}; {line}",
                file=sys.stderr,
            )
        if not subjects:
            continue
        summary = {}
        for strategy in st.personal_strategies:
            gains = [subjects[s][strategy]["gain"] for s in subjects if strategy in subjects[s]]
            if not gains:
                continue
            summary[strategy] = {
                "gain": mean_std(gains),
                "subjects_improved": sum(g > 0 for g in gains),
                "accuracy": mean_std(
                    [subjects[s][strategy]["mean"][0] for s in subjects if strategy in subjects[s]]
                ),
                "subjects": len(gains),
            }
        summary["no_adaptation"] = mean_std(
            [next(iter(subjects[s].values()))["no_adaptation_mean"][0] for s in subjects]
        )
        out["models"][model] = {"subjects": subjects, "summary": summary}
    return out


def _cpu_ms(fn, repeats: int) -> float:
    """Median thread CPU time of ``fn`` (ms): robust to neighbours sharing the cores."""
    times = []
    for _ in range(repeats):
        began = time.thread_time()
        fn()
        times.append((time.thread_time() - began) * 1e3)
    return statistics.median(times)


def measure_timing(st: Settings, rounds: int) -> dict:
    """Interleaved per-strategy CPU times on CCT-2 (weights do not change the cost).

    * batch-1 training step of the whole model (what a device runs; median);
    * a protocol step (batch 8) uncached vs on cached prefix activations, and the
      one-off cost of caching the 250 training + ``test_size`` test samples;
    every figure is the median over ``rounds`` interleaved rounds, thread CPU time.
    """
    import copy

    from edgetrain import models as zoo
    from edgetrain.engine.trainer import make_optimizer, train_step
    from edgetrain.finetune import apply_strategy
    from edgetrain.transfer.loop import build_prefix_cache, cached_step

    cct = {"in_channels": 1, "input_size": st.size, "num_classes": 5, **st.model_options}
    g = torch.Generator().manual_seed(0)
    shape = (1, st.size, st.size)
    n_train = 5 * st.shots
    x = torch.randn((n_train, *shape), generator=g)
    y = torch.randint(0, 5, (n_train,), generator=g)
    x_test = torch.randn((st.test_size, *shape), generator=g)
    setups = {}
    for s in st.strategies:
        model = zoo.build("cct2", seed=0, **cct)
        apply_strategy(model, s)
        cache, plan = build_prefix_cache(model, x, x_test)
        setups[s] = (model, cache, plan)
    samples: dict[str, dict[str, list[float]]] = {s: {} for s in st.strategies}
    steps = 8
    x1, y1, xb, yb = x[:1], y[:1], x[:8], y[:8]
    for rnd in range(rounds):
        for s, (model, cache, _plan) in setups.items():
            work = copy.deepcopy(model)
            opt = make_optimizer(work.parameters(), "sgd", 0.01)
            for _w in range(3):
                train_step(work, opt, x1, y1)
            per = samples[s]
            per.setdefault("batch1", []).append(
                _cpu_ms(lambda w=work, o=opt: train_step(w, o, x1, y1), 10)
            )
            per.setdefault("step8", []).append(
                _cpu_ms(lambda w=work, o=opt: train_step(w, o, xb, yb), steps)
            )
            if cache is None:
                continue
            wcache, _ = build_prefix_cache(work, xb, x_test[:1])
            feats = wcache.train[torch.arange(8)]
            step = lambda f=feats, o=opt, sf=wcache.split.suffix: cached_step(sf, o, f, yb)  # noqa: E731
            step()
            per.setdefault("step8_cached", []).append(_cpu_ms(step, steps))
            if rnd < 2:  # the one-off caching of every train and test sample is slow to repeat
                began = time.thread_time()
                build_prefix_cache(work, x, x_test)
                per.setdefault("cache_build", []).append((time.thread_time() - began) * 1e3)
    out = {}
    steps_per_run = st.epochs * -(-n_train // 8)
    for s, per in samples.items():
        med = {k: statistics.median(v) for k, v in per.items()}
        plan = setups[s][2]
        row = {"median_ms": med, "prefix_cache": plan.used, "reason": plan.reason}
        uncached_run = steps_per_run * med["step8"]
        if "step8_cached" in med:
            cached_run = steps_per_run * med["step8_cached"] + med["cache_build"]
            row["step_speedup"] = med["step8"] / med["step8_cached"]
            row["run_speedup"] = uncached_run / cached_run
        else:
            row["step_speedup"] = row["run_speedup"] = 1.0
        out[s] = row
    return {"rounds": rounds, "steps_per_run": steps_per_run, "strategies": out}


def _cell(per: dict | None, seeds: int) -> str:
    if per is None:
        return "-"
    text = f"{100 * per['mean']:.2f} +- {100 * per['std']:.2f}"
    return text if per["seeds"] >= seeds else f"{text} (n={per['seeds']})"


def print_transfer_table(st: Settings, transfer: dict) -> None:
    pairs = transfer["pairs"]
    keys = list(pairs)
    if not transfer["results"]:
        return
    print(
        f"\nTable I layout: {st.shots}-shot transfer, CCT-2 {st.size}x{st.size}, "
        f"{st.epochs} epochs (paper: 100), SGD batch 8, lr 0.01 cosine -> 0.0005, "
        f"accuracy = mean of last 5 epochs, mean +- std over {st.seeds} seeds "
        "((n=k): only k seeds finished)"
    )
    head = ["Strategy", "Training components", "LoRA"] + [pairs[k] for k in keys]
    head += [
        "FLOPs (M)",
        "Trained param (MB)",
        "paper C10->MNIST",
        "paper C10->EuroSAT",
        "paper FLOPs (M)",
        "paper MB",
    ]
    rows = []
    for s in st.strategies:
        per = transfer["results"].get(s)
        if not per:
            continue
        comp, lora = COMPONENTS.get(s, ("", False))
        any_key = next(iter(per.values()))
        paper = PAPER_TABLE_I.get(s)
        pcols = ["", "", "", ""]
        if paper is not None:
            pcols = [
                f"{paper[0][0]:.2f} +- {paper[0][1]:.2f}",
                f"{paper[1][0]:.2f} +- {paper[1][1]:.2f}",
                str(paper[2]),
                str(paper[3]),
            ]
        rows.append(
            [s, comp, "yes" if lora else "no"]
            + [_cell(per.get(k), st.seeds) for k in keys]
            + [
                f"{any_key['flops_train'] / 1e6:.1f}",
                f"{any_key['trained_param_bytes'] / 1e6:.4f}",
                *pcols,
            ]
        )
    _print_grid(head, rows)


def print_tokenizer_table(st: Settings, transfer: dict) -> None:
    """Frozen tokenizer vs full fine-tuning, paired by seed (same shots, same test set)."""
    res = transfer["results"]
    if "full" not in res:
        return
    pairs = transfer["pairs"]
    print(
        "\nFrozen tokenizer vs full fine-tuning: accuracy minus full's on the same seed "
        "(same shots and test set), mean +- std over the common seeds; fit = final-epoch "
        "training accuracy / loss (mean)"
    )
    head = ["Strategy"]
    for k in pairs:
        head += [f"{pairs[k]}: - full (pts)", f"{pairs[k]}: fit"]
    rows = []
    for s in st.strategies:
        per = res.get(s)
        if not per:
            continue
        row = [s]
        for k in pairs:
            cell, base = per.get(k), res["full"].get(k)
            if cell is None or base is None:
                row += ["-", "-"]
                continue
            mine = dict(zip(cell["seed_ids"], cell["accuracies"], strict=True))
            full = dict(zip(base["seed_ids"], base["accuracies"], strict=True))
            common = sorted(set(mine) & set(full))
            diffs = [100 * (mine[i] - full[i]) for i in common]
            m, sd = mean_std(diffs) if diffs else (float("nan"), 0.0)
            row.append("-" if s == "full" else f"{m:+.2f} +- {sd:.2f} (n={len(diffs)})")
            accs = [a for a in cell["final_train_accuracy"] if a is not None]
            losses = [v for v in cell["final_train_loss"] if v is not None]
            row.append(
                f"{100 * sum(accs) / len(accs):.1f}% / {sum(losses) / len(losses):.3f}"
                if accs
                else "-"
            )
        rows.append(row)
    _print_grid(head, rows)


def print_timing_table(st: Settings, timing: dict, plans: dict) -> None:
    print(
        "\nPer-strategy CPU times on this machine (torch "
        f"{torch.__version__}, {torch.get_num_threads()} thread(s); thread CPU time, median of "
        f"{timing['rounds']} interleaved rounds) vs. the planner's target estimate "
        "(SIMULATED, analytical cost model). Run speed-up = "
        f"{timing['steps_per_run']} uncached steps / ({timing['steps_per_run']} cached steps + "
        "caching)."
    )
    head = [
        "Strategy",
        "batch-1 step (ms)",
        "target cores (ms)",
        "target accel. (ms)",
        "batch-8 step (ms)",
        "cached batch-8 (ms)",
        "caching (ms, once)",
        "step x",
        "run x",
    ]
    rows = []
    for s, row in timing["strategies"].items():
        med = row["median_ms"]
        lat = ((plans.get(s) or {}).get("latency_ms")) or {}
        rows.append(
            [
                s,
                f"{med['batch1']:.2f}",
                _fmt(lat.get("cores")),
                _fmt(lat.get("accelerated")),
                f"{med['step8']:.2f}",
                _fmt(med.get("step8_cached")),
                _fmt(med.get("cache_build"), 0),
                f"{row['step_speedup']:.1f}",
                f"{row['run_speedup']:.1f}",
            ]
        )
    _print_grid(head, rows)
    for s, row in timing["strategies"].items():
        if not row["prefix_cache"]:
            print(f"  {s}: no prefix cache ({row['reason']})")


def print_personal_table(st: Settings, personal: dict) -> None:
    for model, res in personal["models"].items():
        print(
            f"\nPersonalisation ({model}): leave-one-subject-out over watch subjects "
            f"{','.join(map(str, res['subjects']))}; source pretrained on the other subjects, "
            f"{st.personal_shots} windows per class of the held-out subject, "
            f"{st.personal_epochs} epochs, {st.seeds} seeds; test = that subject's other windows"
        )
        head = ["Subject", "no adaptation"] + st.personal_strategies
        rows = []
        for subject, per in res["subjects"].items():
            base = next(iter(per.values()))["no_adaptation_mean"]
            rows.append(
                [str(subject), f"{100 * base[0]:.2f}"]
                + [
                    f"{100 * per[s]['mean'][0]:.2f} +- {100 * per[s]['mean'][1]:.2f}"
                    if s in per
                    else "-"
                    for s in st.personal_strategies
                ]
            )
        summ = res["summary"]
        rows.append(
            ["mean over subjects", f"{100 * summ['no_adaptation'][0]:.2f}"]
            + [
                f"{100 * summ[s]['accuracy'][0]:.2f} +- {100 * summ[s]['accuracy'][1]:.2f}"
                if s in summ
                else "-"
                for s in st.personal_strategies
            ]
        )
        rows.append(
            ["gain vs no adaptation", ""]
            + [
                f"{100 * summ[s]['gain'][0]:+.2f} +- {100 * summ[s]['gain'][1]:.2f} "
                f"({summ[s]['subjects_improved']}/{summ[s]['subjects']} up)"
                if s in summ
                else "-"
                for s in st.personal_strategies
            ]
        )
        _print_grid(head, rows)


def _fmt(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


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
    targets = [t.strip() for t in args.targets.split(",") if t.strip() and t.strip() != "none"]
    unknown = sorted(set(targets) - set(TARGETS))
    if unknown:
        raise SystemExit(
            f"error: unknown --targets {unknown}; accepted: {', '.join(TARGETS)}, none"
        )
    log = ResultLog(args.results)
    print(f"settings: {st}", file=sys.stderr)
    transfer = {"pairs": {}, "results": {}, "cct_options": {}}
    personal = None
    if not args.timing_only:
        transfer = run_transfer(st, cache, targets, runs_root, log)
        if not args.no_personalisation:
            personal = run_personalisation(st, cache, runs_root, log)
    cct_options = {"in_channels": 1, "input_size": st.size, **st.model_options}
    plans = {} if args.no_plan else plan_estimates(st.strategies, {**cct_options, "num_classes": 5})
    timing = None
    if args.timing_only or not args.no_timing:
        timing = measure_timing(st, args.timing_rounds or (2 if st.epochs < 10 else 7))
    print_transfer_table(st, transfer)
    print_tokenizer_table(st, transfer)
    if timing is not None:
        print_timing_table(st, timing, plans)
    if personal:
        print_personal_table(st, personal)
    out = {
        "settings": st.__dict__,
        "transfer": transfer,
        "plans": plans,
        "timing": timing,
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
