"""The federated server loop: select -> plan -> train -> aggregate -> evaluate -> checkpoint.

One round (FedHybrid §4.1 workflow):

1. clients check in (predicted memory budget, per-step operator time, profile estimate);
2. the selector picks ``k`` clients;
3. each selected client gets the model and, under a plan technique, an execution plan
   from the :class:`~edgetrain.federated.plans.PlanService` (clustered, cached);
4. its memory outcome decides how it trains (fits / planned / over budget under page
   reclaim / killed above physical memory — :mod:`edgetrain.sim.memory`), it may drop out
   (probability ``dropout``), and its simulated round time and energy follow from
   :mod:`edgetrain.sim.clock`; clients past the deadline are discarded (the round ends at
   the deadline), the others train for real on their partition;
5. the aggregator combines the successful updates (weights = sample counts);
6. the global model is evaluated on the held-out test set (real accuracy and loss).

Every round writes one line to ``metrics.jsonl`` and a checkpoint (``checkpoint/
global.safetensors`` + ``checkpoint/state.json``); :meth:`FederatedServer.run` with
``resume=True`` continues from it and ends with the same metrics as an uninterrupted run.
All randomness is drawn from ``(seed, round, client)``-keyed generators or the
selector's generator, whose state is checkpointed.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from edgetrain.engine.trainer import evaluate
from edgetrain.errors import ConfigError
from edgetrain.federated.aggregators import Aggregator, make_aggregator
from edgetrain.federated.environment import Environment
from edgetrain.federated.methods import METHODS, MethodSpec
from edgetrain.federated.plans import PlanOutcome, PlanService
from edgetrain.federated.selectors import CheckIn, Feedback, Selector, make_selector
from edgetrain.runs import RunDir, load_state, save_state
from edgetrain.sim.clock import ClientCost, client_cost, pressure_factor
from edgetrain.sim.executor import ClientTask, InProcessExecutor

# HeteroFL width levels (Diao et al. 2020, §3: model complexity levels a-e are width
# ratios 1, 1/2, 1/4, 1/8, 1/16). Activation memory scales ~ width, FLOPs ~ width^2.
HETEROFL_WIDTHS = (1.0, 0.5, 0.25, 0.125, 0.0625)
OUTCOMES = ("fit", "planned", "submodel", "pressure", "killed", "dropped", "late")


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


def _seed(*parts: int) -> int:
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1)[0])


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
    ) -> None:
        fcfg = env.config.federated
        self.env = env
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
        sel_opts = {"epsilon": fcfg.epsilon} if self.method.selector == "fedhybrid" else {}
        self.selector: Selector = make_selector(
            self.method.selector, seed=_seed(env.config.seed, 7), **sel_opts
        )
        self.run_dir = run_dir
        self.model = env.build_model()
        self.global_state = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        self.round = 0
        self.sim_time = 0.0
        self.records: list[dict[str, Any]] = []
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
        if self.plans is not None and tech in ("hybrid", "recompute", "compress", "swap"):
            if run_dir is not None and (run_dir.path / "plans.json").exists():
                self.plans.load_json(json.loads((run_dir.path / "plans.json").read_text()))
            self.plans.precompute(tech)
            if run_dir is not None:
                run_dir.write_json("plans.json", self.plans.to_json())
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
            memory_budget=env.budgets,
            step_time_s=env.step_time_s(),
            est_duration_s=env.est_duration_s(),
            m_g=env.m_g,
        )

    # -- helpers ----------------------------------------------------------------------------
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
        """Memory outcome, dropout and cost of one selected client (no training yet)."""
        env, f = self.env, self.env.config.federated
        p = env.fleet[cid]
        rng = np.random.default_rng(_seed(env.config.seed, r, cid, 1))
        actual = float(env.budgets[cid])  # what the device really has free this round
        believed = actual if self.method.predictor else env.memory.measured_budget(p, rng, actual)
        tech = self.method.technique
        demand, overhead, width, plan = env.m_g, 1.0, 1.0, None
        outcome = "fit"
        if tech == "heterofl":
            width = next(
                (w for w in HETEROFL_WIDTHS if w * env.m_g <= believed), HETEROFL_WIDTHS[-1]
            )
            demand = width * env.m_g
            outcome = "submodel" if width < 1.0 else "fit"
        elif tech != "none" and env.m_g > believed:
            assert self.plans is not None
            plan = self.plans.plan_for(tech, believed / env.m_g, env.memory_class(cid))
            if plan.feasible:
                demand, overhead, outcome = plan.fraction * env.m_g, plan.overhead_factor, "planned"
        if demand > env.hard_limits[cid]:
            return ClientRound(cid, "killed", width, overhead, 1.0, None, plan)
        press = pressure_factor(demand, actual)
        if press > 1.0:
            outcome = "pressure"
        if np.random.default_rng(_seed(env.config.seed, r, cid, 3)).random() < f.dropout:
            return ClientRound(cid, "dropped", width, overhead, press, None, plan)
        cost = client_cost(
            p,
            samples=f.local_steps * f.batch_size,
            flops_per_sample=env.flops_per_sample,
            model_bytes=env.model_bytes * width * width,
            overhead_factor=overhead,
            pressure=press,
            compute_scale=width * width,
        )
        if f.deadline_s is not None and cost.total_s > f.deadline_s:
            return ClientRound(cid, "late", width, overhead, press, cost, plan)
        return ClientRound(cid, outcome, width, overhead, press, cost, plan)

    # -- one round --------------------------------------------------------------------------
    def run_round(self) -> dict[str, Any]:
        env, f = self.env, self.env.config.federated
        r = self.round + 1
        t0 = time.perf_counter()
        selected = self.selector.select(r, self._checkin, f.clients_per_round)
        rounds = [self._client_round(r, c) for c in selected]
        train = [c for c in rounds if c.outcome in ("fit", "planned", "submodel", "pressure")]
        tasks = [
            ClientTask(
                c.cid,
                r,
                c.width,
                f.local_steps,
                f.batch_size,
                f.lr,
                self.aggregator.proximal_mu,
                _seed(env.config.seed, r, c.cid, 2),
            )  # fmt: skip
            for c in train
        ]
        results = self.executor.run(self.global_state, tasks)
        updates = [(res.state, float(res.n_samples)) for res in results]
        self.global_state = self.aggregator.aggregate(self.global_state, updates)
        # simulated round time: the slowest aggregated client, or the deadline if any was late
        done_s = [c.cost.total_s for c in train if c.cost is not None]
        late = any(c.outcome == "late" for c in rounds)
        round_s = max(done_s, default=0.0)
        if late and f.deadline_s is not None:
            round_s = f.deadline_s
        elif not done_s:
            round_s = f.deadline_s or max(
                (c.cost.total_s for c in rounds if c.cost is not None), default=0.0
            )
        self.sim_time += round_s
        # feedback to the selector
        by_cid = {c.cid: res for c, res in zip(train, results, strict=True)}
        feedback = []
        for c in rounds:
            res = by_cid.get(c.cid)
            dur = c.cost.total_s if c.cost is not None else math.inf
            if res is not None:
                feedback.append(Feedback(c.cid, True, dur, res.loss_sq_mean, res.n_samples))
            else:
                feedback.append(Feedback(c.cid, False, dur, math.nan, int(env.n_samples[c.cid])))
        self.selector.update(r, feedback)
        # evaluation (real)
        acc = loss = None
        if r % f.eval_every == 0 or r == f.rounds:
            self.model.load_state_dict(self.global_state)
            loss, acc = evaluate(self.model, env.test.x, env.test.y)
        energy = [c.cost.energy_j for c in rounds if c.cost is not None]
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
            "participation": dict(sorted(participation.items())),
            "outcomes": decisions,
            "plan_decisions": plan_decisions,
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
        return rec

    def run(self, rounds: int | None = None, *, stop_after: int | None = None) -> list[dict]:
        """Run until ``rounds`` total rounds (default: the config's); ``stop_after`` ends
        early after that many rounds of this call (to simulate a killed run in tests)."""
        total = rounds or self.env.config.federated.rounds
        n = 0
        while self.round < total:
            self.run_round()
            n += 1
            if stop_after is not None and n >= stop_after:
                break
        return self.records

    # -- checkpoints --------------------------------------------------------------------------
    def checkpoint(self) -> None:
        assert self.run_dir is not None
        ck = self.run_dir.path / "checkpoint"
        ck.mkdir(exist_ok=True)
        tensors = {f"model.{k}": v for k, v in self.global_state.items()}
        tensors.update({f"agg.{k}": v for k, v in self.aggregator.state_tensors().items()})
        save_state(ck / "global.safetensors", tensors, {"round": str(self.round)})
        state = {
            "round": self.round,
            "sim_time_s": self.sim_time,
            "method": self.method_name,
            "aggregator": self.aggregator_name,
            "selector": self.selector.state_dict(),
        }
        tmp = ck / "state.json.tmp"
        tmp.write_text(json.dumps(state))
        tmp.replace(ck / "state.json")
        self.run_dir.save_model(self.global_state)

    def resume(self) -> bool:
        """Load the run directory's checkpoint; False if there is none."""
        if self.run_dir is None:
            return False
        ck = self.run_dir.path / "checkpoint"
        if not (ck / "state.json").exists():
            return False
        state = json.loads((ck / "state.json").read_text())
        if state["method"] != self.method_name or state["aggregator"] != self.aggregator_name:
            raise ConfigError(
                f"checkpoint in {ck} is for {state['method']}/{state['aggregator']}, not "
                f"{self.method_name}/{self.aggregator_name}"
            )
        tensors = load_state(ck / "global.safetensors")
        self.global_state = {k[6:]: v for k, v in tensors.items() if k.startswith("model.")}
        self.aggregator.load_state_tensors(
            {k[4:]: v for k, v in tensors.items() if k.startswith("agg.")}
        )
        self.selector.load_state_dict(state["selector"])
        self.round = int(state["round"])
        self.sim_time = float(state["sim_time_s"])
        # metrics written after the checkpoint (a crash mid-round) are dropped
        rows = [m for m in self.run_dir.metrics() if m["round"] <= self.round]
        path = self.run_dir.path / RunDir.METRICS
        path.write_text("".join(json.dumps(m, sort_keys=True) + "\n" for m in rows))
        self.records = rows
        return True


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
    return PlanService(model, x, y, key, bucket=mc.bucket)


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
