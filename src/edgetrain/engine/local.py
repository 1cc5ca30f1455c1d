"""One local training run, from a validated config to a run directory.

config -> data set -> split -> model (shaped to the data) -> train -> runs/<name>/

A run writes a checkpoint after every ``train.checkpoint_every`` epochs
(``checkpoints/epoch-NNNN/``, :mod:`edgetrain.checkpoint`); :func:`resume_local`
(``edgetrain run --resume RUN_DIR``) continues it from the newest one and ends with the
metrics and weights of a run never interrupted.  A resume may change the memory budget
(a device whose free memory fell, or a run a :class:`BudgetError` stopped): the rest of
the config is the run's own.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from edgetrain import data as data_mod
from edgetrain import models as models_mod
from edgetrain.checkpoint import Resumption, complete_checkpoints
from edgetrain.config import RunConfig, parse_config, with_budget
from edgetrain.engine.trainer import EpochMetrics, train_classifier
from edgetrain.errors import BudgetError, ConfigError, EdgetrainError
from edgetrain.runs import RunDir, read_run_config_json, seed_everything

#: config.json's ``command`` for a local run (older run directories have none)
COMMAND = "run"
#: a budgeted run's model profile (edgetrain.engine.budget.profile_io), read again by a resume
PROFILE_FILE = "profile.json"


@dataclass
class LocalRunResult:
    run_dir: Path
    test_accuracy: float
    test_loss: float
    history: list[EpochMetrics]
    model_name: str
    model_options: dict[str, Any]
    data_name: str
    params: int
    wall_seconds: float
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "run_dir": str(self.run_dir),
            "accuracy": self.test_accuracy,
            "test_loss": self.test_loss,
            "model": self.model_name,
            "model_options": self.model_options,
            "data": self.data_name,
            "params": self.params,
            "epochs": len(self.history),
            "wall_s": self.wall_seconds,
            **self.extra,
        }


def model_options_for(model_name: str, dataset, options: dict[str, Any]) -> dict[str, Any]:
    """Fill the model options a data set determines (classes, channels, length, vocabulary).

    Only options the model accepts are filled, and options the user gave win.
    """
    accepted = set(models_mod.spec(model_name).defaults)
    shape = tuple(dataset.input_shape)
    derived: dict[str, Any] = {"num_classes": dataset.num_classes}
    kind = dataset.meta.get("kind")
    if kind == "text" or dataset.x.dtype == torch.int64:
        derived["vocab_size"] = int(dataset.meta.get("vocab_size", int(dataset.x.max()) + 1))
        derived["max_len"] = shape[-1]
    elif len(shape) == 2:  # C x T sensor window
        derived["in_channels"], derived["length"] = shape
    elif len(shape) == 3:  # C x H x W image
        derived["in_channels"] = shape[0]
        derived["input_size"] = shape[1]
    out = {k: v for k, v in derived.items() if k in accepted}
    out.update(options)
    return out


def budget_spec(config: RunConfig):
    """The run's :class:`~edgetrain.engine.budget.train.BudgetSpec`, checked before any data
    is loaded; ``None`` without a ``budget`` section."""
    if config.budget is None:
        return None
    from edgetrain.engine.budget.train import BudgetSpec

    return BudgetSpec(**config.budget.model_dump())


def run_local(
    config: RunConfig,
    *,
    on_epoch: Callable[[EpochMetrics], None] | None = None,
    on_step: Callable[[int, int], None] | None = None,
    run_name: str | None = None,
    resume_dir: str | Path | None = None,
) -> LocalRunResult:
    """Train ``config.model`` on ``config.data`` and write the run directory.

    With a ``budget`` section every step runs under a memory plan
    (:class:`~edgetrain.engine.budget.train.BudgetedTraining`): its ``plan`` and ``budget``
    events go to ``metrics.jsonl``, each plan to ``plan-<n>.json``, a summary to
    ``result.json``.  A budget no plan reaches after some epochs (the predictor's budget
    fell) saves the weights trained so far before the :class:`BudgetError` propagates.

    ``resume_dir``: continue that run directory from its newest checkpoint (``config`` is
    its own, :func:`read_run_config`, possibly with another budget; see
    :func:`resume_local`).
    """
    start = time.perf_counter()
    spec = budget_spec(config)
    resumed, plans = None, 0  # plans: made before the checkpoint (plan-<n>.json go on)
    if resume_dir is not None:
        read_run_config(resume_dir)  # the same checks as resume_local's
        resumed = Resumption.open(resume_dir, config.train.epochs)
    generator = seed_everything(config.seed)
    dataset = data_mod.load(config.data.name, **config.data.options)
    if config.data.max_samples is not None and config.data.max_samples < len(dataset):
        keep = np.random.default_rng(config.seed).permutation(len(dataset))
        dataset = dataset.subset(np.sort(keep[: config.data.max_samples]))
    train_ds, test_ds = dataset.train_test_split(
        test_fraction=config.data.test_fraction,
        seed=config.seed,
        stratify=config.data.split == "stratified",
        by_group=config.data.split == "by-group",
    )
    if len(test_ds) == 0:
        raise ConfigError("the test split is empty; raise data.test_fraction")
    options = model_options_for(config.model.name, dataset, dict(config.model.options))
    torch.manual_seed(config.seed)
    model = models_mod.build(config.model.name, **options)
    params = sum(p.numel() for p in model.parameters())

    if resumed is None:
        run = RunDir.unique(run_name or config.name, config.output_root)
        run.write_config(
            {
                "command": COMMAND,
                "config": config.model_dump(),
                "resolved": {"model_options": options, "data_source": dataset.source},
            }
        )
    else:
        run = resumed.run
        budget = config.budget.model_dump() if config.budget is not None else None
        rows = resumed.begin({"config": config.model_dump()}, {"budget": budget})
        plans = 1 + max(
            (int(r["plan"]) for r in rows if r.get("event") == "plan" and "plan" in r),
            default=-1,
        )

    def _log(m: EpochMetrics) -> None:
        run.log_metrics({"event": "epoch", **m.to_dict()})
        if on_epoch is not None:
            on_epoch(m)

    stepper = None
    if spec is not None:
        from edgetrain.engine.budget.train import BudgetedTraining

        stepper = BudgetedTraining(
            spec,
            log=run.log_metrics,
            plan_dir=run.ensure().path,
            plan_offset=plans,
            profile_file=run.path / PROFILE_FILE,
            model_name={"name": config.model.name, "options": options},
            seed=config.seed,
        )
    done: list[EpochMetrics] = []

    def _epoch_done(m: EpochMetrics) -> None:
        done.append(m)
        _log(m)

    t = config.train
    try:
        history = train_classifier(
            model,
            train_ds.x,
            train_ds.y,
            test_ds.x,
            test_ds.y,
            epochs=t.epochs,
            batch_size=t.batch_size,
            lr=t.lr,
            optimizer=t.optimizer,
            momentum=t.momentum,
            weight_decay=t.weight_decay,
            schedule=t.schedule,
            generator=generator,
            on_epoch=_epoch_done,
            on_step=on_step,
            stepper=stepper,
            checkpoint_dir=run.path,
            checkpoint_every=t.checkpoint_every,
            resume_from=resumed.checkpoint if resumed is not None else None,
        )
    except BaseException as exc:
        if done:
            if isinstance(exc, BudgetError):
                before = resumed.checkpoint.epoch if resumed is not None else 0
                raise _stopped(exc, run, model, config, before + len(done)) from None
            raise
        if resumed is not None:  # nothing trained in this session: the run is as it was
            resumed.undo()
        elif isinstance(exc, EdgetrainError):
            # a user mistake found before the first step (a budget no plan reaches, a
            # budget.profile file that does not fit): nothing trained, no run directory
            shutil.rmtree(run.path, ignore_errors=True)
        raise
    run.save_model(
        model.state_dict(),
        metadata={"model": config.model.name, "seed": str(config.seed)},
    )
    last = history[-1]
    result = LocalRunResult(
        run_dir=run.path,
        test_accuracy=last.test_accuracy,
        test_loss=last.test_loss,
        history=history,
        model_name=config.model.name,
        model_options=options,
        data_name=config.data.name,
        params=params,
        wall_seconds=time.perf_counter() - start,
    )
    if resumed is not None:
        result.extra["resumed_after_epoch"] = resumed.checkpoint.epoch
    if stepper is not None:
        result.extra["budget"] = stepper.summary()
    run.write_json("result.json", result.to_json())
    return result


def _stopped(exc: BudgetError, run: RunDir, model: torch.nn.Module, config, epochs: int):
    """The BudgetError of a run stopped after ``epochs`` epochs, its weights saved first."""
    path = run.save_model(
        model.state_dict(),
        metadata={
            "model": config.model.name,
            "seed": str(config.seed),
            "epochs_done": str(epochs),
            "stopped": "budget",
        },
    )
    saved = complete_checkpoints(run.path)
    more = (
        f"; `edgetrain run --resume {run.path} --budget LIMIT` continues from {saved[-1].name}"
        if saved
        else ""
    )
    return BudgetError(
        f"{exc} -- the weights after epoch {epochs} are in {path}, its metrics in "
        f"{run.path / RunDir.METRICS}{more}"
    )


def read_run_config(run_dir: str | Path) -> RunConfig:
    """The validated config a local run directory (``edgetrain run`` / ``demo``) was
    started with."""
    data = read_run_config_json(run_dir, COMMAND, unmarked_ok=True)
    path = Path(run_dir) / RunDir.CONFIG
    if not isinstance(data.get("config"), dict):
        raise ConfigError(
            f"{path} has no 'config' object as `edgetrain run` writes it; --resume takes a "
            "run directory made by `edgetrain run`"
        )
    return parse_config(data["config"], str(path))


def resume_local(
    run_dir: str | Path,
    *,
    budget: str | None = None,
    budget_method: str | None = None,
    on_epoch: Callable[[EpochMetrics], None] | None = None,
    on_step: Callable[[int, int], None] | None = None,
) -> LocalRunResult:
    """Continue the local run in ``run_dir`` from its newest checkpoint.

    ``budget`` / ``budget_method`` replace the budget section's limit / method for the
    epochs still to train (``edgetrain run --resume DIR --budget 0.3``); the rest of the
    config is the run's own.  The result's history holds every epoch of the run."""
    config = read_run_config(run_dir)
    if budget is not None or budget_method is not None:
        config = with_budget(config, limit=budget, method=budget_method)
    return run_local(config, on_epoch=on_epoch, on_step=on_step, resume_dir=run_dir)
