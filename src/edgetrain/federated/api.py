"""One call per use: run one method into a run directory, or compare methods.

``compare`` builds the environment once, so every method sees the identical fleet,
partition and seed; the target accuracy is the best accuracy Random reaches (FedHybrid
Table 3), and each method's ``time_to_target_s`` is the simulated time it first reaches it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from edgetrain.errors import ConfigError
from edgetrain.federated.config import FederatedConfig
from edgetrain.federated.environment import Environment, build_environment
from edgetrain.federated.methods import COMPARE_METHODS
from edgetrain.federated.server import FederatedServer, summarize
from edgetrain.runs import RunDir


def run_federated(
    cfg: FederatedConfig,
    *,
    method: str | None = None,
    aggregator: str | None = None,
    rounds: int | None = None,
    run_dir: RunDir | None = None,
    resume: bool = False,
    env: Environment | None = None,
    executor: str | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> tuple[FederatedServer, list[dict[str, Any]]]:
    """Run (or resume) one method; returns the server and its per-round records.
    ``progress`` receives the server's events (:class:`FederatedServer`)."""
    env = env or build_environment(cfg)
    server = FederatedServer(
        env, method, aggregator, run_dir=run_dir, executor=executor, progress=progress
    )
    if resume:
        server.resume()
    records = server.run(rounds or cfg.federated.rounds)
    return server, records


def participation(records: Sequence[dict[str, Any]]) -> dict[str, list[int]]:
    """Per memory class: [selected, completed] summed over a run's rounds."""
    out: dict[str, list[int]] = {}
    for r in records:
        for cls, v in r["participation"].items():
            row = out.setdefault(cls, [0, 0])
            row[0] += int(v["selected"])
            row[1] += int(v["completed"])
    return dict(sorted(out.items(), key=lambda kv: float(kv[0].rstrip("GB"))))


