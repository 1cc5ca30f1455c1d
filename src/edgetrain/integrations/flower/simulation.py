"""Run an edgetrain federated config on Flower's simulation engine (Ray backend).

:func:`build_apps` turns a :class:`~edgetrain.federated.config.FederatedConfig` into a
Flower ``ServerApp`` (running :class:`EdgetrainStrategy` with the config's method,
aggregator and plan technique) and ``ClientApp`` (one node per fleet client).
:func:`simulate` runs them with ``flwr.simulation.run_simulation`` and returns what the
strategy recorded plus the server-side test accuracy per round.

Every process builds the same :class:`Environment` from the config JSON (cached per
process): the simulation's Ray workers never receive data, only the config text.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp

from edgetrain.engine.trainer import evaluate
from edgetrain.errors import ConfigError
from edgetrain.federated.aggregators import make_aggregator
from edgetrain.federated.config import FederatedConfig
from edgetrain.federated.environment import Environment, build_environment
from edgetrain.federated.methods import METHODS
from edgetrain.federated.selectors import make_selector
from edgetrain.integrations.flower.client import make_client_app
from edgetrain.integrations.flower.strategy import EdgetrainStrategy, RoundLog

PLAN_TECHNIQUES = ("hybrid", "recompute", "compress", "swap")


@functools.cache
def environment_for(config_json: str) -> Environment:
    """The environment of a config (built once per process, keyed by its JSON)."""
    return build_environment(FederatedConfig.model_validate_json(config_json))


@dataclass
class SimulationResult:
    """What a Flower simulation of an edgetrain config produced."""

    method: str
    rounds: list[RoundLog]
    accuracy: dict[int, float] = field(default_factory=dict)  # round -> test accuracy
    loss: dict[int, float] = field(default_factory=dict)
    sim_time_s: float = 0.0
    # round -> weighted federated evaluation on the nodes (eval-loss, eval-acc)
    federated_eval: dict[int, dict[str, float]] = field(default_factory=dict)
    final_state: dict[str, torch.Tensor] | None = field(default=None, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "sim_time_s": self.sim_time_s,
            "federated_eval": {str(r): m for r, m in sorted(self.federated_eval.items())},
            "rounds": [
                {
                    "round": r.round,
                    "selected": r.selected,
                    "aggregated": r.aggregated,
                    "planned": r.planned,
                    "failed": r.failed,
                    "late": r.late,
                    "stragglers": r.stragglers,
                    "plans": {str(c): p for c, p in r.plans.items()},
                    "round_time_s": r.round_time_s,
                    "train_loss": r.train_loss,
                    "accuracy": self.accuracy.get(r.round),
                    "loss": self.loss.get(r.round),
                }
                for r in self.rounds
            ],
        }


def make_strategy(
    cfg: FederatedConfig,
    env: Environment,
    method: str,
    *,
    evaluate_clients: int = 0,
    node_timeout_s: float = 600.0,
) -> EdgetrainStrategy:
    """The strategy for ``method`` (a name of :data:`edgetrain.federated.methods.METHODS`);
    ``evaluate_clients`` nodes evaluate the global model after every round (0: none)."""
    if method not in METHODS:
        raise ConfigError(f"unknown method {method!r}; accepted: {', '.join(METHODS)}")
    spec = METHODS[method]
    if spec.technique not in (*PLAN_TECHNIQUES, "none"):
        raise ConfigError(
            f"method {method!r} uses {spec.technique!r}, which the Flower strategy does not "
            f"ship; use a method whose technique is none or one of {PLAN_TECHNIQUES}"
        )
    f = cfg.federated
    if spec.uniform and f.baseline_plans == "uniform":
        # Table 4's baselines run as fleet-wide systems (Melon's micro-batches, plans made and
        # paid for on the device: edgetrain.federated.baselines); Flower nodes execute one
        # shipped per-client plan and do neither, so they would run a different baseline.
        raise ConfigError(
            f"method {method!r} is a Table 4 baseline applied uniformly "
            "(federated.baseline_plans: uniform), which only the in-process and Ray "
            "runtimes execute; on Flower set federated.baseline_plans: per_client "
            "(Oort with per-client plans) or use edgetrain federate"
        )
    if spec.oracle:
        # a reference in which no device runs out of memory: real nodes have the memory
        # they have, so a Flower run cannot be one
        raise ConfigError(
            f"method {method!r} is FedHybrid Fig. 1's memory oracle (every device assumed to "
            "fit), a simulation reference that only edgetrain federate runs; on Flower use "
            "oort, random or fedhybrid"
        )
    if f.local_epochs is not None:
        # the strategy ships a fixed step count to every node; epochs over each node's own
        # partition (edgetrain.federated.environment.Environment.local_work) are not wired
        # through Flower's config records, so refuse rather than train the wrong work
        raise ConfigError(
            f"federated.local_epochs: {f.local_epochs} is run only by the in-process and Ray "
            "runtimes (edgetrain federate); on Flower leave it unset and set "
            "federated.local_steps and batch_size"
        )
    if f.partial_work:
        # the strategy aggregates the replies of nodes that finished their round; a node is
        # not told when the round will close, so it cannot stop early and send partial work
        raise ConfigError(
            "federated.partial_work: true (FedProx's partial updates from stragglers) is run "
            "only by the in-process and Ray runtimes (edgetrain federate); on Flower set "
            "federated.partial_work: false"
        )
    if f.unplannable == "microbatch":
        # the strategy ships the plan service's plans; Melon's fallback is not wired in
        raise ConfigError(
            "federated.unplannable: microbatch is run only by the in-process and Ray "
            "runtimes (edgetrain federate); on Flower set federated.unplannable: exclude "
            "or dispatch"
        )
    opts: dict[str, Any] = {}
    if f.aggregator == "fedprox":
        opts = {"mu": f.mu}
    elif f.aggregator == "fedyogi":
        opts = dict(f.yogi.model_dump())
    from edgetrain.federated.server import selector_options

    sel_opts = selector_options(spec.selector, f)
    plans = None
    if spec.technique in PLAN_TECHNIQUES:
        from edgetrain.federated.server import make_plan_service

        if env.plan_service is None:  # one per environment, as FederatedServer shares it
            env.plan_service = make_plan_service(env)
        plans = env.plan_service
    # the selector seed FederatedServer uses, so both runtimes select alike from one seed
    sel_seed = int(np.random.SeedSequence([cfg.seed, 7]).generate_state(1)[0])
    return EdgetrainStrategy(
        make_selector(spec.selector, seed=sel_seed, **sel_opts),
        make_aggregator(f.aggregator, **opts),
        clients_per_round=f.clients_per_round,
        m_g=env.m_g,
        plan_service=plans,
        plan_strategy=spec.technique if plans is not None else "hybrid",
        cluster=cfg.memory.cluster,
        deadline_s=f.deadline_s,
        overcommit=f.overcommit,
        failure_report=f.failure_report,
        deadline_factor=f.deadline_factor,
        straggler_feedback=f.straggler_feedback,
        # the server-side plan service decides who can be planned; on-device generation
        # (the -nooptimizer ablation) and no plans leave every node eligible, as in-process
        unplannable=f.unplannable if plans is not None and spec.optimizer else "dispatch",
        local_steps=f.local_steps,
        batch_size=f.batch_size,
        lr=f.lr,
        clip_grad_norm=f.clip_grad_norm,
        seed=cfg.seed,
        min_available_nodes=cfg.fleet.clients,
        evaluate_clients=evaluate_clients,
        node_timeout_s=node_timeout_s,
    )


def run_rounds(
    grid: Grid,
    cfg: FederatedConfig,
    env: Environment,
    strategy: EdgetrainStrategy,
    result: SimulationResult,
) -> SimulationResult:
    """The body of a ``ServerApp`` main: run ``cfg``'s rounds of ``strategy`` on ``grid``
    from the seeded initial model, evaluating the global model on ``env``'s test split
    after every round (round 0 = the initial model); fills and returns ``result``."""

    def central_eval(rnd: int, arrays: ArrayRecord) -> MetricRecord:
        model = env.build_model()
        model.load_state_dict(arrays.to_torch_state_dict())
        loss, acc = evaluate(model, env.test.x, env.test.y)
        result.accuracy[rnd], result.loss[rnd] = acc, loss
        return MetricRecord({"accuracy": acc, "loss": loss})

    torch.manual_seed(cfg.seed)
    initial = ArrayRecord(env.build_model().state_dict())
    out = strategy.start(
        grid=grid,
        initial_arrays=initial,
        num_rounds=cfg.federated.rounds,
        train_config=ConfigRecord({"method": result.method}),
        evaluate_fn=central_eval,
    )
    result.sim_time_s = strategy.sim_time_s
    result.federated_eval = {
        int(rnd): {k: float(v) for k, v in m.items()}
        for rnd, m in out.evaluate_metrics_clientapp.items()
    }
    result.final_state = out.arrays.to_torch_state_dict()
    return result


def build_apps(cfg: FederatedConfig, method: str | None = None):
    """``(server_app, client_app, strategy, result)`` for ``cfg``; ``result`` fills in
    while the server app runs."""
    method = method or cfg.federated.method
    text = cfg.model_dump_json()
    env = environment_for(text)
    strategy = make_strategy(cfg, env, method)
    result = SimulationResult(method, strategy.history)
    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        run_rounds(grid, cfg, env, strategy, result)

    client_app = make_client_app(lambda context: environment_for(text))
    return server_app, client_app, strategy, result


def simulate(
    cfg: FederatedConfig, method: str | None = None, *, num_cpus: int = 2
) -> SimulationResult:
    """Run ``cfg`` on Flower's simulation engine with ``cfg.fleet.clients`` nodes."""
    from flwr.simulation import run_simulation

    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")  # no network calls from a run
    if num_cpus < 1:
        raise ConfigError(f"num_cpus={num_cpus}; expected >= 1")
    server_app, client_app, _, result = build_apps(cfg, method)
    run_simulation(
        server_app=server_app,
        client_app=client_app,
        num_supernodes=cfg.fleet.clients,
        backend_config={
            "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
            "init_args": {"num_cpus": num_cpus, "num_gpus": 0, "include_dashboard": False},
        },
    )
    if not result.rounds:
        raise ConfigError(
            "the Flower simulation finished without a training round; see its log above"
        )
    return result


def result_json(result: SimulationResult) -> str:
    return json.dumps(result.to_json(), sort_keys=True)
