"""The node side: a Flower ``ClientApp`` whose nodes are edgetrain clients.

Each Flower node stands for one client of an edgetrain
:class:`~edgetrain.federated.environment.Environment` (its data partition, device
profile and predicted memory budget), chosen by the node's ``partition-id``
(Flower's simulation engine sets it in ``context.node_config``). The node:

* answers the **check-in** query with the numbers :class:`EdgetrainStrategy` needs;
* **trains** for real on its partition — under the execution plan it was sent
  (:func:`edgetrain.engine.budget.executor.executing`: recompute / compress / swap per
  unit), or unplanned — and reports the per-sample loss statistics the selectors use and
  its simulated round time and energy (:func:`edgetrain.sim.clock.client_cost`, with the
  plan's overhead factor and the page-reclaim pressure factor of
  :func:`edgetrain.sim.clock.pressure_factor`). A node whose memory demand exceeds its
  physical memory raises :class:`~edgetrain.errors.BudgetError`: Flower turns that into
  an error reply, which the strategy counts as a failed (killed) round;
* **evaluates** the global model on its partition when asked.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from torch import nn

from edgetrain.engine.budget import ExecutionPlan
from edgetrain.engine.budget.executor import executing
from edgetrain.engine.budget.runner import codecs_for
from edgetrain.engine.trainer import batches, evaluate
from edgetrain.errors import BudgetError, ConfigError
from edgetrain.federated.environment import Environment
from edgetrain.integrations.flower import keys as K
from edgetrain.sim.clock import client_cost, pressure_factor


def checkin_records(env: Environment, cid: int) -> tuple[MetricRecord, ConfigRecord]:
    """The check-in of client ``cid`` (FedHybrid §4.2 heartbeat) as Flower records."""
    _check_cid(env, cid)
    metrics = MetricRecord(
        {
            K.CID: cid,
            K.N_SAMPLES: int(env.n_samples[cid]),
            K.MEMORY_BUDGET: float(env.budgets[cid]),
            K.STEP_TIME: float(env.step_time_s()[cid]),
            K.EST_DURATION: float(env.est_duration_s()[cid]),
            K.COMPUTE: float(env.fleet[cid].compute_flops),
        }
    )
    return metrics, ConfigRecord({K.DEVICE_CLASS: env.memory_class(cid)})


def train_on_client(
    env: Environment,
    cid: int,
    state: Mapping[str, torch.Tensor],
    config: Mapping[str, Any],
) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    """Train client ``cid`` from ``state`` as ``config`` (the strategy's record) says.

    Returns the new state and the reply metrics (``num-examples``, ``loss-sq-mean``,
    ``train-loss``, ``duration-s``, ``energy-j``, ``plan-executed``).
    """
    _check_cid(env, cid)
    profile = env.fleet[cid]
    plan_text = str(config.get(K.PLAN_JSON, "") or "")
    plan = ExecutionPlan.from_json(json.loads(plan_text)) if plan_text else None
    fraction = float(config.get(K.PLAN_FRACTION, 1.0)) if plan is not None else 1.0
    overhead = float(config.get(K.PLAN_OVERHEAD, 1.0)) if plan is not None else 1.0
    demand = fraction * env.m_g if plan is not None else env.m_g
    if demand > env.hard_limits[cid]:
        raise BudgetError(
            f"client {cid} ({profile.name}) needs {demand / 1e9:.2f} GB to train but has "
            f"{env.hard_limits[cid] / 1e9:.2f} GB physical memory: killed"
        )
    steps = int(config.get(K.LOCAL_STEPS, 5))
    batch = int(config.get(K.BATCH_SIZE, 16))
    lr = float(config.get(K.LR, 0.05))
    mu = float(config.get(K.PROXIMAL_MU, 0.0))
    clip = float(config.get(K.CLIP_NORM, 0.0))
    gen = torch.Generator().manual_seed(int(config.get(K.SEED, 0)))
    idx = torch.as_tensor(env.parts[cid], dtype=torch.long)
    x, y = env.train.x[idx], env.train.y[idx]
    model = env.build_model()
    model.load_state_dict(dict(state))
    model.train()
    anchor = [p.detach().clone() for p in model.parameters()] if mu > 0 else None
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    sq_sum = loss_sum = 0.0
    count = done = 0
    while done < steps:
        for b in batches(len(x), batch, gen):
            seen: list[torch.Tensor] = []

            def loss_fn(out: torch.Tensor, yb: torch.Tensor = y[b], seen=seen) -> torch.Tensor:
                per = nn.functional.cross_entropy(out, yb, reduction="none")
                seen.append(per.detach())
                loss = per.mean()
                if anchor is not None:
                    prox = sum(
                        ((p - a) ** 2).sum()
                        for p, a in zip(model.parameters(), anchor, strict=True)
                    )
                    loss = loss + 0.5 * mu * prox
                return loss

            opt.zero_grad(set_to_none=True)
            if plan is not None:
                with executing(model, plan, codecs=codecs_for(plan.method)) as ex:
                    ex.step([x[b]], loss_fn)
            else:
                loss_fn(model(x[b])).backward()
            if clip > 0:
                nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
            per = seen[0]
            sq_sum += float((per * per).sum())
            loss_sum += float(per.sum())
            count += len(b)
            done += 1
            if done >= steps:
                break
    cost = client_cost(
        profile,
        samples=steps * batch,
        flops_per_sample=env.flops_per_sample,
        model_bytes=env.model_bytes,
        overhead_factor=max(overhead, 1.0),
        pressure=pressure_factor(demand, float(env.budgets[cid])),
    )
    new_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    metrics = {
        K.WEIGHT: float(len(x)),
        K.LOSS_SQ_MEAN: sq_sum / max(count, 1),
        K.MEAN_LOSS: loss_sum / max(count, 1),
        K.DURATION: float(cost.total_s),
        K.ENERGY: float(cost.energy_j),
        K.PLAN_EXECUTED: float(plan is not None),
    }
    return new_state, metrics


def node_client_id(context: Context) -> int:
    """The edgetrain client id a Flower node stands for: its ``partition-id``."""
    if "partition-id" not in context.node_config:
        raise ConfigError(
            "the Flower node has no 'partition-id' in its node_config; run it under the "
            "simulation runtime or start the SuperNode with --node-config "
            "'partition-id=N num-partitions=M'"
        )
    return int(context.node_config["partition-id"])


def answer_query(env: Environment, cid: int, msg: Message) -> Message:
    """Reply to the strategy's check-in ``query`` with client ``cid``'s check-in."""
    metrics, info = checkin_records(env, cid)
    return Message(RecordDict({K.METRICS: metrics, K.CHECKIN_INFO: info}), reply_to=msg)


def answer_train(env: Environment, cid: int, msg: Message) -> Message:
    """Train client ``cid`` from the message's arrays under the plan in its config."""
    cfg = msg.content.config_records[K.CONFIG]
    if int(cfg.get(K.CID, cid)) != cid:
        raise ConfigError(f"train message for client {cfg[K.CID]} reached node of {cid}")
    state = msg.content.array_records[K.ARRAYS].to_torch_state_dict()
    new, metrics = train_on_client(env, cid, state, cfg)
    reply = RecordDict({K.ARRAYS: ArrayRecord(new), K.METRICS: MetricRecord(metrics)})
    return Message(reply, reply_to=msg)


def answer_evaluate(env: Environment, cid: int, msg: Message) -> Message:
    """Evaluate the message's model on client ``cid``'s partition."""
    _check_cid(env, cid)
    model = env.build_model()
    model.load_state_dict(msg.content.array_records[K.ARRAYS].to_torch_state_dict())
    idx = torch.as_tensor(env.parts[cid], dtype=torch.long)
    loss, acc = evaluate(model, env.train.x[idx], env.train.y[idx])
    m = MetricRecord({K.WEIGHT: float(len(idx)), K.EVAL_LOSS: loss, K.EVAL_ACC: acc})
    return Message(RecordDict({K.METRICS: m}), reply_to=msg)


def make_client_app(env_factory: Callable[[Context], Environment]) -> ClientApp:
    """A ``ClientApp`` serving the clients of ``env_factory(context)`` (called for every
    message; cache it per process, e.g. with :func:`functools.cache` on the config)."""
    app = ClientApp()

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        return answer_query(env_factory(context), node_client_id(context), msg)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        return answer_train(env_factory(context), node_client_id(context), msg)

    @app.evaluate()
    def evaluate_(msg: Message, context: Context) -> Message:
        return answer_evaluate(env_factory(context), node_client_id(context), msg)

    return app


def _check_cid(env: Environment, cid: int) -> None:
    if not 0 <= cid < len(env.parts):
        raise ConfigError(
            f"client id {cid} out of range; this environment has clients 0..{len(env.parts) - 1}"
        )
