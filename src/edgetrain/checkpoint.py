"""Per-epoch training checkpoints: safetensors for tensors, JSON for the rest.

A checkpoint is a directory ``checkpoints/epoch-NNNN/`` with

* ``state.safetensors`` — ``model/<name>`` (the full model state, LoRA factors
  included), ``optim/<param>/<key>`` (optimizer tensors such as momentum buffers),
  ``rng/generator`` and ``rng/torch`` (torch RNG states as uint8 tensors) and
  ``rng/numpy`` (NumPy's MT19937 key);
* ``state.json`` — epoch, step, strategy, optimizer scalars and hyper-parameters,
  the Python RNG state and every epoch's metrics so far.

``state.json`` is written last, so a directory without it is an interrupted write
and is ignored. Loading checks names and shapes against the live model and
optimizer and raises :class:`~edgetrain.errors.ModelError` listing every mismatch
rather than loading part of it.
"""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from edgetrain.errors import ConfigError, ModelError
from edgetrain.runs import RunDir, _jsonable, load_into, load_state, note_checkpoint, save_state

CHECKPOINTS = "checkpoints"
TENSORS = "state.safetensors"
META = "state.json"


@dataclass
class Checkpoint:
    """Everything needed to continue training after ``epoch`` as if never stopped."""

    epoch: int
    step: int
    strategy: str
    metrics: list[dict[str, Any]]
    tensors: dict[str, torch.Tensor] = field(repr=False)
    meta: dict[str, Any] = field(repr=False)
    path: Path | None = None


def trainable_names(model: nn.Module) -> list[str]:
    """Names of parameters that train, in the order the optimizer receives them."""
    return [n for n, p in model.named_parameters() if p.requires_grad]


def save_checkpoint(
    root: str | Path,
    *,
    epoch: int,
    step: int,
    strategy: str,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    generator: torch.Generator,
    metrics: Sequence[dict[str, Any]],
    keep_last: int = 1,
) -> Path:
    """Write the checkpoint after ``epoch`` under ``root/checkpoints``; drop older ones."""
    base = Path(root) / CHECKPOINTS
    target = base / f"epoch-{epoch:04d}"
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)

    names = trainable_names(model)
    tensors: dict[str, torch.Tensor] = {f"model/{k}": v for k, v in model.state_dict().items()}
    opt_state = optimizer.state_dict()
    scalars: dict[str, dict[str, Any]] = {}
    for idx, state in opt_state["state"].items():
        name = names[idx]
        for key, value in state.items():
            if isinstance(value, torch.Tensor) and value.dim() > 0:
                tensors[f"optim/{name}/{key}"] = value
            elif isinstance(value, torch.Tensor):
                scalars.setdefault(name, {})[key] = {"tensor": value.item()}
            else:
                scalars.setdefault(name, {})[key] = value
    groups = [{k: v for k, v in g.items() if k != "params"} for g in opt_state["param_groups"]]
    group_sizes = [len(g["params"]) for g in opt_state["param_groups"]]
    tensors["rng/generator"] = generator.get_state()
    tensors["rng/torch"] = torch.get_rng_state()
    np_state = np.random.get_state()
    tensors["rng/numpy"] = torch.from_numpy(np.asarray(np_state[1], dtype=np.int64))
    py_state = random.getstate()
    save_state(target / TENSORS, tensors)
    meta = {
        "format": "edgetrain-checkpoint-1",
        "epoch": epoch,
        "step": step,
        "strategy": strategy,
        "trainable": names,
        "optimizer": {
            "class": type(optimizer).__name__,
            "param_groups": groups,
            "group_sizes": group_sizes,
            "scalars": scalars,
        },
        "rng": {
            "python": [py_state[0], list(py_state[1]), py_state[2]],
            "numpy": {
                "pos": int(np_state[2]),
                "has_gauss": int(np_state[3]),
                "cached": float(np_state[4]),
            },
        },
        "metrics": list(metrics),
    }
    tmp = target / (META + ".tmp")
    tmp.write_text(json.dumps(_jsonable(meta), indent=1, sort_keys=True) + "\n")
    tmp.replace(target / META)
    for old in complete_checkpoints(root)[:-keep_last]:
        shutil.rmtree(old)
    note_checkpoint(root, f"epoch {epoch}")  # Ctrl-C on the command line names it
    return target


