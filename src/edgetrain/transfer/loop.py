"""The fine-tuning loop: the protocol, a checkpoint after every epoch, exact resume.

Reuses the engine's pieces (optimizer factory, seeded batch order, evaluation,
cosine schedule) but owns the loop, because resuming needs the step counter, the
optimizer state and every RNG to continue exactly where they stopped: a resumed
run ends with the same metrics as one that was never interrupted.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from edgetrain.engine.trainer import batches, cosine_lr, evaluate, make_optimizer, train_step
from edgetrain.errors import ConfigError
from edgetrain.transfer.checkpoint import latest_checkpoint, restore_checkpoint, save_checkpoint
from edgetrain.transfer.protocol import Protocol

EpochCallback = Callable[[dict[str, Any]], None]


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
) -> list[dict[str, Any]]:
    """Train ``model`` on ``train`` by ``protocol``; return one metrics dict per epoch.

    With ``checkpoint_dir`` a checkpoint is written after every epoch, before
    ``on_epoch`` is called (so an exception raised there, or a crash, loses nothing).
    ``resume=True`` continues from the newest checkpoint in ``checkpoint_dir``.
    Metrics dicts hold epoch, step, lr, train_loss, train_accuracy, test_loss and
    test_accuracy (None on epochs the protocol does not evaluate) and seconds.
    """
    x_train, y_train = train
    x_test, y_test = test
    if len(x_train) == 0:
        raise ConfigError("the fine-tuning set is empty; raise --shots or check --data")
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
            loss, hits = train_step(model, opt, x_train[idx], y_train[idx])
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
            test_loss, test_acc = evaluate(model, x_test, y_test)
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
        if checkpoint_dir is not None:
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
