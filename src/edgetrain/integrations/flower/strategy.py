"""``EdgetrainStrategy``: a Flower Message-API strategy driven by edgetrain's selectors.

One round on Flower's ``Grid`` (FedHybrid §4.1 workflow, same steps as
:class:`edgetrain.federated.server.FederatedServer`):

1. **check-in** — the first ``configure_train`` (and every ``checkin_every`` rounds) sends
   a ``query`` message to every connected node; each answers with its edgetrain client
   id, sample count, predicted memory budget M_i, per-step operator time, profile round
   estimate, compute rate and device class. These become a
   :class:`~edgetrain.federated.selectors.CheckIn`, and the node id <-> client id map.
2. **select** — the edgetrain selector (Random / Oort / FedHybrid) picks
   ``int(overcommit x k)`` client ids (over-commitment, as the in-process server).
3. **plan** — every selected client whose budget is below M_G gets an execution plan from
   the :class:`~edgetrain.federated.plans.PlanService` (k-means clusters, weakest member,
   cache); the plan's JSON rides in that node's train ``ConfigRecord`` (``plan-json``).
4. **aggregate** — valid replies past the deadline (their simulated round time) are
   discarded as late; of the rest, the ``k`` with the shortest simulated round time go
   through the edgetrain aggregator (FedAvg / FedProx / FedYogi) weighted by
   ``num-examples``, the others are stragglers that reported after the round closed.
   Error replies (a node killed above its physical memory, a crash) count as failed
   rounds; with ``failure_report="deadline"`` the round then lasts until the deadline
   when fewer than ``k`` reported (the rules of
   :meth:`edgetrain.federated.server.FederatedServer._round_time`).
5. **feedback** — every selected client's outcome goes back to ``selector.update``.

Selection randomness comes from the selector's own seeded generator and evaluation
sampling from a seeded NumPy generator; Flower's ``random.sample`` is never used.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from logging import INFO
from typing import Any

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy
from flwr.supercore import log

from edgetrain.errors import ConfigError, DataError
from edgetrain.federated.aggregators import Aggregator
from edgetrain.federated.plans import STRATEGIES, PlanOutcome, PlanService, plannable_mask
from edgetrain.federated.selectors import CheckIn, Feedback, Selector
from edgetrain.integrations.flower import keys as K


@dataclass
class RoundLog:
    """What the strategy decided and saw in one training round (plain data)."""

    round: int
    selected: list[int]
    plans: dict[int, dict[str, Any]] = field(default_factory=dict)  # cid -> plan summary
    aggregated: list[int] = field(default_factory=list)
    planned: list[int] = field(default_factory=list)  # trained under the shipped plan
    failed: list[int] = field(default_factory=list)
    late: list[int] = field(default_factory=list)
    stragglers: list[int] = field(default_factory=list)  # reported after the k-th report
    round_time_s: float = 0.0
    train_loss: float | None = None


class EdgetrainStrategy(Strategy):
    """Flower strategy: edgetrain selector + server-side plans + edgetrain aggregator.

    ``m_g`` is the model's unplanned training memory (bytes, as in
    :class:`~edgetrain.federated.environment.Environment`); ``plan_service`` may be None
    (no plans: clients below M_G train unplanned, as Random/Oort do).
    """

    def __init__(
        self,
        selector: Selector,
        aggregator: Aggregator,
        *,
        clients_per_round: int,
        m_g: float,
        plan_service: PlanService | None = None,
        plan_strategy: str = "hybrid",
        cluster: bool = True,
        deadline_s: float | None = None,
        local_steps: int = 5,
        batch_size: int = 16,
        lr: float = 0.05,
        seed: int = 0,
        min_available_nodes: int = 1,
        checkin_every: int = 0,
        evaluate_clients: int = 0,
        query_timeout_s: float = 600.0,
        node_timeout_s: float = 600.0,
        overcommit: float = 1.0,
        failure_report: str = "immediate",
        deadline_factor: float = 2.0,
        straggler_feedback: str = "none",
        unplannable: str = "dispatch",
        clip_grad_norm: float | None = None,
    ) -> None:
        if clients_per_round < 1:
            raise ConfigError(f"clients_per_round={clients_per_round}; expected >= 1")
        if not m_g > 0:
            raise ConfigError(f"m_g={m_g}; expected the model's training memory in bytes (> 0)")
        if plan_strategy not in STRATEGIES:
            raise ConfigError(f"plan_strategy {plan_strategy!r}; expected one of {STRATEGIES}")
        if deadline_s is not None and not deadline_s > 0:
            raise ConfigError(f"deadline_s={deadline_s}; expected seconds > 0 or None")
        if not overcommit >= 1.0 or not deadline_factor >= 1.0:
            raise ConfigError(
                f"overcommit={overcommit}, deadline_factor={deadline_factor}; expected >= 1"
            )
        if failure_report not in ("deadline", "immediate"):
            raise ConfigError(f"failure_report {failure_report!r}; expected deadline or immediate")
        if straggler_feedback not in ("average", "none"):
            raise ConfigError(
                f"straggler_feedback {straggler_feedback!r}; expected average or none"
            )
        if unplannable not in ("dispatch", "exclude"):
            raise ConfigError(f"unplannable {unplannable!r}; expected dispatch or exclude")
        if clip_grad_norm is not None and not clip_grad_norm > 0:
            raise ConfigError(f"clip_grad_norm={clip_grad_norm}; expected a norm > 0 or None")
        if not node_timeout_s > 0:
            raise ConfigError(f"node_timeout_s={node_timeout_s}; expected seconds > 0")
        if checkin_every < 0 or evaluate_clients < 0 or min_available_nodes < 1:
            raise ConfigError(
                "checkin_every and evaluate_clients must be >= 0 and min_available_nodes >= 1"
            )
        self.selector, self.aggregator = selector, aggregator
        self.clients_per_round, self.m_g = clients_per_round, float(m_g)
        self.plan_service, self.plan_strategy, self.cluster = plan_service, plan_strategy, cluster
        self.deadline_s = deadline_s
        self.overcommit, self.failure_report = overcommit, failure_report
        self.deadline_factor, self.straggler_feedback = deadline_factor, straggler_feedback
        self.unplannable = unplannable
        self.local_steps, self.batch_size, self.lr = local_steps, batch_size, lr
        self.clip_grad_norm = clip_grad_norm
        self.seed = seed
        self.min_available_nodes = min_available_nodes
        self.checkin_every = checkin_every
        self.evaluate_clients = evaluate_clients
        self.query_timeout_s = query_timeout_s
        self.node_timeout_s = node_timeout_s
        self.rng = np.random.default_rng(seed)
        self.checkin: CheckIn | None = None
        self.compute = np.zeros(0)
        self.device_class: list[str] = []
        self.node_of: dict[int, int] = {}  # cid -> Flower node id
        self.history: list[RoundLog] = []
        self.sim_time_s = 0.0
        self._global: dict[str, torch.Tensor] | None = None
        self._pending: RoundLog | None = None

    # -- check-in ---------------------------------------------------------------------------
    def check_in(self, grid: Grid) -> CheckIn:
        """Query every connected node for its edgetrain check-in; build the CheckIn."""
        give_up = time.monotonic() + self.node_timeout_s
        while len(nodes := sorted(grid.get_node_ids())) < self.min_available_nodes:
            if time.monotonic() > give_up:
                raise DataError(
                    f"only {len(nodes)} Flower nodes connected within {self.node_timeout_s:g} s; "
                    f"the fleet has {self.min_available_nodes} clients (one node each): start "
                    "that many SuperNodes (simulation: num-supernodes) or shrink fleet.clients"
                )
            log(INFO, "check-in: %d of %d nodes connected", len(nodes), self.min_available_nodes)
            time.sleep(1.0)
        cfg = ConfigRecord({K.QUERY_KIND: K.QUERY_CHECKIN})
        msgs = [
            Message(RecordDict({K.CONFIG: cfg}), message_type=MessageType.QUERY, dst_node_id=n)
            for n in nodes
        ]
        rows: dict[int, tuple[int, dict[str, float], str]] = {}
        for reply in grid.send_and_receive(msgs, timeout=self.query_timeout_s):
            if reply.has_error():
                log(INFO, "check-in: node %d failed: %s", reply.metadata.src_node_id,
                    reply.error.reason)  # fmt: skip
                continue
            m = reply.content.metric_records.get(K.METRICS)
            info = reply.content.config_records.get(K.CHECKIN_INFO)
            if m is None or info is None:
                raise DataError(
                    f"node {reply.metadata.src_node_id} answered the check-in without "
                    f"'{K.METRICS}' MetricRecord and '{K.CHECKIN_INFO}' ConfigRecord; use "
                    "edgetrain.integrations.flower.make_client_app for the ClientApp"
                )
            cid = int(m[K.CID])
            if cid in rows:
                raise DataError(f"two nodes claim edgetrain client id {cid}")
            rows[cid] = (reply.metadata.src_node_id, dict(m), str(info[K.DEVICE_CLASS]))
        n = len(rows)
        if n == 0:
            raise DataError("no node answered the check-in query")
        if sorted(rows) != list(range(n)):
            raise DataError(
                f"check-in client ids {sorted(rows)} are not 0..{n - 1}; every node must "
                "report a distinct partition id and all must answer"
            )

        def col(key: str) -> np.ndarray:
            return np.array([rows[c][1][key] for c in range(n)], dtype=float)

        self.node_of = {c: rows[c][0] for c in range(n)}
        self.compute = col(K.COMPUTE)
        self.device_class = [rows[c][2] for c in range(n)]
        budget = col(K.MEMORY_BUDGET)
        self.checkin = CheckIn(
            n_samples=col(K.N_SAMPLES).astype(np.int64),
            memory_budget=budget,
            step_time_s=col(K.STEP_TIME),
            est_duration_s=col(K.EST_DURATION),
            m_g=self.m_g,
            eligible=self.plannable(budget) if self.unplannable == "exclude" else None,
        )
        log(INFO, "check-in: %d edgetrain clients", n)
        return self.checkin

    # -- plans --------------------------------------------------------------------------------
    def plannable(self, budget: np.ndarray) -> np.ndarray | None:
        """``unplannable: exclude``: the nodes the selector may pick -- those whose check-in
        budget holds M_G or admits a plan from the plan service (its cached bucket for the
        node's device class), as ``FederatedServer`` decides it. None (every node) without a
        plan service."""
        if self.plan_service is None:
            return None
        return plannable_mask(
            self.plan_service, self.plan_strategy, budget, self.m_g, self.device_class, "node"
        )

    def plans_for(self, cids: list[int]) -> dict[int, PlanOutcome]:
        """Plans for the selected clients whose budget is below M_G (clustered, cached)."""
        assert self.checkin is not None
        need = [c for c in cids if self.checkin.memory_budget[c] < self.m_g]
        if self.plan_service is None or not need:
            return {}
        out = self.plan_service.plans_for_clients(
            self.plan_strategy,
            [float(self.checkin.memory_budget[c] / self.m_g) for c in need],
            [float(self.compute[c]) for c in need],
            [self.device_class[c] for c in need],
            cluster=self.cluster,
            seed=self.seed,
        )
        return dict(zip(need, out, strict=True))

    # -- training -----------------------------------------------------------------------------
    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        refresh = self.checkin_every > 0 and (server_round - 1) % self.checkin_every == 0
        if self.checkin is None or refresh:
            self.check_in(grid)
        assert self.checkin is not None
        k = self.clients_per_round
        n_pick = min(len(self.checkin), max(k, int(self.overcommit * k + 1e-9)))
        selected = self.selector.select(server_round, self.checkin, n_pick)
        plans = self.plans_for(selected)
        self._global = arrays.to_torch_state_dict()
        self._pending = RoundLog(server_round, list(selected))
        msgs = []
        for cid in selected:
            cfg = ConfigRecord(dict(config.items()))
            cfg.update(
                {
                    K.ROUND: server_round,
                    K.CID: cid,
                    K.LOCAL_STEPS: self.local_steps,
                    K.BATCH_SIZE: self.batch_size,
                    K.LR: float(self.lr),
                    K.PROXIMAL_MU: float(self.aggregator.proximal_mu),
                    K.CLIP_NORM: float(self.clip_grad_norm or 0.0),
                    K.SEED: _seed(self.seed, server_round, cid, 2),
                    K.PLAN_JSON: "",
                    K.PLAN_FEASIBLE: False,
                    K.PLAN_FRACTION: 1.0,
                    K.PLAN_OVERHEAD: 1.0,
                }
            )
            p = plans.get(cid)
            if p is not None:
                cfg[K.PLAN_FEASIBLE] = bool(p.feasible)
                cfg[K.PLAN_FRACTION] = float(p.fraction)
                cfg[K.PLAN_OVERHEAD] = float(p.overhead_factor)
                if p.feasible and p.plan_json is not None:
                    cfg[K.PLAN_JSON] = json.dumps(p.plan_json, sort_keys=True)
                self._pending.plans[cid] = p.to_dict()
            content = RecordDict({K.ARRAYS: arrays, K.CONFIG: cfg})
            msgs.append(
                Message(content, message_type=MessageType.TRAIN, dst_node_id=self.node_of[cid])
            )
        log(INFO, "configure_train: selected %s, %d with plans", selected, len(plans))
        return msgs

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        rec = self._pending or RoundLog(server_round, [])
        cid_of = {n: c for c, n in self.node_of.items()}
        got: dict[int, Message] = {}
        for reply in replies:
            cid = cid_of.get(reply.metadata.src_node_id)
            if cid is not None and cid in rec.selected:
                got[cid] = reply
        deadline = self.round_deadline_s()
        valid: list[tuple[float, int]] = []  # (simulated round time, cid) of timely replies
        for cid in rec.selected:
            reply = got.get(cid)
            if reply is None or reply.has_error():
                rec.failed.append(cid)
                continue
            dur = float(reply.content.metric_records[K.METRICS][K.DURATION])
            if deadline is not None and dur > deadline:
                rec.late.append(cid)
                continue
            valid.append((dur, cid))
        k = self.clients_per_round
        first = {cid for _, cid in sorted(valid)[:k]}
        rec.stragglers = [cid for _, cid in sorted(valid)[k:]]
        updates: list[tuple[dict[str, torch.Tensor], float]] = []
        feedback: list[Feedback] = []
        losses: list[tuple[float, float]] = []
        durations: list[float] = []
        for cid in rec.selected:
            reply = got.get(cid)
            n_cid = int(self.checkin.n_samples[cid]) if self.checkin is not None else 0
            if cid in rec.failed:
                feedback.append(Feedback(cid, False, math.inf, math.nan, n_cid))
                continue
            assert reply is not None
            m = reply.content.metric_records[K.METRICS]
            dur = float(m[K.DURATION])
            if cid not in first:  # late, or reported after the round closed
                straggler = self.straggler_feedback == "average" and cid in rec.stragglers
                feedback.append(Feedback(cid, False, dur, math.nan, n_cid, straggler=straggler))
                continue
            w = float(m[K.WEIGHT])
            state = reply.content.array_records[K.ARRAYS].to_torch_state_dict()
            updates.append((state, w))
            rec.aggregated.append(cid)
            if float(m.get(K.PLAN_EXECUTED, 0.0)) > 0:
                rec.planned.append(cid)
            durations.append(dur)
            losses.append((float(m[K.MEAN_LOSS]), w))
            feedback.append(Feedback(cid, True, dur, float(m[K.LOSS_SQ_MEAN]), int(w)))
        self.selector.update(server_round, feedback)
        done = sorted(d for d, _ in valid)
        if len(done) >= k:  # the k-th report closes the round
            rec.round_time_s = done[k - 1]
        elif (
            self.failure_report == "deadline" and (rec.failed or rec.late) and deadline is not None
        ):  # a killed node never reports: known only when the deadline passes
            rec.round_time_s = deadline
        else:
            rec.round_time_s = max(durations, default=0.0)
            if rec.late and deadline is not None:
                rec.round_time_s = deadline
        self.sim_time_s += rec.round_time_s
        if losses:
            total = sum(w for _, w in losses)
            rec.train_loss = sum(v * w for v, w in losses) / total
        self.history.append(rec)
        self._pending = None
        metrics = MetricRecord(
            {
                "n-aggregated": len(rec.aggregated),
                "n-failed": len(rec.failed),
                "n-late": len(rec.late),
                "round-time-s": rec.round_time_s,
                "sim-time-s": self.sim_time_s,
            }
        )
        if rec.train_loss is not None:
            metrics[K.MEAN_LOSS] = rec.train_loss
        if not updates or self._global is None:
            return None, metrics
        new = self.aggregator.aggregate(self._global, updates)
        return ArrayRecord(new), metrics

    def round_deadline_s(self) -> float | None:
        """``deadline_s``, or with ``failure_report="deadline"`` and none given,
        ``deadline_factor`` x the longest check-in round estimate (as the in-process server)."""
        if self.deadline_s is not None:
            return self.deadline_s
        if self.failure_report == "deadline" and self.checkin is not None:
            return self.deadline_factor * float(np.max(self.checkin.est_duration_s))
        return None

    # -- federated evaluation --------------------------------------------------------------------
    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        if self.evaluate_clients == 0 or not self.node_of:
            return []
        k = min(self.evaluate_clients, len(self.node_of))
        cids = sorted(int(c) for c in self.rng.choice(len(self.node_of), k, replace=False))
        msgs = []
        for cid in cids:
            cfg = ConfigRecord(dict(config.items()))
            cfg.update({K.ROUND: server_round, K.CID: cid})
            msgs.append(
                Message(
                    RecordDict({K.ARRAYS: arrays, K.CONFIG: cfg}),
                    message_type=MessageType.EVALUATE,
                    dst_node_id=self.node_of[cid],
                )
            )
        return msgs

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        rows = [
            r.content.metric_records[K.METRICS] for r in replies if not r.has_error()
        ]  # fmt: skip
        total = sum(float(m[K.WEIGHT]) for m in rows)
        if not rows or total <= 0:
            return None
        return MetricRecord(
            {
                key: sum(float(m[key]) * float(m[K.WEIGHT]) for m in rows) / total
                for key in (K.EVAL_LOSS, K.EVAL_ACC)
            }
        )

    def summary(self) -> None:
        log(INFO, "\t├──> selector: %s | aggregator: %s", self.selector.name, self.aggregator.name)
        log(INFO, "\t├──> clients per round: %d | M_G: %.3g bytes", self.clients_per_round,
            self.m_g)  # fmt: skip
        log(INFO, "\t└──> plans: %s (%s)", "on" if self.plan_service else "off",
            self.plan_strategy)  # fmt: skip


def _seed(*parts: int) -> int:
    """The seed keyed by ``(seed, round, client, 2)``: the one
    :class:`~edgetrain.federated.server.FederatedServer` gives a client's local training."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1)[0])
