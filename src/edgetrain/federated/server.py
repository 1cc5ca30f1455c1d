"""The federated server loop: select -> plan -> train -> aggregate -> evaluate -> checkpoint.

One round (FedHybrid §4.1 workflow):

1. clients check in (predicted memory budget, per-step operator time, profile estimate);
2. the selector picks ``int(overcommit x k)`` clients (over-commitment, FedScale's
   ``--overcommitment`` default 1.3; identical for every selector);
3. each selected client gets the model and, under a plan technique, an execution plan
   from the :class:`~edgetrain.federated.plans.PlanService` (clustered, cached); Table 4's
   baselines (Oort + Melon / Capuchin / GACT) instead run one fleet-wide plan on every
   client, generated on each device (:mod:`edgetrain.federated.baselines`);
4. its memory outcome decides how it trains (fits / planned / over budget under page
   reclaim / killed above physical memory — :mod:`edgetrain.sim.memory`); its budget for
   the round comes from an app-usage memory trace, predicted by eq. 10 (with FedHybrid's
   plan-regeneration rule applied mid-round) or, without the predictor, a fixed first
   reading (:mod:`edgetrain.sim.round_memory`); it may drop out (probability ``dropout``),
   and its simulated round time and energy follow from :mod:`edgetrain.sim.clock`; clients
   past the deadline are discarded (the round ends at the deadline), the others train for
   real on their partition, passing the plan's compressed share of activations through the
   plan's codec (:mod:`edgetrain.federated.local`);
5. the round closes when ``k`` clients have reported (their updates are aggregated,
   weights = sample counts; later reports are stragglers, credited with the round's mean
   utility as FedScale does) or, with fewer reports, at the round's deadline: a killed or
   dropped client never reports, so the server learns of its failure only when the
   deadline passes (Bonawitz et al., MLSys 2019 §2.2; ``failure_report = "immediate"``
   restores the earlier rule that the server hears of it at once); with
   ``partial_work`` (FedProx, Li et al. MLSys 2020) a client still training at the close
   stops, uploads the local steps it finished in time and is aggregated too;
6. the global model is evaluated on the held-out test set (real accuracy and loss).

Every round writes one line to ``metrics.jsonl`` and a checkpoint (``checkpoint/
global.safetensors``: the tensors, and the round state in its metadata, one atomic file);
:meth:`FederatedServer.resume` continues from it, and the run ends with the same metrics as
an uninterrupted run.
All randomness is drawn from ``(seed, round, client)``-keyed generators or the
selector's generator, whose state is checkpointed.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from edgetrain.engine.trainer import check_one_sample_batches, evaluate
from edgetrain.errors import ConfigError, RunDirError
from edgetrain.federated.aggregators import Aggregator, make_aggregator
from edgetrain.federated.baselines import melon_exact, uniform_fraction, uniform_plan
from edgetrain.federated.environment import Environment
from edgetrain.federated.methods import METHODS, MethodSpec
from edgetrain.federated.plans import (
    ON_DEVICE_PLAN_SLOWDOWN,
    PlanOutcome,
    PlanService,
    plannable_mask,
)
from edgetrain.federated.selectors import CheckIn, Feedback, Selector, make_selector
from edgetrain.runs import (
    RunDir,
    load_state,
    note_checkpoint,
    read_metadata,
    save_state,
)
from edgetrain.sim.clock import PRESSURE_SLOWDOWN_CAL, ClientCost, client_cost
from edgetrain.sim.executor import ClientTask, InProcessExecutor
from edgetrain.sim.round_memory import (
    REGEN_PLAN_BYTES,
    TP1,
    TP2,
    TRACE_STEP_S,
    WS_ADJ,
    ClientMemoryState,
    budget_trace,
    predict,
    train_through,
)

# the checkpoint: tensors + round state (metadata "state") in one file, replaced atomically;
# run directories of earlier versions hold the state in OLD_STATE_FILE next to it
CHECKPOINT_FILE = "global.safetensors"
OLD_STATE_FILE = "state.json"
# HeteroFL width levels (Diao et al. 2020, §3: model complexity levels a-e are width
# ratios 1, 1/2, 1/4, 1/8, 1/16). Activation memory scales ~ width, FLOPs ~ width^2.
HETEROFL_WIDTHS = (1.0, 0.5, 0.25, 0.125, 0.0625)
OUTCOMES = ("fit", "planned", "submodel", "pressure", "killed", "dropped", "late")
TRAIN_OUTCOMES = ("fit", "planned", "submodel", "pressure")  # the client trains and reports
PLAN_TECHNIQUES = ("hybrid", "recompute", "compress", "swap")
# The budget trace covers the slowest round: full pressure (x PRESSURE_SLOWDOWN_CAL) on a
# plan with this overhead factor; past it the last budget holds (round_memory).
MAX_TRACE_OVERHEAD = 3.0
# a believed budget above the round's lowest true budget by more than this share of M_G
# counts as an over-estimate (the round-6 diagnosis used the same 1 % threshold)
BUDGET_OVER_TOL = 0.01


@dataclass
class ClientRound:
    """What happened to one selected client in one round (plain data)."""

    cid: int
    outcome: str  # one of OUTCOMES
    width: float
    overhead: float
    pressure: float
    cost: ClientCost | None
    plan: PlanOutcome | None
    regenerated: bool = False  # the predictor's rule fired and a new plan was fetched
    pages: int = 0  # pages reclaimed over the round (the rule's fault count)
    # plan techniques only: the budget the client planned for (eq. 10's prediction, or the
    # fixed first reading without the predictor) against the budget it really had over
    # its round's unplanned compute (mean and minimum of the trace), as fractions of M_G
    budget_err: float | None = None  # |believed - true mean| / M_G
    budget_over: bool = False  # believed > true minimum + BUDGET_OVER_TOL x M_G


def _seed(*parts: int) -> int:
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1)[0])


def selector_options(selector: str, fcfg: Any) -> dict[str, Any]:
    """The selector's settings from the ``federated`` section: FedHybrid's epsilon, MemStat
    and Stat forms, exploration draw and UCB constant; Oort's ``federated.oort`` section; none
    for Random. One place for every runtime (in-process, Ray, Flower), so a setting cannot
    reach one and not another."""
    if selector == "oort":
        o = fcfg.oort
        return {
            "exploration": o.exploration_factor,
            "decay": o.exploration_decay,
            "exploration_min": o.exploration_min,
            "round_threshold": o.round_threshold,
            "pacer_delta": o.pacer_delta,
            "pacer_step": o.pacer_step,
            "round_penalty": o.round_penalty,
            "cut_off_util": o.cut_off_util,
            "clip_bound": o.clip_bound,
            "sample_window": o.sample_window,
            "exploit_draw": o.exploit_draw,
        }
    if selector != "fedhybrid":
        return {}
    return {
        "epsilon": fcfg.epsilon,
        "memstat": fcfg.memstat,
        "stat": fcfg.fedhybrid_stat,
        "explore": fcfg.fedhybrid_explore,
        "util": fcfg.fedhybrid_util,
        "ucb_c": fcfg.fedhybrid_ucb_c,
    }


class FederatedServer:
    """Runs ``method`` with an aggregator over a fixed :class:`Environment`."""

    def __init__(
        self,
        env: Environment,
        method: str | None = None,
        aggregator: str | None = None,
        run_dir: RunDir | None = None,
        plan_service: PlanService | None = None,
        executor: str | None = None,
        progress: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        """``progress`` receives one event (a plain dict) as each stage advances: ``{"event":
        "plans", "method", "strategy", "done", "total"}`` while the plan buckets are made and
        ``{"event": "round", "method", "round", "rounds", "accuracy", "sim_time_s"}`` after
        each round (``rounds``: the total of the current :meth:`run`, None outside one)."""
        fcfg = env.config.federated
        self.env = env
        self.progress = progress
        self._rounds_goal: int | None = None
        self.method_name = method or fcfg.method
        if self.method_name not in METHODS:
            raise ConfigError(
                f"unknown method {self.method_name!r}; accepted: {', '.join(METHODS)}"
            )
        self.method: MethodSpec = METHODS[self.method_name]
        agg_name = aggregator or fcfg.aggregator
        opts: dict[str, Any] = {}
        if agg_name == "fedprox":
            opts = {"mu": fcfg.mu}
        elif agg_name == "fedyogi":
            opts = dict(fcfg.yogi.model_dump())
        self.aggregator: Aggregator = make_aggregator(agg_name, **opts)
        self.aggregator_name = agg_name
        self.selector: Selector = make_selector(
            self.method.selector,
            seed=_seed(env.config.seed, 7),
            **selector_options(self.method.selector, fcfg),
        )
        self.run_dir = run_dir
        self.model = env.build_model()
        work = []  # (samples, batch, steps) of each client's local training in a round
        for cid, n in enumerate(env.n_samples):
            steps, batch, _ = env.local_work(cid)
            work.append((int(n), batch, steps))
        check_one_sample_batches(self.model, env.train.x, work, "clients (client ids)")
        self.global_state = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        self.round = 0
        self.sim_time = 0.0
        self.records: list[dict[str, Any]] = []
        self.client_mem: dict[int, ClientMemoryState] = {}  # predictor state per client
        self.regenerations = 0
        tech = self.method.technique
        if (
            tech == "heterofl"
            and "width_mult" not in env.config.model.options
            and ("width_mult" not in _spec_defaults(env.config.model.name))
        ):
            raise ConfigError(
                f"heterofl needs a model with a width_mult option (mobilenetv2, shufflenetv2); "
                f"{env.config.model.name} has none"
            )
        self.plans = plan_service
        if tech in ("hybrid", "recompute", "compress", "swap") and self.plans is None:
            # one service per environment: every method of a comparison shares the profiles
            # and planner results (same plans for the same budgets, planned once)
            if env.plan_service is None:
                env.plan_service = make_plan_service(env)
            self.plans = env.plan_service
        # Table 4's baselines as the systems they stand for: one fleet-wide plan
        self.uniform_plan: PlanOutcome | None = None
        self.uniform_target: float | None = None
        if self.plans is not None and tech in ("hybrid", "recompute", "compress", "swap"):
            if run_dir is not None and (run_dir.path / "plans.json").exists():
                load_plans_file(self.plans, run_dir.path / "plans.json")
            if self.method.uniform and fcfg.baseline_plans == "uniform":
                self.uniform_target = uniform_fraction(env.budgets, env.m_g)
                self.uniform_plan = uniform_plan(self.plans, tech, self.uniform_target)
            else:
                self.plans.precompute(tech, self._plan_event if progress else None)
            if run_dir is not None:
                run_dir.write_json("plans.json", self.plans.to_json())
        self._plans_written = len(self.plans.table) if self.plans is not None else 0
        self.executor_name = executor or fcfg.executor
        if self.executor_name == "inprocess":
            self.executor: Any = InProcessExecutor(self._build_width, self._data_for)
        elif self.executor_name == "ray":
            from edgetrain.sim.ray_executor import RayExecutor

            mc = env.config.model
            self.executor = RayExecutor(
                mc.name, mc.options, env.config.seed, env.train.x, env.train.y, env.parts,
                base_width=float(mc.options.get("width_mult", _spec_defaults(mc.name).get("width_mult", 1.0))),
                num_actors=fcfg.ray_actors,
            )  # fmt: skip
        else:
            raise ConfigError(f"executor {self.executor_name!r}; accepted: inprocess, ray")
        self._checkin = CheckIn(
            n_samples=env.n_samples,
            # the oracle's devices all have the memory to train: MemStat (eq. 1) is 1 for each
            memory_budget=np.maximum(env.budgets, env.m_g) if self.method.oracle else env.budgets,
            step_time_s=env.step_time_s(),
            est_duration_s=env.est_duration_s(),
            m_g=env.m_g,
            eligible=self._plannable() if fcfg.unplannable == "exclude" else None,
        )
        # the round's reporting deadline (config field federated.deadline_s; see there)
        self.deadline_s: float | None = fcfg.deadline_s
        if self.deadline_s is None and fcfg.failure_report == "deadline":
            self.deadline_s = fcfg.deadline_factor * float(np.max(self._checkin.est_duration_s))

    # -- helpers ----------------------------------------------------------------------------
    def _plannable(self) -> np.ndarray | None:
        """``federated.unplannable: exclude``: the clients the selector may pick -- those whose
        check-in budget holds M_G or admits a plan from the server's planner (the plan cache's
        bucket, as :meth:`_client_round` asks for it). None (every client) for methods whose
        plans the server does not make: no plans, on-device generation, Table 4's uniform
        plans, and the oracle."""
        env, m = self.env, self.method
        if (
            m.technique not in PLAN_TECHNIQUES
            or not m.optimizer
            or m.oracle
            or self.uniform_plan is not None
            or self.plans is None
        ):
            return None
        classes = [env.memory_class(c) for c in range(len(env.budgets))]
        return plannable_mask(self.plans, m.technique, env.budgets, env.m_g, classes)

    def _build_width(self, width: float) -> torch.nn.Module:
        if width >= 1.0:
            return self.env.build_model()
        base = self.env.config.model.options.get(
            "width_mult", _spec_defaults(self.env.config.model.name).get("width_mult", 1.0)
        )
        return self.env.build_model(width_mult=float(base) * width)

    def _data_for(self, cid: int) -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.as_tensor(self.env.parts[cid], dtype=torch.long)
        return self.env.train.x[idx], self.env.train.y[idx]

    def _client_round(self, r: int, cid: int) -> ClientRound:
        """Memory outcome, dropout and cost of one selected client (no training yet).

        The client's budget comes from a fresh app-usage trace of this round
        (:mod:`edgetrain.sim.round_memory`): predicted by eq. 10 (or, without the
        predictor, its first reading kept as a fixed budget), then trained through it, so a
        budget that shrinks mid-round costs page reclaim (or, under FedHybrid's local
        engine, triggers the regeneration rule and a new plan).
        """
        env, f = self.env, self.env.config.federated
        p = env.fleet[cid]
        tech = self.method.technique
        st = self.client_mem.setdefault(cid, ClientMemoryState())
        steps_samples = env.local_work(cid)[2]  # samples trained this round (the clock)
        base_cost = client_cost(
            p, samples=steps_samples, flops_per_sample=env.flops_per_sample,
            model_bytes=env.model_bytes,
        )  # fmt: skip
        if st.window_s is None:  # W starts as one local epoch on the device (§4.4.2)
            epoch = client_cost(
                p, samples=int(env.n_samples[cid]), flops_per_sample=env.flops_per_sample,
                model_bytes=env.model_bytes,
            ).compute_s  # fmt: skip
            st.window_s = max(TRACE_STEP_S, epoch)
        # long enough for the slowest case: full pressure on a planned step (x2 margin)
        horizon = 2.0 * PRESSURE_SLOWDOWN_CAL * base_cost.compute_s * MAX_TRACE_OVERHEAD
        tr = budget_trace(
            env.memory, p, float(env.budgets[cid]), _seed(env.config.seed, r, cid, 5),
            st.window_s, horizon,
        )  # fmt: skip
        if self.method.predictor:
            believed = predict(tr, tr.start, st.window_s)
        else:  # the reading at the start of its first round, kept as a fixed budget
            if st.static_budget is None:
                st.static_budget = float(tr.budget[tr.start - 1])
            believed = st.static_budget
        regen_here = self.method.regenerate and tech in PLAN_TECHNIQUES
        pre_regen = regen_here and st.kills > TP2
        if pre_regen:  # lmkd killed it more than TP2 times: regenerate before training
            st.window_s = max(TRACE_STEP_S, st.window_s * WS_ADJ)
            believed = predict(tr, tr.start, st.window_s)
            st.kills = 0
            st.regenerations += 1
        berr, bover = None, False
        if tech in PLAN_TECHNIQUES:  # the predictor's error over this round (diagnostics)
            seg = tr.budget[tr.start : tr.start + max(1, math.ceil(base_cost.compute_s))]
            berr = abs(believed - float(seg.mean())) / env.m_g
            bover = believed > float(seg.min()) + BUDGET_OVER_TOL * env.m_g
        demand, overhead, width, plan = env.m_g, 1.0, 1.0, None
        device_plan_s = 0.0
        outcome = "fit"
        cls = env.memory_class(cid)
        if tech == "heterofl":
            width = next(
                (w for w in HETEROFL_WIDTHS if w * env.m_g <= believed), HETEROFL_WIDTHS[-1]
            )
            demand = width * env.m_g
            outcome = "submodel" if width < 1.0 else "fit"
        elif self.uniform_plan is not None:
            # Table 4 baseline: the one fleet-wide plan, on every client, generated on the
            # device (edgetrain.federated.baselines)
            plan = self.uniform_plan
            charge = f.baseline_plan_charge
            if charge == "round" or (charge == "once" and not st.local_plan):
                device_plan_s = ON_DEVICE_PLAN_SLOWDOWN * plan.plan_s
            st.local_plan = True
            if plan.feasible:
                demand = plan.demand_fraction * env.m_g
                overhead, outcome = plan.overhead_factor, "planned"
        elif tech != "none" and env.m_g > believed:
            assert self.plans is not None
            if self.method.optimizer:
                plan = self.plans.plan_for(tech, believed / env.m_g, cls)
                if not plan.feasible and f.unplannable == "microbatch":
                    # no plan of the technique fits: Melon's micro-batches + recompute for
                    # this budget, made on the server (no on-device charge)
                    plan = melon_exact(self.plans, believed / env.m_g)
            elif f.device_plan_generator == "melon":
                # the client plans for itself, on the device, with Melon's plan generation
                # (micro-batches + recompute; FedHybrid §5.4), paying Fig. 20(c)'s 9x
                plan = melon_exact(self.plans, believed / env.m_g)
                device_plan_s = ON_DEVICE_PLAN_SLOWDOWN * plan.plan_s
            else:  # the earlier rule: the recompute planner alone, on the device
                plan = self.plans.plan_exact(tech, believed / env.m_g)
                device_plan_s = ON_DEVICE_PLAN_SLOWDOWN * plan.plan_s
            if plan.feasible:
                demand = plan.demand_fraction * env.m_g
                overhead, outcome = plan.overhead_factor, "planned"
        if self.method.oracle:  # Fig. 1's oracle: every device has the memory to train
            demand = 0.0
        if demand > env.hard_limits[cid]:
            st.kills += 1
            return ClientRound(
                cid, "killed", width, overhead, 1.0, None, plan, pre_regen, 0, berr, bover
            )
        if np.random.default_rng(_seed(env.config.seed, r, cid, 3)).random() < f.dropout:
            return ClientRound(
                cid, "dropped", width, overhead, 1.0, None, plan, pre_regen, 0, berr, bover
            )
        regen_box: list[PlanOutcome] = []

        def regen(i: int) -> tuple[float, float] | None:
            """FedHybrid's rule fired: shrink W, predict anew, fetch a plan for it."""
            st.window_s = max(TRACE_STEP_S, float(st.window_s) * WS_ADJ)
            st.regenerations += 1
            st.kills = 0
            nb = predict(tr, i, st.window_s)
            if nb >= env.m_g:
                return None
            assert self.plans is not None
            np_ = self.plans.plan_for(tech, nb / env.m_g, cls)
            regen_box.append(np_)
            if np_.feasible and np_.fraction * env.m_g < demand:
                return np_.fraction * env.m_g, np_.overhead_factor
            return None

        avg = float(np.mean(st.faults)) if st.faults else None
        limit = TP1 * avg if (regen_here and avg is not None and plan is not None) else math.inf
        rm = train_through(
            tr, base_cost.compute_s * width * width, demand, overhead,
            regen=regen if regen_here and plan is not None else None, fault_limit=limit,
        )  # fmt: skip
        st.faults.append(int(rm.pages))
        if regen_box:
            plan = regen_box[-1] if regen_box[-1].feasible else plan
        base = base_cost.compute_s * width * width
        ovh_eff = rm.work_s / base if base > 0 else 1.0
        press = rm.elapsed_s / rm.work_s if rm.work_s > 0 else 1.0
        if press > 1.0 + 1e-9:
            outcome = "pressure"
        cost = client_cost(
            p,
            samples=steps_samples,
            flops_per_sample=env.flops_per_sample,
            model_bytes=env.model_bytes * width * width,
            overhead_factor=max(1.0, ovh_eff),
            pressure=max(1.0, press),
            compute_scale=width * width,
            extra_compute_s=device_plan_s,
            extra_rx_bytes=REGEN_PLAN_BYTES if (rm.regenerated or pre_regen) else 0.0,
        )
        if self.deadline_s is not None and cost.total_s > self.deadline_s:
            return ClientRound(
                cid,
                "late",
                width,
                overhead,
                press,
                cost,
                plan,
                rm.regenerated or pre_regen,
                rm.pages,
                berr,
                bover,
            )
        return ClientRound(
            cid, outcome, width, overhead, press, cost, plan, rm.regenerated or pre_regen,
            rm.pages, berr, bover,
        )  # fmt: skip

    # -- one round --------------------------------------------------------------------------
    def run_round(self) -> dict[str, Any]:
        env, f = self.env, self.env.config.federated
        r = self.round + 1
        t0 = time.perf_counter()
        k = f.clients_per_round
        # over-commitment (FedScale's select_participants): every selector picks
        # int(overcommit x k) clients; the round closes when k of them have reported
        n_pick = min(len(env.fleet), max(k, int(f.overcommit * k + 1e-9)))
        selected = self.selector.select(r, self._checkin, n_pick)
        rounds = [self._client_round(r, c) for c in selected]
        reported = sorted(
            (c for c in rounds if c.outcome in TRAIN_OUTCOMES and c.cost is not None),
            key=lambda c: (c.cost.total_s, c.cid),  # type: ignore[union-attr]
        )
        # the first k reports are aggregated; later ones arrive after the round closed
        # (FedScale tictak_client_tasks: top-k completion times, the rest are stragglers)
        first = {c.cid for c in reported[:k]}
        round_s = self._round_time(rounds, reported, k)
        # FedProx's partial work: a client still training at the close uploads what it has
        partial = self._partial_steps(rounds, first, round_s) if f.partial_work else {}
        train = [c for c in rounds if c.cid in first or c.cid in partial]
        surplus = [c for c in reported[k:] if c.cid not in partial]
        tasks = []
        for c in train:
            steps, batch = env.local_work(c.cid)[:2]
            tasks.append(
                ClientTask(
                    c.cid, r, c.width, partial.get(c.cid, (steps, 1.0))[0], batch, f.lr,
                    self.aggregator.proximal_mu, _seed(env.config.seed, r, c.cid, 2),
                    _codec_share(c), f.clip_grad_norm,
                )
            )  # fmt: skip
        results = self.executor.run(self.global_state, tasks)
        updates = [(res.state, float(res.n_samples)) for res in results]
        self.global_state = self.aggregator.aggregate(self.global_state, updates)
        self.sim_time += round_s
        # feedback to the selector
        by_cid = {c.cid: res for c, res in zip(train, results, strict=True)}
        late_ids = {c.cid for c in surplus}
        feedback = []
        for c in rounds:
            res = by_cid.get(c.cid)
            dur = c.cost.total_s if c.cost is not None else math.inf
            if res is not None:
                feedback.append(Feedback(c.cid, True, dur, res.loss_sq_mean, res.n_samples))
            else:  # failed, late, or reported after the round closed (FedScale: success=False)
                feedback.append(
                    Feedback(
                        c.cid, False, dur, math.nan, int(env.n_samples[c.cid]),
                        straggler=f.straggler_feedback == "average" and c.cid in late_ids,
                    )
                )  # fmt: skip
        self.selector.update(r, feedback)
        # evaluation (real)
        acc = loss = None
        pred_hist: list[int] | None = None
        class_acc: list[float | None] | None = None
        if r % f.eval_every == 0 or r == f.rounds:
            self.model.load_state_dict(self.global_state)
            loss, acc, pred_hist, class_acc = _evaluate_hist(self.model, env.test.x, env.test.y)
        energy = [
            (c.cost.truncated(partial[c.cid][1]) if c.cid in partial else c.cost).energy_j
            for c in rounds
            if c.cost is not None
        ]
        participation: dict[str, dict[str, int]] = {}
        for c in rounds:
            row = participation.setdefault(env.memory_class(c.cid), {"selected": 0, "completed": 0})
            row["selected"] += 1
            row["completed"] += int(c.cid in by_cid)
        decisions = {k: 0 for k in OUTCOMES}
        plan_decisions: dict[str, int] = {}
        for c in rounds:
            decisions[c.outcome] += 1
            if c.plan is not None and c.plan.feasible and c.outcome in ("planned", "pressure"):
                for d, n in c.plan.decisions.items():
                    plan_decisions[d] = plan_decisions.get(d, 0) + n
        regens = sum(int(c.regenerated) for c in rounds)
        self.regenerations += regens
        rec = {
            "round": r,
            "method": self.method_name,
            "aggregator": self.aggregator_name,
            "sim_time_s": self.sim_time,
            "round_time_s": round_s,
            "accuracy": acc,
            "loss": loss,
            "selected": selected,
            "n_selected": len(selected),
            "n_aggregated": len(updates),
            "n_reported": len(reported),
            "n_surplus": len(surplus),
            "deadline_s": self.deadline_s,
            "participation": dict(sorted(participation.items())),
            "outcomes": decisions,
            "plan_decisions": plan_decisions,
            "compressed_clients": sum(1 for t in tasks if t.codec_share),
            # aggregated partial updates (federated.partial_work) and their mean share of
            # the local steps
            "partial": len(partial),
            "partial_share": (
                sum(v[1] for v in partial.values()) / len(partial) if partial else None
            ),
            # the test split's predictions per class (one class near len(test) = the model
            # predicts one class) and the label counts of the aggregated clients' partitions
            # (their sample-weighted class mix: the aggregation weights are sample counts)
            "pred_hist": pred_hist,
            # test accuracy per class (None for a class the test split lacks): where data
            # lives only on some phones (partition.low_memory_classes), whether it is learnt
            "class_accuracy": class_acc,
            "aggregated_labels": self._label_counts([c.cid for c in train]),
            # who was aggregated: the selector's reach over the fleet's data (exposure's
            # distinct clients)
            "aggregated": sorted(int(c.cid) for c in train),
            # aggregated updates trained under a plan (the plan machinery's reach)
            "planned_aggregated": sum(
                1
                for c in train
                if c.plan is not None and c.plan.feasible and c.outcome in ("planned", "pressure")
            ),
            "regenerations": regens,
            "regenerations_total": self.regenerations,
            # planned client-rounds whose plan compresses activations (aggregated or not)
            "compress_planned": sum(
                1 for c in rounds if c.outcome in ("planned", "pressure") and _codec_share(c)
            ),
            # the predictor against the memory each client really had (plan techniques)
            "budget_n": sum(1 for c in rounds if c.budget_err is not None),
            "budget_err_sum": float(sum(c.budget_err or 0.0 for c in rounds)),
            "budget_over": sum(int(c.budget_over) for c in rounds),
            "page_faults": int(sum(c.pages for c in rounds)),
            "train_loss": (float(np.mean([res.mean_loss for res in results])) if results else None),
            "energy_j": float(sum(energy)),
            "energy_j_per_client": float(np.mean(energy)) if energy else 0.0,
            "energy_j_by_client": {
                str(c.cid): c.cost.energy_j for c in rounds if c.cost is not None
            },
            "wall_s": time.perf_counter() - t0,
        }
        self.round = r
        self.records.append(rec)
        if self.run_dir is not None:
            self.run_dir.log_metrics(rec)
            self.checkpoint()
        if self.progress is not None:
            self.progress(
                {"event": "round", "method": self.method_name, "round": r,
                 "rounds": self._rounds_goal, "accuracy": rec["accuracy"],
                 "sim_time_s": rec["sim_time_s"]}
            )  # fmt: skip
        return rec

    def _plan_event(self, strategy: str, done: int, total: int) -> None:
        assert self.progress is not None
        self.progress(
            {"event": "plans", "method": self.method_name, "strategy": strategy,
             "done": done, "total": total}
        )  # fmt: skip

    def _label_counts(self, cids: list[int]) -> list[int] | None:
        """Summed label counts of the clients' partitions (None: labels are not classes)."""
        y = self.env.train.y
        if not isinstance(y, torch.Tensor) or y.dtype not in (torch.int64, torch.int32):
            return None
        n = int(max(int(y.max()), int(self.env.test.y.max()))) + 1 if len(y) else 0
        idx = [i for c in cids for i in self.env.parts[c]]
        if not idx:
            return [0] * n
        return torch.bincount(y[torch.as_tensor(idx, dtype=torch.long)], minlength=n).tolist()

    def _partial_steps(
        self, rounds: list[ClientRound], first: set[int], close_s: float
    ) -> dict[int, tuple[int, float]]:
        """``{cid: (steps, share)}`` for the clients still training when the round closes at
        ``close_s`` (reported after it, or past the deadline) that finish at least one
        local step in time: each stops at ``close_s`` less its upload and sends the steps it
        finished (FedProx's partial work). Killed and dropped clients have nothing to send."""
        out: dict[int, tuple[int, float]] = {}
        for c in rounds:
            if c.cid in first or c.cost is None or c.outcome not in (*TRAIN_OUTCOMES, "late"):
                continue
            if c.cost.total_s <= close_s:
                continue
            cost = c.cost
            train_s = cost.compute_s - cost.setup_s
            avail = close_s - cost.download_s - cost.setup_s - cost.upload_s
            steps = self.env.local_work(c.cid)[0]
            done = int(math.floor(steps * avail / train_s + 1e-9)) if train_s > 0 else steps
            if done >= 1:
                done = min(done, steps)
                out[c.cid] = (done, done / steps)
        return out

    def _round_time(self, rounds: list[ClientRound], reported: list[ClientRound], k: int) -> float:
        """Simulated length of a round.

        * ``k`` clients reported: the round closes at the k-th report (FedScale's round
          duration with over-commitment: the k-th shortest completion time);
        * fewer, with ``failure_report = "deadline"``: a killed or dropped client does not
          report, so the server only knows it failed when the deadline passes (Bonawitz et
          al. 2019 §2.2) and the round lasts until the deadline;
        * fewer, with ``"immediate"`` (before round 4): killed and dropped clients are
          reported at once; the round lasts until the slowest report, or until the
          deadline when a client was late.
        """
        f = self.env.config.federated
        done_s = [c.cost.total_s for c in reported if c.cost is not None]
        if len(done_s) >= k:
            return done_s[k - 1]
        missing = any(c.outcome in ("killed", "dropped", "late") for c in rounds)
        if f.failure_report == "deadline" and missing and self.deadline_s is not None:
            return self.deadline_s
        late = any(c.outcome == "late" for c in rounds)
        if late and self.deadline_s is not None:
            return self.deadline_s
        if done_s:
            return max(done_s)
        return self.deadline_s or max(
            (c.cost.total_s for c in rounds if c.cost is not None), default=0.0
        )

    def run(self, rounds: int | None = None, *, stop_after: int | None = None) -> list[dict]:
        """Run until ``rounds`` total rounds (default: the config's); ``stop_after`` ends
        early after that many rounds of this call (to simulate a killed run in tests)."""
        total = rounds or self.env.config.federated.rounds
        n = 0
        self._rounds_goal = total
        try:
            while self.round < total:
                self.run_round()
                n += 1
                if stop_after is not None and n >= stop_after:
                    break
        finally:
            self._rounds_goal = None
        return self.records

    # -- checkpoints --------------------------------------------------------------------------
    def checkpoint(self) -> None:
        """Write the round's checkpoint: one file, ``checkpoint/global.safetensors``, holding
        the tensors and (in its metadata) the round state, replaced atomically -- a crash at
        any point leaves the previous round's checkpoint or this one, never a mix.

        The run's other files are written first: metrics.jsonl (by the round), plans.json
        and model.safetensors; a resume drops what is newer than the checkpoint."""
        assert self.run_dir is not None
        if self.plans is not None and self._plans_written != len(self.plans.table):
            # plans made during the run (clients planning for themselves) are kept, so a
            # resumed run reuses the same planner results
            self.run_dir.write_json("plans.json", self.plans.to_json())
            self._plans_written = len(self.plans.table)
        self.run_dir.save_model(self.global_state)
        ck = self.run_dir.path / "checkpoint"
        ck.mkdir(exist_ok=True)
        tensors = {f"model.{k}": v for k, v in self.global_state.items()}
        tensors.update({f"agg.{k}": v for k, v in self.aggregator.state_tensors().items()})
        state = {
            "round": self.round,
            "sim_time_s": self.sim_time,
            "method": self.method_name,
            "aggregator": self.aggregator_name,
            "selector": self.selector.state_dict(),
            "regenerations": self.regenerations,
            "clients": {str(c): m.to_json() for c, m in sorted(self.client_mem.items())},
        }
        meta = {"round": str(self.round), "state": json.dumps(state)}
        save_state(ck / CHECKPOINT_FILE, tensors, meta)  # the commit
        # a state.json of a run begun by an earlier edgetrain is now stale (resume reads the
        # metadata first); it is removed so that the directory shows one checkpoint
        (ck / OLD_STATE_FILE).unlink(missing_ok=True)
        note_checkpoint(self.run_dir.path, f"round {self.round}")

    def resume(self) -> bool:
        """Load the run directory's checkpoint; False if there is none.

        Everything is read and checked before anything is changed: a damaged or foreign
        checkpoint (global.safetensors, its state, metrics.jsonl) is a RunDirError naming
        the file, and the run directory is left as it was. A run directory written by an
        earlier edgetrain (the state in ``checkpoint/state.json`` next to the tensors) is
        read too."""
        if self.run_dir is None:
            return False
        ck = self.run_dir.path / "checkpoint"
        tensors_path, state_path = ck / CHECKPOINT_FILE, ck / OLD_STATE_FILE
        meta = read_metadata(tensors_path) if tensors_path.exists() else {}
        if "state" in meta:
            state = _check_checkpoint_state(
                _parse_state(meta["state"], f"the metadata of {tensors_path}"),
                f"the metadata of {tensors_path}",
            )
            if meta.get("round") != str(state["round"]):
                raise RunDirError(
                    f"{tensors_path} is not one edgetrain wrote: its metadata says round "
                    f"{meta.get('round')} and its state round {state['round']}"
                )
        elif not state_path.exists():
            done = self.run_dir.read_metrics(torn_tail=True)
            if done:
                raise RunDirError(
                    f"{self.run_dir.path} has metrics for {len(done)} round(s) but no "
                    f"checkpoint ({tensors_path} is missing or holds no round state), so it "
                    "cannot be continued; start a new run without --resume (it gets a new "
                    "directory)"
                )
            return False  # stopped before its first round ended: start from round 0
        else:  # written the earlier way: state.json next to the tensors
            state = _read_checkpoint_state(state_path)
        if state["method"] != self.method_name or state["aggregator"] != self.aggregator_name:
            raise ConfigError(
                f"checkpoint in {ck} is for {state['method']}/{state['aggregator']}, not "
                f"{self.method_name}/{self.aggregator_name}"
            )
        tensors = load_state(tensors_path)
        if "state" not in meta:
            saved_round = meta.get("round")
            if saved_round != str(state["round"]):
                raise RunDirError(
                    f"{tensors_path} holds round {saved_round} but {state_path} round "
                    f"{state['round']}: the run stopped while writing its checkpoint and the "
                    "two files disagree (a run directory of an earlier edgetrain, which wrote "
                    "them one after the other), so it cannot be continued exactly; start a new "
                    "run"
                )
        global_state = {k[6:]: v for k, v in tensors.items() if k.startswith("model.")}
        own = {k: tuple(v.shape) for k, v in self.global_state.items()}
        got = {k: tuple(v.shape) for k, v in global_state.items()}
        if own != got:
            diff = sorted(k for k in set(own) | set(got) if own.get(k) != got.get(k))
            shown = "; ".join(f"{k}: file {got.get(k)} vs model {own.get(k)}" for k in diff[:4])
            more = f" (and {len(diff) - 4} more)" if len(diff) > 4 else ""
            raise RunDirError(
                f"{tensors_path} does not match the configured model "
                f"{self.env.config.model.name}: {shown}{more}; resume with the config the "
                "run was started with"
            )
        rows = self.run_dir.read_metrics(torn_tail=True)
        try:
            self.aggregator.load_state_tensors(
                {k[4:]: v for k, v in tensors.items() if k.startswith("agg.")}
            )
            self.selector.load_state_dict(state["selector"])
            client_mem = {
                int(c): ClientMemoryState.from_json(m) for c, m in state.get("clients", {}).items()
            }
            regenerations = int(state.get("regenerations", 0))
            kept = [m for m in rows if int(m["round"]) <= int(state["round"])]
        except (KeyError, TypeError, ValueError, AttributeError, RuntimeError) as exc:
            raise RunDirError(
                f"checkpoint in {ck} could not be loaded ({type(exc).__name__}: {exc}); "
                "the files are damaged or were written by another kind of run"
            ) from None
        missing = sorted(set(range(1, int(state["round"]) + 1)) - {int(m["round"]) for m in kept})
        if missing or len(kept) != int(state["round"]):
            raise RunDirError(
                f"{self.run_dir.path / RunDir.METRICS} does not hold one record per round up to "
                f"the checkpoint's round {state['round']} (missing: "
                f"{', '.join(map(str, missing[:10])) or 'none'}; records: {len(kept)}); it was "
                "truncated or edited, and continuing would leave a gap in the run's metrics"
            )
        self.global_state = global_state
        self.client_mem = client_mem
        self.regenerations = regenerations
        self.round = int(state["round"])
        self.sim_time = float(state["sim_time_s"])
        # metrics written after the checkpoint (a crash mid-round) are dropped
        path = self.run_dir.path / RunDir.METRICS
        path.write_text("".join(json.dumps(m, sort_keys=True) + "\n" for m in kept))
        self.records = kept
        return True


