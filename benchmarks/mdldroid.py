"""MDLdroid figures with edgetrain.decentralized: prints one table per figure.

    .venv/bin/python benchmarks/mdldroid.py            # N = 2..9, 50 scheduling repetitions
    .venv/bin/python benchmarks/mdldroid.py --quick    # a smoke-sized version
    .venv/bin/python benchmarks/mdldroid.py --sections sched,sweep   # only some sections

Sections (paper figure in brackets; ``--sections`` names in parentheses):
1. (acc) accuracy of Chain / Neighbor / Central aggregation per N, real training on
   the watch data, one person per device, medians over ``--acc-seeds`` [Fig. 3, Table 3],
   and peak model copies held by one device [Fig. 11a]; (numerics) where Chain and
   Central part: float rounding of the same deltas, amplified by training (N = 5, 8, 9);
2. (sched) simulated time and energy variance, Chain (DQN) vs Ring vs Tree, plus the
   latency-optimal reference schedule, random allocation with ≤ 50 % busy devices,
   ``--reps`` repetitions per N [Fig. 10] — schedules and the simulated clock only;
   ``--dqn-seeds 0,1,2`` repeats it with several DQN seeds on the same allocations and
   prints the median and spread of each percentage per N and overall;
3. (sweep) the same without the DQN for several busy durations: how much time the
   best possible schedule can save over Tree and Ring under this clock;
4. (threshold) eq. 8's threshold T(N) against the best return any schedule reaches
   (exact dynamic programming) and the share of random episodes passing it [eq. 8-10];
5. (explore) DQN episodes to convergence with TDGE vs DGE vs TGE (and the readings
   ``tdge-greedy`` and ``tdge-a2``), medians over seeds [Fig. 8b], and the scheduler's
   training time until its learning slot ends, env steps and CPU s [Fig. 8a];
6. (speedup) speed-up of an N-device epoch over single-device training, both on the
   phone compute model, Bluetooth and Wi-Fi Direct, at the watch data's size and at
   MDLdroid Table 1's smallest and largest training-set sizes [Fig. 14];
7. (tradeoff) aggregations per epoch × epochs trade-off: accuracy, time, battery,
   against single-device training [Fig. 12-14];
8. (evar) eq. 6's energy variance at small N against *every* valid schedule (the same
   allocations and DQN as ``sched``): the least variance any schedule reaches, whether
   the DQN reaches eq. 7's best return, how many schedules tie there and how far their
   variances spread, and each device's energy by part (reduce vs broadcast) [Fig. 10b];
9. (drift, not in the default list) why aggregations per epoch leave accuracy level: accuracy
   and test loss at 1, 2, 10 aggregations per epoch paired by seed, client drift before each
   aggregation and the data heterogeneity, in the trade-off's split and in more
   heterogeneous ones (one person per device, split by activity, 2x and 4x lr, 4x local steps).
Time and energy are simulated from the device profiles; accuracy is real.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import math
import statistics
import time

import numpy as np
import torch

from edgetrain import data, devices, models
from edgetrain.decentralized.aggregation import CentralSGD, ChainSGD
from edgetrain.decentralized.chain_scheduler import ChainScheduler
from edgetrain.decentralized.costs import (
    BROADCASTS,
    BUSY_S,
    ENERGY_PARTS,
    REDUCE_PARTS,
    link_time_s,
    simulate_iteration,
)
from edgetrain.decentralized.dqn import DQNAgent, DQNConfig, reward_converged_at
from edgetrain.decentralized.env import (
    GLOBAL,
    PER_DEVICE,
    ChainSchedulingEnv,
    RewardConfig,
    _f,
    optimum,
    threshold,
)
from edgetrain.decentralized.resources import DeviceStatus, as_free, random_statuses
from edgetrain.decentralized.schedule import all_schedules
from edgetrain.decentralized.schedulers import (
    EarliestPairScheduler,
    RingScheduler,
    TreeScheduler,
)
from edgetrain.decentralized.tiebreak import TIE_BREAKS
from edgetrain.decentralized.trainer import (
    ChainConfig,
    build_fleet,
    evaluate,
    run_chain,
    training_flops_per_sample,
)
from edgetrain.engine.budget.stats import paired_summary, sign_test_p

SECTIONS = (
    "acc",
    "numerics",
    "sched",
    "sweep",
    "threshold",
    "explore",
    "speedup",
    "tradeoff",
    "evar",
    "drift",
)
# MDLdroid §4.1 / Table 1: the six data sets' training sets range from 25 MB to 900 MB.
PAPER_TRAIN_MB = (25, 900)
# (a, b) pairs of the busy-overhead table: "a's overhead is x % less than b's"
OH_PAIRS = (("chain", "tree"), ("chain", "ring"), ("opt", "tree"), ("opt", "ring"))
# (a, b) pairs of the eq. 5 scheduler-latency table; ring = synchronous Ring-Allreduce,
# ringp = the pipelined ring-order chain (the pre-round-5 model), ringN = ring + N-th round
F_PAIRS = (
    ("chain", "tree"),
    ("chain", "ring"),
    ("chain", "ringp"),
    ("chain", "ringN"),
    ("opt", "tree"),
    ("opt", "ring"),
    ("tree", "ring"),
)


def table(title: str, header: list[str], rows: list[list]) -> None:
    print(f"\n## {title}")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        cells = [f"{c:.4g}" if isinstance(c, float) else str(c) for c in r]
        print("| " + " | ".join(cells) + " |")


def pct_less(a: float, b: float) -> float:
    """How much less ``a`` is than ``b``, in % of ``b``."""
    return 100.0 * (1.0 - a / b) if b else 0.0


# -- 1. accuracy -------------------------------------------------------------------------
def accuracy_section(ds, ns, epochs: int, seeds: list[int]) -> None:
    rows = []
    for n in ns:
        acc = {a: [] for a in ("chain", "neighbor", "central", "chain64")}
        peak = {}
        for seed in seeds:
            for agg in acc:
                cfg = ChainConfig(
                    devices=n,
                    scheduler="ring",
                    aggregation="chain" if agg == "chain64" else agg,
                    epochs=epochs,
                    busy="none",
                    seed=seed,
                    wire="float64" if agg == "chain64" else "float32",
                )
                r = run_chain(cfg, dataset=ds)
                acc[agg].append(r.accuracy)
                peak[agg] = max(peak.get(agg, 0), r.peak_model_copies)
        med = {a: statistics.median(v) for a, v in acc.items()}
        below = sum(nb < c for nb, c in zip(acc["neighbor"], acc["central"], strict=True))
        gap = [nb - c for nb, c in zip(acc["neighbor"], acc["central"], strict=True)]

        rows.append(
            [
                n,
                med["chain"],
                med["neighbor"],
                med["central"],
                round(med["chain"] - med["central"], 6),
                round(_worst(acc, "chain"), 6),
                f"{below}/{len(seeds)}",
                statistics.mean(gap),
                min(gap),
                max(gap),
                peak["chain"],
                peak["central"],
                med["chain64"],
                round(med["chain64"] - med["central"], 6),
                round(_worst(acc, "chain64"), 6),
            ]
        )
    table(
        f"Accuracy (%) after {epochs} epochs, median of seeds {seeds}, watch, one person per "
        "device, Ring order, no busy device; the global model every device holds after the "
        "broadcast, on the shared test set [Fig. 3, Table 3]; Nb-Ce = Neighbor - Central per "
        "seed (points); peak model copies per device [Fig. 11a]; Chain = float32 messages, "
        "Chain64 = float64 messages (2x bytes per reduce transfer); Central accumulates in "
        "float64",
        [
            "N",
            "Chain",
            "Neighbor",
            "Central",
            "Chain-Central",
            "max abs(Chain-Central)",
            "Neighbor<Central",
            "mean Nb-Ce",
            "min Nb-Ce",
            "max Nb-Ce",
            "Chain peak",
            "Central peak",
            "Chain64",
            "Chain64-Central",
            "max abs(Chain64-Central)",
        ],
        rows,
    )


def _worst(acc: dict, a: str) -> float:
    """Largest |a − Central| accuracy difference over the seeds (points)."""
    return max(abs(x - c) for x, c in zip(acc[a], acc["central"], strict=True))


def _ref_hook(ref_states: list, same: dict, diff1: dict, ring):
    """Record the reference trajectory and compare every aggregation on its deltas."""

    def hook(it, state, deltas):
        ref_states.append({k: v.clone() for k, v in state.items()})
        ref_agg = CentralSGD().reduce(deltas, ring).aggregate
        for name, agg in (
            ("chain32", ChainSGD("float32")),
            ("chain64", ChainSGD("float64")),
            ("central32", CentralSGD("float32")),
        ):
            got = agg.reduce(deltas, ring).aggregate
            same[name].append(_bit_differ(got, ref_agg))
            if it == 0:
                diff1[name] = _max_abs(got, ref_agg)

    return hook


def _traj_hook(traj: list, ref_states: list):
    return lambda it, state, _deltas: traj.append(_max_abs(state, ref_states[it]))


def _max_abs(a: dict, b: dict) -> float:
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a)


def _bit_differ(a: dict, b: dict) -> int:
    """How many float elements of ``a`` and ``b`` are not bit-identical."""
    return sum(int((v != b[k]).sum()) for k, v in a.items() if v.is_floating_point())


def numerics_section(ds, ns, epochs: int, seeds: list[int]) -> None:
    """Is Chain - Central float rounding amplified by training? For each (N, seed) the
    Central run (float64 accumulation) is the reference. Same deltas: at every
    iteration the reference's deltas are reduced by Chain (float32 / float64 messages,
    Ring order) and by a float32-accumulating Central; we report the share of the
    aggregate's elements bit-identical to the reference and the largest difference.
    Trajectories: the same runs trained with each aggregation; the largest parameter
    difference to the reference after the first and the last iteration, and the
    accuracy difference."""
    variants = {
        "chain32": (ChainConfig, {"aggregation": "chain", "wire": "float32"}, None),
        "chain64": (ChainConfig, {"aggregation": "chain", "wire": "float64"}, None),
        "central32": (ChainConfig, {"aggregation": "central"}, CentralSGD("float32")),
    }
    rows = []
    for n in ns:
        for seed in seeds:
            base = {"devices": n, "scheduler": "ring", "epochs": epochs, "busy": "none"}
            ref_states, same = [], {k: [] for k in variants}
            diff1 = dict.fromkeys(variants, 0.0)
            ring = RingScheduler().schedule([DeviceStatus(d) for d in range(n)])
            ref = run_chain(
                ChainConfig(**base, aggregation="central", seed=seed),
                dataset=ds,
                on_iteration=_ref_hook(ref_states, same, diff1, ring),
            )
            row: list = [n, seed]
            for name, (cls, kw, aggr) in variants.items():
                traj = []
                r = run_chain(
                    cls(**base, seed=seed, **kw),
                    dataset=ds,
                    aggregator=aggr,
                    on_iteration=_traj_hook(traj, ref_states),
                )
                row += [
                    max(same[name]),
                    diff1[name],
                    traj[0],
                    traj[-1],
                    r.accuracy - ref.accuracy,
                ]
            rows.append(row)
    head = ["N", "seed"]
    for name in variants:
        head += [
            f"{name} not bit-eq (max)",
            f"{name} agg max|d| it1",
            f"{name} param max|d| it1",
            f"{name} param max|d| last",
            f"{name} acc d",
        ]
    table(
        f"Chain vs Central numerics, {epochs} epochs (1 aggregation each), Ring order, no "
        "busy device; reference = Central with float64 accumulation. not bit-eq = aggregate "
        "elements (of all float parameters) not bit-identical to the reference's from the "
        "same deltas (most over the iterations); agg max|d| = largest aggregate difference, iteration 1; "
        "param max|d| = largest parameter difference of the trained trajectories after "
        "iteration 1 and the last; acc d = accuracy minus the reference's (points)",
        head,
        rows,
    )


# -- 2./3. scheduling on the simulated clock -----------------------------------------------
class Clock:
    """LeNet on the watch data over the MDLdroid phones: what the clock needs per N.

    ``broadcast`` (class-wide, ``--broadcast``): the forwarder rule of every scheduler's
    broadcast (costs.BROADCASTS), the same for Chain, Tree and Ring."""

    broadcast = "resource"

    def __init__(self, ds, link: str = "bluetooth") -> None:
        model = models.build(
            "lenet", in_channels=ds.x.shape[1], length=ds.x.shape[2], num_classes=7
        )
        self.n_params = sum(p.numel() for p in model.parameters())
        self.model_bytes = 4 * self.n_params
        self.fps = training_flops_per_sample(model, ds.x.shape[1], ds.x.shape[2])
        self.samples = 0.8 * len(ds.y)  # the trainer holds out 20 % for the test set
        self.phones = devices.phones("mdldroid")
        self.link = link
        self.transfer_s = link_time_s(self.phones[0], self.phones[0], self.model_bytes, link)

    def fleet(self, n: int):
        prof = {d: self.phones[d % len(self.phones)] for d in range(n)}
        flops = dict.fromkeys(range(n), self.fps * self.samples / n)
        train_s = {d: flops[d] / prof[d].compute_flops for d in range(n)}
        return prof, flops, train_s

    def evaluator(self, prof, flops):
        """The Chain scheduler's cost model for eq. 7's tie-break: this clock."""
        return lambda sched, st: self.run(sched, st, prof, flops)

    def run(self, sched, st, prof, flops, busy_s: float = BUSY_S):
        return simulate_iteration(
            sched,
            st,
            prof,
            flops,
            self.n_params,
            self.model_bytes,
            "chain",
            self.link,
            busy_s,
            broadcast=self.broadcast,
        )


def scheduler_section(
    ds,
    ns,
    reps: int,
    first: int,
    relearn: int,
    seed: int,
    dqn_seed: int | None = None,
    verbose: bool = True,
    tie_break: str = "eq4",
) -> dict:
    """Chain vs Tree vs Ring on ``reps`` random allocations per N (drawn from ``seed + N``,
    so every DQN seed sees the same allocations); the Chain scheduler's DQN is seeded
    with ``dqn_seed`` (default ``seed``). Prints the tables when ``verbose``; returns the
    per-N figures the multi-seed summary needs (``{n: {...}}`` plus ``"pooled"``).
    ``tie_break``: how the Chain scheduler breaks eq. 7's ties (``eq4`` or ``none``)."""
    dqn_seed = seed if dqn_seed is None else dqn_seed
    summary: dict = {}
    clock = Clock(ds)
    c = clock.transfer_s
    names = ("chain", "tree", "ring", "opt", "ringp")
    rows_t, rows_e, avg = [], [], {k: [] for k in ("ct", "cr", "ot", "or", "ict", "icr", "v", "rv")}
    rows_o, pooled = [], dict.fromkeys(names, 0.0)
    rows_f, f_pooled = [], dict.fromkeys((*names, "ringN"), 0.0)
    for n in ns:
        prof, flops, train_s = clock.fleet(n)
        scheds = {
            "chain": ChainScheduler(
                n,
                seed=dqn_seed,
                first_episodes=first,
                relearn_episodes=relearn,
                busy_delay=BUSY_S / c,
                tie_break=tie_break,
                evaluate=clock.evaluator(prof, flops),
            ),
            "tree": TreeScheduler(),
            "ring": RingScheduler(),
            "opt": EarliestPairScheduler(BUSY_S, c, train_s),
            "ringp": RingScheduler(synchronous=False),
        }
        rng = np.random.default_rng(seed + n)
        t5 = {k: [] for k in names}
        ti = {k: [] for k in names}
        var = {k: [] for k in names}
        rvar = {k: [] for k in names}  # eq. 6 over the reduce's energy alone (no broadcast)
        after = {k: [] for k in names}  # transfers after the last busy device is free
        free5 = {k: [] for k in names}  # eq.5 time of the same devices all free
        fl = {k: [] for k in names}  # eq.5's f(T_a, T_b) = T(t) - T_tr
        fallbacks = 0
        for _ in range(reps):
            st = random_statuses(n, rng, 0.5)
            free = [as_free(s) for s in st]
            any_busy = any(s.busy for s in st)
            # Chain's all-free reference: the same DQN, in the same state, asked to
            # schedule the same devices all free (a copy, so the run is not perturbed).
            # With no busy device the copy would see the same statuses and return the
            # same schedule, so it is only built when one is busy.
            chain_free = copy.deepcopy(scheds["chain"]) if any_busy else None
            release = max((train_s[s.device] + BUSY_S for s in st if s.busy), default=None)
            for k in names:
                cost = clock.run(scheds[k].schedule(st), st, prof, flops)
                t5[k].append(cost.eq5_time_s)
                ti[k].append(cost.time_s)
                fl[k].append(cost.sched_latency_s)
                var[k].append(cost.energy_variance)
                rvar[k].append(cost.part_variance(REDUCE_PARTS))
                if release is not None:
                    after[k].append((cost.eq5_time_s - release) / c)
                if not any_busy:
                    free5[k].append(cost.eq5_time_s)
                    continue
                ref = chain_free if k == "chain" else scheds[k]
                if k == "opt":
                    ref = EarliestPairScheduler(BUSY_S, c, train_s)
                free5[k].append(clock.run(ref.schedule(free), free, prof, flops).eq5_time_s)
            fallbacks += scheds["chain"].log[-1].fallback
        # busy overhead per allocation: own scheduler's all-free time as the base, and a
        # common base (the latency-optimal all-free time, the least any schedule needs)
        oh = {
            k: statistics.mean(a - b for a, b in zip(t5[k], free5[k], strict=True)) for k in names
        }
        ohc = {
            k: statistics.mean(a - b for a, b in zip(t5[k], free5["opt"], strict=True))
            for k in names
        }
        for k in names:
            pooled[k] += sum(a - b for a, b in zip(t5[k], free5[k], strict=True))
        rows_o.append(
            [n, oh["chain"], oh["tree"], oh["ring"], oh["opt"]]
            + [pct_less(oh[a], oh[b]) for a, b in OH_PAIRS]
            + [pct_less(ohc[a], ohc[b]) for a, b in OH_PAIRS]
        )
        # eq. 5's scheduler latency f; ringN = the synchronous ring with the N-th
        # communication round of §3.3 (closing the ring back to d0) added
        fl["ringN"] = [v + c for v in fl["ring"]]
        mf = {k: statistics.mean(v) for k, v in fl.items()}
        for k, v in fl.items():
            f_pooled[k] += sum(v)
        rows_f.append(
            [n, mf["chain"], mf["tree"], mf["ring"], mf["ringp"], mf["opt"]]
            + [pct_less(mf[a], mf[b]) for a, b in F_PAIRS]
        )
        m5 = {k: statistics.mean(v) for k, v in t5.items()}
        mi = {k: statistics.mean(v) for k, v in ti.items()}
        mv = {k: statistics.mean(v) for k, v in var.items()}
        mr = {k: statistics.mean(v) for k, v in rvar.items()}
        summary[n] = {
            "f_ct": pct_less(mf["chain"], mf["tree"]),
            "f_cr": pct_less(mf["chain"], mf["ring"]),
            "var_ct": pct_less(mv["chain"], mv["tree"]),
            "rvar_ct": pct_less(mr["chain"], mr["tree"]),
            "f_chain": mf["chain"],
            "fallbacks": fallbacks,
        }
        row = [
            n,
            m5["chain"],
            m5["tree"],
            m5["ring"],
            m5["opt"],
            pct_less(m5["chain"], m5["tree"]),
            pct_less(m5["chain"], m5["ring"]),
            pct_less(m5["opt"], m5["tree"]),
            pct_less(m5["opt"], m5["ring"]),
            pct_less(mi["chain"], mi["tree"]),
            pct_less(mi["chain"], mi["ring"]),
        ]
        rows_t.append(row)
        for key, val in zip(("ct", "cr", "ot", "or", "ict", "icr"), row[5:], strict=True):
            avg[key].append(val)
        avg["v"].append(pct_less(mv["chain"], mv["tree"]))
        avg["rv"].append(pct_less(mr["chain"], mr["tree"]))
        busy_draws = len(after["chain"])
        rows_e.append(
            [n, mv["chain"], mv["tree"], mv["ring"], mv["opt"], pct_less(mv["chain"], mv["tree"])]
            + [
                statistics.mean(after[k]) if busy_draws else float("nan")
                for k in ("chain", "tree", "ring", "opt")
            ]
            + [f"{busy_draws}/{reps}", fallbacks]
            + [mr["chain"], mr["tree"], pct_less(mr["chain"], mr["tree"])]
        )
    summary["pooled"] = {
        "f_ct": pct_less(f_pooled["chain"], f_pooled["tree"]),
        "f_cr": pct_less(f_pooled["chain"], f_pooled["ring"]),
    }
    if not verbose:
        return summary
    mean = {k: statistics.mean(v) for k, v in avg.items()}
    rows_t.append(["mean"] + [""] * 4 + [mean[k] for k in ("ct", "cr", "ot", "or", "ict", "icr")])
    table(
        f"Simulated time (s) per iteration, {reps} random allocations with ≤50% busy "
        f"(busy = {BUSY_S:.0f} s, one Bluetooth transfer = {c:.1f} s), LeNet [Fig. 10a]. "
        "eq.5 = training + busy + scheduled reduce (what a scheduler changes); iter = eq.5 + "
        "broadcast. Opt = latency-optimal reference (earliest pair first)",
        [
            "N",
            "Chain eq.5 s",
            "Tree eq.5 s",
            "Ring eq.5 s",
            "Opt eq.5 s",
            "Chain<Tree %",
            "Chain<Ring %",
            "Opt<Tree %",
            "Opt<Ring %",
            "iter Chain<Tree %",
            "iter Chain<Ring %",
        ],
        rows_t,
    )
    rows_e.append(["mean", "", "", "", "", mean["v"]] + [""] * 8 + [mean["rv"]])
    if rows_o:
        cols = list(zip(*(r[5:] for r in rows_o), strict=True))
        rows_o.append(["mean", "", "", "", ""] + [statistics.mean(col) for col in cols])
        rows_o.append(
            ["pooled", pooled["chain"], pooled["tree"], pooled["ring"], pooled["opt"]]
            + [pct_less(pooled[a], pooled[b]) for a, b in OH_PAIRS]
            + [""] * len(OH_PAIRS)
        )
    table(
        "Energy variance of aggregation energy (J², eq. 6: reduce and broadcast transfers "
        "and aggregation compute) [Fig. 10b] and Bluetooth "
        "transfers between the last busy device becoming free and the end of the reduce "
        "(busy-last check: lower = busy devices joined later), draws with ≥1 busy device; "
        "reduce-only = eq. 6 over the reduce's transfers and aggregation alone",
        [
            "N",
            "Chain var",
            "Tree var",
            "Ring var",
            "Opt var",
            "Chain<Tree var %",
            "Chain after-busy",
            "Tree after-busy",
            "Ring after-busy",
            "Opt after-busy",
            "busy draws",
            "DQN fallbacks",
            "Chain reduce-only var",
            "Tree reduce-only var",
            "reduce-only Chain<Tree %",
        ],
        rows_e,
    )
    table(
        "Latency overhead due to busy condition (MDLdroid abstract: 23 % / 53 % less than "
        "Tree / Ring): per allocation, eq.5 time minus the eq.5 time of the same devices all "
        "free, mean over the allocations (s; no-busy draws count as 0). Own = each "
        "scheduler's own all-free schedule as the base (Chain: a copy of the DQN in the same "
        "state); common = the latency-optimal all-free time as the base for all. % = "
        "reduction, ratio of the N's means; 'mean' row = mean of the per-N %, 'pooled' row = "
        "ratio of the overheads summed over every N and allocation (s)",
        [
            "N",
            "Chain OH s",
            "Tree OH s",
            "Ring OH s",
            "Opt OH s",
            "own Chain<Tree %",
            "own Chain<Ring %",
            "own Opt<Tree %",
            "own Opt<Ring %",
            "common Chain<Tree %",
            "common Chain<Ring %",
            "common Opt<Tree %",
            "common Opt<Ring %",
        ],
        rows_o,
    )
    cols = list(zip(*(r[6:] for r in rows_f), strict=True))
    rows_f.append(["mean"] + [""] * 5 + [statistics.mean(col) for col in cols])
    rows_f.append(
        ["pooled"]
        + [f_pooled[k] for k in ("chain", "tree", "ring", "ringp", "opt")]
        + [pct_less(f_pooled[a], f_pooled[b]) for a, b in F_PAIRS]
    )
    table(
        "Eq. 5 scheduler latency f(T_a, T_b) = T(t) - T_tr per iteration (s), mean over "
        f"{reps} random ≤50%-busy allocations [Fig. 10a 'Latency']; T_tr = the slowest "
        "device's local training. Ring = synchronous Ring-Allreduce (starts when every "
        "member is ready: f = T_a + T_b), Ring-p = the pipelined ring-order chain (pre-round-5 "
        "model), RingN = Ring + the N-th communication round of §3.3 (closing the ring). "
        "% = reduction of the mean; 'mean' = mean of the per-N %, 'pooled' = ratio of the "
        "sums over every N and allocation (s)",
        [
            "N",
            "Chain f s",
            "Tree f s",
            "Ring f s",
            "Ring-p f s",
            "Opt f s",
            "Chain<Tree %",
            "Chain<Ring %",
            "Chain<Ring-p %",
            "Chain<RingN %",
            "Opt<Tree %",
            "Opt<Ring %",
            "Tree<Ring %",
        ],
        rows_f,
    )
    return summary


