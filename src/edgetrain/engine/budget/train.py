"""A whole training run under a memory budget: the plan executed on every step.

``edgetrain budget`` times one step; this trains a model for epochs with every step run
through a :class:`~.executor.PlanExecutor`, so a device that lacks the memory to train
the model unplanned still trains it (FedHybrid §3-§4.4, the local side end to end):

1. **prepare** (before the first step, on the first full batch): profile the model
   (:func:`~.profile.profile_model`; or read the profile back from ``spec.profile`` or the
   run directory's ``profile.json`` when its fingerprint serves this run, see
   :meth:`BudgetedTraining._profiled`), measure the unplanned step's peak of the budget's
   scope (what a fractional ``limit`` is a fraction of), resolve the budget, plan.  The
   weights, buffers and torch's RNG state are restored afterwards, so the run's first
   step starts where an unplanned run's would.
2. **steps**: each step is forward + loss + backward under the plan, then the optimizer
   step.  The first step of every epoch is *measured*: scope ``saved`` counts autograd's
   saved tensors during that very step (:class:`~.accountant.MemoryAccountant`); scope
   ``all`` measures every allocation of one extra untimed step on the same batch and
   weights (:func:`~.accountant.step_alloc_peak`; weights and RNG restored).  The other
   steps run with no accounting hook (``measure="every"`` measures every step).
   Keep / recompute / regenerate / mask decisions are exact, so the run's losses and
   weights equal an unplanned run's bit for bit; compressed units are within the codec's
   error bound.
3. **the budget predictor** (optional, FedHybrid §4.4.2): ``predictor="linux"`` samples
   this system (``/proc/meminfo``, ``/proc/zoneinfo``, ``/proc/swaps``, the processes'
   ``oom_score_adj``, this process's page faults) ``samples_per_epoch`` times an epoch;
   a path instead replays a recorded trace (a JSON list of
   :class:`~.predictor.MemorySample` rows, :func:`~.predictor.samples_to_json`; its
   ``page_faults`` and ``lmk_kills`` are cumulative counters; past its end the last row
   repeats).  Eq. 10's window is one epoch of samples.  The budget is the smaller of
   ``limit`` and the prediction ``M_pred`` (eq. 10: ``MemAvailable`` minus alpha times the
   high watermark, the memory the process can still take without reclaim -- so scope
   ``all``, which bounds everything the step allocates, is the natural pairing).  After
   each epoch the plan is made again when the regeneration rule fires (page faults above
   TP1 x the previous epochs' average, or more than TP2 low-memory kills; the window then
   shrinks by WS_adj) or when the current plan's predicted peak no longer fits the
   predicted budget (an addition: a plan known not to fit is never kept).  The profile
   is reused; only the plan is made again.

A budget no plan reaches is a :class:`~edgetrain.errors.BudgetError` naming the minimum
feasible budget; raised at the start it trains nothing, raised after a later epoch it
leaves the run's finished epochs in place (:mod:`edgetrain.engine.local` saves the
weights first).

Every (re)plan and every epoch's measurement goes to ``log`` (``metrics.jsonl`` events
``plan`` and ``budget`` in a run directory).
"""

from __future__ import annotations

import copy
import json
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from edgetrain.engine.budget.accountant import (
    MemoryAccountant,
    model_state_tensors,
    step_alloc_peak,
)
from edgetrain.engine.budget.executor import PlanExecutor
from edgetrain.engine.budget.plan import ExecutionPlan
from edgetrain.engine.budget.planner import METHODS, check_scope, minimum_budget, plan
from edgetrain.engine.budget.predictor import (
    BudgetPredictor,
    MemorySample,
    sample_linux,
    samples_from_json,
)
from edgetrain.engine.budget.profile import ModelProfile
from edgetrain.engine.budget.runner import (
    check_budget_form,
    codecs_for,
    measure_steps,
    none_plan,
    parse_budget,
)
from edgetrain.errors import BudgetError, ConfigError

MEASURES = ("epoch", "every")