def exposure(
    records: Sequence[dict[str, Any]],
    until_s: float | None,
    n_samples: Sequence[int] | None = None,
) -> dict[str, Any]:
    """How often each memory mechanism acted, over the rounds up to ``until_s`` (the
    time to target; every round when None): clients per outcome, aggregated updates
    trained under a plan, plan regenerations and compressed clients. An ablation can only
    change a run through these clients (round 6, Fig. 17).

    Round 7 adds ``compress_planned`` (planned client-rounds whose plan compresses),
    ``budget_over`` (client-rounds whose believed budget exceeded the lowest budget of
    their round by > 1 % of M_G) and ``budget_err_pct`` (mean |believed - true mean
    budget over the round| in % of M_G; None without plan-technique clients).

    Round 34 adds the selector's reach: ``distinct_selected`` / ``distinct_aggregated``
    (clients selected / aggregated at least once) and ``top_decile_share`` (the share of
    the aggregated updates that came from the tenth of the aggregated clients aggregated
    most often; 0.1 when every client was aggregated equally often). None where the
    records predate the ``aggregated`` field.

    Round 39 adds how much of the data the selector trains on: ``repeat_share`` (the mean,
    over rounds 2.., of the share of a round's aggregated clients that were aggregated in the
    round before; about k / n for a draw that ignores the past, n the clients it draws
    from) and, given the clients' ``n_samples``, ``data_coverage`` (the share of the training
    samples held by the clients aggregated at least once)."""
    out: dict[str, Any] = {
        k: 0 for k in ("planned", "pressure", "killed", "late", "planned_aggregated")
    }
    out.update(regenerations=0, compressed_clients=0, rounds=0)
    out.update(compress_planned=0, budget_over=0)
    err, n = 0.0, 0
    chosen: set[int] = set()
    times: dict[int, int] = {}
    known = True
    repeats: list[float] = []
    prev: set[int] | None = None
    for r in records:
        if until_s is not None and r["sim_time_s"] > until_s + 1e-9:
            break
        out["rounds"] += 1
        chosen.update(int(c) for c in r.get("selected", ()))
        if "aggregated" not in r:
            known = False
        agg = {int(c) for c in r.get("aggregated", ())}
        for c in agg:
            times[c] = times.get(c, 0) + 1
        if prev is not None and agg:
            repeats.append(len(agg & prev) / len(agg))
        prev = agg
        for k in ("planned", "pressure", "killed", "late"):
            out[k] += int(r.get("outcomes", {}).get(k, 0))
        for k in ("planned_aggregated", "regenerations", "compressed_clients"):
            out[k] += int(r.get(k, 0))
        for k in ("compress_planned", "budget_over"):
            out[k] += int(r.get(k, 0))
        err += float(r.get("budget_err_sum", 0.0))
        n += int(r.get("budget_n", 0))
    out["budget_err_pct"] = 100.0 * err / n if n else None
    out["distinct_selected"] = len(chosen)
    counts = sorted(times.values(), reverse=True)
    out["distinct_aggregated"] = len(counts) if known else None
    top = max(1, len(counts) // 10)
    out["top_decile_share"] = sum(counts[:top]) / sum(counts) if known and counts else None
    out["repeat_share"] = sum(repeats) / len(repeats) if known and repeats else None
    out["data_coverage"] = None
    if known and n_samples is not None and sum(n_samples) > 0:
        out["data_coverage"] = sum(int(n_samples[c]) for c in times) / sum(n_samples)
    return out


def compare(
    cfg: FederatedConfig,
    methods: Sequence[str] = COMPARE_METHODS,
    *,
    aggregator: str | None = None,
    rounds: int | None = None,
    root: Path | None = None,
    env: Environment | None = None,
    extend_factor: float = 3.0,
    executor: str | None = None,
    cached: dict[str, tuple[list[dict[str, Any]], float]] | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """Run every method on the same environment; one summary row per method.

    Random runs ``rounds`` rounds and sets the target (its best accuracy). A method whose
    rounds are shorter may not have reached the target when its ``rounds`` are done; it
    then keeps going while it is below the target and its simulated time is below
    Random's total, up to ``extend_factor x rounds`` rounds (so time-to-accuracy compares
    equal simulated time, not equal round counts). ``cached`` maps a method to records and
    wall seconds from an earlier call on the same environment (not re-run). ``progress``
    receives each server's events (:class:`FederatedServer`); rounds past ``rounds`` report
    ``"rounds": None``.
    """
    if "random" not in methods:
        raise ConfigError("compare needs 'random' among the methods (it sets the target)")
    env = env or build_environment(cfg)
    n_rounds = rounds or cfg.federated.rounds
    order = ["random"] + [m for m in methods if m != "random"]
    records: dict[str, list[dict[str, Any]]] = {}
    walls: dict[str, float] = {}
    skipped: dict[str, str] = {}
    target = horizon = None
    for m in order:
        if cached and m in cached:
            records[m], walls[m] = cached[m]
        else:
            rd = None
            if root is not None:
                rd = RunDir.create(m.replace("+", "_"), root, exist_ok=True)
            t0 = time.perf_counter()
            try:
                server = FederatedServer(
                    env, m, aggregator, run_dir=rd, executor=executor, progress=progress
                )
            except ConfigError as exc:  # e.g. heterofl on a model without width_mult
                if m == "random":
                    raise
                skipped[m] = str(exc)
                continue
            recs = server.run(n_rounds)
            if m != "random" and target is not None:
                cap = int(extend_factor * n_rounds)
                while (
                    server.round < cap
                    and (summarize(recs, None)["best_accuracy"] or 0.0) < target
                    and server.sim_time < horizon
                ):
                    server.run_round()
            walls[m] = time.perf_counter() - t0
            records[m] = recs
        if m == "random":
            target = summarize(records["random"], None)["best_accuracy"]
            horizon = records["random"][-1]["sim_time_s"]
    rows = []
    base = summarize(records["random"], target)["time_to_target_s"]
    for m in order:
        if m in skipped:
            rows.append({"method": m, "skipped": skipped[m]})
            continue
        s = summarize(records[m], target)
        tta = s["time_to_target_s"]
        rows.append(
            {
                "method": m,
                "final_accuracy": s["final_accuracy"],
                "best_accuracy": s["best_accuracy"],
                "target_accuracy": target,
                "time_to_target_s": tta,
                "speedup_vs_random": (base / tta) if (tta and base) else None,
                "rounds": s["rounds"],
                "sim_time_s": s["sim_time_s"],
                "wall_s": walls[m],
                "participation": participation(records[m]),
                "regenerations": sum(int(r.get("regenerations", 0)) for r in records[m]),
                "compressed_clients": sum(int(r.get("compressed_clients", 0)) for r in records[m]),
                "exposure": exposure(records[m], tta, env.n_samples.tolist()),
            }
        )
    return rows, records