def _spread(v: list[float]) -> str:
    """median [min, max] of a list of percentages."""
    return f"{statistics.median(v):.1f} [{min(v):.1f}, {max(v):.1f}]"


def dqn_seeds_section(
    ds,
    ns,
    reps: int,
    first: int,
    relearn: int,
    seed: int,
    dqn_seeds: list[int],
    tie_break: str = "eq4",
) -> None:
    """The Chain vs Tree / Ring comparison repeated with several DQN seeds on the *same*
    allocations: how much of each percentage is the DQN's run-to-run spread. The full
    tables are printed for the first DQN seed only."""
    runs = []
    for i, ds_seed in enumerate(dqn_seeds):
        t = time.time()
        runs.append(
            scheduler_section(
                ds, ns, reps, first, relearn, seed, ds_seed, i == 0, tie_break=tie_break
            )
        )
        print(f"(DQN seed {ds_seed}: {time.time() - t:.0f} s wall)", flush=True)
    keys = (
        ("f_ct", "f Chain<Tree %"),
        ("f_cr", "f Chain<Ring %"),
        ("var_ct", "var Chain<Tree %"),
        ("rvar_ct", "reduce-only var Chain<Tree %"),
    )
    rows = []
    for n in ns:
        row: list = [n]
        for k, _ in keys:
            row.append(_spread([r[n][k] for r in runs]))
        row.append(_spread([r[n]["f_chain"] for r in runs]))
        row.append(" ".join(str(r[n]["fallbacks"]) for r in runs))
        rows.append(row)
    # overall figure per DQN seed = mean of the per-N % (the README's "mean" row)
    row = ["mean of N"]
    for k, _ in keys:
        row.append(_spread([statistics.mean(r[n][k] for n in ns) for r in runs]))
    rows.append(row + ["", ""])
    rows.append(
        ["pooled"] + [_spread([r["pooled"][k] for r in runs]) for k in ("f_ct", "f_cr")] + [""] * 4
    )
    per_seed = [
        [s]
        + [statistics.mean(r[n][k] for n in ns) for k, _ in keys]
        + [r["pooled"]["f_ct"], r["pooled"]["f_cr"]]
        for s, r in zip(dqn_seeds, runs, strict=True)
    ]
    table(
        f"Chain vs Tree / Ring over DQN seeds {dqn_seeds} (Chain tie-break {tie_break}; "
        f"same {reps} ≤50%-busy "
        "allocations per N for every seed): median [min, max] over the seeds of eq. 5's "
        "latency f reduction and the energy-variance (eq. 6) reduction [Fig. 10]; "
        "fallbacks per seed; 'mean of N' = per seed the mean of the per-N %",
        ["N"] + [h for _, h in keys] + ["Chain f s", "DQN fallbacks"],
        rows,
    )
    table(
        "Per DQN seed: mean over N of the per-N % and the pooled f reduction",
        ["DQN seed"] + [h for _, h in keys] + ["pooled f Chain<Tree %", "pooled f Chain<Ring %"],
        per_seed,
    )