@dataclass(frozen=True)
class BudgetSpec:
    """What a budgeted run is asked for (the ``budget`` section of a run config)."""

    #: a fraction in (0, 1] of the unplanned step's peak of ``scope`` (``0.5``) or a size
    #: (``"300MB"``, ``"256MiB"``, bytes); ``None``: the predictor's budget alone
    limit: str | float | None = None
    method: str = "hybrid"
    #: ``saved``: autograd's saved tensors; ``all``: every allocation of the step
    scope: str = "saved"
    #: ``None`` | ``"linux"`` | the path of a recorded trace (JSON list of samples)
    predictor: str | None = None
    samples_per_epoch: int = 8
    #: ``epoch``: measure the first step of every epoch; ``every``: every step
    measure: str = "epoch"
    #: profiling effort (:func:`~.profile.profile_model`'s ``repeats`` and
    #: ``in_situ_steps``): fewer times each op and fits the in-step costs on fewer steps,
    #: so profiling is faster and the plan's predicted time noisier; the memory a plan
    #: holds is measured, not timed, so the budget holds either way
    profile_repeats: int = 3
    in_situ_steps: int = 10
    #: a model profile file (:mod:`~.profile_io`, JSON) shared between runs: read when it
    #: was measured for this model, batch, seed and machine, otherwise measured (every
    #: method's codecs and the all-allocation timeline, so it serves any method and scope)
    #: and written there; one made for another setting is refused, never rewritten
    profile: str | None = None

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ConfigError(
                f"budget.method {self.method!r}; expected one of {', '.join(METHODS)}"
            )
        check_scope(self.scope)
        if self.limit is None and self.predictor is None:
            raise ConfigError(
                "budget: give budget.limit (a fraction such as 0.5 or a size such as 300MB), "
                "budget.predictor ('linux' or a recorded trace), or both"
            )
        if self.limit is not None:
            check_budget_form(self.limit, "budget.limit")  # the peak is measured later
        if self.predictor not in (None, "linux") and not Path(self.predictor).is_file():
            raise ConfigError(
                f"budget.predictor: no file {self.predictor!r}; expected 'linux' or the path "
                "of a recorded trace (a JSON list of memory samples)"
            )
        if self.measure not in MEASURES:
            raise ConfigError(f"budget.measure {self.measure!r}; expected 'epoch' or 'every'")
        if self.samples_per_epoch < 1:
            raise ConfigError(f"budget.samples_per_epoch {self.samples_per_epoch}; expected >= 1")
        if self.profile_repeats < 1:
            raise ConfigError(f"budget.profile_repeats {self.profile_repeats}; expected >= 1")
        if self.in_situ_steps < 0:
            raise ConfigError(f"budget.in_situ_steps {self.in_situ_steps}; expected >= 0")
        if self.profile is not None:
            where = Path(self.profile)
            if where.is_dir() or not where.parent.is_dir():
                raise ConfigError(
                    f"budget.profile {self.profile!r}: "
                    + ("is a directory" if where.is_dir() else f"no folder {str(where.parent)!r}")
                    + "; expected the path of a model profile file (JSON) in an existing folder"
                )


# -- where memory samples come from ----------------------------------------------------
def trace_sampler(path: str | Path) -> Callable[[], MemorySample]:
    """Replay a recorded trace: each call returns the next sample, then the last again."""
    p = Path(path)
    what = (
        "a JSON list of memory samples (fields t, mem_available_bytes, "
        "watermark_high_bytes, swap_kind, weight, page_faults, lmk_kills), "
        "as edgetrain.engine.budget.predictor.samples_to_json writes"
    )
    if not p.is_file():
        raise ConfigError(
            f"budget.predictor: no file {str(p)!r}; expected 'linux' or the path of {what}"
        )
    try:
        rows = json.loads(p.read_text())
        samples = samples_from_json(rows)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"budget.predictor: {str(p)!r} is not {what} ({exc})") from None
    if not samples:
        raise ConfigError(f"budget.predictor: {str(p)!r} holds no samples; expected {what}")
    for i, s in enumerate(samples):
        if s.swap_kind not in ("zram", "disk", "none") or s.weight <= 0:
            raise ConfigError(
                f"budget.predictor: sample {i} of {str(p)!r} has swap_kind {s.swap_kind!r} / "
                f"weight {s.weight}; expected zram, disk or none and a weight > 0"
            )
    state = {"i": 0}

    def next_sample() -> MemorySample:
        s = samples[min(state["i"], len(samples) - 1)]
        state["i"] += 1
        return s

    return next_sample