def load_plans_file(service: PlanService, path) -> None:
    """Load a run directory's ``plans.json`` (the planner results the run used, written by
    the server) into ``service``; a damaged file is a RunDirError naming it, raised before
    anything is loaded."""
    need = ("strategy", "fraction", "feasible", "overhead_factor")
    try:
        rows = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RunDirError(
            f"{path} is not valid JSON ({exc}); the run directory is damaged (it holds the "
            "planner results the run used, a JSON list)"
        ) from None
    if not isinstance(rows, list):
        raise RunDirError(f"{path} is not a JSON list of planner results")
    for i, r in enumerate(rows):
        missing = [k for k in need if not isinstance(r, dict) or k not in r]
        if missing:
            raise RunDirError(
                f"{path}: row {i} lacks {', '.join(missing)}; expected planner results "
                f"with {', '.join(need)}"
            )
        try:
            float(r["fraction"]), float(r["overhead_factor"])
        except (TypeError, ValueError):
            raise RunDirError(
                f"{path}: row {i} has a non-numeric fraction or overhead_factor"
            ) from None
    before = dict(service.table)
    try:
        service.load_json(rows)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        service.table.clear()  # as it was: no row of a damaged file is kept
        service.table.update(before)
        raise RunDirError(
            f"{path}: a planner result could not be read ({type(exc).__name__}: {exc}); "
            "the run directory is damaged"
        ) from None