def sweep_section(ds, ns, reps: int, busy_units: list[float], seed: int) -> None:
    clock = Clock(ds)
    c = clock.transfer_s
    rows = []
    for b in busy_units:
        pct = {k: [] for k in ("5t", "5r", "it", "ir")}
        for n in ns:
            prof, flops, train_s = clock.fleet(n)
            opt = EarliestPairScheduler(b * c, c, train_s)
            rng = np.random.default_rng(seed + n)
            t5 = {k: [] for k in ("opt", "tree", "ring")}
            ti = {k: [] for k in t5}
            for _ in range(reps):
                st = random_statuses(n, rng, 0.5)
                for k, sch in (("opt", opt), ("tree", TreeScheduler()), ("ring", RingScheduler())):
                    cost = clock.run(sch.schedule(st), st, prof, flops, busy_s=b * c)
                    t5[k].append(cost.eq5_time_s)
                    ti[k].append(cost.time_s)
            m5 = {k: statistics.mean(v) for k, v in t5.items()}
            mi = {k: statistics.mean(v) for k, v in ti.items()}
            pct["5t"].append(pct_less(m5["opt"], m5["tree"]))
            pct["5r"].append(pct_less(m5["opt"], m5["ring"]))
            pct["it"].append(pct_less(mi["opt"], mi["tree"]))
            pct["ir"].append(pct_less(mi["opt"], mi["ring"]))
        rows.append(
            [b, b * c]
            + [statistics.mean(pct[k]) for k in ("5t", "5r", "it", "ir")]
            + [max(pct["5t"]), max(pct["5r"])]
        )
    table(
        f"Ceiling: time the latency-optimal schedule saves over Tree / Ring, mean over "
        f"N = {ns[0]}..{ns[-1]}, {reps} random ≤50%-busy allocations per N, by busy duration "
        "(in Bluetooth transfers; the default is the row with "
        f"{BUSY_S:.0f} s)",
        [
            "busy (transfers)",
            "busy s",
            "eq.5 Opt<Tree %",
            "eq.5 Opt<Ring %",
            "iter Opt<Tree %",
            "iter Opt<Ring %",
            "max-N eq.5 Opt<Tree %",
            "max-N eq.5 Opt<Ring %",
        ],
        rows,
    )


