"""FedHybrid Tables 3-4 and Fig. 17 on edgetrain's simulated fleet: time to accuracy.

For each task and aggregator, every method runs on the identical fleet, partition and
seed; the target is the best accuracy Random reaches; we print the speedup of each
method's (simulated) time to that target over Random's, and its final accuracy, in the
layout of Tables 3 and 4, then the Fig. 17 ablations, then the scale figure (wall seconds
per round and peak RSS for 1 000 clients x 100 per round, in-process).

    .venv/bin/python benchmarks/fedhybrid_tta.py            # the full run (long)
    .venv/bin/python benchmarks/fedhybrid_tta.py --quick    # tiny scale (a test runs it)
    # the rules before round 4: eq. 1's MemStat, no over-commitment, failures known at once
    .venv/bin/python benchmarks/fedhybrid_tta.py --memstat eq1 --overcommit 1 \
        --failure-report immediate --straggler-feedback none
    # the rules before round 5: Table 4 baselines as per-client plans of one technique,
    # "without optimizer" with the recompute planner alone
    .venv/bin/python benchmarks/fedhybrid_tta.py --baseline-plans per_client \
        --device-plan-generator recompute
    # FedHybrid §5.1's local work (CV): 10 local epochs, batch 64 (capped at the partition)
    .venv/bin/python benchmarks/fedhybrid_tta.py --local-epochs 10 --batch 64
    # Table 3's NLP task: BBC News, small BERT, 100 clients, 20 per round, 1 local step of
    # batch 8 at lr 0.1, M_G = share:0.7 (see bbc_task)
    .venv/bin/python benchmarks/fedhybrid_tta.py --task bbc-bert --aggregators fedprox \
        --no-scale --no-ablations --methods random,oort,fedhybrid --extend 1.5
    # Table 4 on the NLP task: Oort + Melon / Capuchin / GACT (uniform plans) next to them
    .venv/bin/python benchmarks/fedhybrid_tta.py --task bbc-bert --aggregators fedprox \
        --no-scale --no-ablations --extend 1.5 \
        --methods random,oort,fedhybrid,oort+recompute,oort+swap,oort+compress
    # FedHybrid §1's premise made explicit: 2 classes live only on the phones below M_G's
    # physical memory (the ones a memory wall kills); accuracy on them per method
    .venv/bin/python benchmarks/fedhybrid_tta.py --aggregators fedprox --no-scale \
        --no-ablations --local-epochs 10 --batch 64 --low-memory-classes 2 \
        --methods random,oort,fedhybrid,oort-oracle,fedhybrid-oracle,heterofl

Round semantics (defaults, see edgetrain.federated.config): every selector picks
int(1.3 x k) clients, the round closes at the k-th report or at the deadline (2 x the
fleet's slowest check-in estimate), and a killed client is only known to have failed at
the deadline; the time-to-accuracy ratios depend on that deadline (``--deadline-factor``).

Task mnist (default). Training is real (LeNet-1D over MNIST-5k rows as a proxy, so the
2-core CPU can afford it); plans, M_G and the clock model the phone workload: MobileNetV2
plans (profiled and planned by edgetrain.engine.budget), MobileNetV2's 0.3 G multiply-adds
per 224 px image (Sandler et al. 2018, Table 6: 300 M MAdds -> 0.6 GFLOPs) and 3.4 M float32
parameters (13.6 MB) per transfer.

Task bbc-bert (Table 3's NLP task): BBC News trained for real with a small BERT, planned
as examples/federated-bbc-bert.yaml's small BERT, BERT-Small's FLOPs and bytes on the
clock (``bbc_task``; since round 34 from PPMI word vectors with clipped gradients). It adds, per aggregator, the FedHybrid-vs-Oort comparison, the
accuracy at common rounds and each method's client-rounds lost to kills / page reclaim, and
with Table 4's baselines among the methods, FedHybrid against each of them, the fastest and
the best (``table4_summary``).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np
import yaml

from edgetrain.config import parse_config
from edgetrain.federated import FederatedConfig, FederatedServer, build_environment, compare
from edgetrain.federated.methods import COMPARE_METHODS
from edgetrain.federated.plans import ON_DEVICE_PLAN_SLOWDOWN, profiles_path
from edgetrain.federated.selectors.fedhybrid import UTIL_FORMS
from edgetrain.federated.server import held_split

PHONE_CLOCK = {"flops_per_sample": 6.0e8, "model_bytes": 1.36e7}
# BBC News task (Table 3's NLP row): examples/federated-bbc-bert.yaml's clock. BERT-Small
# (Turc et al. 2019: 4 layers x hidden 512, 29.1 M parameters) at 128 tokens: 2 x 29 M
# params x 128 tokens ~ 7.4 GFLOPs forward (Kaplan et al. 2020 §2.1: 2N FLOPs per token);
# 29 M float32 parameters = 116 MB per transfer
BERT_CLOCK = {"flops_per_sample": 7.4e9, "model_bytes": 1.16e8}
# the plan model: examples/federated-bbc-bert.yaml's small BERT (2 layers x hidden 256, 4
# heads, MLP 1024, a 10 000-word vocabulary, FedHybrid §5.1's max sequence length 128),
# profiled and planned by edgetrain.engine.budget
BERT_PLAN_MODEL = {
    "name": "bert-small",
    "options": {"vocab_size": 10000, "max_len": 128, "num_classes": 5, "hidden": 256,
                "num_layers": 2, "heads": 4, "intermediate": 1024},
}  # fmt: skip
# the model trained for real: the same BERT at half the width (hidden 128, 2 heads, MLP 512;
# 1.7 M parameters, same vocabulary and length). Evaluating the 444-article test split every
# round with the example's width took ~7 s of a ~10 s round on the shared 2-core CPU
# (benchmarks/out/r10n), too slow for 100+ rounds x 3 methods x 3 seeds
BERT_MODEL = {
    "name": "bert-small",
    "options": {"vocab_size": 10000, "max_len": 128, "num_classes": 5, "hidden": 128,
                "num_layers": 2, "heads": 2, "intermediate": 512},
}  # fmt: skip
QUICK_BERT_MODEL = {
    "name": "bert-small",
    "options": {"vocab_size": 2000, "max_len": 32, "num_classes": 5, "hidden": 32,
                "num_layers": 1, "heads": 2, "intermediate": 64},
}  # fmt: skip
# Table 3's other NLP model: examples/federated-bbc-albert.yaml's clock (ALBERT-small, one
# layer shared by all applications: ~6.4 GFLOPs forward per 128-token sample, 7.3 M float32
# parameters = 29 MB per transfer; the example's comments cite Kaplan et al. 2020 §2.1)
ALBERT_CLOCK = {"flops_per_sample": 6.4e9, "model_bytes": 2.9e7}
# the plan model: examples/federated-bbc-albert.yaml's ALBERT (2 applications of one shared
# layer, hidden 256, 4 heads, MLP 1024), planned per call since round 19 (it could not be
# evicted before: every client below M_G went unplanned)
ALBERT_PLAN_MODEL = {
    "name": "albert-small",
    "options": {"vocab_size": 10000, "max_len": 128, "num_classes": 5, "hidden": 256,
                "num_layers": 2, "heads": 4, "intermediate": 1024},
}  # fmt: skip
# trained for real at half the width, as bbc-bert's BERT_MODEL (for CPU time)
ALBERT_MODEL = {
    "name": "albert-small",
    "options": {"vocab_size": 10000, "max_len": 128, "num_classes": 5, "hidden": 128,
                "num_layers": 2, "heads": 2, "intermediate": 512},
}  # fmt: skip
QUICK_ALBERT_MODEL = {
    "name": "albert-small",
    "options": {"vocab_size": 2000, "max_len": 32, "num_classes": 5, "hidden": 32,
                "num_layers": 2, "heads": 2, "intermediate": 64, "embedding_dim": 16},
}  # fmt: skip
TASKS = ("mnist", "bbc-bert", "bbc-albert")
# planner results kept per task (--plans pinned): why and how made in benchmarks/plans/README.md
PINNED_PLANS = Path(__file__).resolve().parent / "plans"
TASK_TITLES = {
    "mnist": "MNIST-5k (LeNet proxy, MobileNetV2 plans/clock)",
    "bbc-bert": "BBC News (small BERT at half width trained, the example's planned, "
    "BERT-Small clock)",
    "bbc-albert": "BBC News (small ALBERT at half width trained, the example's planned, "
    "ALBERT-small clock)",
}
PLAN_MODEL = {
    "name": "mobilenetv2",
    "options": {"width_mult": 0.25, "in_channels": 1, "input_size": 28},
}
QUICK_PLAN_MODEL = {
    "name": "mobilenetv2",
    "options": {"width_mult": 0.1, "in_channels": 1, "input_size": 16},
}
ABLATIONS = (
    "fedhybrid", "fedhybrid-noselector", "fedhybrid-nooptimizer", "fedhybrid-nocompress",
    "fedhybrid-nopredictor",
)  # fmt: skip
# round 6: the three component ablations under Random selection (compare with
# fedhybrid-noselector): there the plan machinery acts on ~1/3 of the selections
MECHANISM_CHECKS = (
    "fedhybrid-noselector-nooptimizer", "fedhybrid-noselector-nocompress",
    "fedhybrid-noselector-nopredictor",
)  # fmt: skip


def plans_file(arg: str, task: str, quick: bool) -> str | None:
    """The planner-results file a run reuses (None: profile and plan afresh).

    ``pinned`` names the task's kept file where there is one; the quick scale plans a
    smaller model on another bucket grid, so it always profiles afresh."""
    if arg == "fresh":
        return None
    if arg == "pinned":
        path = PINNED_PLANS / f"{task}.json"
        return str(path) if path.is_file() and not quick else None
    return arg


def mnist_task(quick: bool) -> dict:
    """Task mnist's own fields: MNIST-5k rows through a LeNet-1D proxy, 100 clients, 10 per
    round, 5 local steps of batch 16 at lr 0.05, M_G = share:0.4; MobileNetV2's plans and
    phone clock."""
    return {
        "name": "tta",
        "data": {"name": "mnist5k", "reshape": [28, 28]},
        "model": {"name": "lenet", "options": {"in_channels": 28, "length": 28, "num_classes": 10}},
        "scale": {"clients": 12, "rounds": 3, "per_round": 4, "samples": 400, "steps": 1}
        if quick
        else {"clients": 100, "rounds": 40, "per_round": 10, "samples": 3000, "steps": 5},
        "batch": 16, "lr": 0.05, "m_g": "share:0.4", "plan_batch": 2 if quick else 8,
        "plan_model": QUICK_PLAN_MODEL if quick else PLAN_MODEL, "clock": PHONE_CLOCK,
    }  # fmt: skip


def bbc_task(quick: bool, family: str = "bert") -> dict:
    """Task bbc-bert's own fields (Table 3's NLP task): BBC News (2 225 articles, 5 topics;
    20 % held out, the full test split evaluated every round) with a small BERT trained for
    real (``BERT_MODEL``: half the width of examples/federated-bbc-bert.yaml's, for CPU time).

    FedHybrid §5.1 (NLP): "the batch size is 8, with 400 rounds and a local training
    iteration of 1 at a learning rate of 0.1. The max sequence length is 128", and for
    20NEWS "20 out of 100 clients are chosen each round": 100 clients, 20 per round (the
    selectors pick int(1.3 x 20) = 26, the round closing at the 20th report), one local step
    of batch 8 at lr 0.1, Dirichlet alpha 0.1 (§5.2). M_G = share:0.7: BERT does not fit
    70 % of phones unplanned (§2.1 / Fig. 1b). Plans: the example's small BERT
    (``BERT_PLAN_MODEL``; quick: the trained one) profiled by edgetrain.engine.budget at
    batch 4 (the example's plan_batch); clock: BERT-Small's FLOPs and bytes
    (``BERT_CLOCK``). Rounds default to 80 (the paper's 400 do not fit the
    2-core CPU next to other work; ``--rounds``).

    Since round 34 the model starts from PPMI word vectors of the training split
    (``model.word_vectors: ppmi``, a stand-in for the pretrained encoder FedHybrid fine-tunes)
    and each local step's gradient is clipped to norm 1.0 (BERT's recipe). From random
    weights and unclipped, every method stays near chance in 80 rounds (Random's model
    predicts one class in 29-44 of them); ``--word-vectors random --clip-grad-norm 0``
    reproduces the earlier task.

    ``family="albert"`` (task bbc-albert): the same task with ALBERT in BERT's place: the
    half-width ALBERT trained (``ALBERT_MODEL``), examples/federated-bbc-albert.yaml's
    planned (``ALBERT_PLAN_MODEL``), its clock (``ALBERT_CLOCK``)."""
    if family not in ("bert", "albert"):
        raise ValueError(f"unknown BBC model family {family!r}; accepted: bert, albert")
    albert = family == "albert"
    if albert:
        model = QUICK_ALBERT_MODEL if quick else ALBERT_MODEL
        plan_model, clock = ALBERT_PLAN_MODEL, ALBERT_CLOCK
    else:
        model = QUICK_BERT_MODEL if quick else BERT_MODEL
        plan_model, clock = BERT_PLAN_MODEL, BERT_CLOCK
    opts = model["options"]
    return {
        "name": "tta-bbc-albert" if albert else "tta-bbc",
        "data": {"name": "bbc", "reshape": None,
                 "options": {"max_len": opts["max_len"], "vocab_size": opts["vocab_size"]}},
        "model": model,
        "scale": {"clients": 12, "rounds": 3, "per_round": 4, "samples": 300, "steps": 1}
        if quick
        else {"clients": 100, "rounds": 80, "per_round": 20, "samples": None, "steps": 1},
        "batch": 8, "lr": 0.1, "m_g": "share:0.7", "plan_batch": 2 if quick else 4,
        "plan_model": None if quick else plan_model, "clock": clock,
        # since round 34 (see the docstring): a learnable task at the paper's lr 0.1
        "word_vectors": "ppmi", "clip_grad_norm": 1.0,
    }  # fmt: skip


def bbc_albert_task(quick: bool) -> dict:
    """Task bbc-albert: :func:`bbc_task` with ALBERT (Table 3's ALBERT rows)."""
    return bbc_task(quick, family="albert")


TASK_FIELDS = {"mnist": mnist_task, "bbc-bert": bbc_task, "bbc-albert": bbc_albert_task}


def task_config(
    quick: bool,
    aggregator: str,
    seed: int,
    rounds: int | None = None,
    m_g: str | None = None,
    semantics: dict | None = None,
    local_epochs: int | None = None,
    batch: int | None = None,
    plans: str | None = None,
    task: str = "mnist",
    low_memory_classes: int = 0,
    word_vectors: str | None = None,
) -> FederatedConfig:
    """The benchmark task: one builder for every task, the task's own fields from
    ``TASK_FIELDS`` (:func:`mnist_task`, :func:`bbc_task`); the rest (Dirichlet alpha 0.1,
    FedProx mu 0.01, Yogi's eta/tau, the plan-cache bucket) is shared.

    ``semantics`` overrides federated fields (memstat, overcommit, failure_report,
    deadline_factor, straggler_feedback, partial_work, baseline_plans, baseline_plan_charge,
    device_plan_generator) to reproduce older behaviour or try another round rule.

    ``local_epochs`` / ``batch``: the local work of every method alike (default: the task's
    steps and batch; FedHybrid §5.1's CV setting is ``local_epochs=10, batch=64``: 10 epochs
    over the client's partition in batches of min(64, n_k)).

    ``plans``: a plans file saved by an earlier run (``--save-plans``, or a run directory's
    ``plans.json``) whose planner results every method reuses, so a rerun in another
    process makes the same plans (they are otherwise made from op costs profiled here).

    ``low_memory_classes``: K classes whose training samples only the phones below M_G's
    physical memory hold (``partition.low_memory_classes``; FedHybrid §1's "unique data" on
    the devices a memory wall drops); 0 keeps the data independent of memory."""
    if task not in TASK_FIELDS:
        raise ValueError(f"unknown task {task!r}; accepted: {', '.join(TASK_FIELDS)}")
    t = TASK_FIELDS[task](quick)
    scale = dict(t["scale"])
    if rounds is not None:
        scale["rounds"] = rounds
    d = {
        "name": f"{t['name']}-{aggregator}",
        "seed": seed,
        "data": {**t["data"], "max_samples": scale["samples"]},
        "model": {**t["model"], "word_vectors": word_vectors or t.get("word_vectors", "random")},
        "fleet": {"clients": scale["clients"]},
        "partition": {"scheme": "dirichlet", "alpha": 0.1,
                      "low_memory_classes": low_memory_classes},
        "federated": {
            "rounds": scale["rounds"], "clients_per_round": scale["per_round"],
            "local_steps": scale["steps"], "batch_size": batch or t["batch"], "lr": t["lr"],
            "local_epochs": local_epochs,
            "aggregator": aggregator, "mu": 0.01, "yogi": {"eta": 0.01, "tau": 1e-3},
            "clip_grad_norm": t.get("clip_grad_norm"),
            **(semantics or {}),
        },
        "memory": {"m_g": m_g or t["m_g"], "plan_batch": t["plan_batch"],
                   "bucket": 0.1 if quick else 0.05, "plan_model": t["plan_model"],
                   "plans": plans},
        "clock": t["clock"],
    }  # fmt: skip
    return parse_config(d, schema=FederatedConfig)


def oort_settings(pairs: list[str], error) -> dict:
    """``--oort KEY=VALUE`` pairs as a ``federated.oort`` dict; the values are checked by
    the config's schema (``OortSection``), an unknown key here by ``error``."""
    from edgetrain.federated.config import OortSection

    out: dict = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or key not in OortSection.model_fields:
            error(
                f"--oort {pair!r}: expected KEY=VALUE with KEY one of "
                + ", ".join(OortSection.model_fields)
            )
        out[key] = value
    try:
        valid = OortSection.model_validate(out)
    except ValueError as e:  # pydantic's ValidationError names the field and the bound
        error(f"--oort: {e}")
    return {k: getattr(valid, k) for k in out}


def fmt_speed(r: dict) -> str:
    sp = r.get("speedup_vs_random")
    return "-" if sp is None else f"{sp:.2f}x"


def curves(recs: dict[str, list[dict]]) -> dict[str, list[list[float]]]:
    """Per method, [simulated s, test accuracy] after every round: accuracy at a common
    round or time (not only the final and best rounds) can be read from the JSON."""
    return {m: [[r["sim_time_s"], r["accuracy"]] for r in rs] for m, rs in recs.items()}


def acc_at_round(recs: list[dict], n: int) -> float | None:
    """Test accuracy after round ``n`` (1-based), None if the run is shorter."""
    return recs[n - 1]["accuracy"] if len(recs) >= n else None


def lost_rounds(recs: list[dict]) -> dict[str, int]:
    """Client-rounds per outcome over the whole run: killed above physical memory, trained
    under page reclaim (pressure), late (past the round's close), planned, and selected."""
    out = dict.fromkeys(("selected", "killed", "pressure", "late", "planned"), 0)
    for r in recs:
        o = r.get("outcomes", {})
        out["selected"] += sum(int(v) for v in o.values())
        for k in ("killed", "pressure", "late", "planned"):
            out[k] += int(o.get(k, 0))
    return out


# a round counts as one class when at least this share of the test split is predicted as a
# single class
ONE_CLASS_SHARE = 0.95


def collapse_stats(recs: list[dict], label_share: list[float] | None = None) -> dict:
    """How often the global model predicts one class, and whether the clients aggregated
    next hold that class (round 12, issue 6).

    ``one_class_rounds``: evaluated rounds where at least ``ONE_CLASS_SHARE`` of the test
    split is predicted as one class. ``cohort_share_of_predicted``: the mean, over rounds
    2.., of the share of round r's aggregated samples (the aggregation weights) whose label
    is the class the model predicted most after round r - 1; ``train_share_of_predicted``:
    the mean share of that class in the training split (``label_share``), what a cohort
    drawn without regard to the labels holds on average (a mean, not a median: a cohort of
    a few one-class clients often holds none of a class). Records without predictions give
    None."""
    hists = [r.get("pred_hist") for r in recs]
    ev = [h for h in hists if h]
    out: dict = {
        "evaluated_rounds": len(ev),
        "one_class_rounds": sum(1 for h in ev if max(h) >= ONE_CLASS_SHARE * sum(h)),
        "cohort_share_of_predicted": None,
        "train_share_of_predicted": None,
    }
    cohort, train = [], []
    for prev, r in zip(recs, recs[1:], strict=False):
        h, lab = prev.get("pred_hist"), r.get("aggregated_labels")
        if not h or not lab or sum(lab) == 0:
            continue
        c = max(range(len(h)), key=lambda i: (h[i], -i))
        cohort.append(lab[c] / sum(lab))
        if label_share is not None:
            train.append(label_share[c])
    if cohort:
        out["cohort_share_of_predicted"] = float(np.mean(cohort))
        out["train_share_of_predicted"] = float(np.mean(train)) if train else None
    return out


def tail_rounds(recs: dict[str, list[dict]]) -> tuple[int, int]:
    """(the rounds every method in ``recs`` ran, the last eighth of them: at least one)."""
    common = min(len(v) for v in recs.values())
    return common, max(1, common // 8)


def last_eighth(recs: dict[str, list[dict]]) -> tuple[int, int, dict[str, float]]:
    """(common rounds, last, per method the mean accuracy over the last eighth of the rounds
    every method in ``recs`` ran): one round's accuracy on a small test split is noisy."""
    common, last = tail_rounds(recs)
    mean = {
        m: sum(r["accuracy"] for r in v[common - last : common]) / last for m, v in recs.items()
    }
    return common, last, mean


def oracle_summary(rows: list[dict], recs: dict[str, list[dict]]) -> dict | None:
    """FedHybrid Fig. 1 on this fleet: how many points the memory wall costs Oort (Oort-Oracle
    minus Oort) and where FedHybrid lands against that ceiling, at the final round, the best
    round and over the last eighth of the rounds all three ran (one round's accuracy on a small
    test split is noisy). None unless oort, oort-oracle and fedhybrid all ran."""
    by = {r["method"]: r for r in rows if "skipped" not in r}
    names = ("oort", "oort-oracle", "fedhybrid")
    if not all(m in by and m in recs for m in names):
        return None
    if "fedhybrid-oracle" in by and "fedhybrid-oracle" in recs:
        names += ("fedhybrid-oracle",)  # FedHybrid's selector without the wall
    common, last, mean = last_eighth({m: recs[m] for m in names})
    out: dict = {"last_rounds": last, "common_rounds": common}
    for key, val in (
        ("final", {m: by[m]["final_accuracy"] for m in names}),
        ("best", {m: by[m]["best_accuracy"] for m in names}),
        ("last_mean", mean),
    ):
        out[key] = {
            "wall_points": 100 * (val["oort-oracle"] - val["oort"]),  # Oracle - Practical
            "fedhybrid_vs_oort_points": 100 * (val["fedhybrid"] - val["oort"]),
            "fedhybrid_vs_oracle_points": 100 * (val["fedhybrid"] - val["oort-oracle"]),
        }
        if "fedhybrid-oracle" in val:  # the selectors compared with no wall at all
            out[key]["selector_points"] = 100 * (val["fedhybrid-oracle"] - val["oort-oracle"])
    return out


def held_summary(recs: dict[str, list[dict]], held: tuple[int, ...]) -> dict | None:
    """Per method, the mean test accuracy on the classes only low-memory phones hold
    (``held``) and on the others, at the final round and over the last eighth of the common
    rounds: whether the wall's data reaches the global model. None when no class is held."""
    if not held:
        return None
    common, last = tail_rounds(recs)

    def split(rec: dict) -> tuple[float, float] | None:
        ca = rec.get("class_accuracy")
        if not ca:
            return None
        inside, outside = held_split(ca, held)
        return None if inside is None or outside is None else (inside, outside)

    out: dict = {"classes": list(held), "last_rounds": last, "common_rounds": common}
    for m, v in recs.items():
        fin = split(v[-1])
        tail = [x for x in (split(r) for r in v[common - last : common]) if x is not None]
        if fin is None or not tail:
            continue
        out[m] = {
            "final_held": fin[0],
            "final_other": fin[1],
            "last_held": sum(t[0] for t in tail) / len(tail),
            "last_other": sum(t[1] for t in tail) / len(tail),
        }
    return out


def table3_summary(
    rows: list[dict], recs: dict[str, list[dict]], label_share: list[float] | None = None
) -> dict:
    """Table 3's comparison of one seed: FedHybrid vs Oort (time to Random's best accuracy,
    final and best accuracy), accuracy at common rounds (quarter marks of the shortest
    run), the mean accuracy over the last eighth of the common rounds (``last_mean``, over
    ``last_rounds`` rounds: one round's accuracy on a small test split is noisy), the round
    each method first reaches the target, each method's client-rounds lost to kills /
    page reclaim, and over the common rounds its :func:`collapse_stats` (``label_share``:
    the training split's class shares)."""
    by = {r["method"]: r for r in rows if "skipped" not in r}
    common, last, last_mean = last_eighth(recs)
    marks = sorted({max(1, common * q // 4) for q in (1, 2, 3, 4)})
    target = rows[0].get("target_accuracy")
    out: dict = {
        "common_rounds": marks,
        "acc_at_round": {m: [acc_at_round(v, n) for n in marks] for m, v in recs.items()},
        "last_rounds": last,
        "last_mean": last_mean,
        "round_to_target": {
            m: next(
                (
                    i + 1
                    for i, r in enumerate(v)
                    if target is not None
                    and r["accuracy"] is not None
                    and r["accuracy"] >= target - 1e-12
                ),
                None,
            )
            for m, v in recs.items()
        },
        "lost": {m: lost_rounds(v) for m, v in recs.items()},
        "collapse": {m: collapse_stats(v[:common], label_share) for m, v in recs.items()},
    }
    fh, oo = by.get("fedhybrid"), by.get("oort")
    if fh and oo:
        t_f, t_o = fh["time_to_target_s"], oo["time_to_target_s"]
        out["fedhybrid_vs_oort"] = (t_o / t_f) if (t_f and t_o) else None
        out["oort_reached"] = t_o is not None
        out["fedhybrid_reached"] = t_f is not None
        out["final_diff_points"] = 100 * (fh["final_accuracy"] - oo["final_accuracy"])
        out["best_diff_points"] = 100 * (fh["best_accuracy"] - oo["best_accuracy"])
        out["last_mean_diff_points"] = 100 * (
            out["last_mean"]["fedhybrid"] - out["last_mean"]["oort"]
        )
    return out


def print_summary(agg: str, summ: dict) -> None:
    print(f"\nTable 3 comparison (+{agg}): FedHybrid vs Oort")
    if "final_diff_points" in summ:
        vs = summ["fedhybrid_vs_oort"]
        why = "Oort not reached" if not summ["oort_reached"] else "FedHybrid not reached"
        print(f"  time to target, Oort / FedHybrid: {why if vs is None else f'{vs:.2f}x'}")
        print(f"  final FedHybrid - Oort: {summ['final_diff_points']:+.2f} points;"
              f" best-round: {summ['best_diff_points']:+.2f} points; mean of the last"
              f" {summ['last_rounds']} common rounds: {summ['last_mean_diff_points']:+.2f}"
              " points")  # fmt: skip
    marks = summ["common_rounds"]
    print(f"  accuracy at common rounds {', '.join(str(n) for n in marks)}:")
    for m, accs in summ["acc_at_round"].items():
        cells = "  ".join("-" if a is None else f"{100 * a:6.2f}%" for a in accs)
        hit = summ["round_to_target"][m]
        print(f"    {m:<18}{cells}   last-{summ['last_rounds']} mean "
              f"{100 * summ['last_mean'][m]:.2f}%, target at round {hit or '-'}")  # fmt: skip
    print("  client-rounds over the run: selected / killed / page reclaim / late / planned")
    for m, v in summ["lost"].items():
        print(f"    {m:<18}{v['selected']:>6} /{v['killed']:>5} /{v['pressure']:>5} /"
              f"{v['late']:>5} /{v['planned']:>5}")  # fmt: skip
    if any(c["evaluated_rounds"] for c in summ.get("collapse", {}).values()):
        print(f"  common rounds predicting one class (>= {100 * ONE_CLASS_SHARE:.0f} % of the "
              "test split); mean share of a round's aggregated samples labelled with the "
              "class predicted most after the round before (training split's share of it)")  # fmt: skip
        for m, c in summ["collapse"].items():
            co, tr = c["cohort_share_of_predicted"], c["train_share_of_predicted"]
            cells = "-" if co is None else f"{100 * co:.1f} %"
            if co is not None and tr is not None:
                cells += f" ({100 * tr:.1f} %)"
            print(f"    {m:<18}{c['one_class_rounds']:>4} / {c['evaluated_rounds']:<4}{cells}")


# Table 4's baselines (FedHybrid §5.3): Oort with each memory technique applied uniformly
TABLE4_LABELS = {
    "oort+recompute": "Oort + Melon", "oort+swap": "Oort + Capuchin",
    "oort+compress": "Oort + GACT", "heterofl": "HeteroFL",
}  # fmt: skip


def table4_summary(rows: list[dict], summ: dict) -> dict:
    """Table 4's comparison of one seed: FedHybrid against each memory-technique baseline
    (``TABLE4_LABELS``; the ones in ``rows``) -- time to Random's best accuracy over
    FedHybrid's, final and last-eighth-mean accuracy differences -- then against the fastest
    baseline (shortest time to the target) and the best one (highest final accuracy; highest
    last-eighth mean). ``summ`` is :func:`table3_summary`'s result for the same rows (its
    ``last_mean``); a refused baseline (e.g. heterofl on a model without width_mult) is kept
    with its refusal under ``skipped``."""
    by = {r["method"]: r for r in rows}
    fh = by["fedhybrid"]
    t_f = fh["time_to_target_s"]
    skipped = {m: by[m]["skipped"] for m in TABLE4_LABELS if m in by and "skipped" in by[m]}
    names = [m for m in TABLE4_LABELS if m in by and m not in skipped]
    means = summ["last_mean"]
    per: dict = {}
    for m in names:
        r = by[m]
        t_b = r["time_to_target_s"]
        per[m] = {
            "speedup_vs_random": r["speedup_vs_random"],
            "final_accuracy": r["final_accuracy"],
            "last_mean": means[m],
            "reached": t_b is not None,
            "fedhybrid_vs": (t_b / t_f) if (t_b and t_f) else None,
            "final_diff_points": 100 * (fh["final_accuracy"] - r["final_accuracy"]),
            "last_mean_diff_points": 100 * (means["fedhybrid"] - means[m]),
        }
    out: dict = {"baselines": names, "skipped": skipped, "per_baseline": per,
                 "fedhybrid_reached": t_f is not None}  # fmt: skip
    reached = [m for m in names if per[m]["reached"]]
    fastest = min(reached, key=lambda m: by[m]["time_to_target_s"]) if reached else None
    out["fastest"] = fastest
    out["fedhybrid_vs_fastest"] = per[fastest]["fedhybrid_vs"] if fastest else None
    if names:
        best = max(names, key=lambda m: by[m]["final_accuracy"])
        best_mean = max(names, key=lambda m: means[m])
        out["best_final"], out["final_diff_points"] = best, per[best]["final_diff_points"]
        out["best_last_mean"] = best_mean
        out["last_mean_diff_points"] = per[best_mean]["last_mean_diff_points"]
    return out


def print_table4(agg: str, t4: dict, summ: dict) -> None:
    print(f"\nTable 4 comparison (+{agg}): FedHybrid vs Oort + Melon / Capuchin / GACT "
          f"(speedup vs Random / final accuracy; 'FedHybrid x' = the baseline's time to "
          f"target over FedHybrid's; mean of the last {summ['last_rounds']} common rounds)")  # fmt: skip
    for m, p in t4["per_baseline"].items():
        sp = "not reached" if p["speedup_vs_random"] is None else f"{p['speedup_vs_random']:.2f}x"
        vs = p["fedhybrid_vs"]
        vs_txt = f"{vs:.2f}x" if vs is not None else "-"
        print(f"  {TABLE4_LABELS[m]:<16}{sp:>12} / {100 * p['final_accuracy']:5.2f}%"
              f"   FedHybrid {vs_txt:>6}   final {p['final_diff_points']:+6.2f}   "
              f"last mean {100 * p['last_mean']:5.2f}% ({p['last_mean_diff_points']:+.2f})")  # fmt: skip
    for m, why in t4["skipped"].items():
        print(f"  {TABLE4_LABELS[m]:<16}refused: {why}")
    if t4["fastest"]:
        v = t4["fedhybrid_vs_fastest"]
        vs_txt = "FedHybrid not reached" if v is None else f"{v:.2f}x"
        print(f"  FedHybrid vs the fastest baseline ({TABLE4_LABELS[t4['fastest']]}): {vs_txt}")
    elif t4["baselines"]:
        print("  FedHybrid vs the fastest baseline: no baseline reached the target")
    if "best_final" in t4:
        print(f"  final FedHybrid - the best baseline ({TABLE4_LABELS[t4['best_final']]}): "
              f"{t4['final_diff_points']:+.2f} points; mean of the last {summ['last_rounds']} "
              f"rounds, FedHybrid - the best ({TABLE4_LABELS[t4['best_last_mean']]}): "
              f"{t4['last_mean_diff_points']:+.2f} points")  # fmt: skip


def scale_figure(quick: bool) -> dict:
    """Wall seconds per round and peak RSS for N clients x K per round (in-process)."""
    n, k, rounds = (200, 20, 2) if quick else (1000, 100, 3)
    cfg = parse_config(
        {
            "name": "scale",
            "data": {"name": "mnist5k", "reshape": [28, 28]},
            "fleet": {"clients": n},
            "federated": {
                "rounds": rounds,
                "clients_per_round": k,
                "local_steps": 5,
                "batch_size": 16,
                "method": "fedhybrid",
            },
            "memory": {"plan_model": PLAN_MODEL, "plan_batch": 4},
            "clock": PHONE_CLOCK,
        },  # fmt: skip
        schema=FederatedConfig,
    )
    t0 = time.perf_counter()
    env = build_environment(cfg)
    server = FederatedServer(env)
    setup_s = time.perf_counter() - t0
    walls = [server.run_round()["wall_s"] for _ in range(rounds)]
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    # the mean is the figure quoted since round 6 (round 1 holds the plan service's profiling);
    # the per-round walls and their median say how much of it that is
    return {"clients": n, "per_round": k, "wall_s_per_round": sum(walls) / len(walls),
            "wall_s_rounds": walls, "wall_s_median": float(np.median(walls)),
            "setup_s": setup_s, "peak_rss_mb": rss / 2**20}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny scale (seconds, for tests)")
    ap.add_argument(
        "--task", choices=TASKS, default="mnist",
        help="mnist: MNIST-5k, LeNet proxy (Table 3's CV task); bbc-bert / bbc-albert: BBC "
        "News with the small BERT / ALBERT (Table 3's NLP task; 80 rounds unless --rounds)",
    )  # fmt: skip
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--aggregators", default="fedprox,fedyogi")
    ap.add_argument("--json", action="store_true", help="print one JSON object only")
    ap.add_argument("--out", default=None, help="also write the JSON object to this file")
    ap.add_argument("--no-scale", action="store_true", help="skip the scale figure")
    ap.add_argument(
        "--scale-only", action="store_true",
        help="only the scale figure (1 000 clients x 100 per round; --quick: 200 x 20)",
    )  # fmt: skip
    ap.add_argument("--no-ablations", action="store_true", help="skip the Fig. 17 ablations")
    ap.add_argument("--rounds", type=int, default=None, help="rounds (default 40; quick 3)")
    ap.add_argument(
        "--m-g", default=None,
        help="M_G override, e.g. 100MB: every client fits (Oort-Oracle of FedHybrid Fig. 1)",
    )  # fmt: skip
    ap.add_argument(
        "--methods", default=",".join(COMPARE_METHODS), help="methods of the tables"
    )  # fmt: skip
    ap.add_argument(
        "--extend", type=float, default=3.0,
        help="a method below the target runs on up to EXTEND x rounds (within Random's time)",
    )  # fmt: skip
    ap.add_argument("--memstat", choices=("eq4", "eq1"), default=None, help="FedHybrid MemStat")
    ap.add_argument(
        "--epsilon", type=float, default=None,
        help="FedHybrid's exploited share of the slots (§5.1: 0.9; the rest explores)",
    )  # fmt: skip
    ap.add_argument(
        "--fedhybrid-stat", choices=("eq2", "samples"), default=None,
        help="FedHybrid's Stat: eq. 2 as printed, or scaled by the sample count as Oort's",
    )  # fmt: skip
    ap.add_argument(
        "--fedhybrid-explore", choices=("system", "samples"), default=None,
        help="FedHybrid's exploration draw: by check-in system utility as printed, or by "
        "sample count as FedScale's Oort explores",
    )  # fmt: skip
    ap.add_argument(
        "--fedhybrid-util", choices=UTIL_FORMS, default=None,
        help="what FedHybrid's selector exploits: eq. 4's Stat x MemStat x CompStat as "
        "printed; variants: Stat alone, or without CompStat, or without MemStat",
    )  # fmt: skip
    ap.add_argument(
        "--clip-grad-norm", type=float, default=None,
        help="clip each local step's gradient to this L2 norm (every method alike; 0: none; "
        "the BBC tasks' default is 1.0)",
    )  # fmt: skip
    ap.add_argument(
        "--word-vectors", choices=("random", "ppmi"), default=None,
        help="BBC tasks: the model's initial word embeddings (ppmi, the default: from the "
        "training split's co-occurrence counts, a stand-in for a pretrained encoder)",
    )  # fmt: skip
    ap.add_argument(
        "--ucb-c", type=float, default=None,
        help="FedHybrid's MAB-UCB constant c in sqrt(c ln t / n) (default 1.5, CUCB's 3/2, "
        "Chen et al. 2013, the MAB-UCB FedHybrid cites; 0.1 is FedScale's Oort constant, "
        "the default through round 39)",
    )  # fmt: skip
    ap.add_argument(
        "--oort", action="append", default=[], metavar="KEY=VALUE",
        help="a federated.oort setting (FedScale's flag names: exploration_factor, "
        "exploration_decay, exploration_min, round_threshold, pacer_delta, pacer_step, "
        "round_penalty, cut_off_util, clip_bound, sample_window; exploit_draw=top a variant) "
        "for every method that selects with Oort; repeatable",
    )  # fmt: skip
    ap.add_argument(
        "--unplannable", choices=("dispatch", "exclude", "microbatch"), default=None,
        help="a client whose check-in budget no server-side plan fits: left out (exclude, "
        "the default), offered to the selector and killed (dispatch), or given Melon's "
        "micro-batched plan by the server (microbatch, a variant)",
    )  # fmt: skip
    ap.add_argument("--overcommit", type=float, default=None, help="selected / per round")
    ap.add_argument("--failure-report", choices=("deadline", "immediate"), default=None)
    ap.add_argument("--deadline-factor", type=float, default=None)
    ap.add_argument("--straggler-feedback", choices=("average", "none"), default=None)
    ap.add_argument(
        "--partial-work", action="store_true",
        help="FedProx's partial work: a client still training at the round's close sends the "
        "local steps it finished and is aggregated (every method alike)",
    )  # fmt: skip
    ap.add_argument(
        "--baseline-plans", choices=("uniform", "per_client"), default=None,
        help="Table 4 baselines: one fleet-wide Melon/Capuchin/GACT plan, or per-client plans",
    )  # fmt: skip
    ap.add_argument(
        "--baseline-plan-charge", choices=("round", "once", "none"), default=None,
        help="when a uniform baseline's client pays its on-device plan generation",
    )  # fmt: skip
    ap.add_argument(
        "--device-plan-generator", choices=("melon", "recompute"), default=None,
        help="Fig. 17 'without optimizer': the plan generation clients run on the device",
    )  # fmt: skip
    ap.add_argument(
        "--local-epochs", type=int, default=None,
        help="local work: this many epochs over each client's partition (FedHybrid §5.1: 10) "
        "instead of 5 steps; every method alike",
    )  # fmt: skip
    ap.add_argument(
        "--batch", type=int, default=None,
        help="local batch size (default 16; FedHybrid §5.1 CV: 64, capped at the partition)",
    )  # fmt: skip
    ap.add_argument(
        "--plans", default="pinned",
        help="planner results to reuse: 'pinned' (the default: the task's file under "
        "benchmarks/plans/ where there is one, else a fresh profile), 'fresh' (profile and "
        "plan in this process, as before round 37), or a file written by --save-plans",
    )  # fmt: skip
    ap.add_argument(
        "--save-plans", default=None,
        help="write the planner results to this file, and the profiles they were planned "
        "from beside it (X.profiles.json, read back with the file by --plans)",
    )  # fmt: skip
    ap.add_argument(
        "--low-memory-classes", type=int, default=0,
        help="K classes whose samples only the phones below M_G's physical memory hold "
        "(FedHybrid §1's unique data on low-end devices); 0: data independent of memory",
    )  # fmt: skip
    ap.add_argument(
        "--mechanism-checks", action="store_true",
        help="also run the optimizer / compression / predictor ablations under Random "
        "selection (compare with fedhybrid-noselector)",
    )  # fmt: skip
    ap.add_argument(
        "--dump-config", metavar="FILE", default=None,
        help="write the task's config (the first aggregator, these flags) as an edgetrain "
        "federate YAML and exit, e.g. to run one method or a changed setting with the command",
    )  # fmt: skip
    args = ap.parse_args(argv)
    if args.scale_only and args.no_scale:
        ap.error("--scale-only and --no-scale exclude each other")
    plans = plans_file(args.plans, args.task, args.quick)
    semantics = {
        k: v
        for k, v in {
            "memstat": args.memstat,
            "fedhybrid_stat": args.fedhybrid_stat,
            "fedhybrid_explore": args.fedhybrid_explore,
            "fedhybrid_util": args.fedhybrid_util,
            "fedhybrid_ucb_c": args.ucb_c,
            "epsilon": args.epsilon,
            "overcommit": args.overcommit,
            "failure_report": args.failure_report,
            "deadline_factor": args.deadline_factor,
            "straggler_feedback": args.straggler_feedback,
            "partial_work": True if args.partial_work else None,
            "baseline_plans": args.baseline_plans,
            "baseline_plan_charge": args.baseline_plan_charge,
            "device_plan_generator": args.device_plan_generator,
            "unplannable": args.unplannable,
        }.items()
        if v is not None
    }
    if args.oort:
        semantics["oort"] = oort_settings(args.oort, ap.error)
    if args.clip_grad_norm is not None:  # 0 turns a task's clipping off (kept as None)
        semantics["clip_grad_norm"] = args.clip_grad_norm or None
    task_fields = TASK_FIELDS[args.task](args.quick)
    if args.dump_config:
        cfg = task_config(
            args.quick, args.aggregators.split(",")[0], args.seed, args.rounds, args.m_g,
            semantics, local_epochs=args.local_epochs, batch=args.batch, plans=plans,
            task=args.task, low_memory_classes=args.low_memory_classes,
            word_vectors=args.word_vectors,
        )  # fmt: skip
        text = yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
        Path(args.dump_config).write_text(text)
        print(f"wrote {args.dump_config}: edgetrain federate {args.dump_config} ...")
        return 0
    out: dict = {
        "seed": args.seed, "low_memory_classes": args.low_memory_classes,
        "tables": {}, "ablations": {}, "semantics": semantics,
        # the recipe the runs trained under: the flags, else the task's own settings
        "word_vectors": args.word_vectors or task_fields.get("word_vectors", "random"),
        "clip_grad_norm": semantics.get("clip_grad_norm", task_fields.get("clip_grad_norm")),
        "local_work": {"local_epochs": args.local_epochs, "batch": args.batch or 16},
        "plans": plans or "fresh profile",
        "curves": {},
    }  # fmt: skip
    t0 = time.perf_counter()
    saved: dict[tuple[str, float], dict] = {}  # planner results of every aggregator's runs
    service = None  # the plan service of the last aggregator's runs
    for agg in [] if args.scale_only else args.aggregators.split(","):
        cfg = task_config(
            args.quick, agg, args.seed, args.rounds, args.m_g, semantics,
            local_epochs=args.local_epochs, batch=args.batch, plans=plans, task=args.task,
            low_memory_classes=args.low_memory_classes, word_vectors=args.word_vectors,
        )  # fmt: skip
        env = build_environment(cfg)
        methods = tuple(args.methods.split(","))
        rows, recs = compare(cfg, methods, env=env, extend_factor=args.extend)
        out["tables"][agg] = rows
        out["curves"][agg] = curves(recs)
        orc = oracle_summary(rows, recs)
        if orc is not None:
            out.setdefault("oracle", {})[agg] = orc
        hs = held_summary(recs, env.low_memory_classes)
        if hs is not None:
            out.setdefault("held", {})[agg] = hs
        if args.task != "mnist":  # the MNIST JSON stays as before
            ys = env.train.y.numpy()
            counts = np.bincount(ys, minlength=int(max(ys.max(), env.test.y.numpy().max())) + 1)
            share = (counts / counts.sum()).tolist()
            summ = out.setdefault("summary", {})[agg] = table3_summary(rows, recs, share)
            if any(r["method"] in TABLE4_LABELS for r in rows) and "fedhybrid" in recs:
                summ["table4"] = table4_summary(rows, summ)
        if env.plan_service is not None:  # Table 4 baselines: the fleet-wide plans
            out["uniform_plans"] = [
                {**o.to_dict(), "device_plan_s": ON_DEVICE_PLAN_SLOWDOWN * o.plan_s}
                for (name, _), o in sorted(env.plan_service.table.items())
                if name in ("melon", "capuchin", "gact")
            ]
        if agg == "fedprox" and not args.no_ablations:
            done = {r["method"]: (recs[r["method"]], r["wall_s"]) for r in rows if "wall_s" in r}
            names = ("random",) + ABLATIONS + (MECHANISM_CHECKS if args.mechanism_checks else ())
            abl, abl_recs = compare(cfg, names, env=env, cached=done, extend_factor=args.extend)
            out["ablations"][agg] = abl
            out["curves"][agg].update(curves(abl_recs))
        if env.plan_service is not None:
            service = env.plan_service
            for r in service.to_json():
                saved[(r["strategy"], r["fraction"])] = r
    if args.save_plans:
        with open(args.save_plans, "w") as fh:
            json.dump([saved[k] for k in sorted(saved)], fh, indent=1)
        if service is not None:  # the measurement behind them, for the plans made later
            service.save_profiles(profiles_path(args.save_plans))
    if not args.no_scale:
        out["scale"] = scale_figure(args.quick)
    out["wall_s"] = time.perf_counter() - t0
    if args.task != "mnist" and not args.scale_only:
        out["task"] = {"name": args.task, "eval": f"the full test split ({len(env.test)} "
                       f"samples), every round", "train_samples": len(env.train),
                       "clients": len(env.fleet), "m_g_gib": env.m_g / 2**30}  # fmt: skip
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(out, fh)
    if args.json:
        print(json.dumps(out))
        return 0
    for agg, rows in out["tables"].items():
        print(f"\nTable 3/4 layout -- {TASK_TITLES[args.task]}, +{agg}")
        print(f"{'method':<18}{'speedup':>10}{'final acc':>11}{'best acc':>10}{'TTA (h)':>10}"
              f"{'rounds':>8}{'s/round':>9}")  # fmt: skip
        for r in rows:
            if "skipped" in r:
                print(f"{r['method']:<18}{'skipped: ' + r['skipped'][:50]}")
                continue
            tta = r["time_to_target_s"]
            print(f"{r['method']:<18}{fmt_speed(r):>10}{100 * r['final_accuracy']:>10.2f}%"
                  f"{100 * r['best_accuracy']:>9.2f}%"
                  f"{'-' if tta is None else f'{tta / 3600:.2f}':>10}"
                  f"{r['rounds']:>8}{r['sim_time_s'] / max(1, r['rounds']):>9.1f}")  # fmt: skip
        print(f"target = Random's best accuracy {100 * rows[0]['target_accuracy']:.2f}%")
        orc = out.get("oracle", {}).get(agg)
        if orc is not None:
            sel = "selector_points" in orc["final"]
            print("  FedHybrid Fig. 1 (points): the memory wall = Oort-Oracle - Oort; "
                  "FedHybrid - Oort; FedHybrid - Oort-Oracle"
                  + ("; FedHybrid-Oracle - Oort-Oracle (the selectors, no wall)" if sel else ""))  # fmt: skip
            for key, label in (("final", "final round"), ("best", "best round"),
                               ("last_mean", f"mean of the last {orc['last_rounds']}")):  # fmt: skip
                d = orc[key]
                tail = f"{d['selector_points']:>+8.1f}" if sel else ""
                print(f"    {label:<22}{d['wall_points']:>+8.1f}{d['fedhybrid_vs_oort_points']:>+8.1f}"
                      f"{d['fedhybrid_vs_oracle_points']:>+8.1f}{tail}")  # fmt: skip
        hs = out.get("held", {}).get(agg)
        if hs is not None:
            print(f"  classes {hs['classes']} live only on phones below M_G's physical memory: "
                  f"test accuracy on them / on the other classes, final round and mean of the "
                  f"last {hs['last_rounds']}")  # fmt: skip
            for m, d in hs.items():
                if isinstance(d, dict):
                    print(f"    {m:<18}{100 * d['final_held']:>7.1f}%{100 * d['final_other']:>7.1f}%"
                          f"{100 * d['last_held']:>9.1f}%{100 * d['last_other']:>7.1f}%")  # fmt: skip
    for u in out.get("uniform_plans", []):
        print(f"  {u['strategy']:<9} for {u['fraction']:.3f} M_G: demand "
              f"{u['demand'] if u['demand'] is not None else u['fraction']:.3f} M_G, "
              f"x{u['overhead_factor']:.2f} per step, {u['micro_batches']} micro-batch(es), "
              f"{u['device_plan_s']:.1f} s to plan on the device")  # fmt: skip
    for agg, rows in out["ablations"].items():
        print(f"\nFig. 17 ablations (+{agg}): speedup vs Random; 'x ref' = time to target over "
              "fedhybrid's (fedhybrid-noselector's for the -noselector-* checks); up to the "
              "target: client-rounds planned / under pressure / killed / late, aggregated "
              "updates trained under a plan, regenerations, compressed aggregated / planned "
              "client-rounds, believed budget > the round's lowest + 1 % M_G, mean |believed - "
              "true| budget in % M_G")  # fmt: skip
        tta = {r["method"]: r.get("time_to_target_s") for r in rows}
        for r in rows:
            ref = "fedhybrid-noselector" if "-noselector-" in r["method"] else "fedhybrid"
            ratio = (
                f"x{r['time_to_target_s'] / tta[ref]:.2f}"
                if r["method"] not in ("random", ref) and r["time_to_target_s"] and tta.get(ref)
                else "-"
            )
            e = r.get("exposure", {})
            be = e.get("budget_err_pct")
            err = "-" if be is None else f"{be:.2f}%"
            print(f"  {r['method']:<34}{fmt_speed(r):>8}{ratio:>7}"
                  f"  final {100 * r['final_accuracy']:.2f}%"
                  f"  planned {e.get('planned', 0)} pressure {e.get('pressure', 0)}"
                  f" killed {e.get('killed', 0)} late {e.get('late', 0)}"
                  f" agg-planned {e.get('planned_aggregated', 0)}"
                  f" regen {e.get('regenerations', 0)} compressed {e.get('compressed_clients', 0)}"
                  f"/{e.get('compress_planned', 0)} budget-over {e.get('budget_over', 0)}"
                  f" err {err}"
                  f" (rounds {e.get('rounds', 0)})")  # fmt: skip
    for agg, rows in out["tables"].items():
        print(f"\nparticipation by memory class (+{agg}): completed / selected")
        for r in rows:
            if "participation" in r:
                cells = "  ".join(f"{c} {v[1]}/{v[0]}" for c, v in r["participation"].items())
                print(f"  {r['method']:<18}{cells}")
        reach = [r for r in rows if r.get("exposure", {}).get("distinct_aggregated") is not None]
        if reach:
            print(f"\nreach up to the target (+{agg}): distinct clients selected / aggregated, "
                  "share of the aggregated updates from the most-aggregated tenth, mean share "
                  "of a round's aggregated clients aggregated the round before, share of the "
                  "training samples the aggregated clients hold")  # fmt: skip
            for r in reach:
                e = r["exposure"]
                rep, cov = e.get("repeat_share"), e.get("data_coverage")
                print(f"  {r['method']:<18}{e['distinct_selected']:>6} /"
                      f"{e['distinct_aggregated']:>5}   top tenth {e['top_decile_share']:.2f}"
                      f"   repeated {'-' if rep is None else f'{rep:.2f}'}"
                      f"   data {'-' if cov is None else f'{cov:.2f}'}"
                      f"  (rounds {e['rounds']})")  # fmt: skip
    for agg, summ in out.get("summary", {}).items():
        print_summary(agg, summ)
        if "table4" in summ:
            print_table4(agg, summ["table4"], summ)
    if "task" in out:
        print(f"evaluation: {out['task']['eval']}; {out['task']['train_samples']} training "
              f"samples on {out['task']['clients']} clients; M_G {out['task']['m_g_gib']:.2f} GiB")  # fmt: skip
    if "scale" in out:
        s = out["scale"]
        print(f"\nscale: {s['clients']} clients x {s['per_round']} per round in-process: "
              f"{s['wall_s_per_round']:.1f} wall s/round (rounds: "
              f"{', '.join(f'{w:.1f}' for w in s['wall_s_rounds'])}; median "
              f"{s['wall_s_median']:.1f}; set-up {s['setup_s']:.1f} s), "
              f"peak RSS {s['peak_rss_mb']:.0f} MB")  # fmt: skip
    if not args.scale_only:
        print(f"plans: {out['plans']}")
    print(f"\ntotal wall {out['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