_STATE_FIELDS = {
    "round": int,
    "sim_time_s": (int, float),
    "method": str,
    "aggregator": str,
    "selector": dict,
}


def _read_checkpoint_state(path) -> dict[str, Any]:
    """``checkpoint/state.json`` of a run directory written by an earlier edgetrain."""
    try:
        text = path.read_text()
    except UnicodeDecodeError as exc:
        raise RunDirError(
            f"checkpoint state {path} is not valid JSON ({exc}); the run directory is damaged "
            "and cannot be continued -- restore it from a copy or start a new run"
        ) from None
    return _check_checkpoint_state(_parse_state(text, str(path)), str(path))


def _parse_state(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise RunDirError(
            f"checkpoint state {where} is not valid JSON ({exc}); the run directory is damaged "
            "and cannot be continued -- restore it from a copy or start a new run"
        ) from None


def _check_checkpoint_state(state: Any, where: str) -> dict[str, Any]:
    """The round state, checked field by field; RunDirError naming what is wrong."""
    if not isinstance(state, dict):
        raise RunDirError(f"checkpoint state {where} is not a JSON object")
    wrong = [
        f"{k} ({'missing' if k not in state else type(state[k]).__name__})"
        for k, kind in _STATE_FIELDS.items()
        if not isinstance(state.get(k), kind) or isinstance(state.get(k), bool)
    ]
    if wrong or state["round"] < 0:
        wrong = wrong or [f"round ({state['round']} < 0)"]
        raise RunDirError(
            f"checkpoint state {where} is not one edgetrain wrote: bad field(s) "
            f"{', '.join(wrong)}; expected {', '.join(_STATE_FIELDS)}"
        )
    return state


def _evaluate_hist(
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor
) -> tuple[float, float, list[int], list[float | None]]:
    """:func:`~edgetrain.engine.trainer.evaluate` (same loss and accuracy) plus the count of
    test samples predicted as each class and the accuracy on each class's test samples
    (None where the test split has none of it)."""
    preds: list[torch.Tensor] = []
    width = [0]

    def forward(*xb):
        out = model(*xb)
        preds.append(out.argmax(dim=1))
        width[0] = out.shape[1]
        return out

    loss, acc = evaluate(model, x, y, forward=forward)  # batches in order, unshuffled
    if not preds:
        return loss, acc, [], []
    p = torch.cat(preds)
    k = max(width[0], int(y.max()) + 1)
    hist = torch.bincount(p, minlength=k).tolist()
    support = torch.bincount(y, minlength=k)
    hits = torch.bincount(y[p == y], minlength=k)
    per_class = [
        round(int(h) / int(n), 6) if int(n) else None
        for h, n in zip(hits.tolist(), support.tolist(), strict=True)
    ]
    return loss, acc, hist, per_class


def _codec_share(c: ClientRound) -> tuple[tuple[str, float], ...]:
    """The codecs a client's plan compresses with (and their byte shares), if it trains
    under that plan."""
    if c.plan is None or not c.plan.feasible or c.outcome not in ("planned", "pressure"):
        return ()
    if c.plan.demand_fraction >= 1.0:
        return ()
    return tuple(sorted(c.plan.compress_share.items()))


def _spec_defaults(name: str) -> dict[str, Any]:
    from edgetrain import models

    return dict(models.spec(name).defaults)


def make_plan_service(env: Environment) -> PlanService:
    """A plan service profiling the plan model at the config's planning batch."""
    mc = env.config.memory
    b = min(mc.plan_batch, len(env.train))
    if mc.plan_model is None:
        model = env.build_model()
        x, y = env.train.x[:b], env.train.y[:b]
        key = env.config.model.name
    else:
        from edgetrain import models

        model = models.build(mc.plan_model.name, seed=env.config.seed, **mc.plan_model.options)
        gen = torch.Generator().manual_seed(env.config.seed)
        x = models.example_input(model, b, gen)
        y = torch.randint(0, int(model.num_classes), (b,), generator=gen)
        key = mc.plan_model.name
    service = PlanService(model, x, y, key, bucket=mc.bucket)
    if mc.plans is not None:
        service.load_file(mc.plans)
    return service


def held_split(
    class_accuracy: list[float | None], held: tuple[int, ...]
) -> tuple[float | None, float | None]:
    """(mean test accuracy over the ``held`` classes, over the others) of one round's
    ``class_accuracy``; a side with no class in the test split is None."""
    inside = [a for c, a in enumerate(class_accuracy) if c in held and a is not None]
    outside = [a for c, a in enumerate(class_accuracy) if c not in held and a is not None]
    return (
        sum(inside) / len(inside) if inside else None,
        sum(outside) / len(outside) if outside else None,
    )


def held_class_accuracy(records: list[dict[str, Any]], held: tuple[int, ...]) -> float | None:
    """The last evaluated round's mean test accuracy over the ``held`` classes (those only
    the low-memory phones hold, ``partition.low_memory_classes``); None without any."""
    if not held:
        return None
    for r in reversed(records):
        if r.get("class_accuracy"):
            return held_split(r["class_accuracy"], held)[0]
    return None


def summarize(records: list[dict[str, Any]], target: float | None) -> dict[str, Any]:
    """Final accuracy, best accuracy and the simulated time to reach ``target``."""
    accs = [(r["sim_time_s"], r["accuracy"]) for r in records if r["accuracy"] is not None]
    tta = None
    if target is not None:
        tta = next((t for t, a in accs if a >= target - 1e-12), None)
    return {
        "final_accuracy": accs[-1][1] if accs else None,
        "best_accuracy": max((a for _, a in accs), default=None),
        "time_to_target_s": tta,
        "rounds": len(records),
        "sim_time_s": records[-1]["sim_time_s"] if records else 0.0,
    }
