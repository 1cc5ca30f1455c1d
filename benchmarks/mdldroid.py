"""MDLdroid figures with edgetrain.decentralized: prints one table per figure.

    .venv/bin/python benchmarks/mdldroid.py            # N = 2..9, 50 repetitions
    .venv/bin/python benchmarks/mdldroid.py --quick    # a smoke-sized version

Sections (paper figure in brackets):
1. accuracy of Chain / Neighbor / Central aggregation per N, real training on
   the watch data, one person per device [Fig. 3, Table 3];
2. peak model copies held by one device per N [Fig. 11a];
3. simulated time per iteration and energy variance, Chain vs Ring vs Tree
   schedulers, random allocation with ≤ 50 % busy devices [Fig. 10];
4. DQN episodes to convergence with TDGE vs DGE vs TGE exploration [Fig. 8];
5. speed-up of an N-device epoch over single-device training [Fig. 14];
6. epochs × aggregations-per-epoch trade-off: accuracy, time, battery [Fig. 12-14].
Time and energy are simulated from the device profiles; accuracy is real.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from edgetrain import data, devices, models
from edgetrain.decentralized.chain_scheduler import ChainScheduler
from edgetrain.decentralized.costs import BUSY_S, link_time_s, simulate_iteration
from edgetrain.decentralized.dqn import DQNAgent, DQNConfig
from edgetrain.decentralized.env import GLOBAL, PER_DEVICE, ChainSchedulingEnv
from edgetrain.decentralized.resources import DeviceStatus, random_statuses
from edgetrain.decentralized.schedulers import RingScheduler, TreeScheduler
from edgetrain.decentralized.trainer import (
    ChainConfig,
    build_fleet,
    run_chain,
    training_flops_per_sample,
)


def table(title: str, header: list[str], rows: list[list]) -> None:
    print(f"\n## {title}")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        cells = [f"{c:.4g}" if isinstance(c, float) else str(c) for c in r]
        print("| " + " | ".join(cells) + " |")


def accuracy_section(ds, ns, epochs: int) -> None:
    rows = []
    for n in ns:
        res = {}
        for agg in ("chain", "neighbor", "central"):
            cfg = ChainConfig(
                devices=n, scheduler="ring", aggregation=agg, epochs=epochs, busy="none"
            )
            res[agg] = run_chain(cfg, dataset=ds)
        rows.append(
            [n]
            + [res[a].accuracy for a in ("chain", "neighbor", "central")]
            + [res["chain"].accuracy - res["central"].accuracy]
            + [res["chain"].peak_model_copies, res["central"].peak_model_copies]
        )
    table(
        f"Accuracy (%) after {epochs} epochs, watch, one person per device [Fig. 3] and "
        "peak model copies per device [Fig. 11a]",
        ["N", "Chain", "Neighbor", "Central", "Chain-Central", "Chain peak", "Central peak"],
        rows,
    )


def scheduler_section(ds, ns, reps: int, first: int, relearn: int, seed: int) -> None:
    model = models.build("lenet", in_channels=ds.x.shape[1], length=ds.x.shape[2], num_classes=7)
    n_params = sum(p.numel() for p in model.parameters())
    model_bytes = 4 * n_params
    fps = training_flops_per_sample(model, ds.x.shape[1], ds.x.shape[2])
    ph = devices.phones("mdldroid")
    rows = []
    for n in ns:
        prof = {d: ph[d % len(ph)] for d in range(n)}
        samples = 0.8 * len(ds.y) / n
        flops = dict.fromkeys(range(n), fps * samples)
        busy_delay = BUSY_S / link_time_s(ph[0], ph[0], model_bytes, "bluetooth")
        chain = ChainScheduler(
            n, seed=seed, first_episodes=first, relearn_episodes=relearn, busy_delay=busy_delay
        )
        rng = np.random.default_rng(seed + n)
        t = {"chain": [], "ring": [], "tree": []}
        v = {"chain": [], "ring": [], "tree": []}
        for _ in range(reps):
            st = random_statuses(n, rng, 0.5)
            for name, sch in (
                ("chain", chain),
                ("ring", RingScheduler()),
                ("tree", TreeScheduler()),
            ):
                c = simulate_iteration(sch.schedule(st), st, prof, flops, n_params, model_bytes)
                t[name].append(c.time_s)
                v[name].append(c.energy_variance)
        m = {k: statistics.mean(x) for k, x in t.items()}
        e = {k: statistics.mean(x) for k, x in v.items()}
        rows.append(
            [
                n,
                m["chain"],
                m["tree"],
                m["ring"],
                100 * (1 - m["chain"] / m["tree"]),
                100 * (1 - m["chain"] / m["ring"]),
                e["chain"],
                e["tree"],
                e["ring"],
                100 * (1 - e["chain"] / e["tree"]) if e["tree"] else 0.0,
            ]
        )
    table(
        f"Simulated time per iteration (s) and energy variance (J², eq. 6), {reps} random "
        "allocations with ≤50% busy, LeNet over Bluetooth [Fig. 10]",
        [
            "N",
            "Chain s",
            "Tree s",
            "Ring s",
            "Chain vs Tree %less",
            "Chain vs Ring %less",
            "Chain var",
            "Tree var",
            "Ring var",
            "Chain vs Tree var %less",
        ],
        rows,
    )


def exploration_section(ns, reps: int, budget: int, seed: int) -> None:
    rows = []
    for n in ns:
        row = [n]
        for expl in ("tdge", "dge", "tge"):
            eps, conv = [], 0
            for r in range(reps):
                st = random_statuses(n, np.random.default_rng(seed + 31 * r + n), 0.5)
                env = ChainSchedulingEnv(n, st)
                agent = DQNAgent(n * PER_DEVICE + GLOBAL, n, DQNConfig(exploration=expl), seed + r)
                res = agent.learn(env, budget)
                eps.append(res.converged_at or budget)
                conv += res.converged_at is not None
            row += [statistics.mean(eps), f"{conv}/{reps}"]
        rows.append(row)
    table(
        f"DQN episodes to convergence (budget {budget}; unconverged count as the budget) [Fig. 8]",
        ["N", "TDGE", "conv", "DGE", "conv", "TGE", "conv"],
        rows,
    )


def speedup_section(ds, ns, seed: int) -> None:
    rows = []
    for n in ns:
        cfg = ChainConfig(devices=n, scheduler="tree", epochs=1, busy="none", seed=seed)
        fleet = build_fleet(cfg, ds)
        model = models.build(
            "lenet",
            in_channels=fleet.in_channels,
            length=fleet.length,
            num_classes=fleet.num_classes,
        )
        fps = training_flops_per_sample(model, fleet.in_channels, fleet.length)
        total = sum(len(y) for _, y in fleet.parts)
        single = fps * total / fleet.profiles[0].compute_flops
        for link in ("bluetooth", "wifi_direct"):
            st = [DeviceStatus(d) for d in range(n)]
            n_params = sum(p.numel() for p in model.parameters())
            c = simulate_iteration(
                TreeScheduler().schedule(st),
                st,
                fleet.profiles,
                {d: fps * len(fleet.parts[d][1]) for d in range(n)},
                n_params,
                4 * n_params,
                "chain",
                link,
            )
            rows.append([n, link, single, c.time_s, single / c.time_s])
    table(
        "Speed-up of one epoch (1 aggregation) over single-device training, no busy devices "
        "[Fig. 14]",
        ["N", "link", "single s", "N-device s", "speed-up"],
        rows,
    )


def tradeoff_section(ds, n: int, configs, seed: int) -> None:
    rows = []
    for aggs, epochs in configs:
        cfg = ChainConfig(
            devices=n,
            scheduler="chain",
            epochs=epochs,
            aggs_per_epoch=aggs,
            seed=seed,
            first_episodes=100,
            relearn_episodes=20,
        )
        r = run_chain(cfg, dataset=ds)
        rows.append(
            [f"{aggs}-E{epochs}", r.accuracy, r.sim_time_s, max(r.epochs[-1]["battery_mah"])]
        )
    table(
        f"Aggregations per epoch × epochs trade-off, N={n} [Fig. 12-14]",
        ["option", "accuracy %", "sim time s", "max battery mAh"],
        rows,
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke-sized run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reps", type=int, default=50, help="scheduler repetitions (full mode)")
    ap.add_argument("--epochs", type=int, default=10, help="training epochs (full mode)")
    ap.add_argument("--max-n", type=int, default=9, help="largest fleet (full mode)")
    ap.add_argument("--explore-reps", type=int, default=5, help="DQN runs per strategy and N")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    t0 = time.time()
    ds = data.load("watch")
    if args.quick:
        accuracy_section(ds, [3], epochs=1)
        scheduler_section(ds, [4], reps=2, first=20, relearn=5, seed=args.seed)
        exploration_section([3], reps=1, budget=20, seed=args.seed)
        speedup_section(ds, [2], args.seed)
        tradeoff_section(ds, 2, [(1, 1), (2, 1)], args.seed)
    else:
        ns = list(range(2, args.max_n + 1))
        e = args.epochs
        accuracy_section(ds, ns, epochs=e)
        scheduler_section(ds, ns, reps=args.reps, first=300, relearn=60, seed=args.seed)
        exploration_section(
            [n for n in (3, 5, 7, 9) if n <= args.max_n], args.explore_reps, 300, args.seed
        )
        speedup_section(ds, ns, args.seed)
        tradeoff_section(ds, 4, [(1, e), (2, e), (4, e), (1, 2 * e)], args.seed)
    print(f"\n(wall time {time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