# -- 4. exploration ---------------------------------------------------------------------
def _replay_return(env: ChainSchedulingEnv, sched) -> float:
    env.reset()
    total = 0.0
    for p in sched.pairs:
        for a in (p.sender, p.receiver):
            _, r, _, _, _ = env.step(a)
            total += r
    return total


def _random_pass_rate(env: ChainSchedulingEnv, thr: float, episodes: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(episodes):
        _, info = env.reset()
        total, done = 0.0, False
        while not done:
            _, r, done, _, info = env.step(int(rng.choice(np.flatnonzero(info["action_mask"]))))
            total += r
        hits += total > thr
    return hits / episodes


def _closed_form_threshold(n: int, k: int, cfg: RewardConfig, busy_delay: float) -> float:
    """The threshold as it was before round 4 (busy part estimated in closed form:
    ρk²/(2(N−1)) and one transfer after the busy delay), kept to show the change."""
    base = 2 * (n - 1) * cfg.alpha + cfg.complete
    depth = math.ceil(math.log2(n))
    makespan = max(depth, (busy_delay + 1) if k else 0)
    busy_floor = cfg.rho * k * k / (2 * (n - 1))
    return base + busy_floor - cfg.latency * makespan + _f(n, cfg.beta) + cfg.beta * depth - cfg.phi


def threshold_section(ns, episodes: int, busy_delay: float, seed: int) -> None:
    """Eq. 8's threshold against the best return any schedule can reach (exact DP),
    per N and number of busy devices k, and how often a random valid episode (TDGE's
    ε = 1 phase) passes it."""
    cfg = RewardConfig()
    rows = []
    for n in ns:
        for k in range(n // 2 + 1):
            best = optimum(n, k, cfg, busy_delay)
            thr = threshold(n, k, cfg, busy_delay)
            lit = _f(n, cfg.beta) + cfg.beta * math.ceil(math.log2(n)) - cfg.phi
            old = _closed_form_threshold(n, k, cfg, busy_delay)
            st = [DeviceStatus(d, in_use=d < k) for d in range(n)]
            env = ChainSchedulingEnv(n, st, busy_delay=busy_delay)
            rates = [_random_pass_rate(env, t, episodes, seed) for t in (thr, old, lit)]
            rows.append(
                [n, k, best, thr, best - thr, lit, best - lit, old, best - old]
                + [100 * r for r in rates]
            )
    table(
        "Eq. 8 threshold vs the best reachable return (exact DP over all schedules), "
        f"busy delay {busy_delay:.2f} transfers, k busy devices; rand% = % of {episodes} "
        "random valid episodes whose return passes the bar (TDGE/TGE leave ε = 1 only "
        "then). T = ours (eq. 8 + order-independent base + exact busy shift); eq.8 = f+g−Φ "
        "alone; old = round-3 closed-form busy estimate",
        [
            "N",
            "k",
            "best",
            "T",
            "best-T",
            "eq.8",
            "best-eq.8",
            "old T",
            "best-old",
            "rand% T",
            "rand% old",
            "rand% eq.8",
        ],
        rows,
    )


def exploration_section(
    ns,
    reps: int,
    budget: int,
    busy_delay: float,
    seed: int,
    bars=("eq8", "tree"),
    strategies=("tdge", "dge", "tge"),
) -> None:
    """Every run spends the whole budget (Algorithm 2 runs to max Epoch) so the three
    strategies' training-reward curves can be compared; two convergence points are
    read off: the greedy policy first reaching the bar (checked every 5 episodes; where
    the Chain scheduler ends a learning slot) and the training reward's 10-episode mean
    first reaching the bar (Fig. 8b's convergence of cumulative reward)."""
    rows = []
    # Fig. 8a: per (N, strategy) the learning slot's cost until it ends (greedy policy at
    # the bar, where the Chain scheduler stops; the budget if never): env steps, CPU s
    cost: dict = {}
    per_seed: dict = {}  # (bar, N, strategy) -> each seed's r (same draw and DQN seed per r)
    for bar in bars:
        for n in ns:
            row: list = [bar, n]
            pass_rates = []
            for expl in strategies:
                greedy, reward, passed, latent = [], [], [], []
                steps, cpu = [], []
                for r in range(reps):
                    st = random_statuses(n, np.random.default_rng(seed + 31 * r + n), 0.5)
                    env = ChainSchedulingEnv(n, st, busy_delay=busy_delay)
                    _, info = env.reset()
                    thr = (
                        threshold(n, info["n_busy"], env.cfg, busy_delay)
                        if bar == "eq8"
                        else _replay_return(env, TreeScheduler().schedule(st))
                    )
                    if expl == strategies[0]:
                        pass_rates.append(_random_pass_rate(env, thr, 200, seed + r))
                    cfg = DQNConfig(
                        exploration=expl, stop_at_convergence=False, stop_when_both_converged=True
                    )
                    agent = DQNAgent(n * PER_DEVICE + GLOBAL, n, cfg, seed + r)
                    res = agent.learn(env, budget, threshold_override=thr)
                    greedy.append(res.converged_at or budget)
                    reward.append(reward_converged_at(res.returns, thr) or budget)
                    passed.append(res.passed_at or budget)
                    latent.append(res.greedy_at or budget)
                    end = (res.converged_at or res.episodes) - 1
                    steps.append(res.steps_at[end])
                    cpu.append(res.cpu_at[end])
                if bar == bars[0]:
                    cost[n, expl] = (steps, cpu)
                per_seed[bar, n, expl] = reward
                row += [
                    statistics.median(greedy),
                    statistics.median(reward),
                    sum(x < budget for x in reward),
                    statistics.median(passed),
                    statistics.median(latent),
                ]
            row.append(100 * statistics.median(pass_rates))
            rows.append(row)
    table(
        f"DQN episodes to convergence, median of {reps} seeds (each its own ≤50%-busy draw), "
        f"budget {budget} (unconverged = budget), busy delay {busy_delay:.2f} transfers "
        "[Fig. 8]. g = greedy policy reaches the bar (slot end); r = 10-episode mean training "
        "reward reaches the bar (Fig. 8b), n = runs whose reward converged; p = first episode "
        "passing the bar; l = greedy policy reaches the bar in any phase (also while ε = 1: "
        "learned off-policy, not acted on). bar eq8 = T(N) of eq. 8 (near the optimum); bar "
        "tree = return of the Tree schedule on the same draw; rand% = % of random valid "
        "episodes passing it",
        ["bar", "N"]
        + [c for e in strategies for c in (f"{e.upper()} g", f"{e.upper()} r", "n", "p", "l")]
        + ["rand%"],
        rows,
    )
    _training_time_table(ns, reps, budget, bars[0], strategies, cost)
    _paired_exploration_table(ns, reps, bars, strategies, per_seed)


def _paired_exploration_table(ns, reps: int, bars, strategies, per_seed: dict) -> None:
    """Fig. 8b paired by seed: seed r runs every strategy on the same busy draw with the
    same DQN seed, so each strategy's r can be compared with the first strategy's seed by
    seed -- the ratio other / first (above 1: the first converges sooner), its median with
    an order-statistic interval, and on how many seeds the first is sooner, with a
    one-sided sign test (ties excluded)."""
    if len(strategies) < 2:
        return
    first = strategies[0]
    rows = []
    for bar in bars:
        for n in ns:
            a = per_seed[bar, n, first]
            for e in strategies[1:]:
                b = per_seed[bar, n, e]
                ratios = [y / x for x, y in zip(a, b, strict=True)]
                summ = paired_summary(ratios)
                sooner = sum(x < y for x, y in zip(a, b, strict=True))
                later = sum(x > y for x, y in zip(a, b, strict=True))
                m = sooner + later
                p = sum(math.comb(m, i) for i in range(sooner, m + 1)) / 2.0**m if m else 1.0
                rows.append(
                    [bar, n, f"{e.upper()} / {first.upper()}",
                     f"{summ.median:.2f} [{summ.lo:.2f}, {summ.hi:.2f}] ({summ.coverage:.0%})",
                     f"{sooner} / {later} / {reps - m}", f"{p:.3f}"]
                )  # fmt: skip
    table(
        f"Fig. 8b paired by seed ({reps} seeds): r of each strategy over {first.upper()}'s "
        f"(the 10-episode mean training reward reaching the bar; unconverged = the budget); "
        f"{first.upper()} sooner / later / tie, one-sided sign test that {first.upper()} "
        "converges sooner",
        ["bar", "N", "ratio", "median [interval]", "sooner / later / tie", "p"],
        rows,
    )


def _training_time_table(ns, reps: int, budget: int, bar: str, strategies, cost: dict) -> None:
    """Fig. 8a: the scheduler's training time per N and strategy, mean and standard
    deviation over the seeds, in environment steps (training episodes + the greedy
    convergence checks once exploiting) and in CPU seconds of the learning thread."""
    rows = []
    for n in ns:
        row: list = [n]
        for e in strategies:
            st, cp = cost[n, e]
            row += [
                f"{statistics.mean(st):.0f} ± {statistics.pstdev(st):.0f}",
                f"{statistics.mean(cp):.2f} ± {statistics.pstdev(cp):.2f}",
            ]
        rows.append(row)
    # overall: mean over N of the per-N mean steps and the per-N std; ratio to the first
    mean_st = {e: statistics.mean(statistics.mean(cost[n, e][0]) for n in ns) for e in strategies}
    sd_st = {e: statistics.mean(statistics.pstdev(cost[n, e][0]) for n in ns) for e in strategies}
    row = ["mean of N"]
    for e in strategies:
        mean_cp = statistics.mean(statistics.mean(cost[n, e][1]) for n in ns)
        row += [f"{mean_st[e]:.0f} ± {sd_st[e]:.0f}", f"{mean_cp:.2f}"]
    rows.append(row)
    first = strategies[0]
    row = [f"x {first.upper()}"]
    for e in strategies:
        r_mean = mean_st[e] / mean_st[first] if mean_st[first] else float("nan")
        r_sd = sd_st[e] / sd_st[first] if sd_st[first] else float("nan")
        row += [f"{r_mean:.2f} (sd {r_sd:.2f})", ""]
    rows.append(row)
    table(
        f"Fig. 8a: Chain-scheduler training time until the learning slot ends (the greedy "
        f"policy reaches the bar '{bar}'; budget {budget} episodes if never), mean ± std over "
        f"{reps} seeds: env steps (training + convergence-check rollouts) and CPU s of the "
        f"learning thread; 'x {first.upper()}' = each strategy's mean steps (and mean std) "
        f"over {first.upper()}'s (paper: TDGE 1.2x / 1.3x less than TGE / DGE, std 1.9x / "
        "2.1x less)",
        ["N"] + [c for e in strategies for c in (f"{e.upper()} steps", f"{e.upper()} CPU s")],
        rows,
    )


# -- 5. speed-up -------------------------------------------------------------------------
def speedup_section(ds, ns, seed: int) -> None:
    """One epoch, one aggregation, no busy device, Tree reduce + binomial broadcast, every
    local step timed by the phone profile's sustained training FLOP/s × the model's
    counted FLOPs — the same compute model for the single device and the N devices."""
    rows = []
    c, t = int(ds.x.shape[1]), int(ds.x.shape[2])
    bytes_per_window = 4 * c * t
    for n in ns:
        cfg = ChainConfig(devices=n, scheduler="tree", epochs=1, busy="none", seed=seed)
        fleet = build_fleet(cfg, ds)
        model = models.build(
            "lenet", in_channels=fleet.in_channels, length=fleet.length, num_classes=7
        )
        fps = training_flops_per_sample(model, fleet.in_channels, fleet.length)
        n_params = sum(p.numel() for p in model.parameters())
        watch = sum(len(y) for _, y in fleet.parts)
        sizes = [watch] + [int(mb * 1e6 / bytes_per_window) for mb in PAPER_TRAIN_MB]
        st = [DeviceStatus(d) for d in range(n)]
        sched = TreeScheduler().schedule(st)
        for link in ("bluetooth", "wifi_direct"):
            row: list = [n, link]
            for total in sizes:
                share = {d: len(fleet.parts[d][1]) / watch for d in range(n)}
                single = fps * total / fleet.profiles[0].compute_flops
                cost = simulate_iteration(
                    sched,
                    st,
                    fleet.profiles,
                    {d: fps * total * share[d] for d in range(n)},
                    n_params,
                    4 * n_params,
                    "chain",
                    link,
                )
                row += [single, cost.time_s, single / cost.time_s]
            rows.append(row)
    sizes_txt = ", ".join(
        f"{mb} MB = {int(mb * 1e6 / bytes_per_window)} windows" for mb in PAPER_TRAIN_MB
    )
    table(
        "Speed-up of one epoch (1 aggregation, no busy device) over single-device training "
        f"on the phone compute model [Fig. 14]; watch = {watch} training windows; paper "
        f"Table 1 sizes as windows of our shape: {sizes_txt}",
        [
            "N",
            "link",
            "watch single s",
            "watch N-dev s",
            "watch speed-up",
            "25MB single s",
            "25MB N-dev s",
            "25MB speed-up",
            "900MB single s",
            "900MB N-dev s",
            "900MB speed-up",
        ],
        rows,
    )


# -- 6. trade-off ------------------------------------------------------------------------
def tradeoff_section(
    ds, n: int, configs, seed: int, first: int, relearn: int, tie_break: str = "eq4"
) -> None:
    rows = []
    for aggs, epochs in configs:
        cfg = ChainConfig(
            devices=n,
            scheduler="chain",
            epochs=epochs,
            aggs_per_epoch=aggs,
            seed=seed,
            first_episodes=first,
            relearn_episodes=relearn,
            tie_break=tie_break,
        )
        r = run_chain(cfg, dataset=ds)
        fleet = build_fleet(cfg, ds)
        model = models.build(
            "lenet", in_channels=fleet.in_channels, length=fleet.length, num_classes=7
        )
        fps = training_flops_per_sample(model, fleet.in_channels, fleet.length)
        total = sum(len(y) for _, y in fleet.parts)
        p0 = fleet.profiles[0]
        single_s = epochs * fps * total / p0.compute_flops
        single_mah = devices.battery_drain(p0, devices.energy_j(p0, compute_s=single_s))
        max_mah = max(r.epochs[-1]["battery_mah"])
        rows.append(
            [
                f"{aggs}-E{epochs}",
                r.accuracy,
                r.sim_time_s,
                single_s,
                single_s / r.sim_time_s,
                max_mah,
                single_mah,
                single_mah / max_mah if max_mah else float("nan"),
            ]
        )
    table(
        f"Aggregations per epoch × epochs trade-off, N={n}, Chain scheduler, ≤50% busy, "
        "Bluetooth; single = one phone training all the data [Fig. 12-14]",
        [
            "option",
            "accuracy %",
            "sim time s",
            "single s",
            "speed-up",
            "max battery mAh",
            "single mAh",
            "battery saving x",
        ],
        rows,
    )


# -- 7b. why aggregation frequency does not move accuracy ---------------------------------
# (label, ChainConfig overrides, what stands in for the person ids: None = the people,
# "label" = the activity, "shuffled" = the people's ids dealt to random windows, so the
# devices keep the per-person split's sizes but hold IID samples of everyone's windows)
DRIFT_VARIANTS = {
    "base": ("N=4, 2-3 people per device (the trade-off's split)", {"devices": 4}, None),
    "shuffled": ("N=4, base's sizes, windows dealt IID", {"devices": 4}, "shuffled"),
    "person": ("N=10, one person per device", {"devices": 10}, None),
    "iid": ("N=4, one person's windows spread IID", {"devices": 4, "setting": "individual"}, None),
    "label": ("N=4, split by activity (1-2 of 7 per device)", {"devices": 4}, "label"),
    "lr2": ("N=4 as base, lr 0.1 (2x)", {"devices": 4, "lr": 0.1}, None),
    "lr": ("N=4 as base, lr 0.2 (4x)", {"devices": 4, "lr": 0.2}, None),
    "steps": ("N=4 as base, batch 4 (4x local steps)", {"devices": 4, "batch_size": 4}, None),
}


def _regroup(ds, how: str | None, seed: int):
    """``ds`` with its person ids replaced as DRIFT_VARIANTS says."""
    if how is None:
        return ds
    if how == "label":
        return dataclasses.replace(ds, groups=ds.y.clone())
    g = torch.Generator().manual_seed(seed)
    return dataclasses.replace(ds, groups=ds.groups[torch.randperm(len(ds.groups), generator=g)])


def _flat(tensors) -> torch.Tensor:
    return torch.cat([t.reshape(-1).to(torch.float64) for t in tensors])


def calibration(logits: torch.Tensor, y: torch.Tensor) -> tuple[float, float, float]:
    """(mean top-class probability, the temperature T that minimises the test
    cross-entropy of ``logits / T``, that least cross-entropy). T > 1: the model is
    over-confident; the least cross-entropy is the loss with the confidence level removed,
    so what is left of a loss difference is in the ranking of the classes. T from a
    log-spaced grid over [0.25, 4] (step 0.5 %)."""
    import torch.nn.functional as F

    logits = logits.to(torch.float64)
    conf = float(logits.softmax(1).max(1).values.mean())
    temps = torch.logspace(math.log10(0.25), math.log10(4.0), 557, dtype=torch.float64)
    nll = torch.stack([F.cross_entropy(logits / t, y) for t in temps])
    i = int(torch.argmin(nll))
    return conf, float(temps[i]), float(nll[i])


def _corr(a: list[float], b: list[float]) -> float:
    """Pearson correlation (nan with fewer than 3 pairs or a constant side)."""
    if len(a) < 3 or np.std(a) == 0 or np.std(b) == 0:
        return float("nan")
    return float(np.corrcoef(a, b)[0, 1])


def drift_of(deltas: dict) -> tuple[float, float]:
    """Client drift just before one aggregation: (RMS over devices of ‖w_d − w̄‖, ‖w̄ − w_g‖).

    Device d's model is w_g + Δ_d, so its distance from the devices' mean model w̄ is
    ‖Δ_d − Δ̄‖, and the mean's step from the global model it started from is ‖Δ̄‖
    (plain mean; Chain's θ-weighted aggregate is that mean up to float32 rounding)."""
    flat = torch.stack([_flat(d.values()) for d in deltas.values()])
    mean = flat.mean(0)
    drift = float((flat - mean).pow(2).sum(1).mean().sqrt())
    return drift, float(mean.norm())


def gradient_dissimilarity(model: torch.nn.Module, parts) -> float:
    """B² = mean_d ‖∇F_d‖² / ‖mean_d ∇F_d‖² at ``model``: 1 when every device's full-data
    gradient is the same (IID), larger the more the devices' objectives disagree."""
    grads = []
    for x, y in parts:
        model.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        grads.append(_flat(p.grad for p in model.parameters()))
    model.zero_grad(set_to_none=True)
    g = torch.stack(grads)
    return float(g.pow(2).sum(1).mean() / g.mean(0).pow(2).sum())


def label_tv(parts, num_classes: int) -> float:
    """Mean over devices of the total-variation distance between the device's label
    distribution and the pooled one (0: same mix of activities everywhere)."""
    counts = [np.bincount(y.numpy(), minlength=num_classes).astype(float) for _, y in parts]
    pooled = np.sum(counts, 0) / np.sum(counts)
    return float(np.mean([0.5 * np.abs(c / c.sum() - pooled).sum() for c in counts]))


def drift_section(ds, variants, aggs_list, epochs: int, seeds: list[int]) -> None:
    """Accuracy, test loss and client drift at several aggregations per epoch, paired by
    seed against the first, in several data splits. Ring order and no busy device: the
    schedule changes only which float32 roundings the mean takes, not the mean."""
    het_rows, rows, cal_rows = [], [], []
    for v in variants:
        label, over, how = DRIFT_VARIANTS[v]
        probe = ChainConfig(seed=seeds[0], **over)
        parts = build_fleet(probe, _regroup(ds, how, seeds[0])).parts
        fewest = min(math.ceil(len(y) / probe.batch_size) for _, y in parts)
        ks = [k for k in aggs_list if k <= fewest]
        if ks != list(aggs_list):
            print(
                f"  {v}: {', '.join(str(k) for k in aggs_list if k > fewest)} aggregations per "
                f"epoch skipped: a device's epoch has {fewest} batches"
            )
        acc = {k: [] for k in ks}
        loss = {k: [] for k in ks}
        train = {k: [] for k in ks}
        drift = {k: [] for k in ks}
        step = {k: [] for k in ks}
        ratio = {k: [] for k in ks}
        cal = {k: [] for k in ks}  # (confidence, T, calibrated test loss) per seed
        b2_init, b2_end, tv, sizes = [], [], [], None
        for seed in seeds:
            vds = _regroup(ds, how, seed)
            for k in ks:
                cfg = ChainConfig(
                    scheduler="ring",
                    busy="none",
                    epochs=epochs,
                    aggs_per_epoch=k,
                    seed=seed,
                    **over,
                )
                per_it = []

                def hook(it, state, deltas, per_it=per_it):
                    per_it.append(drift_of(deltas))

                r = run_chain(cfg, dataset=vds, on_iteration=hook)
                acc[k].append(r.accuracy)
                loss[k].append(r.epochs[-1]["loss"])
                fleet = build_fleet(cfg, vds)
                fresh_model = functools.partial(
                    models.build,
                    cfg.model,
                    in_channels=fleet.in_channels,
                    length=fleet.length,
                    num_classes=fleet.num_classes,
                    seed=seed,
                )

                model = fresh_model()
                model.load_state_dict(r.final_state)
                train[k].append(
                    evaluate(
                        model,
                        torch.cat([x for x, _ in fleet.parts]),
                        torch.cat([y for _, y in fleet.parts]),
                    )[1]
                )
                model.eval()
                with torch.no_grad():
                    cal[k].append(calibration(model(fleet.test[0]), fleet.test[1]))
                model.train()
                drift[k].append(statistics.median(d for d, _ in per_it))
                step[k].append(statistics.median(s for _, s in per_it))
                ratio[k].append(statistics.median(d / s for d, s in per_it if s > 0))
                if k == ks[0]:
                    sizes = [len(y) for _, y in fleet.parts]
                    tv.append(label_tv(fleet.parts, fleet.num_classes))
                    b2_end.append(gradient_dissimilarity(model, fleet.parts))
                    model = fresh_model()
                    b2_init.append(gradient_dissimilarity(model, fleet.parts))
            print(
                f"  {v} seed {seed}: " + ", ".join(f"{k}/epoch {acc[k][-1]:.2f} %" for k in ks),
                flush=True,
            )
        het_rows.append(
            [
                v,
                label,
                "/".join(str(s) for s in sizes),
                statistics.median(tv),
                statistics.median(b2_init),
                statistics.median(b2_end),
            ]
        )
        base = ks[0]
        for k in ks:
            d_acc = [a - b for a, b in zip(acc[k], acc[base], strict=True)]
            d_loss = [a - b for a, b in zip(loss[k], loss[base], strict=True)]
            hi, lo = sum(x > 0 for x in d_acc), sum(x < 0 for x in d_acc)
            lhi, llo = sum(x > 0 for x in d_loss), sum(x < 0 for x in d_loss)
            d_train = [a - b for a, b in zip(train[k], train[base], strict=True)]
            thi, tlo = sum(x > 0 for x in d_train), sum(x < 0 for x in d_train)
            rows.append(
                [
                    v,
                    k,
                    f"{statistics.median(acc[k]):.2f} [{min(acc[k]):.2f}, {max(acc[k]):.2f}]",
                    sum(not math.isfinite(x) for x in loss[k]),
                    f"{statistics.mean(d_acc):+.2f}",
                    f"{hi}/{lo}/{len(d_acc) - hi - lo}",
                    f"{sign_test_p(hi, lo):.3f}",
                    f"{statistics.median(loss[k]):.4f}",
                    f"{statistics.mean(d_loss):+.4f}",
                    f"{llo}/{lhi}/{len(d_loss) - lhi - llo}",
                    f"{sign_test_p(lhi, llo):.3f}",
                    f"{statistics.median(train[k]):.4f}",
                    f"{statistics.mean(d_train):+.4f}",
                    f"{tlo}/{thi}/{len(d_train) - thi - tlo}",
                    f"{sign_test_p(thi, tlo):.3f}",
                    statistics.median(step[k]),
                    statistics.median(drift[k]),
                    statistics.median(ratio[k]),
                ]
            )
            d_conf = [a[0] - b[0] for a, b in zip(cal[k], cal[base], strict=True)]
            d_cal = [a[2] - b[2] for a, b in zip(cal[k], cal[base], strict=True)]
            chi, clo = sum(x > 0 for x in d_cal), sum(x < 0 for x in d_cal)
            fin = [(t, r) for t, r in zip(d_loss, d_train, strict=True) if math.isfinite(t + r)]
            cal_rows.append(
                [
                    v,
                    k,
                    f"{statistics.median(c[0] for c in cal[k]):.4f}",
                    f"{statistics.mean(d_conf):+.4f}",
                    f"{statistics.median(c[1] for c in cal[k]):.3f}",
                    f"{statistics.median(c[2] for c in cal[k]):.4f}",
                    f"{statistics.mean(d_cal):+.4f}",
                    f"{clo}/{chi}/{len(d_cal) - chi - clo}",
                    "–" if k == base else f"{_corr([t for t, _ in fin], [r for _, r in fin]):.2f}",
                ]
            )
            print(f"  {v} {k}/epoch accuracy per seed: {' '.join(f'{a:.2f}' for a in acc[k])}")
            print(f"  {v} {k}/epoch test loss per seed: {' '.join(f'{x:.4f}' for x in loss[k])}")
            print(f"  {v} {k}/epoch train loss per seed: {' '.join(f'{x:.4f}' for x in train[k])}")
    table(
        f"Heterogeneity of the splits (median over seeds {seeds}): training windows per "
        "device; label TV = mean total-variation distance of a device's activity mix from "
        "the pooled one; B² = mean_d ‖∇F_d‖² / ‖mean_d ∇F_d‖² (full-data gradients, 1 = "
        f"IID) at the initial model and after {epochs} epochs at {aggs_list[0]} aggregation "
        "per epoch",
        ["split", "what", "windows per device", "label TV", "B² init", "B² end"],
        het_rows,
    )
    table(
        f"Aggregations per epoch, E{epochs}, paired by seed against {aggs_list[0]} per epoch "
        f"({len(seeds)} seeds; Ring order, no busy device, Chain aggregation, LeNet, plain "
        "SGD): accuracy median [min, max]; Δ = mean paired difference; higher/lower/tie and a "
        "two-sided sign test (a pair with a diverged run, test loss nan, counts as a tie); test loss and training loss (all devices' training windows) the "
        "same (better = lower); drift = RMS over devices "
        "of ‖w_d − w̄‖ just before an aggregation, step = ‖w̄ − w_global‖, medians over the "
        "run's aggregations, then over seeds",
        [
            "split",
            "aggs/epoch",
            "accuracy %",
            "diverged",
            "Δ acc",
            "higher/lower/tie",
            "p",
            "test loss",
            "Δ loss",
            "better/worse/tie",
            "p (loss)",
            "train loss",
            "Δ train",
            "better/worse/tie (train)",
            "p (train)",
            "step",
            "drift",
            "drift/step",
        ],
        rows,
    )
    table(
        "Where the test loss moves (same runs): confidence = mean top-class probability on "
        "the test windows; T = the temperature that minimises the test cross-entropy (> 1: "
        "over-confident); calibrated loss = that least cross-entropy, the loss with the "
        "confidence level removed (medians; Δ = mean paired difference against "
        f"{aggs_list[0]} per epoch; better/worse/tie for the calibrated loss); corr = Pearson "
        "correlation over seeds of Δ test loss with Δ training loss (near 1: the test loss "
        "moves with how well the run fits its training windows, not with a generalisation gap)",
        [
            "split",
            "aggs/epoch",
            "confidence",
            "Δ confidence",
            "T",
            "calibrated loss",
            "Δ calibrated",
            "better/worse/tie (calibrated)",
            "corr(Δ test, Δ train)",
        ],
        cal_rows,
    )


# -- 8. energy variance against every schedule --------------------------------------------
def evar_section(
    ds,
    ns,
    reps: int,
    first: int,
    relearn: int,
    seed: int,
    dqn_seeds: list[int],
    tie_break: str = "eq4",
) -> None:
    """Eq. 6 at small N, where every valid schedule can be enumerated: is the DQN short of
    the least variance because it misses eq. 7's best return (learning), because eq. 7's
    best return does not single out the low-variance schedules (reward), or because no
    schedule does better (structure)? Same allocations (``seed + N``) and Chain
    scheduler settings as ``sched``, so the DQN column equals that section's."""
    clock = Clock(ds)
    c = clock.transfer_s
    tol_var = 1e-3  # J², "at the minimum": far below one transfer's energy squared
    tol_f = 0.01 * c  # s: schedules this close in f are latency-equivalent
    rows, part_rows = [], []
    for n in ns:
        prof, flops, train_s = clock.fleet(n)
        every = list(all_schedules(range(n)))
        for dseed in dqn_seeds:
            chain = ChainScheduler(
                n,
                seed=dseed,
                first_episodes=first,
                relearn_episodes=relearn,
                busy_delay=BUSY_S / c,
                tie_break=tie_break,
                evaluate=clock.evaluator(prof, flops),
            )
            rng = np.random.default_rng(seed + n)
            acc = {k: [] for k in ("chain", "tree", "ring", "min", "minf", "cred", "tred")}
            at_min = dict.fromkeys(("chain", "tree", "ring"), 0)
            at_best, tied, tied_min, tie_lo, tie_hi = 0, [], [], [], []
            parts = {
                (k, role): np.zeros(len(ENERGY_PARTS))
                for k in ("chain", "tree")
                for role in ("root", "other")
            }
            for _ in range(reps):
                st = random_statuses(n, rng, 0.5)
                scheds = {
                    "chain": chain.schedule(st),
                    "tree": TreeScheduler().schedule(st),
                    "ring": RingScheduler().schedule(st),
                }
                costs = {k: clock.run(v, st, prof, flops) for k, v in scheds.items()}
                everyc = [clock.run(s, st, prof, flops) for s in every]
                var = [x.energy_variance for x in everyc]
                vmin = min(var)
                fmin = min(x.sched_latency_s for x in everyc)
                acc["min"].append(vmin)
                acc["minf"].append(
                    min(
                        v
                        for v, x in zip(var, everyc, strict=True)
                        if x.sched_latency_s <= fmin + tol_f
                    )
                )
                for k in at_min:
                    acc[k].append(costs[k].energy_variance)
                    at_min[k] += costs[k].energy_variance <= vmin + tol_var
                acc["cred"].append(costs["chain"].part_variance(REDUCE_PARTS))
                acc["tred"].append(costs["tree"].part_variance(REDUCE_PARTS))
                env = ChainSchedulingEnv(n, st, reward=chain.reward, busy_delay=chain.busy_delay)
                rets = [_replay_return(env, s) for s in every]
                best = max(rets)
                top = [v for v, r in zip(var, rets, strict=True) if r >= best - 1e-9]
                at_best += _replay_return(env, scheds["chain"]) >= best - 1e-9
                tied.append(len(top))
                tied_min.append(sum(v <= vmin + tol_var for v in top))
                tie_lo.append(min(top))
                tie_hi.append(max(top))
                for k in ("chain", "tree"):
                    root = scheds[k].root
                    for d, ps in costs[k].energy_parts.items():
                        role = "root" if d == root else "other"
                        w = 1.0 if role == "root" else 1.0 / (n - 1)
                        parts[(k, role)] += w * np.array([ps[p] for p in ENERGY_PARTS]) / reps
            m = {k: statistics.mean(v) for k, v in acc.items()}
            rows.append(
                [
                    n,
                    dseed,
                    m["chain"],
                    m["tree"],
                    m["ring"],
                    m["min"],
                    m["minf"],
                    pct_less(m["chain"], m["tree"]),
                    pct_less(m["min"], m["tree"]),
                    " / ".join(str(at_min[k]) for k in ("chain", "tree", "ring")),
                    f"{at_best}/{reps}",
                    statistics.mean(tied),
                    statistics.mean(tied_min),
                    f"{statistics.mean(tie_lo):.3f}-{statistics.mean(tie_hi):.3f}",
                    pct_less(m["cred"], m["tred"]),
                ]
            )
            if dseed == dqn_seeds[0]:
                for (k, role), v in parts.items():
                    part_rows.append([n, k, role] + [float(x) for x in v] + [float(v.sum())])
    table(
        f"Energy variance (eq. 6, J²) against every valid schedule, Chain tie-break {tie_break}, "
        f"{reps} ≤50%-busy "
        "allocations per N (the sched section's), mean over the allocations [Fig. 10b]. "
        "Min = least variance of any schedule per allocation; Min|f = least among the "
        "latency-optimal ones; at min = allocations where Chain / Tree / Ring reach Min; "
        "DQN at eq.7 best = allocations where the DQN's schedule has eq. 7's best return; "
        "tied = schedules sharing that best return, of them at Min, and their variance range; "
        "reduce-only = eq. 6 over the reduce's transfers and aggregation alone",
        [
            "N",
            "DQN seed",
            "Chain var",
            "Tree var",
            "Ring var",
            "Min var",
            "Min|f var",
            "Chain<Tree %",
            "Min<Tree %",
            "at min C / T / R",
            "DQN at eq.7 best",
            "tied",
            "tied at Min",
            "tied var range",
            "reduce-only Chain<Tree %",
        ],
        rows,
    )
    table(
        "Energy per device by part (J, mean over the allocations; first DQN seed): the "
        "reduce root vs the mean of the other devices",
        ["N", "scheduler", "device", *ENERGY_PARTS, "total"],
        part_rows,
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke-sized run")
    ap.add_argument(
        "--sections",
        default=",".join(s for s in SECTIONS if s != "drift"),
        help="comma list of sections (default: all but drift)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reps", type=int, default=50, help="scheduling repetitions per N")
    ap.add_argument("--max-n", type=int, default=9, help="largest fleet")
    ap.add_argument("--min-n", type=int, default=2, help="smallest fleet (sched, sweep, ...)")
    ap.add_argument("--first", type=int, default=300, help="DQN episodes, first learning slot")
    ap.add_argument("--relearn", type=int, default=60, help="DQN episodes per re-learning slot")
    ap.add_argument(
        "--dqn-seeds",
        default=None,
        help="comma list of Chain-scheduler DQN seeds for the sched section (same "
        "allocations for each; prints median and spread); default: one run, DQN seed = --seed",
    )
    ap.add_argument("--sweep-reps", type=int, default=200, help="allocations per N in the sweep")
    ap.add_argument("--acc-epochs", type=int, default=10, help="training epochs, accuracy rows")
    ap.add_argument("--acc-seeds", type=int, default=1, help="seeds for the accuracy rows")
    ap.add_argument("--acc-max-n", type=int, default=None, help="largest N, accuracy rows")
    ap.add_argument("--acc-min-n", type=int, default=2, help="smallest N, accuracy rows")
    ap.add_argument(
        "--numerics-ns", default="5,8,9", help="comma list of N for the numerics section"
    )
    ap.add_argument("--explore-reps", type=int, default=8, help="DQN seeds per strategy and N")
    ap.add_argument("--explore-budget", type=int, default=300, help="episodes per DQN run")
    ap.add_argument(
        "--explore-bars", default="eq8,tree", help="comma list of bars: eq8 (T(N)), tree"
    )
    ap.add_argument(
        "--explore-strategies",
        default="tdge,tdge-greedy,dge,tge,tdge-a2",
        help="comma list of exploration strategies (tdge-a2 = Algorithm 2 read literally, "
        "tdge-greedy = the threshold compared with a greedy evaluation episode's reward)",
    )
    ap.add_argument(
        "--explore-ns", default="3,5,7,9", help="comma list of N for the explore section"
    )
    ap.add_argument("--tradeoff-n", type=int, default=4)
    ap.add_argument(
        "--evar-ns", default="3,4", help="comma list of N for the evar section (N <= 5)"
    )
    ap.add_argument("--tradeoff-epochs", type=int, default=10, help="E of the 1-E, 2-E rows")
    ap.add_argument(
        "--drift-variants",
        default=",".join(DRIFT_VARIANTS),
        help=f"comma list of data splits for the drift section ({', '.join(DRIFT_VARIANTS)})",
    )
    ap.add_argument("--drift-seeds", type=int, default=8, help="seeds of the drift section")
    ap.add_argument("--drift-aggs", default="1,2,10", help="aggregations per epoch (drift)")
    ap.add_argument(
        "--tie-break",
        default="eq4",
        choices=TIE_BREAKS,
        help="Chain scheduler's tie-break among eq. 7's equal returns (sched, evar, "
        "tradeoff): eq4 = relabel alike devices "
        "toward eq. 4's time + eq. 6 variance, none = the DQN's schedule as is (rounds 1-8)",
    )
    ap.add_argument(
        "--broadcast",
        default="resource",
        choices=BROADCASTS,
        help="forwarders of every scheduler's broadcast on the simulated clock: resource "
        "(§3.2.3's resource-sorted list) or energy (least energy spent this iteration first)",
    )
    args = ap.parse_args(argv)
    Clock.broadcast = args.broadcast
    print(f"(Chain tie-break: {args.tie_break}; broadcast: {args.broadcast})")
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    bad = [s for s in sections if s not in SECTIONS]
    if bad:
        ap.error(f"unknown sections {bad}; choose from {', '.join(SECTIONS)}")
    if "drift" in sections:
        unknown = [v for v in args.drift_variants.split(",") if v.strip() not in DRIFT_VARIANTS]
        if unknown:
            ap.error(f"unknown --drift-variants {unknown}; choose from {', '.join(DRIFT_VARIANTS)}")
    if "evar" in sections and any(int(n) > 5 for n in args.evar_ns.split(",")):
        ap.error(f"--evar-ns {args.evar_ns}: N <= 5 (N = 6 has 86,400 schedules per allocation)")
    torch.set_num_threads(1)
    t0 = time.time()
    ds = data.load("watch")
    clock = Clock(ds)
    if args.quick:
        plan = {
            "acc": lambda: accuracy_section(ds, [3], 1, [args.seed]),
            "numerics": lambda: numerics_section(ds, [3], 1, [args.seed]),
            "sched": lambda: dqn_seeds_section(
                ds, [4], 3, 20, 5, args.seed, [args.seed, args.seed + 1], args.tie_break
            ),
            "sweep": lambda: sweep_section(ds, [3, 4], 5, [2.0], args.seed),
            "threshold": lambda: threshold_section([3, 4], 50, 2.0, args.seed),
            "explore": lambda: exploration_section(
                [3], 1, 20, 2.0, args.seed, strategies=("tdge", "tdge-greedy", "dge")
            ),
            "speedup": lambda: speedup_section(ds, [2], args.seed),
            "tradeoff": lambda: tradeoff_section(
                ds, 2, [(1, 1), (2, 1)], args.seed, 20, 5, args.tie_break
            ),
            "evar": lambda: evar_section(ds, [3], 4, 20, 5, args.seed, [args.seed], args.tie_break),
            "drift": lambda: drift_section(ds, ["base", "label"], [1, 2], 1, [args.seed]),
        }
    else:
        ns = list(range(args.min_n, args.max_n + 1))
        acc_ns = list(range(args.acc_min_n, (args.acc_max_n or args.max_n) + 1))
        e = args.tradeoff_epochs
        bd = BUSY_S / clock.transfer_s
        plan = {
            "acc": lambda: accuracy_section(
                ds, acc_ns, args.acc_epochs, list(range(args.seed, args.seed + args.acc_seeds))
            ),
            "numerics": lambda: numerics_section(
                ds,
                [int(n) for n in args.numerics_ns.split(",")],
                args.acc_epochs,
                list(range(args.seed, args.seed + args.acc_seeds)),
            ),
            "sched": lambda: (
                scheduler_section(
                    ds,
                    ns,
                    args.reps,
                    args.first,
                    args.relearn,
                    args.seed,
                    tie_break=args.tie_break,
                )
                if args.dqn_seeds is None
                else dqn_seeds_section(
                    ds,
                    ns,
                    args.reps,
                    args.first,
                    args.relearn,
                    args.seed,
                    [int(x) for x in args.dqn_seeds.split(",")],
                    args.tie_break,
                )
            ),
            "sweep": lambda: sweep_section(
                ds, [n for n in ns if n >= 3], args.sweep_reps, [1, 2, 3, bd, 10], args.seed
            ),
            "threshold": lambda: threshold_section(ns, 1000, bd, args.seed),
            "explore": lambda: exploration_section(
                [int(n) for n in args.explore_ns.split(",") if int(n) <= args.max_n],
                args.explore_reps,
                args.explore_budget,
                bd,
                args.seed,
                tuple(args.explore_bars.split(",")),
                tuple(args.explore_strategies.split(",")),
            ),
            "speedup": lambda: speedup_section(ds, ns, args.seed),
            # MDLdroid's 1-E20, 2-E20, 10-E20, 1-E30, 1-E40, scaled to E = --tradeoff-epochs
            "tradeoff": lambda: tradeoff_section(
                ds,
                args.tradeoff_n,
                [(1, e), (2, e), (10, e), (1, 3 * e // 2), (1, 2 * e)],
                args.seed,
                args.first,
                args.relearn,
                args.tie_break,
            ),
            "drift": lambda: drift_section(
                ds,
                [v.strip() for v in args.drift_variants.split(",") if v.strip()],
                [int(k) for k in args.drift_aggs.split(",")],
                e,
                list(range(args.seed, args.seed + args.drift_seeds)),
            ),
            "evar": lambda: evar_section(
                ds,
                [int(n) for n in args.evar_ns.split(",")],
                args.reps,
                args.first,
                args.relearn,
                args.seed,
                [int(x) for x in (args.dqn_seeds or str(args.seed)).split(",")],
                args.tie_break,
            ),
        }
    for name in sections:
        t = time.time()
        plan[name]()
        print(f"({name}: {time.time() - t:.0f} s wall)", flush=True)
    print(f"\n(wall time {time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
