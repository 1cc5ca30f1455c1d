"""Pretrain on a source task, fine-tune on a few shots of a target task, resume.

``pretrain`` -> run dir with ``model.safetensors`` + ``card.json``.
``finetune`` -> run dir with ``config.json`` (everything needed to redo or resume
the run), ``metrics.jsonl``, per-epoch ``checkpoints/``, the artifact a device would
store and send (``adapter/`` in PEFT format for LoRA, ``weights.safetensors`` with
only the trained tensors otherwise) and ``result.json``.

A fine-tune is rebuilt from its config the same way on start, on resume and when
its artifact is re-loaded (:func:`load_finetuned`), so the three can never drift.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from edgetrain import models as models_mod
from edgetrain.engine.trainer import EpochMetrics, evaluate, train_classifier
from edgetrain.errors import ConfigError, DataError, EdgetrainError
from edgetrain.runs import RunDir, load_into, read_run_config_json, seed_everything
from edgetrain.transfer.fewshot import few_shot_split
from edgetrain.transfer.loop import build_prefix_cache, train_protocol
from edgetrain.transfer.protocol import Protocol, final_accuracy
from edgetrain.transfer.source import CARD, WEIGHTS, Card, DataRef, Pretrained, load_pretrained
from edgetrain.transfer.steptime import count_train_flops, measure_step_time

CONFIG_FORMAT = "edgetrain-finetune-1"
ADAPTER_DIR = "adapter"


# --------------------------------------------------------------------------- pretrain


@dataclass(frozen=True)
class PretrainSettings:
    """How the source model is trained (plain supervised training, then saved)."""

    epochs: int = 5
    batch_size: int = 32
    lr: float = 1e-3
    optimizer: str = "adam"
    schedule: str = "cosine"
    test_fraction: float = 0.2
    limit: int | None = None  # cap on training samples (stratified), for quick settings

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, data: Any, where: str) -> PretrainSettings:
        known = set(cls.__dataclass_fields__)
        if not isinstance(data, dict) or set(data) - known:
            extra = sorted(set(data) - known) if isinstance(data, dict) else data
            raise ConfigError(
                f"{where}: 'settings' must be an object with keys {', '.join(sorted(known))} "
                f"as `edgetrain pretrain` writes it (unexpected: {extra})"
            )
        return cls(**data)


@dataclass
class PretrainResult:
    run_dir: Path
    card: Card
    history: list[EpochMetrics]
    trained_param_bytes: int
    step_time_ms: float
    wall_s: float

    def to_json(self) -> dict[str, Any]:
        return {
            "run_dir": str(self.run_dir),
            "accuracy": self.card.accuracy,
            "trained_param_bytes": self.trained_param_bytes,
            "step_time_ms": self.step_time_ms,
            "model": self.card.model,
            "model_options": self.card.model_options,
            "data": self.card.data.to_json(),
            "classes": self.card.classes,
            "seed": self.card.seed,
            "epochs": len(self.history),
            "wall_s": self.wall_s,
        }


def _param_bytes(params) -> int:
    return sum(p.numel() * p.element_size() for p in params)


def pretrain(
    model: str,
    data: DataRef,
    *,
    model_options: dict[str, Any] | None = None,
    settings: PretrainSettings = PretrainSettings(),
    seed: int = 0,
    output_root: str | Path = "runs",
    name: str | None = None,
    on_epoch: Callable[[EpochMetrics], None] | None = None,
    on_step: Callable[[int, int], None] | None = None,
    resume_dir: str | Path | None = None,
) -> PretrainResult:
    """Train zoo ``model`` on ``data`` and save weights + card into a new run directory.

    A checkpoint is written after every epoch (:mod:`edgetrain.checkpoint`);
    ``resume_dir`` continues that run from its newest one (see :func:`resume_pretrain`,
    which reads the run's own settings) and ends as a run never interrupted."""
    from edgetrain.checkpoint import Resumption
    from edgetrain.engine.local import model_options_for
    from edgetrain.transfer.fewshot import _stratified_subsample

    began = time.perf_counter()
    resumed = Resumption.open(resume_dir, settings.epochs) if resume_dir is not None else None
    generator = seed_everything(seed)
    dataset = data.load()
    train_ds, test_ds = dataset.train_test_split(settings.test_fraction, seed=seed, stratify=True)
    if settings.limit is not None and settings.limit < len(train_ds):
        y = train_ds.y.numpy()
        keep = _stratified_subsample(
            y, np.arange(len(y)), settings.limit, np.random.default_rng([seed, 2])
        )
        train_ds = train_ds.subset(keep)
    options = model_options_for(model, dataset, dict(model_options or {}))
    net = models_mod.build(model, seed=seed, **options)
    _check_input(net, dataset, f"pretrain data {data.describe()!r}")
    if resumed is None:
        run = RunDir.unique(name or f"pretrain-{model}-{data.name}", output_root)
        run.write_config(
            {
                "command": "pretrain",
                "model": model,
                "model_options": options,
                "data": data.to_json(),
                "settings": settings.to_json(),
                "seed": seed,
            }
        )
    else:
        run = resumed.run
        resumed.begin({}, {})
    trained: list[int] = []

    def _log(m: EpochMetrics) -> None:
        trained.append(m.epoch)
        run.log_metrics({"event": "epoch", **m.to_dict()})
        if on_epoch is not None:
            on_epoch(m)

    try:
        history = train_classifier(
            net,
            train_ds.x,
            train_ds.y,
            test_ds.x,
            test_ds.y,
            epochs=settings.epochs,
            batch_size=settings.batch_size,
            lr=settings.lr,
            optimizer=settings.optimizer,
            schedule=settings.schedule,
            generator=generator,
            on_epoch=_log,
            on_step=on_step,
            checkpoint_dir=run.path,
            resume_from=resumed.checkpoint if resumed is not None else None,
        )
    except BaseException:
        if resumed is not None and not trained:  # e.g. a checkpoint that does not match
            resumed.undo()
        raise
    card = Card(
        model=model,
        model_options=options,
        data=data,
        classes=list(dataset.classes),
        input_shape=list(dataset.input_shape),
        seed=seed,
        accuracy=history[-1].test_accuracy,
        train={**settings.to_json(), "train_samples": len(train_ds), "test_samples": len(test_ds)},
    )
    run.save_model(net.state_dict(), metadata={"card": json.dumps(card.to_json())})
    run.write_json(CARD, card.to_json())
    timing = measure_step_time(net, tuple(dataset.input_shape), dataset.num_classes)
    result = PretrainResult(
        run_dir=run.path,
        card=card,
        history=history,
        trained_param_bytes=_param_bytes(net.parameters()),
        step_time_ms=timing.median_ms,
        wall_s=time.perf_counter() - began,
    )
    run.write_json("result.json", result.to_json())
    return result


def resume_pretrain(
    run_dir: str | Path,
    *,
    on_epoch: Callable[[EpochMetrics], None] | None = None,
    on_step: Callable[[int, int], None] | None = None,
) -> PretrainResult:
    """Continue the pretrain run in ``run_dir`` from its newest checkpoint, with its own
    settings (``edgetrain pretrain --resume RUN_DIR``)."""
    where = Path(run_dir)
    data = read_run_config_json(where, "pretrain")
    path = where / RunDir.CONFIG
    try:
        model, options, ref = data["model"], data["model_options"], data["data"]
        seed = int(data["seed"])
        ref = DataRef.from_json(ref)
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(
            f"{path} lacks a field `edgetrain pretrain` writes ({exc}); --resume takes a run "
            "directory made by `edgetrain pretrain`"
        ) from None
    return pretrain(
        model,
        ref,
        model_options=options,
        settings=PretrainSettings.from_json(data.get("settings"), str(path)),
        seed=seed,
        resume_dir=where,
        on_epoch=on_epoch,
        on_step=on_step,
    )


def _check_input(model: nn.Module, dataset, what: str) -> None:
    want = tuple(model.input_shape)
    got = tuple(dataset.input_shape)
    if want != got:
        hint = ""
        if len(want) == 3 and len(got) == 3 and want[0] == got[0]:
            hint = f" (for image data sets pass --data-opt size={want[-1]})"
        raise DataError(
            f"{what} has samples of shape {list(got)} but the model expects {list(want)}{hint}"
        )


# --------------------------------------------------------------------------- finetune


@dataclass(frozen=True)
class FinetuneConfig:
    """Everything that determines a fine-tune; saved as the run's ``config.json``."""

    source: str
    strategy: str
    data: DataRef
    shots: int = 50
    protocol: Protocol = Protocol()
    seed: int = 0
    test_size: int | None = None
    rank: int = 4
    alpha: float = 8.0
    head: str = "auto"  # auto | new | keep
    target: str | None = None  # SoC target for the plan's latency estimate
    timing_steps: int = 30
    plan: bool = True  # ask edgetrain.memory.plan_training for the target estimate
    cache_prefix: bool = True  # train the suffix on cached frozen-prefix activations (exact)
    checkpoint_every: int = 1  # epochs between checkpoints (the last epoch is always saved)

    def __post_init__(self) -> None:
        if self.head not in ("auto", "new", "keep"):
            raise ConfigError(f"--head must be one of auto, new, keep (got {self.head!r})")
        if self.shots < 1:
            raise ConfigError(f"--shots must be >= 1 (got {self.shots})")
        if self.checkpoint_every < 1:
            raise ConfigError(f"--checkpoint-every must be >= 1 (got {self.checkpoint_every})")
        if Path(self.source).exists():  # absolute, so --resume works from any directory
            object.__setattr__(self, "source", str(Path(self.source).resolve()))

    def to_json(self) -> dict[str, Any]:
        return {
            "format": CONFIG_FORMAT,
            "source": self.source,
            "strategy": self.strategy,
            "data": self.data.to_json(),
            "shots": self.shots,
            "protocol": self.protocol.to_json(),
            "seed": self.seed,
            "test_size": self.test_size,
            "rank": self.rank,
            "alpha": self.alpha,
            "head": self.head,
            "target": self.target,
            "timing_steps": self.timing_steps,
            "plan": self.plan,
            "cache_prefix": self.cache_prefix,
            "checkpoint_every": self.checkpoint_every,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str) -> FinetuneConfig:
        if data.get("format") != CONFIG_FORMAT:
            raise ConfigError(
                f"{where} is not an edgetrain fine-tune config (format {data.get('format')!r}, "
                f"expected {CONFIG_FORMAT!r}); --resume takes a directory made by `edgetrain finetune`"
            )
        return cls(
            source=data["source"],
            strategy=data["strategy"],
            data=DataRef.from_json(data["data"]),
            shots=int(data["shots"]),
            protocol=Protocol.from_json(data["protocol"]),
            seed=int(data["seed"]),
            test_size=data.get("test_size"),
            rank=int(data["rank"]),
            alpha=float(data["alpha"]),
            head=data["head"],
            target=data.get("target"),
            timing_steps=int(data.get("timing_steps", 30)),
            plan=bool(data.get("plan", True)),
            cache_prefix=bool(data.get("cache_prefix", True)),
            checkpoint_every=int(data.get("checkpoint_every", 1)),
        )


@dataclass
class Prepared:
    """A fine-tune set up and ready to train (same on start, resume and reload)."""

    config: FinetuneConfig
    pretrained: Pretrained
    model: nn.Module
    info: Any  # edgetrain.finetune.StrategyInfo
    train: Any  # Dataset
    test: Any  # Dataset
    new_head: bool
    no_adaptation_accuracy: float | None
    model_options: dict[str, Any]


def prepare(config: FinetuneConfig) -> Prepared:
    """Load the source, sample the shots, build the model and apply the strategy."""
    from edgetrain.finetune import apply_strategy

    seed_everything(config.seed)
    pre = load_pretrained(config.source)
    card = pre.card
    dataset = config.data.load()
    split = few_shot_split(dataset, config.shots, config.seed, config.test_size)
    same_classes = list(dataset.classes) == list(card.classes)
    if config.head == "keep" and dataset.num_classes != len(card.classes):
        raise ConfigError(
            f"--head keep needs the target to have the source's {len(card.classes)} classes; "
            f"{config.data.describe()!r} has {dataset.num_classes} (use --head new or auto)"
        )
    new_head = config.head == "new" or (config.head == "auto" and not same_classes)

    options = dict(card.model_options)
    if "num_classes" in options:
        options["num_classes"] = dataset.num_classes
    model = models_mod.build(card.model, seed=config.seed, **options)
    _check_input(model, dataset, f"target data {config.data.describe()!r}")
    state = dict(pre.state)
    no_adaptation = None
    if new_head:
        prefix = model.head + "."
        fresh = {k: v for k, v in model.state_dict().items() if k.startswith(prefix)}
        stale = [k for k in state if k.startswith(prefix)]
        for k in stale:
            del state[k]
        state.update(fresh)
    load_into(model, state)
    if not new_head:
        _, no_adaptation = evaluate(model, split.test.x, split.test.y)
    info = apply_strategy(
        model,
        config.strategy,
        rank=config.rank,
        alpha=config.alpha,
        seed=config.seed,
    )
    return Prepared(
        config=config,
        pretrained=pre,
        model=model,
        info=info,
        train=split.train,
        test=split.test,
        new_head=new_head,
        no_adaptation_accuracy=no_adaptation,
        model_options=options,
    )


@dataclass
class FinetuneResult:
    run_dir: Path
    strategy: str
    accuracy: float
    last_accuracy: float
    no_adaptation_accuracy: float | None
    trained_params: int
    trained_param_bytes: int
    step_time_ms: float
    step_time: dict[str, Any]
    flops_train_counted: int
    plan: dict[str, Any] | None
    plan_note: str | None
    history: list[dict[str, Any]]
    artifact: str
    artifact_bytes: int
    train_samples: int
    test_samples: int
    new_head: bool
    wall_s: float
    resumed_from_epoch: int | None = None
    prefix_cache: dict[str, Any] | None = None
    train_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def target_latency_ms(self) -> dict[str, Any] | None:
        return None if self.plan is None else self.plan.get("latency_ms")

    def to_json(self) -> dict[str, Any]:
        return {
            "run_dir": str(self.run_dir),
            "strategy": self.strategy,
            "accuracy": self.accuracy,
            "last_epoch_accuracy": self.last_accuracy,
            "no_adaptation_accuracy": self.no_adaptation_accuracy,
            "trained_params": self.trained_params,
            "trained_param_bytes": self.trained_param_bytes,
            "step_time_ms": self.step_time_ms,
            "step_time": self.step_time,
            "flops_train_counted": self.flops_train_counted,
            "target_latency_ms": self.target_latency_ms,
            "plan": self.plan,
            "plan_note": self.plan_note,
            "artifact": self.artifact,
            "artifact_bytes": self.artifact_bytes,
            "train_samples": self.train_samples,
            "test_samples": self.test_samples,
            "new_head": self.new_head,
            "epochs": len(self.history),
            "resumed_from_epoch": self.resumed_from_epoch,
            "prefix_cache": self.prefix_cache,
            "train_s": self.train_s,
            "wall_s": self.wall_s,
        }


def _dir_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def save_device_artifact(prep: Prepared, run_path: Path) -> Path:
    """Store what a device keeps and sends: only the tensors that trained.

    ``adapter/`` in PEFT's layout (``adapter_config.json`` + ``adapter_model.safetensors``):
    LoRA factors plus the trained head for ``lora-k``; for ``lp``/``ft-k``/``full`` the
    same layout holds exactly the changed weights (``peft_type: null``).
    """
    from edgetrain.finetune import save_adapter

    return save_adapter(prep.model, run_path / ADAPTER_DIR, prep.info)


def load_device_artifact(prep: Prepared, run_path: Path) -> nn.Module:
    """Load the stored artifact into ``prep.model``; any mismatch is a listed ModelError."""
    from edgetrain.finetune import load_adapter

    load_adapter(prep.model, Path(run_path) / ADAPTER_DIR)
    return prep.model


def check_target(target: str) -> None:
    """Fail before training, not after, when ``--target`` names no known SoC."""
    try:
        from edgetrain.devices import get_target
    except ImportError as exc:
        raise ConfigError(
            f"--target {target!r} needs edgetrain.devices, which is not available ({exc})"
        ) from None
    get_target(target)


def _plan(prep: Prepared) -> tuple[dict[str, Any] | None, str | None]:
    """The memory/latency plan's estimate for the target SoC, when the planner is available."""
    kwargs: dict[str, Any] = {
        "batch": 1,
        "optimizer": prep.config.protocol.optimizer,
        "seed": prep.config.seed,
        "model_options": prep.model_options,
    }
    if prep.config.target is not None:
        kwargs["target"] = prep.config.target
    try:
        from edgetrain.memory import plan_training

        plan = plan_training(prep.pretrained.card.model, prep.config.strategy, **kwargs)
    except ImportError as exc:
        return None, f"planner unavailable ({exc})"
    except EdgetrainError as exc:
        return None, f"planner could not plan this model/strategy: {exc}"
    except Exception as exc:  # the plan is an optional side estimate; never lose the run for it
        return None, f"planner failed ({type(exc).__name__}: {exc})"
    return plan.to_json(), None


def run_finetune(
    config: FinetuneConfig,
    *,
    output_root: str | Path = "runs",
    name: str | None = None,
    resume_dir: str | Path | None = None,
    on_epoch: Callable[[dict[str, Any]], None] | None = None,
    on_step: Callable[[int, int], None] | None = None,
) -> FinetuneResult:
    """Fine-tune by ``config`` into a new run directory, or continue ``resume_dir``."""
    began = time.perf_counter()
    if config.target is not None:
        check_target(config.target)
    prep = prepare(config)
    if resume_dir is not None:
        run = RunDir(Path(resume_dir))
    else:
        strategy = str(config.strategy).lower()
        run = RunDir.unique(name or f"finetune-{strategy}-{config.data.name}", output_root)
        run.write_config(config.to_json())
    resumed_from = None
    if resume_dir is not None:
        from edgetrain.checkpoint import latest_checkpoint

        ckpt = latest_checkpoint(run.path)
        if ckpt is None:
            raise ConfigError(
                f"{run.path} holds no complete checkpoint to resume from "
                "(expected checkpoints/epoch-NNNN/state.json); start the fine-tune again"
            )
        resumed_from = ckpt.epoch
        # metrics.jsonl is rebuilt from the checkpoint, so no epoch appears twice
        (run.path / RunDir.METRICS).unlink(missing_ok=True)
        for record in ckpt.metrics:
            run.log_metrics({"event": "epoch", **record})

    def _log(record: dict[str, Any]) -> None:
        run.log_metrics({"event": "epoch", **record})
        if on_epoch is not None:
            on_epoch(record)

    # The frozen prefix holds the source's weights (a checkpoint restores the same values),
    # so its activations can be computed once, before any resume.
    cache, prefix_plan = build_prefix_cache(
        prep.model, prep.train.x, prep.test.x, enabled=config.cache_prefix
    )
    generator = torch.Generator().manual_seed(config.seed)
    train_began = time.perf_counter()
    history = train_protocol(
        prep.model,
        (prep.train.x, prep.train.y),
        (prep.test.x, prep.test.y),
        config.protocol,
        generator,
        strategy=str(config.strategy).lower(),
        checkpoint_dir=run.path,
        resume=resume_dir is not None,
        on_epoch=_log,
        on_step=on_step,
        cache=cache,
        checkpoint_every=config.checkpoint_every,
    )
    train_s = time.perf_counter() - train_began
    accuracy = final_accuracy(history, config.protocol.average_last)
    artifact = save_device_artifact(prep, run.path)
    input_shape = tuple(prep.train.input_shape)
    timing = measure_step_time(
        prep.model,
        input_shape,
        prep.train.num_classes,
        optimizer=config.protocol.optimizer,
        steps=config.timing_steps,
        seed=config.seed,
    )
    flops = count_train_flops(prep.model, input_shape, prep.train.num_classes)
    plan, note = _plan(prep) if config.plan else (None, "not requested (plan disabled)")
    result = FinetuneResult(
        run_dir=run.path,
        strategy=str(config.strategy).lower(),
        accuracy=accuracy,
        last_accuracy=float(history[-1]["test_accuracy"]),
        no_adaptation_accuracy=prep.no_adaptation_accuracy,
        trained_params=int(prep.info.trainable_params),
        trained_param_bytes=int(prep.info.trainable_bytes),
        step_time_ms=timing.median_ms,
        step_time=timing.to_json(),
        flops_train_counted=flops,
        plan=plan,
        plan_note=note,
        history=history,
        artifact=str(artifact),
        artifact_bytes=_dir_bytes(artifact),
        train_samples=len(prep.train),
        test_samples=len(prep.test),
        new_head=prep.new_head,
        wall_s=time.perf_counter() - began,
        resumed_from_epoch=resumed_from,
        prefix_cache=prefix_plan.to_json(),
        train_s=train_s,
    )
    run.write_json("result.json", result.to_json())
    return result


def read_config(run_dir: str | Path) -> FinetuneConfig:
    path = Path(run_dir) / RunDir.CONFIG
    if not path.is_file():
        raise ConfigError(
            f"{run_dir} is not a fine-tune run directory (no {RunDir.CONFIG}); "
            "--resume takes a directory made by `edgetrain finetune`"
        )
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not valid JSON ({exc})") from exc
    return FinetuneConfig.from_json(data, str(path))


def resume_finetune(run_dir: str | Path, **kwargs: Any) -> FinetuneResult:
    """Continue an interrupted fine-tune from its newest checkpoint."""
    return run_finetune(read_config(run_dir), resume_dir=run_dir, **kwargs)


def load_finetuned(run_dir: str | Path) -> tuple[nn.Module, Prepared]:
    """Rebuild a finished fine-tune from its source model and stored device artifact."""
    prep = prepare(read_config(run_dir))
    load_device_artifact(prep, Path(run_dir))
    prep.model.eval()
    return prep.model, prep


__all__ = [
    "ADAPTER_DIR",
    "FinetuneConfig",
    "FinetuneResult",
    "PretrainResult",
    "PretrainSettings",
    "Prepared",
    "WEIGHTS",
    "load_device_artifact",
    "load_finetuned",
    "prepare",
    "pretrain",
    "read_config",
    "resume_finetune",
    "resume_pretrain",
    "run_finetune",
    "save_device_artifact",
]