def complete_checkpoints(root: str | Path) -> list[Path]:
    """Checkpoint directories under ``root`` whose write finished, oldest first."""
    base = Path(root) / CHECKPOINTS
    if not base.is_dir():
        return []
    return sorted(p for p in base.glob("epoch-*") if (p / META).is_file())


def latest_checkpoint(root: str | Path) -> Checkpoint | None:
    """Read the newest complete checkpoint under ``root`` (None if there is none)."""
    done = complete_checkpoints(root)
    return read_checkpoint(done[-1]) if done else None


def read_checkpoint(path: str | Path) -> Checkpoint:
    path = Path(path)
    try:
        meta = json.loads((path / META).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelError(f"checkpoint {path} has no readable {META} ({exc})") from exc
    if meta.get("format") != "edgetrain-checkpoint-1":
        raise ModelError(
            f"checkpoint {path} has format {meta.get('format')!r}; expected 'edgetrain-checkpoint-1'"
        )
    tensors = load_state(path / TENSORS)
    return Checkpoint(
        epoch=int(meta["epoch"]),
        step=int(meta["step"]),
        strategy=str(meta["strategy"]),
        metrics=list(meta["metrics"]),
        tensors=tensors,
        meta=meta,
        path=path,
    )


def restore_checkpoint(
    ckpt: Checkpoint,
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    generator: torch.Generator,
    strategy: str,
) -> None:
    """Load ``ckpt`` into live objects, or raise ModelError listing every mismatch.

    Checked before anything is loaded: the strategy, the trainable parameter names
    and, via :func:`edgetrain.runs.load_into`, every model tensor's name and shape,
    then every optimizer tensor's shape.
    """
    problems = []
    if ckpt.strategy != strategy:
        problems.append(f"strategy: checkpoint {ckpt.strategy!r} vs run {strategy!r}")
    names = trainable_names(model)
    saved = list(ckpt.meta["trainable"])
    if saved != names:
        only_ckpt = sorted(set(saved) - set(names))
        only_model = sorted(set(names) - set(saved))
        detail = []
        if only_ckpt:
            detail.append("trained in checkpoint only: " + ", ".join(only_ckpt))
        if only_model:
            detail.append("trained in model only: " + ", ".join(only_model))
        if not detail:
            detail.append("same names in a different order")
        problems.append("trainable parameters differ (" + "; ".join(detail) + ")")
    params = dict(model.named_parameters())
    for key, value in ckpt.tensors.items():
        if key.startswith("optim/"):
            pname = key[len("optim/") :].rsplit("/", 1)[0]
            if pname in params and tuple(value.shape) != tuple(params[pname].shape):
                problems.append(
                    f"optimizer state {key}: {tuple(value.shape)} vs parameter "
                    f"{tuple(params[pname].shape)}"
                )
    if ckpt.meta["optimizer"]["class"] != type(optimizer).__name__:
        problems.append(
            f"optimizer: checkpoint {ckpt.meta['optimizer']['class']} vs run "
            f"{type(optimizer).__name__}"
        )
    if problems:
        raise ModelError(
            f"checkpoint {ckpt.path} does not match this run -> " + " | ".join(problems)
        )
    model_state = {k[len("model/") :]: v for k, v in ckpt.tensors.items() if k.startswith("model/")}
    load_into(model, model_state)

    index = {n: i for i, n in enumerate(names)}
    state: dict[int, dict[str, Any]] = {}
    for key, value in ckpt.tensors.items():
        if key.startswith("optim/"):
            pname, skey = key[len("optim/") :].rsplit("/", 1)
            state.setdefault(index[pname], {})[skey] = value
    for pname, entries in ckpt.meta["optimizer"]["scalars"].items():
        for skey, value in entries.items():
            if isinstance(value, dict) and "tensor" in value:
                value = torch.tensor(value["tensor"])
            state.setdefault(index[pname], {})[skey] = value
    groups, start = [], 0
    for group, size in zip(
        ckpt.meta["optimizer"]["param_groups"], ckpt.meta["optimizer"]["group_sizes"], strict=True
    ):
        groups.append({**group, "params": list(range(start, start + size))})
        start += size
    optimizer.load_state_dict({"state": state, "param_groups": groups})

    generator.set_state(ckpt.tensors["rng/generator"])
    torch.set_rng_state(ckpt.tensors["rng/torch"])
    np_meta = ckpt.meta["rng"]["numpy"]
    np.random.set_state(
        (
            "MT19937",
            ckpt.tensors["rng/numpy"].numpy().astype(np.uint32),
            np_meta["pos"],
            np_meta["has_gauss"],
            np_meta["cached"],
        )
    )
    py = ckpt.meta["rng"]["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))


@dataclass
class Resumption:
    """A run directory being continued from its newest checkpoint (``edgetrain run
    --resume``, ``edgetrain pretrain --resume``), with its files as they were, so that a
    resume which trains nothing (a budget no plan reaches, a checkpoint that does not
    match the model) can leave the directory byte for byte unchanged (:meth:`undo`)."""

    run: RunDir
    checkpoint: Checkpoint
    config_text: str
    metrics_text: str

    @classmethod
    def open(cls, run_dir: str | Path, epochs: int) -> Resumption:
        """The newest checkpoint of ``run_dir`` (whose config.json the caller checked), or
        a ConfigError when there is none or the run already trained its ``epochs``."""
        run = RunDir(Path(run_dir))
        ckpt = latest_checkpoint(run.path)
        if ckpt is None:
            raise ConfigError(
                f"{run.path} holds no complete checkpoint to resume from (expected "
                f"{CHECKPOINTS}/epoch-NNNN/{META}, written after each checkpointed epoch; "
                "`edgetrain run` skips them with train.checkpoint_every 0); start the run again"
            )
        if ckpt.epoch >= epochs:
            raise ConfigError(
                f"{run.path}: its checkpoint is after epoch {ckpt.epoch} of {epochs}; the run "
                "is finished and there is nothing to resume"
            )
        metrics = run.path / RunDir.METRICS
        return cls(
            run,
            ckpt,
            (run.path / RunDir.CONFIG).read_text(),
            metrics.read_text() if metrics.is_file() else "",
        )

    def begin(self, config: dict[str, Any], event: dict[str, Any]) -> list[dict[str, Any]]:
        """Record the resume and return ``metrics.jsonl``'s records up to the checkpoint.

        config.json gets ``config``'s keys (the settings the run continues with) and an
        entry in its ``resumed`` list; metrics.jsonl drops what came after the checkpoint
        (the epochs a crash cut short, a torn last line), gains any checkpointed epoch it
        lacks and a ``resume`` event (``after_epoch`` and ``event``'s fields)."""
        k = self.checkpoint.epoch
        kept = [r for r in self.run.read_metrics(torn_tail=True) if _before(r, k)]
        logged = {r.get("epoch") for r in kept if r.get("event") == "epoch"}
        kept += [
            {"event": "epoch", **m} for m in self.checkpoint.metrics if m["epoch"] not in logged
        ]
        meta = json.loads(self.config_text)
        meta.update(config)
        meta.setdefault("resumed", []).append({"after_epoch": k, **event})
        self.run.write_config(meta)
        rows = [*kept, {"event": "resume", "after_epoch": k, **event}]
        _replace_text(
            self.run.path / RunDir.METRICS,
            "".join(json.dumps(_jsonable(r), sort_keys=True) + "\n" for r in rows),
        )
        return kept

    def undo(self) -> None:
        """Put config.json and metrics.jsonl back as they were before :meth:`begin`."""
        _replace_text(self.run.path / RunDir.CONFIG, self.config_text)
        _replace_text(self.run.path / RunDir.METRICS, self.metrics_text)


def _before(row: dict[str, Any], k: int) -> bool:
    """Whether a metrics.jsonl record belongs to a run's first ``k`` epochs: their
    ``epoch`` and ``budget`` records, the plans made before epoch ``k`` ended (a plan made
    after it is made again on resume), earlier resumes, records without an epoch."""
    event = row.get("event")
    at = row.get("after_epoch") if event == "resume" else row.get("epoch")
    if not isinstance(at, int):
        return True
    return at < k if event == "plan" else at <= k


def _replace_text(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
