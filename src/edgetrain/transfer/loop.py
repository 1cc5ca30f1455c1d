"""The fine-tuning loop: the protocol, a checkpoint after every epoch, exact resume.

Reuses the engine's pieces (optimizer factory, seeded batch order, evaluation,
cosine schedule, :mod:`edgetrain.checkpoint`, as
:func:`edgetrain.engine.trainer.train_classifier` does) but owns the loop, because the
protocol evaluates only some epochs (the averaged last ones, every ``eval_every``-th) and
may step the trained suffix on cached prefix activations.  A resumed run ends with the
same metrics as one that was never interrupted.

With a :class:`PrefixCache` (see :mod:`edgetrain.transfer.prefix`) the steps run the
trained suffix on cached frozen-prefix activations instead of the whole model on raw
samples; batch order, schedule, losses and updates are the same.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from edgetrain.checkpoint import latest_checkpoint, restore_checkpoint, save_checkpoint
from edgetrain.engine.trainer import batches, cosine_lr, evaluate, make_optimizer, train_step
from edgetrain.errors import ConfigError
from edgetrain.transfer.prefix import CachedFeatures, PrefixPlan, PrefixSplit, cache_prefix
from edgetrain.transfer.protocol import Protocol

EpochCallback = Callable[[dict[str, Any]], None]

EVAL_BATCH = 256  # as edgetrain.engine.trainer.evaluate


@dataclass
class PrefixCache:
    """The model split at its frozen prefix and the prefix outputs of train and test."""

    split: PrefixSplit
    train: CachedFeatures
    test: CachedFeatures


def cached_step(
    suffix: nn.Module, opt: torch.optim.Optimizer, inputs: tuple[torch.Tensor, ...], yb
) -> tuple[float, int]:
    """:func:`edgetrain.engine.trainer.train_step` on cached prefix activations."""
    return train_step(suffix, opt, tuple(inputs), yb)


def cached_evaluate(
    model: nn.Module, suffix: nn.Module, feats: CachedFeatures, y: torch.Tensor
) -> tuple[float, float]:
    """:func:`edgetrain.engine.trainer.evaluate` on cached prefix activations."""
    # model.eval() covers the suffix too: it shares the model's modules.
    return evaluate(model, feats, y, EVAL_BATCH, forward=suffix)


def train_protocol(
    model: nn.Module,
    train: tuple[torch.Tensor, torch.Tensor],
    test: tuple[torch.Tensor, torch.Tensor],
    protocol: Protocol,
    generator: torch.Generator,
    *,
    strategy: str = "full",
    checkpoint_dir: str | Path | None = None,
    resume: bool = False,
    on_epoch: EpochCallback | None = None,
    on_step: Callable[[int, int], None] | None = None,
    cache: PrefixCache | None = None,
    checkpoint_every: int = 1,
) -> list[dict[str, Any]]:
    """Train ``model`` on ``train`` by ``protocol``; return one metrics dict per epoch.

    With ``checkpoint_dir`` a checkpoint is written after every ``checkpoint_every``-th
    epoch and the last, before ``on_epoch`` is called (so an exception raised there, or
    a crash, loses at most the epochs since the last checkpoint).
    ``resume=True`` continues from the newest checkpoint in ``checkpoint_dir``.
    Metrics dicts hold epoch, step, lr, train_loss, train_accuracy, test_loss and
    test_accuracy (None on epochs the protocol does not evaluate) and seconds.
    ``cache`` (from :func:`edgetrain.transfer.prefix.cache_prefix` on these very
    ``train``/``test`` tensors) trains the suffix on cached prefix activations.
    """
    x_train, y_train = train
    x_test, y_test = test
    if len(x_train) == 0:
        raise ConfigError("the fine-tuning set is empty; raise --shots or check --data")
    if checkpoint_every < 1:
        raise ConfigError(f"checkpoint_every must be >= 1 (got {checkpoint_every})")
    if cache is not None and (len(cache.train) != len(x_train) or len(cache.test) != len(x_test)):
        raise ConfigError(
            f"prefix cache rows ({len(cache.train)} train, {len(cache.test)} test) do not match "
            f"the data ({len(x_train)} train, {len(x_test)} test); rebuild it with cache_prefix"
        )
    opt = make_optimizer(
        model.parameters(),
        protocol.optimizer,
        protocol.lr,
        protocol.momentum,
        protocol.weight_decay,
    )
    steps_per_epoch = math.ceil(len(x_train) / protocol.batch_size)
    total_steps = protocol.epochs * steps_per_epoch
    history: list[dict[str, Any]] = []
    start_epoch, step = 1, 0
    if resume:
        if checkpoint_dir is None:
            raise ConfigError("resume needs the run directory that holds the checkpoints")
        ckpt = latest_checkpoint(checkpoint_dir)
        if ckpt is None:
            raise ConfigError(
                f"{checkpoint_dir} holds no complete checkpoint to resume from "
                "(expected checkpoints/epoch-NNNN/state.json)"
            )
        restore_checkpoint(ckpt, model=model, optimizer=opt, generator=generator, strategy=strategy)
        history = list(ckpt.metrics)
        start_epoch, step = ckpt.epoch + 1, ckpt.step

    for epoch in range(start_epoch, protocol.epochs + 1):
        model.train()
        began = time.perf_counter()
        loss_sum, correct, seen = 0.0, 0, 0
        for idx in batches(len(x_train), protocol.batch_size, generator):
            lr = (
                cosine_lr(protocol.lr, protocol.final_lr, step, total_steps)
                if protocol.schedule == "cosine"
                else protocol.lr
            )
            for group in opt.param_groups:
                group["lr"] = lr
            if cache is None:
                loss, hits = train_step(model, opt, x_train[idx], y_train[idx])
            else:
                loss, hits = cached_step(cache.split.suffix, opt, cache.train[idx], y_train[idx])
            if not math.isfinite(loss):
                raise ConfigError(
                    f"fine-tuning diverged at epoch {epoch} (loss {loss}); "
                    f"lower --lr (now {protocol.lr})"
                )
            loss_sum += loss * len(idx)
            correct += hits
            seen += len(idx)
            step += 1
            if on_step is not None:
                on_step(step, total_steps)
        test_loss = test_acc = None
        if protocol.evaluates(epoch):
            if cache is None:
                test_loss, test_acc = evaluate(model, x_test, y_test, batch_size=EVAL_BATCH)
            else:
                test_loss, test_acc = cached_evaluate(model, cache.split.suffix, cache.test, y_test)
        record = {
            "epoch": epoch,
            "step": step,
            "lr": opt.param_groups[0]["lr"],
            "train_loss": loss_sum / seen,
            "train_accuracy": correct / seen,
            "test_loss": test_loss,
            "test_accuracy": test_acc,
            "seconds": time.perf_counter() - began,
        }
        history.append(record)
        if checkpoint_dir is not None and (
            epoch % checkpoint_every == 0 or epoch == protocol.epochs
        ):
            save_checkpoint(
                checkpoint_dir,
                epoch=epoch,
                step=step,
                strategy=strategy,
                model=model,
                optimizer=opt,
                generator=generator,
                metrics=history,
            )
        if on_epoch is not None:
            on_epoch(record)
    return history


def build_prefix_cache(
    model: nn.Module, x_train: torch.Tensor, x_test: torch.Tensor, *, enabled: bool = True
) -> tuple[PrefixCache | None, PrefixPlan]:
    """Cache ``model``'s frozen prefix over train and test, or say why not (the plan)."""
    split, feats, plan = cache_prefix(model, [x_train, x_test], enabled=enabled)
    if split is None or feats is None:
        return None, plan
    return PrefixCache(split, feats[0], feats[1]), plan
