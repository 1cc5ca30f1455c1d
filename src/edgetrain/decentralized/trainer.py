"""In-process MDLdroid training: real local training, pair aggregation, simulated clock.

The three stages of Fig. 2, in order:

1. *Scan and build*: every device announces its profile and resources to the
   MA, which builds the mesh and sends the model config (here: the devices'
   profiles, partitions and the initial model, optionally pre-trained).
2. *Training and scheduling*: each iteration every connected device trains on
   its own data from the current global model; the MA's scheduler orders the
   pair aggregations from the devices' resource reports; deltas are reduced
   along that schedule (ChainSGD / NeighborSGD / CentralSGD); the aggregate is
   broadcast back. Aggregation runs ``aggs_per_epoch`` times per epoch (the
   "1-E20 / 2-E20" trade-off of Fig. 12-14).
3. *Inference broadcast*: the final global model is saved and every device
   holds it.

Accuracy and losses are real; time and energy come from
:mod:`edgetrain.decentralized.costs` on the devices' profiles.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from edgetrain import data as edata
from edgetrain import devices as edevices
from edgetrain import models as emodels
from edgetrain.decentralized.aggregation import WIRE_DTYPES, Aggregator, make_aggregator
from edgetrain.decentralized.broadcast import resource_score
from edgetrain.decentralized.chain_scheduler import ChainScheduler
from edgetrain.decentralized.costs import BUSY_S, energy_variance, link_time_s, simulate_iteration
from edgetrain.decentralized.dqn import EXPLORATIONS, DQNConfig
from edgetrain.decentralized.faults import DeviceCache, Fault
from edgetrain.decentralized.resources import DeviceStatus, random_statuses
from edgetrain.decentralized.schedule import star_schedule
from edgetrain.decentralized.schedulers import RingScheduler, Scheduler, TreeScheduler
from edgetrain.decentralized.tiebreak import TIE_BREAKS
from edgetrain.errors import ConfigError, DataError
from edgetrain.runs import RunDir, load_into, load_state

SCHEDULERS = ("chain", "ring", "tree")
AGGREGATIONS = ("chain", "neighbor", "central")
SETTINGS = ("per-person", "individual")
BUSY_MODES = ("random", "trace", "none")


@dataclass
class ChainConfig:
    """Everything one decentralized run needs; validated by :meth:`check`."""

    devices: int = 6
    scheduler: str = "chain"
    aggregation: str = "chain"
    model: str = "lenet"
    data: str = "watch"
    setting: str = "per-person"
    epochs: int = 5
    aggs_per_epoch: int = 1
    batch_size: int = 16
    lr: float = 0.05
    momentum: float = 0.0  # plain S-SGD (eq. 1); momentum state would reset each iteration
    seed: int = 0
    link: str = "bluetooth"
    busy: str = "random"
    max_busy_share: float = 0.5
    busy_s: float = BUSY_S
    test_fraction: float = 0.2
    faults: list[Fault] = field(default_factory=list)
    init_model: str | None = None
    relearn_episodes: int = 60
    first_episodes: int = 300
    catalogue: str = "mdldroid"
    # precision of the chain/neighbor messages (float64: 2x bytes per reduce transfer,
    # chain messages carry θ-weighted sums and equal Central's aggregate bit for bit)
    wire: str = "float32"
    # the Chain scheduler's exploration strategy (dqn.EXPLORATIONS; TDGE is the paper's)
    exploration: str = "tdge"
    # how the Chain scheduler breaks eq. 7's ties (tiebreak.TIE_BREAKS): "eq4" relabels
    # alike devices toward eq. 4's time + eq. 6 energy variance, "none" keeps the DQN's
    tie_break: str = "eq4"

    def check(self) -> None:
        for name, value, allowed in (
            ("scheduler", self.scheduler, SCHEDULERS),
            ("aggregation", self.aggregation, AGGREGATIONS),
            ("setting", self.setting, SETTINGS),
            ("busy", self.busy, BUSY_MODES),
            ("wire", self.wire, tuple(WIRE_DTYPES)),
            ("exploration", self.exploration, EXPLORATIONS),
            ("tie_break", self.tie_break, TIE_BREAKS),
        ):
            if value not in allowed:
                raise ConfigError(f"{name} {value!r} is not one of {', '.join(allowed)}")
        if self.devices < 1:
            raise ConfigError(f"devices must be >= 1, got {self.devices}")
        if self.epochs < 1 or self.aggs_per_epoch < 1:
            raise ConfigError("epochs and aggs_per_epoch must be >= 1")
        if not 0.0 < self.test_fraction < 1.0:
            raise ConfigError(f"test_fraction must be in (0, 1), got {self.test_fraction}")
        for f in self.faults:
            if not 0 <= f.device < self.devices:
                raise ConfigError(
                    f"fault names device {f.device}; devices are 0..{self.devices - 1}"
                )

    def to_json(self) -> dict:
        d = asdict(self)
        d["faults"] = [asdict(f) for f in self.faults]
        return d


@dataclass
class Fleet:
    """Per-device training tensors, a shared test set and device profiles."""

    parts: list[tuple[torch.Tensor, torch.Tensor]]
    test: tuple[torch.Tensor, torch.Tensor]
    profiles: dict[int, edevices.DeviceProfile]
    in_channels: int
    length: int
    num_classes: int


def build_fleet(cfg: ChainConfig, dataset: edata.Dataset | None = None) -> Fleet:
    """Split the data by the chosen setting (§1's two implication models).

    ``per-person``: one person's windows per device (the non-individual model);
    ``individual``: the person with most windows, spread IID over their devices.
    A ``test_fraction`` of each device's windows is held out for the shared test set.
    """
    ds = dataset if dataset is not None else edata.load(cfg.data)
    if ds.x.ndim != 3:
        raise DataError(f"data set {ds.name!r} is not N x C x T sensor windows; use watch")
    n = cfg.devices
    if cfg.setting == "per-person":
        if ds.groups is None:
            raise DataError(f"data set {ds.name!r} has no subject ids; use --setting individual")
        n_groups = int(torch.unique(ds.groups).numel())
        if n > n_groups:
            raise ConfigError(
                f"--setting per-person needs one person per device but {ds.name!r} has "
                f"{n_groups} people; use --devices <= {n_groups} or --setting individual"
            )
        idx = edata.partition_by_group(ds.groups.numpy(), n)
    else:
        if ds.groups is not None:
            ids, counts = np.unique(ds.groups.numpy(), return_counts=True)
            person = np.flatnonzero(ds.groups.numpy() == ids[int(np.argmax(counts))])
        else:
            person = np.arange(len(ds.y))
        idx = [person[p] for p in edata.partition_iid(len(person), n, seed=cfg.seed)]
    rng = np.random.default_rng(cfg.seed)
    parts, tx, ty = [], [], []
    for p in idx:
        p = rng.permutation(p)
        k = max(1, int(round(len(p) * cfg.test_fraction)))
        if len(p) - k < 1:
            raise DataError(f"a device has only {len(p)} windows; too few to train and test")
        te, tr = np.sort(p[:k]), np.sort(p[k:])
        parts.append((ds.x[tr], ds.y[tr]))
        tx.append(ds.x[te])
        ty.append(ds.y[te])
    phones = edevices.phones(cfg.catalogue)
    profiles = {d: phones[d % len(phones)] for d in range(n)}
    return Fleet(
        parts,
        (torch.cat(tx), torch.cat(ty)),
        profiles,
        int(ds.x.shape[1]),
        int(ds.x.shape[2]),
        len(ds.classes),
    )


def training_flops_per_sample(model: nn.Module, in_channels: int, length: int) -> float:
    """Forward + backward FLOPs of one sample, counted by torch's FlopCounterMode."""
    x = torch.zeros(1, in_channels, length)
    with FlopCounterMode(display=False) as fc:
        model(x).sum().backward()
    model.zero_grad(set_to_none=True)
    return float(fc.get_total_flops())


def make_scheduler(cfg: ChainConfig, busy_delay: float) -> Scheduler:
    if cfg.scheduler == "ring":
        return RingScheduler()
    if cfg.scheduler == "tree":
        return TreeScheduler()
    return ChainScheduler(
        cfg.devices,
        seed=cfg.seed,
        first_episodes=cfg.first_episodes,
        relearn_episodes=cfg.relearn_episodes,
        busy_delay=busy_delay,
        dqn=DQNConfig(exploration=cfg.exploration),
        tie_break=cfg.tie_break,
    )


def _evaluator(
    cfg: ChainConfig, fleet: Fleet, flops: dict, n_params: int, model_bytes: int, reduce_bytes: int
):
    """One iteration's simulated clock, ``(schedule, statuses) -> IterationCost``: what
    the run charges for the schedule it ran and what the MA scores candidates with."""

    def evaluate(schedule, statuses):
        return simulate_iteration(
            schedule,
            statuses,
            fleet.profiles,
            flops,
            n_params,
            model_bytes,
            cfg.aggregation,
            cfg.link,
            cfg.busy_s,
            reduce_bytes=reduce_bytes,
        )

    return evaluate


def _statuses(cfg: ChainConfig, iteration: int, rng: np.random.Generator, trace) -> list:
    if cfg.busy == "none":
        return [DeviceStatus(d) for d in range(cfg.devices)]
    if cfg.busy == "trace":
        row = trace[iteration]
        return [DeviceStatus(d, in_use=bool(row[d])) for d in range(cfg.devices)]
    return random_statuses(cfg.devices, rng, cfg.max_busy_share)


def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """(accuracy in %, mean cross-entropy) on ``x, y``."""
    model.eval()
    with torch.no_grad():
        logits = torch.cat([model(x[i : i + 256]) for i in range(0, len(x), 256)])
    model.train()
    loss = nn.functional.cross_entropy(logits, y).item()
    return 100.0 * (logits.argmax(1) == y).float().mean().item(), loss


def local_train(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    batches: Sequence[torch.Tensor],
    lr: float,
    momentum: float,
) -> int:
    """SGD over ``batches`` (index tensors into x, y); returns samples processed."""
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    seen = 0
    for b in batches:
        opt.zero_grad()
        nn.functional.cross_entropy(model(x[b]), y[b]).backward()
        opt.step()
        seen += len(b)
    return seen


@dataclass
class ChainResult:
    """Summary of a run (what ``edgetrain chain --json`` prints)."""

    accuracy: float
    sim_time_s: float
    energy_variance: float
    peak_model_copies: int
    run_dir: str | None
    epochs: list[dict]
    final_state: dict[str, torch.Tensor] = field(repr=False, default_factory=dict)

    def summary(self) -> dict:
        last = self.epochs[-1] if self.epochs else {}
        return {
            "accuracy": self.accuracy,
            "sim_time_s": self.sim_time_s,
            "energy_variance": self.energy_variance,
            "peak_model_copies": self.peak_model_copies,
            "run_dir": self.run_dir,
            "energy_j": last.get("energy_j"),
            "battery_mah": last.get("battery_mah"),
            "sum_theta_ok": all(e["sum_theta_ok"] for e in self.epochs),
        }


def run_chain(
    cfg: ChainConfig,
    run_dir: RunDir | None = None,
    dataset: edata.Dataset | None = None,
    progress: Callable[[dict], None] | None = None,
    executor=None,
    aggregator: Aggregator | None = None,
    on_iteration: Callable[[int, dict, dict | None], None] | None = None,
) -> ChainResult:
    """Train ``cfg.devices`` devices together without a server; see the module doc.

    ``aggregator`` replaces the one ``cfg.aggregation`` names (in-process only; the
    benchmark's float32-accumulating central control). ``on_iteration(it,
    global_state, deltas)`` is called after every global update (``deltas`` is None
    under Ray); the benchmark reads parameter trajectories with it.

    ``executor``: ``None``/``"inprocess"`` trains in this process; ``"ray"`` starts
    a :class:`~edgetrain.decentralized.ray_executor.RayExecutor` (one actor per
    device, shut down at the end); a started ``RayExecutor`` is used as given.
    """
    cfg.check()
    fleet = build_fleet(cfg, dataset)
    n = cfg.devices
    fewest = min(math.ceil(len(y) / cfg.batch_size) for _, y in fleet.parts)
    if cfg.aggs_per_epoch > fewest:
        # a segment without a batch would aggregate zero deltas: a round that is charged
        # on the clock and trains nothing
        raise ConfigError(
            f"aggs_per_epoch {cfg.aggs_per_epoch} exceeds the {fewest} batches of the "
            f"smallest device's epoch (batch size {cfg.batch_size}); use "
            f"aggs_per_epoch <= {fewest} or a smaller batch size"
        )
    model = emodels.build(
        cfg.model,
        in_channels=fleet.in_channels,
        length=fleet.length,
        num_classes=fleet.num_classes,
        seed=cfg.seed,
    )
    if cfg.init_model:  # keep training a pre-trained model on new local data
        load_into(model, load_state(cfg.init_model))
    global_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    n_params = sum(v.numel() for v in global_state.values() if v.is_floating_point())
    model_bytes = sum(v.numel() * v.element_size() for v in global_state.values())
    # bytes of one reduce message: the float tensors at the wire precision, never
    # narrower than the model's own (central's master receives the deltas themselves);
    # θ (one float per message) is left out
    wire_size = WIRE_DTYPES[cfg.wire].itemsize if cfg.aggregation != "central" else 0
    reduce_bytes = sum(
        v.numel()
        * (max(wire_size, v.element_size()) if v.is_floating_point() else v.element_size())
        for v in global_state.values()
    )
    flops_sample = training_flops_per_sample(model, fleet.in_channels, fleet.length)
    if aggregator is None:
        aggregator = make_aggregator(cfg.aggregation, cfg.wire)
    elif executor not in (None, "inprocess"):
        raise ConfigError("a custom aggregator runs in-process only; drop executor")
    transfer_s = link_time_s(fleet.profiles[0], fleet.profiles[0], reduce_bytes, cfg.link)
    scheduler = make_scheduler(cfg, busy_delay=cfg.busy_s / max(transfer_s, 1e-9))
    rng = np.random.default_rng(cfg.seed + 7919)
    iters = cfg.epochs * cfg.aggs_per_epoch
    trace = (
        edevices.busy_trace(n, iters, cfg.max_busy_share, seed=cfg.seed)
        if cfg.busy == "trace"
        else None
    )
    # everything above is built and checked: a failure there leaves no run directory
    cache = DeviceCache(run_dir.ensure().path / "cache") if run_dir else None
    if run_dir:
        run_dir.write_config({"command": "chain", **cfg.to_json()})
    energy = dict.fromkeys(range(n), 0.0)
    agg_energy = dict.fromkeys(range(n), 0.0)
    peak = dict.fromkeys(range(n), 1)
    sim_time = 0.0
    was_down: set[int] = set()
    crashed: set[int] = set()
    epochs: list[dict] = []
    ex = executor
    if executor == "ray":
        from edgetrain.decentralized.ray_executor import RayExecutor

        kw = {
            "in_channels": fleet.in_channels,
            "length": fleet.length,
            "num_classes": fleet.num_classes,
            "seed": cfg.seed,
        }
        ex = RayExecutor.start(fleet.parts, cfg.model, kw, cfg.lr, cfg.momentum)
    elif executor in (None, "inprocess"):
        ex = None
    it = 0
    for epoch in range(cfg.epochs):
        # each device's shuffled batches for this epoch, cut into aggs_per_epoch segments
        segs: dict[int, list[list[torch.Tensor]]] = {}
        for d, (x, _) in enumerate(fleet.parts):
            g = torch.Generator().manual_seed(cfg.seed * 1_000_003 + epoch * 1009 + d)
            perm = torch.randperm(len(x), generator=g)
            batches = list(perm.split(cfg.batch_size))
            k = cfg.aggs_per_epoch
            segs[d] = [
                batches[i * len(batches) // k : (i + 1) * len(batches) // k] for i in range(k)
            ]
        ep_sched, ep_time, ep_events, ep_busy, ep_theta_ok = [], 0.0, [], [], True
        t_wall = time.perf_counter()
        for seg in range(cfg.aggs_per_epoch):
            live = [
                d for d in range(n) if not any(f.device == d and f.down(it) for f in cfg.faults)
            ]
            if not live:
                raise ConfigError(f"every device is down at iteration {it}; nothing can train")
            if ex is not None:
                for d in range(n):
                    if d not in live and d not in was_down:
                        ex.kill(d)  # injected fault: the device's actor dies
                    if d in live and (d in was_down or d in crashed):
                        ex.revive(d)  # reconnect: a fresh actor for the device
            for d in live:
                if d in was_down or d in crashed:  # rejoin: last record in, iteration out
                    rec = cache.record(d) if cache else None
                    ep_events.append(
                        {
                            "event": "rejoin",
                            "device": d,
                            "last_iteration": rec["iteration"] if rec else None,
                            "current_iteration": it,
                        }
                    )
            for d in range(n):
                if d not in live and d not in was_down:
                    ep_events.append({"event": "lost", "device": d, "iteration": it})
            was_down = set(range(n)) - set(live)
            crashed.clear()
            statuses = _statuses(cfg, it, rng, trace)
            live_st = [s for s in statuses if s.device in live]
            ep_busy.append([s.device for s in live_st if s.busy])
            # local training from the global model (real)
            if ex is not None:
                seen = ex.train(live, global_state, {d: segs[d][seg] for d in live})
                for d in live:
                    if d not in seen:  # the actor died: a lost device for this iteration
                        ep_events.append({"event": "lost", "device": d, "iteration": it})
                        crashed.add(d)
                live = [d for d in live if d in seen]
                live_st = [s for s in live_st if s.device in seen]
                if not live:
                    raise RuntimeError(f"every device actor died at iteration {it}")
            else:
                deltas, seen = {}, {}
                for d in live:
                    model.load_state_dict(global_state)
                    x, y = fleet.parts[d]
                    seen[d] = local_train(model, x, y, segs[d][seg], cfg.lr, cfg.momentum)
                    local = model.state_dict()
                    deltas[d] = {k: local[k] - global_state[k] for k in global_state}
            # this iteration's simulated clock: the run's cost and the MA's tie-break model
            clock = _evaluator(
                cfg,
                fleet,
                {d: flops_sample * seen[d] for d in live},
                n_params,
                model_bytes,
                reduce_bytes,
            )
            # schedule + reduce
            if cfg.aggregation == "central":
                master = max(live_st, key=resource_score).device
                sched = star_schedule(live, master)
            else:
                if isinstance(scheduler, ChainScheduler):
                    scheduler.evaluate = clock  # the MA's cost model for eq. 7's tie-break
                sched = scheduler.schedule(live_st)
            red = (
                ex.reduce(sched, cfg.aggregation, cfg.wire)
                if ex
                else aggregator.reduce(deltas, sched)
            )
            theta_ok = math.isclose(red.theta, len(live))
            ep_theta_ok &= theta_ok
            if cfg.aggregation == "chain" and not theta_ok:
                raise RuntimeError(
                    f"Σθ = {red.theta} != {len(live)} live devices at iteration {it}"
                )
            global_state = {
                k: (v + red.aggregate[k].to(v.dtype))
                if v.is_floating_point()
                else red.aggregate[k].clone()
                for k, v in global_state.items()
            }
            if on_iteration:
                on_iteration(it, global_state, None if ex else deltas)
            cost = clock(sched, live_st)
            for d in live:
                energy[d] += cost.energy_j[d]
                agg_energy[d] += cost.agg_energy_j[d]
                peak[d] = max(peak[d], red.peak_copies.get(d, 1))
                if cache:  # file cache: parameters + iteration record, every iteration
                    cache.save(
                        d, global_state, {"iteration": it + 1, "theta": 1.0, "samples": seen[d]}
                    )
            sim_time += cost.time_s
            ep_time += cost.time_s
            ep_sched.append(sched.to_json())
            it += 1
        model.load_state_dict(global_state)
        acc, loss = evaluate(model, *fleet.test)
        battery = {d: edevices.battery_drain(fleet.profiles[d], energy[d]) for d in range(n)}
        rec = {
            "epoch": epoch + 1,
            "accuracy": acc,
            "loss": loss,
            "sim_time_s": sim_time,
            "epoch_sim_time_s": ep_time,
            "energy_j": [energy[d] for d in range(n)],
            "agg_energy_j": [agg_energy[d] for d in range(n)],
            "energy_variance": energy_variance(agg_energy),
            "battery_mah": [battery[d] for d in range(n)],
            "peak_model_copies": [peak[d] for d in range(n)],
            "schedule": ep_sched,
            "busy": ep_busy,
            "events": ep_events,
            "sum_theta_ok": ep_theta_ok,
            "wall_s": time.perf_counter() - t_wall,
        }
        if isinstance(scheduler, ChainScheduler) and scheduler.log:
            lg = scheduler.log[-1]
            rec["dqn"] = {
                "relearned": lg.relearned,
                "episodes": lg.episodes,
                "converged_at": lg.converged_at,
                "fallback": lg.fallback,
                "tie_swaps": lg.tie_swaps,
                "returns": lg.learn.returns if lg.learn else [],
            }
        epochs.append(rec)
        if run_dir:
            run_dir.log_metrics(rec)
        if progress:
            progress(rec)
    if executor == "ray" and ex is not None:
        ex.shutdown()
    if run_dir:
        run_dir.save_model(global_state)  # stage 3: the model every device now holds
        from edgetrain.decentralized.report import write_report

        write_report(run_dir.path, cfg.to_json(), epochs)
    return ChainResult(
        accuracy=epochs[-1]["accuracy"],
        sim_time_s=sim_time,
        energy_variance=energy_variance(agg_energy),
        peak_model_copies=max(peak.values()),
        run_dir=str(run_dir.path) if run_dir else None,
        epochs=epochs,
        final_state=global_state,
    )


def default_run_name(cfg: ChainConfig) -> str:
    """``chain-<scheduler>-<aggregation>-n<devices>-s<seed>``."""
    return f"chain-{cfg.scheduler}-{cfg.aggregation}-n{cfg.devices}-s{cfg.seed}"