def sampler_for(predictor: str | None) -> Callable[[], MemorySample] | None:
    if predictor is None:
        return None
    if predictor == "linux":
        if not Path("/proc/meminfo").is_file():
            raise ConfigError(
                "budget.predictor 'linux' reads /proc/meminfo, which this system lacks; "
                "give a recorded trace instead"
            )
        return sample_linux
    return trace_sampler(predictor)


def sample_steps(steps: int, k: int) -> set[int]:
    """The steps of an epoch of ``steps`` after which the predictor samples: ``min(k,
    steps)`` of them, evenly spread, the epoch's last step always among them."""
    return {max(0, (i + 1) * steps // k - 1) for i in range(k)} if steps > 0 else set()


@contextmanager
def _same_rng() -> Iterator[None]:
    """Leave torch's global RNG as it was (profiling and measuring steps reseed it)."""
    state = torch.get_rng_state()
    try:
        yield
    finally:
        torch.set_rng_state(state)


@dataclass
class _Epoch:
    steps: int = 0
    measured_peak: int = 0
    measured_steps: int = 0
    #: (page faults, low-memory kills) of the last sample before the epoch
    faults_at_start: tuple[int, int] | None = None


@dataclass
class BudgetedTraining:
    """The stepper :func:`edgetrain.engine.trainer.train_classifier` calls for every step
    (``begin_epoch`` / ``step`` / ``end_epoch`` / ``close``)."""

    spec: BudgetSpec
    #: one row per event (``plan``, ``budget``), e.g. ``RunDir.log_metrics``
    log: Callable[[dict[str, Any]], None] | None = None
    #: where predictor samples come from; default from ``spec.predictor``
    sampler: Callable[[], MemorySample] | None = None
    #: each (re)plan is written here as ``plan-<n>.json`` (a run directory)
    plan_dir: Path | None = None
    profile: ModelProfile | None = None
    plan: ExecutionPlan | None = None
    budget_bytes: int = 0
    unplanned_peak_bytes: int = 0
    predicted_budget_bytes: int | None = None
    plans: list[dict[str, Any]] = field(default_factory=list)
    epochs: list[dict[str, Any]] = field(default_factory=list)
    #: the number of this stepper's first plan: a resumed run continues the numbering of
    #: its ``plan-<n>.json`` files and ``plan`` events
    plan_offset: int = 0
    #: the run's own profile file (a run directory's ``profile.json``): written by the
    #: first session, read by a resume when it serves the resumed method and scope, so
    #: the resume plans from the same measurements (and, at the same budget, makes the
    #: same plan) instead of profiling again.  ``spec.profile``, when set, takes its place.
    profile_file: Path | None = None
    #: what the profile's fingerprint names the model (``{"name", "options"}`` of a run
    #: config; default the module's class name) and the run's seed
    model_name: str | dict[str, Any] | None = None
    seed: int = 0
    #: where the profile came from: ``path``, ``reused``, ``profile_s`` (and ``why`` a
    #: run's own file was not reused)
    profile_info: dict[str, Any] = field(default_factory=dict)
    #: the epochs finished before this stepper's first (a resumed run's checkpoint)
    _before: int = 0
    _predictor: BudgetPredictor | None = None
    _fast: PlanExecutor | None = None
    _epoch: _Epoch = field(default_factory=_Epoch)
    _sample_at: set[int] = field(default_factory=set)
    _last_sample: MemorySample | None = None

    def __post_init__(self) -> None:
        if self.sampler is None:
            self.sampler = sampler_for(self.spec.predictor)

    # -- planning ------------------------------------------------------------------
    def prepare(self, model: nn.Module, xb: torch.Tensor, yb: torch.Tensor) -> ExecutionPlan:
        """Profile on one batch, measure the unplanned peak, resolve the budget, plan."""
        t0 = time.perf_counter()
        inputs, loss_fn = (xb,), _loss_for(yb)
        state = copy.deepcopy(model.state_dict())
        with _same_rng():
            self.profile = self._profiled(model, inputs, loss_fn)
            base = none_plan(self.profile)
            if self.spec.scope == "saved":
                first = measure_steps(model, {"none": base}, inputs, loss_fn, repeats=0)
                self.unplanned_peak_bytes = first["none"]["peak"]
            else:
                self.unplanned_peak_bytes = step_alloc_peak(model, base, inputs, loss_fn)[0]
        model.load_state_dict(state)
        model.zero_grad(set_to_none=True)
        if self.sampler is not None:
            self._predictor = BudgetPredictor(window=self.spec.samples_per_epoch)
            self._observe()
        self._replan(epoch=self._before, reason="start" if not self._before else "resume", since=t0)
        return self.plan

    def _profiled(self, model: nn.Module, inputs: tuple, loss_fn: Callable) -> ModelProfile:
        """The run's profile: read from ``spec.profile`` or ``profile_file`` when it serves
        this run, otherwise measured (and written where no file is yet)."""
        from edgetrain.engine.budget.profile_io import reusable_profile

        t0 = time.perf_counter()
        shared = self.spec.profile is not None
        path = Path(self.spec.profile) if shared else self.profile_file
        info: dict[str, Any] = {"path": None if path is None else str(path)}
        kinds = {}  # the user's shared file: every method's codecs and the timeline (default)
        if not shared:  # the run's own file: what this method and scope need
            kinds = {
                "codecs": codecs_for(self.spec.method),
                "alloc_timeline": self.spec.scope == "all",
            }

        def mismatch(exc: ConfigError) -> None:  # the run's own file: kept as it is
            info["why"] = str(exc)

        prof, info["reused"] = reusable_profile(
            path,
            model,
            inputs,
            loss_fn,
            name=self.model_name if self.model_name is not None else type(model).__name__,
            seed=self.seed,
            option="budget.profile",
            on_mismatch=None if shared else mismatch,  # the user's file: refused
            repeats=self.spec.profile_repeats,
            in_situ_steps=self.spec.in_situ_steps,
            **kinds,
        )
        info["profile_s"] = time.perf_counter() - t0
        self.profile_info = info
        return prof

    def _limit_bytes(self) -> int | None:
        if self.spec.limit is None:
            return None
        return parse_budget(self.spec.limit, self.unplanned_peak_bytes)

    def _resolve(self) -> int:
        limit = self._limit_bytes()
        if self._predictor is not None:
            self.predicted_budget_bytes = max(0, int(self._predictor.predict()))
            return (
                self.predicted_budget_bytes
                if limit is None
                else min(limit, self.predicted_budget_bytes)
            )
        assert limit is not None
        return limit

    def _replan(self, epoch: int, reason: str, since: float | None = None) -> None:
        """Plan under the current budget; ``since``: when the work for it began (the
        ``plan`` event's ``seconds`` then include profiling)."""
        assert self.profile is not None
        since = time.perf_counter() if since is None else since
        budget = self._resolve()
        try:
            p = plan(self.profile, budget, self.spec.method, scope=self.spec.scope)
        except BudgetError:
            low = minimum_budget(self.profile, self.spec.method, scope=self.spec.scope)
            where = "before the first epoch" if epoch == 0 else f"after epoch {epoch}"
            limit = self._limit_bytes()
            if self.predicted_budget_bytes is not None and (limit is None or budget < limit):
                why = f"the budget predictor's M_pred (eq. 10) fell to {_mb(budget)} ({budget:,} B)"
            else:
                why = f"budget.limit {self.spec.limit!r} is {_mb(budget)} ({budget:,} B)"
            hint = "raise budget.limit" if self._predictor is None else "free memory"
            hint += ", lower train.batch_size"
            if self.spec.method != "hybrid":
                hint += ", or use budget.method hybrid (it reaches lower)"
            raise BudgetError(
                f"{where}: {why} of {self.spec.scope!r} memory, below the smallest plan "
                f"method {self.spec.method!r} reaches on this model and batch: {_mb(low)} "
                f"({low:,} B, {low / max(self.unplanned_peak_bytes, 1):.3f} of the unplanned "
                f"{_mb(self.unplanned_peak_bytes)}); {hint}"
            ) from None
        self.plan, self.budget_bytes = p, budget
        row = {
            "event": "plan",
            "epoch": epoch,
            "reason": reason,
            "plan": self.plan_offset + len(self.plans),
            "method": self.spec.method,
            "scope": self.spec.scope,
            "budget_bytes": budget,
            "unplanned_peak_bytes": self.unplanned_peak_bytes,
            "predicted_budget_bytes": self.predicted_budget_bytes,
            "predicted_peak_bytes": p.predicted_peak_bytes,
            "predicted_overhead_s": p.predicted_overhead_s,
            "decisions": p.decision_counts(),
            "seconds": time.perf_counter() - since,
        }
        if not self.plans and self.profile_info:  # this session's first plan
            row["profile"] = dict(self.profile_info)
        if self.plan_dir is not None:
            path = Path(self.plan_dir) / f"plan-{self.plan_offset + len(self.plans)}.json"
            p.save(path)
            row["plan_file"] = path.name
        self.plans.append(row)
        self._emit(row)

    # -- the predictor -------------------------------------------------------------
    def _observe(self) -> None:
        assert self.sampler is not None and self._predictor is not None
        s = self.sampler()
        self._predictor.observe_sample(s)
        self._last_sample = s

    # -- the trainer's calls -------------------------------------------------------
    def begin_epoch(self, epoch: int, steps: int) -> None:
        if self.profile is None:  # the first epoch this stepper runs (after a resume: not 1)
            self._before = epoch - 1
        self._epoch = _Epoch()
        if self._last_sample is not None:
            self._epoch.faults_at_start = (
                self._last_sample.page_faults,
                self._last_sample.lmk_kills,
            )
        self._sample_at = sample_steps(steps, self.spec.samples_per_epoch)

    def step(
        self, model: nn.Module, opt: torch.optim.Optimizer, xb: torch.Tensor, yb: torch.Tensor
    ) -> tuple[float, int]:
        """One optimizer step under the plan; (batch loss, correct predictions)."""
        e = self._epoch
        if self.plan is None:
            self.prepare(model, xb, yb)
            if self._last_sample is not None:
                e.faults_at_start = (self._last_sample.page_faults, self._last_sample.lmk_kills)
        measure = self.spec.measure == "every" or e.steps == 0
        hits = {"n": 0}
        loss_fn = _loss_for(yb, hits)
        opt.zero_grad(set_to_none=True)
        if measure:
            self._close_fast()
            if self.spec.scope == "all":
                with _same_rng():
                    peak = step_alloc_peak(model, self.plan, (xb,), _loss_for(yb))[0]
                loss = self._step_accounted(model, xb, loss_fn)
            else:
                acc = MemoryAccountant(exclude=model_state_tensors(model))
                loss = self._step_accounted(model, xb, loss_fn, acc)
                peak = acc.peak
            e.measured_peak = max(e.measured_peak, peak)
            e.measured_steps += 1
        else:
            if self._fast is None:
                self._fast = PlanExecutor(model, self.plan, account=False).__enter__()
            loss = self._fast.step((xb,), loss_fn)
        value = float(loss)
        if math.isfinite(value):
            opt.step()
        if self._predictor is not None and e.steps in self._sample_at:
            self._observe()
        e.steps += 1
        return value, hits["n"]

    def _step_accounted(
        self, model: nn.Module, xb: torch.Tensor, loss_fn, acc: MemoryAccountant | None = None
    ) -> torch.Tensor:
        kw = {"accountant": acc} if acc is not None else {"account": False}
        with PlanExecutor(model, self.plan, **kw) as ex:
            return ex.step((xb,), loss_fn)

    def end_epoch(self, epoch: int) -> dict[str, Any]:
        """Close the epoch's executor, record its measurement, apply the predictor's rule."""
        self._close_fast()
        e = self._epoch
        row: dict[str, Any] = {
            "event": "budget",
            "epoch": epoch,
            "plan": self.plan_offset + len(self.plans) - 1,
            "budget_bytes": self.budget_bytes,
            "scope": self.spec.scope,
            "measured_peak_bytes": e.measured_peak,
            "measured_steps": e.measured_steps,
            "predicted_peak_bytes": self.plan.predicted_peak_bytes if self.plan else None,
            "within_budget": e.measured_peak <= self.budget_bytes,
        }
        regenerate, reason = False, ""
        if self._predictor is not None and self._last_sample is not None:
            faults0, kills0 = e.faults_at_start or (0, 0)
            faults = self._last_sample.page_faults - faults0
            kills = self._last_sample.lmk_kills - kills0
            regenerate = self._predictor.end_round(max(faults, 0), max(kills, 0))
            self.predicted_budget_bytes = max(0, int(self._predictor.predict()))
            row.update(
                page_faults=faults,
                lmk_kills=kills,
                predicted_budget_bytes=self.predicted_budget_bytes,
                window=self._predictor.window,
                regeneration_rule=regenerate,
            )
            if regenerate:
                reason = "regeneration rule (page faults or low-memory kills)"
            elif self.plan is not None and self.plan.predicted_peak_bytes > self._resolve():
                reason = "the plan no longer fits the predicted budget"
        self.epochs.append(row)
        self._emit(row)
        if reason:
            self._replan(epoch=epoch, reason=reason)
        return row

    def close(self) -> None:
        """Take the plan's wrappers off the model (idempotent)."""
        self._close_fast()

    def _close_fast(self) -> None:
        if self._fast is not None:
            fast, self._fast = self._fast, None
            fast.__exit__(None, None, None)

    def summary(self) -> dict[str, Any]:
        """What ``result.json`` records of the budget."""
        now = self.plan_offset + len(self.plans) - 1
        last = [r["measured_peak_bytes"] for r in self.epochs if r["plan"] == now]
        return {
            "method": self.spec.method,
            "scope": self.spec.scope,
            "limit": self.spec.limit,
            "predictor": self.spec.predictor,
            "unplanned_peak_bytes": self.unplanned_peak_bytes,
            "budget_bytes": self.budget_bytes,
            "plans": len(self.plans),
            "profile": dict(self.profile_info),
            "decisions": self.plan.decision_counts() if self.plan else {},
            #: the last plan's measured peak (its epochs), against ``budget_bytes``
            "measured_peak_bytes": max(last, default=0),
            #: every epoch's measured peak within the budget of the plan it ran
            "within_budget": all(r["within_budget"] for r in self.epochs),
            "peak_to_budget": max(
                (r["measured_peak_bytes"] / max(r["budget_bytes"], 1) for r in self.epochs),
                default=0.0,
            ),
        }

    def _emit(self, row: dict[str, Any]) -> None:
        if self.log is not None:
            self.log(row)


def _loss_for(yb: torch.Tensor, hits: dict[str, int] | None = None):
    def loss_fn(out: torch.Tensor) -> torch.Tensor:
        if hits is not None:
            hits["n"] = int((out.detach().argmax(1) == yb).sum())
        return nn.functional.cross_entropy(out, yb)

    return loss_fn


def _mb(n: int | None) -> str:
    if n is None:
        return "?"
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n / 1e3:.1f} kB"
