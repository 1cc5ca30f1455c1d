"""Server-side execution plans: k-means clusters of clients, one plan per cluster, a cache.

FedHybrid §4.3 / §5.5 (Fig. 20(b)): the server makes each selected client's execution
plan. Planning every client separately costs one planner run per client; instead the
server clusters the selected clients by (memory budget, compute) with k-means
(scikit-learn), plans once per cluster *for its weakest member* (the smallest budget, so
the plan fits every member) and caches plans keyed by
``(model, strategy, budget bucket, device class)``. Budgets are expressed as the fraction
``M_i / M_G`` of the model's unplanned training memory and floored to a bucket of width
``bucket`` (0.05 by default: a plan never assumes more memory than the client has).

The model is profiled once per codec set (:func:`edgetrain.engine.budget.profile_model`
on this CPU; recompute and swap plan on hybrid's profile, :data:`PROFILE_OF`), or its
profiles are read from beside a kept plans file (:meth:`PlanService.load_file`); a plan for
fraction ``f`` is :func:`edgetrain.engine.budget.plan` with ``f x`` the profiled unplanned
saved-activation peak. Its time overhead factor,
``1 + predicted_overhead_s / (3 x forward time)``, is what enters the simulated clock.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from edgetrain.engine.budget import ExecutionPlan, ModelProfile, plan, profile_model
from edgetrain.engine.budget.profile_io import (
    fingerprint,
    fingerprint_diff,
    profile_from_json,
    profile_to_json,
)
from edgetrain.engine.budget.runner import codecs_for
from edgetrain.errors import BudgetError, ConfigError
from edgetrain.sim.clock import TRAIN_FLOPS_PER_FORWARD

STRATEGIES = ("hybrid", "recompute", "compress", "swap")
#: the profile each strategy plans on.  Recompute and swap use no codec, and hybrid's
#: profile measures every op time, recomputation and I/O they are priced by (its codec
#: costs are extra entries they never read), so they plan on it: FedHybrid's plans, its
#: compression ablation's (recompute-only) plans and Melon's and Capuchin's are priced from
#: one measurement, and the engine's cap (hybrid never predicted above recompute at a
#: budget) holds between the outcomes too.  Round 41: with a profile each, 12-15 % apart on
#: the same recompute-only plan (MobileNetV2 at 0.25-0.30 of M_G), Fig. 17's ablation
#: compared two measurements of one plan (docs/results/federated.md, "Round 41").
#: Compress (GACT: int8 / int4 codecs) keeps a profile of its own.
PROFILE_OF = {"hybrid": "hybrid", "recompute": "hybrid", "swap": "hybrid", "compress": "compress"}
# FedHybrid §5.4 / Fig. 20(c): a client generating its own execution plan on the device is
# 9x slower than the server's generation (ablation "without the graph optimizer").
ON_DEVICE_PLAN_SLOWDOWN = 9.0
# resolution of a client's exact budget when it plans for itself (no bucket): 0.1% of M_G
EXACT_RESOLUTION = 1e-3
PROFILES_FORMAT = "edgetrain-plan-profiles"
#: the fingerprint fields a kept profile must match (what was measured); the machine's
#: (cpu, threads, torch) and the seed may differ: a kept measurement is meant to serve
#: every seed and machine, as the kept plan results made from it do
PROFILE_MATCH = ("model", "structure", "inputs", "codecs")


def profiles_path(plans_path: str | Path) -> Path:
    """Where the profiles behind a plans file are kept: ``X.json`` -> ``X.profiles.json``."""
    p = Path(plans_path)
    return p.with_name(p.name.removesuffix(".json") + ".profiles.json")


@dataclass(frozen=True)
class PlanOutcome:
    """What a client receives: whether a plan fits, its time factor and decisions."""

    strategy: str
    fraction: float  # the bucketed M_i / M_G the plan was made for
    feasible: bool
    overhead_factor: float
    decisions: dict[str, int] = field(default_factory=dict)
    plan_json: dict[str, Any] | None = None
    # share of the plan's saved-activation bytes held compressed, per codec: what the
    # client's local training passes through that codec (edgetrain.federated.local)
    compress_share: dict[str, float] = field(default_factory=dict)
    plan_s: float = 0.0  # measured planner seconds (CPU of this host) for this plan
    # uniform baselines (edgetrain.federated.baselines): Melon's micro-batch count, and the
    # predicted demand (fraction of M_G) when it differs from the fraction planned for
    micro_batches: int = 1
    demand: float | None = None

    @property
    def demand_fraction(self) -> float:
        """The memory (fraction of M_G) a client training under this plan uses."""
        return self.fraction if self.demand is None else self.demand

    def to_dict(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "fraction": self.fraction,
            "feasible": self.feasible,
            "overhead_factor": self.overhead_factor,
            "decisions": dict(self.decisions),
            "compress_share": dict(self.compress_share),
            "plan_s": self.plan_s,
            "micro_batches": self.micro_batches,
            "demand": self.demand,
        }


def bucket_of(fraction: float, width: float) -> float:
    """Floor ``fraction`` to the bucket grid (rounded to kill float noise)."""
    return round(math.floor(fraction / width + 1e-9) * width, 6)


class PlanService:
    """Profiles a model once per strategy and hands out (cached) per-client plans.

    ``refine``: plan with the planner's local search (:mod:`edgetrain.engine.budget.refine`).
    Off by default here, whatever :func:`edgetrain.engine.budget.plan`'s default: it made
    plan generation 9-16x slower per plan (``benchmarks/plan_service.py --quick``, with
    and without ``--refine``), so the service plans with the greedy walks (Algorithm 1)
    as before.
    """

    def __init__(
        self,
        model: nn.Module,
        inputs: torch.Tensor,
        targets: torch.Tensor,
        model_key: str,
        *,
        bucket: float = 0.05,
        max_units: int = 12,
        repeats: int = 2,
        refine: bool = False,
    ) -> None:
        if not 0 < bucket <= 0.5:
            raise ConfigError(f"plan bucket {bucket}; expected a fraction in (0, 0.5]")
        self.model, self.inputs, self.targets = model, inputs, targets
        self.model_key, self.bucket = model_key, bucket
        self.max_units, self.repeats, self.refine = max_units, repeats, refine
        self._profiles: dict[str, ModelProfile] = {}
        self.cache: dict[tuple[str, str, float, str], PlanOutcome] = {}
        self.table: dict[tuple[str, float], PlanOutcome] = {}
        self.planner_calls = 0
        self.cache_hits = 0
        self.profile_s = 0.0
        self.plan_s = 0.0
        # Melon's measured micro-batch cost (edgetrain.federated.baselines), once per service
        self.micro_batch_eff: dict[int, float] | None = None
        # recompute's smallest reachable fraction and its CPU seconds (Melon's search)
        self.melon_floor: tuple[float, float] | None = None

    # -- profiling and planning -----------------------------------------------------------
    def profile(self, strategy: str) -> ModelProfile:
        """The plan model's profile ``strategy`` plans on (:data:`PROFILE_OF`), measured
        once per service."""
        if strategy not in STRATEGIES:
            raise ConfigError(f"plan strategy {strategy!r}; expected one of {STRATEGIES}")
        strategy = PROFILE_OF[strategy]
        if strategy not in self._profiles:
            t0 = time.perf_counter()
            y = self.targets

            def loss_fn(out: torch.Tensor) -> torch.Tensor:
                return nn.functional.cross_entropy(out, y)

            was = self.model.training
            self.model.train()
            self._profiles[strategy] = profile_model(
                self.model,
                [self.inputs],
                loss_fn,
                codecs=codecs_for(strategy),
                max_units=self.max_units,
                repeats=self.repeats,
            )
            self.model.train(was)
            self.profile_s += time.perf_counter() - t0
        return self._profiles[strategy]

    def make_plan(self, strategy: str, fraction: float) -> PlanOutcome:
        """Run the planner for ``fraction`` of the unplanned peak (no cache)."""
        prof = self.profile(strategy)
        if fraction >= 1.0:
            return PlanOutcome(strategy, 1.0, True, 1.0, {"keep": len(prof.units)})
        t0 = time.perf_counter()
        c0 = time.process_time()
        self.planner_calls += 1
        unplanned = _unplanned_peak(prof)
        try:
            p: ExecutionPlan = plan(
                prof, max(1, int(fraction * unplanned)), strategy, refine=self.refine
            )
        except BudgetError:
            self.plan_s += time.perf_counter() - t0
            return PlanOutcome(strategy, fraction, False, 1.0, plan_s=time.process_time() - c0)
        cpu_s = time.process_time() - c0
        self.plan_s += time.perf_counter() - t0
        step_s = TRAIN_FLOPS_PER_FORWARD * max(sum(prof.item_s), 1e-9)
        factor = 1.0 + p.predicted_overhead_s / step_s
        return PlanOutcome(
            strategy, fraction, True, float(factor), p.decision_counts(), p.to_json(),
            compress_share=compress_share(p), plan_s=cpu_s,
        )  # fmt: skip

    def outcome(self, strategy: str, bucket: float) -> PlanOutcome:
        """The (memoised) planner result for a bucketed fraction."""
        key = (strategy, round(bucket, 6))
        if key not in self.table:
            self.table[key] = self.make_plan(strategy, bucket)
        return self.table[key]

    def precompute(
        self, strategy: str, on_plan: Callable[[str, int, int], None] | None = None
    ) -> None:
        """Plan every bucket below 1 once (so a run's plans are fixed from its start).

        ``on_plan(strategy, done, total)`` is called before the first bucket and after each
        one (progress for the command; a bucket already planned or loaded counts as done)."""
        n = int(round(1.0 / self.bucket))
        if on_plan is not None:
            on_plan(strategy, 0, n - 1)
        for j in range(1, n):
            self.outcome(strategy, round(j * self.bucket, 6))
            if on_plan is not None:
                on_plan(strategy, j, n - 1)

    def plan_exact(self, strategy: str, fraction: float) -> PlanOutcome:
        """A plan for the client's own budget (no bucket, no cluster, no cache key): what a
        client without the server-side optimizer generates itself."""
        f = math.floor(fraction / EXACT_RESOLUTION + 1e-9) * EXACT_RESOLUTION
        if f <= 0:
            return PlanOutcome(strategy, 0.0, False, 1.0)
        if f >= 1.0:
            return PlanOutcome(strategy, 1.0, True, 1.0)
        return self.outcome(strategy, round(f, 6))

    def plan_for(self, strategy: str, fraction: float, device_class: str) -> PlanOutcome:
        """Cached plan for a client with budget ``fraction`` of M_G in ``device_class``."""
        b = min(bucket_of(fraction, self.bucket), 1.0)
        if b <= 0:
            return PlanOutcome(strategy, 0.0, False, 1.0)
        key = (self.model_key, strategy, b, device_class)
        hit = self.cache.get(key)
        if hit is not None:
            self.cache_hits += 1
            return hit
        out = self.outcome(strategy, b) if b < 1.0 else PlanOutcome(strategy, 1.0, True, 1.0)
        self.cache[key] = out
        return out

    def to_json(self) -> list[dict[str, Any]]:
        """The planner results (no plan bodies), for ``plans.json`` in a run directory.

        Each row names the plan model and the bucket width, so :meth:`load_file` can refuse
        results made for another model or grid."""
        return [
            {**o.to_dict(), "model": self.model_key, "bucket": self.bucket}
            for _, o in sorted(self.table.items())
        ]

    def load_file(self, path: str | Path) -> int:
        """Reuse the planner results an earlier run saved (its run directory's ``plans.json``).

        Plans are made from operator costs profiled on this CPU (FedHybrid §4.4), so two
        fresh processes can plan slightly differently; loading one run's results makes a
        second run, in any process, use the same plans and so reproduce its metrics. Only
        results missing from the file are planned (and profiled) anew. Returns the number of
        results loaded; a missing, corrupt or foreign file is a :class:`ConfigError`.
        The profiles beside it (``X.profiles.json``, :func:`profiles_path`), when there are,
        are loaded too (:meth:`load_profiles`), so the plans made anew come from the same
        measurement as those loaded.
        """
        p = Path(path)
        accepted = "a run directory's plans.json (a JSON list of planner results)"
        if not p.is_file():
            raise ConfigError(f"memory.plans: no file {str(p)!r}; expected {accepted}")
        try:
            rows = json.loads(p.read_text())
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ConfigError(
                f"memory.plans: {str(p)!r} is not JSON ({e}); expected {accepted}"
            ) from e
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise ConfigError(
                f"memory.plans: {str(p)!r} is not a list of objects; expected {accepted}"
            )
        need = ("strategy", "fraction", "feasible", "overhead_factor")
        for i, r in enumerate(rows):
            missing = [k for k in need if k not in r]
            if missing:
                raise ConfigError(
                    f"memory.plans: row {i} of {str(p)!r} lacks {', '.join(missing)}; "
                    f"expected {accepted}"
                )
            if r.get("model", self.model_key) != self.model_key:
                raise ConfigError(
                    f"memory.plans: row {i} of {str(p)!r} was planned for model {r['model']!r}; "
                    f"this run plans {self.model_key!r}"
                )
            if r.get("bucket", self.bucket) != self.bucket:
                raise ConfigError(
                    f"memory.plans: row {i} of {str(p)!r} uses bucket {r['bucket']}; "
                    f"this run's memory.bucket is {self.bucket}"
                )
        before = dict(self.table)
        try:
            self.load_json(rows)
        except (TypeError, ValueError) as e:
            self.table = before  # all or nothing
            raise ConfigError(f"memory.plans: a row of {str(p)!r} has a bad value ({e})") from e
        if profiles_path(p).is_file():  # the measurement the results came from
            try:
                self.load_profiles(profiles_path(p))
            except ConfigError:
                self.table = before
                raise
        return len(rows)

    def _fingerprint(self, key: str) -> dict[str, Any]:
        return fingerprint(
            self.model, [self.inputs], name=self.model_key, seed=0,
            codecs=list(codecs_for(key)),
        )  # fmt: skip

    def save_profiles(self, path: str | Path) -> int:
        """Write the profiles this service planned from (JSON, no pickle; atomically), so a
        later process that loads them (:meth:`load_profiles`) makes any plan the kept
        results lack from the same measurement.  Returns how many were written."""
        body = {
            "format": PROFILES_FORMAT,
            "model": self.model_key,
            "profiles": {
                key: profile_to_json(prof, self._fingerprint(key))
                for key, prof in sorted(self._profiles.items())
            },
        }
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(body, allow_nan=False))
        tmp.replace(path)
        return len(self._profiles)

    def load_profiles(self, path: str | Path) -> int:
        """Plan from profiles :meth:`save_profiles` wrote instead of measuring anew.

        Plan results are only as comparable as the measurements they come from: FedHybrid's
        kept plans, a plan a client makes for its exact budget (Fig. 17's ablation without
        the server-side optimizer) and a fleet-wide baseline's plan for another seed are
        priced alike only when they share one profile.  A profile of another model, batch
        shape or codec set is a :class:`ConfigError`; another machine, torch or seed is
        accepted (:data:`PROFILE_MATCH`).  All or nothing; returns how many were loaded."""
        p = Path(path)
        accepted = f'a JSON object with "format": "{PROFILES_FORMAT}" (save_profiles)'
        try:
            body = json.loads(p.read_text())
        except OSError as e:
            raise ConfigError(f"plan profiles {str(p)!r}: cannot read ({e})") from e
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ConfigError(
                f"plan profiles {str(p)!r} is not JSON ({e}); expected {accepted}"
            ) from e
        if not isinstance(body, dict) or body.get("format") != PROFILES_FORMAT:
            raise ConfigError(f"plan profiles {str(p)!r}: expected {accepted}")
        if body.get("model") != self.model_key:
            raise ConfigError(
                f"plan profiles {str(p)!r} were measured for model {body.get('model')!r}; "
                f"this run plans {self.model_key!r}"
            )
        found = body.get("profiles")
        if not isinstance(found, dict) or not set(found) <= set(PROFILE_OF.values()):
            raise ConfigError(
                f"plan profiles {str(p)!r}: expected a 'profiles' object keyed by "
                f"{sorted(set(PROFILE_OF.values()))}"
            )
        loaded: dict[str, ModelProfile] = {}
        for key, obj in found.items():
            prof, fp = profile_from_json(obj, where=f"plan profiles {str(p)!r}, {key!r}")
            want = self._fingerprint(key)
            diff = [k for k in fingerprint_diff(fp, want) if k in PROFILE_MATCH]
            if diff:
                parts = "; ".join(
                    f"{k}: file {fp.get(k)!r}, this run {want.get(k)!r}" for k in diff
                )
                raise ConfigError(
                    f"plan profiles {str(p)!r}: the {key!r} profile was measured for another "
                    f"setting ({parts}); remove the file to profile afresh"
                )
            loaded[key] = prof
        self._profiles.update(loaded)
        return len(loaded)

    def load_json(self, rows: list[dict[str, Any]]) -> None:
        for r in rows:
            o = PlanOutcome(
                r["strategy"], float(r["fraction"]), bool(r["feasible"]),
                float(r["overhead_factor"]), dict(r.get("decisions") or {}),
                compress_share={k: float(v) for k, v in (r.get("compress_share") or {}).items()},
                plan_s=float(r.get("plan_s", 0.0)),
                micro_batches=int(r.get("micro_batches", 1)),
                demand=None if r.get("demand") is None else float(r["demand"]),
            )  # fmt: skip
            self.table[(o.strategy, round(o.fraction, 6))] = o

    # -- the server's per-round service ----------------------------------------------------
    def plans_for_clients(
        self,
        strategy: str,
        fractions: Sequence[float],
        compute: Sequence[float],
        device_classes: Sequence[str],
        *,
        cluster: bool = True,
        n_clusters: int | None = None,
        seed: int = 0,
    ) -> list[PlanOutcome]:
        """One plan per client; with ``cluster`` (k-means + weakest member + cache)."""
        n = len(fractions)
        if n == 0:
            return []
        if not cluster:
            return [self.make_plan(strategy, min(float(f), 1.0)) for f in fractions]
        labels = kmeans_labels(fractions, compute, n_clusters, seed)
        out: list[PlanOutcome | None] = [None] * n
        for c in np.unique(labels):
            members = np.flatnonzero(labels == c)
            weakest = min(float(fractions[i]) for i in members)
            # one plan per (cluster, device class) so the cache key stays meaningful
            for dc in sorted({device_classes[i] for i in members}):
                p = self.plan_for(strategy, weakest, dc)
                for i in members:
                    if device_classes[i] == dc:
                        out[i] = p
        return [o for o in out if o is not None]


def plannable_mask(
    service: PlanService,
    strategy: str,
    budgets: Sequence[float],
    m_g: float,
    device_classes: Sequence[str],
    who: str = "client",
) -> np.ndarray:
    """``federated.unplannable: exclude``: True for each client whose budget holds M_G or
    admits a feasible ``strategy`` plan at its cached budget bucket for its device class --
    the clients the selector may be offered. Raises one ConfigError when none qualifies."""
    ok = np.array(
        [
            b >= m_g or service.plan_for(strategy, float(b) / m_g, device_classes[c]).feasible
            for c, b in enumerate(budgets)
        ],
        dtype=bool,
    )
    if not ok.any():
        raise ConfigError(
            f"federated.unplannable: exclude leaves no {who} to select: no {strategy} plan "
            f"fits any {who}'s budget (largest {float(np.max(budgets)) / m_g:.2f} of M_G); "
            "lower the model's memory or set federated.unplannable: dispatch"
        )
    return ok


def compress_share(p: ExecutionPlan) -> dict[str, float]:
    """Per codec, the share of the plan's saved-activation bytes its compressed units hold."""
    total = sum(u.saved_bytes for u in p.units)
    out: dict[str, float] = {}
    if total <= 0:
        return out
    for u in p.units:
        if u.decision == "compress" and u.codec:
            out[u.codec] = out.get(u.codec, 0.0) + u.saved_bytes / total
    return {k: round(v, 6) for k, v in sorted(out.items())}


def _unplanned_peak(prof: ModelProfile) -> int:
    from edgetrain.engine.budget.planner import simulate

    return int(simulate(prof, {}).max(initial=0))


def kmeans_labels(
    fractions: Sequence[float],
    compute: Sequence[float],
    n_clusters: int | None = None,
    seed: int = 0,
) -> np.ndarray:
    """k-means (scikit-learn) labels over standardised (budget fraction, log compute).

    ``n_clusters`` defaults to ``ceil(sqrt(n / 2))`` (the rule-of-thumb k of Mardia et al.
    1979, "Multivariate Analysis" §13.2), capped by the number of distinct points.
    """
    from sklearn.cluster import KMeans

    x = np.column_stack(
        [np.asarray(fractions, dtype=float), np.log(np.asarray(compute, dtype=float))]
    )
    n = len(x)
    distinct = len({tuple(r) for r in np.round(x, 9)})
    k = n_clusters or max(1, math.ceil(math.sqrt(n / 2)))
    k = max(1, min(k, distinct))
    if k == 1:
        return np.zeros(n, dtype=int)
    sd = x.std(axis=0)
    sd[sd == 0] = 1.0
    z = (x - x.mean(axis=0)) / sd
    return KMeans(n_clusters=k, n_init=3, random_state=seed).fit_predict(z)
