"""Plain local training: the loop every later stage (budgets, federated clients,
decentralized devices) reuses.

Batches are drawn with an explicit ``torch.Generator`` so the same seed gives the same
metrics; no DataLoader worker processes (the targets are single devices).
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

from edgetrain.checkpoint import Checkpoint, restore_checkpoint, save_checkpoint
from edgetrain.errors import ConfigError


@dataclass(frozen=True)
class EpochMetrics:
    epoch: int
    train_loss: float
    train_accuracy: float
    test_loss: float
    test_accuracy: float
    lr: float
    seconds: float

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> EpochMetrics:
        """The metrics of :meth:`to_dict` (a checkpoint's record); a non-finite loss,
        which JSON holds as null, comes back as NaN."""
        values = {f.name: row[f.name] for f in fields(cls)}
        return cls(
            **{
                k: int(v) if k == "epoch" else float("nan") if v is None else float(v)
                for k, v in values.items()
            }
        )


class Stepper(Protocol):
    """Runs the training steps instead of :func:`train_step` (e.g. under a memory budget:
    :class:`edgetrain.engine.budget.train.BudgetedTraining`)."""

    def begin_epoch(self, epoch: int, steps: int) -> None: ...

    def step(
        self, model: nn.Module, opt: torch.optim.Optimizer, xb: torch.Tensor, yb: torch.Tensor
    ) -> tuple[float, int]: ...

    def end_epoch(self, epoch: int) -> Any: ...

    def close(self) -> None: ...


def make_optimizer(
    params,
    name: str,
    lr: float,
    momentum: float = 0.9,
    weight_decay: float = 0.0,
) -> torch.optim.Optimizer:
    """Build one of the optimizers every stage supports: sgd, sgd-momentum, adam."""
    params = [p for p in params if p.requires_grad]
    if not params:
        raise ConfigError("no trainable parameters: the fine-tuning strategy froze everything")
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, weight_decay=weight_decay)
    if name == "sgd-momentum":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    raise ConfigError(f"unknown optimizer {name!r}; accepted: sgd, sgd-momentum, adam")


def batches(
    n: int, batch_size: int, generator: torch.Generator | None, shuffle: bool = True
) -> Iterator[torch.Tensor]:
    """Index batches over ``range(n)``; shuffled with ``generator`` when asked."""
    order = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
    for start in range(0, n, batch_size):
        yield order[start : start + batch_size]


def draws_one_sample_batch(n: int, batch_size: int, steps: int | None = None) -> bool:
    """Whether :func:`batches`, cycled for ``steps`` steps over ``n`` samples (``None``: whole
    epochs), draws a batch of one sample: each epoch ends with ``n % batch_size`` samples,
    reached only at the epoch's ``ceil(n / batch_size)``-th step."""
    if n <= 0:
        return False
    if batch_size == 1:
        return True
    return n % batch_size == 1 and (steps is None or steps >= math.ceil(n / batch_size))


def check_one_sample_batches(
    model: nn.Module,
    sample: torch.Tensor,
    work: Sequence[tuple[int, int, int | None]],
    where: str,
) -> None:
    """Raise :class:`ConfigError` before training if a batch of one sample would fail.

    BatchNorm cannot train on one sample where it has one value per channel (a flat feature,
    or a 1 x 1 map): PyTorch raises a bare ``ValueError`` mid-run. ``work`` holds one
    ``(samples, batch_size, steps)`` per holder (client or device; ``steps`` None: whole
    epochs), ``sample`` one input row, ``where`` names the holders in the message (plural, with
    their indices listed; a single holder is named by ``where`` alone). A copy of the model is
    probed, so its running statistics do not move.
    """
    if not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules()):
        return
    ones = [i for i, (n, b, steps) in enumerate(work) if draws_one_sample_batch(n, b, steps)]
    if not ones:
        return
    probe = copy.deepcopy(model).train()
    try:
        probe(sample[:1])
    except ValueError as exc:
        if "more than 1 value per channel" not in str(exc):
            raise
        listed = ", ".join(str(i) for i in ones[:8]) + (" ..." if len(ones) > 8 else "")
        on = f"{len(ones)} {where} ({listed})" if len(work) > 1 else where
        raise ConfigError(
            f"the batch size leaves a batch of one sample on {on}, "
            f"and the model's BatchNorm cannot train on one sample ({exc}); choose a batch "
            "size that leaves no batch of one (n % batch_size != 1 where the last batch is "
            "reached), or a model without batch statistics over a single value per channel"
        ) from None


@torch.no_grad()
def evaluate(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    batch_size: int = 256,
    loss_fn: Callable = nn.functional.cross_entropy,
    forward: Callable | None = None,
) -> tuple[float, float]:
    """Mean loss and accuracy of a classifier on (x, y).

    ``model`` is put in eval mode for the pass; ``forward`` (default: ``model``) computes the
    logits, e.g. the trainable suffix of a model fed cached activations. When ``x[idx]`` is a
    tuple it is unpacked into ``forward``'s positional inputs.
    """
    run = model if forward is None else forward
    was_training = model.training
    model.eval()
    total_loss, correct = 0.0, 0
    for idx in batches(len(x), batch_size, None, shuffle=False):
        xb = x[idx]
        out = run(*xb) if isinstance(xb, tuple) else run(xb)
        total_loss += float(loss_fn(out, y[idx], reduction="sum"))
        correct += int((out.argmax(dim=1) == y[idx]).sum())
    model.train(was_training)
    n = max(len(y), 1)
    return total_loss / n, correct / n


def train_step(
    model: nn.Module,
    opt: torch.optim.Optimizer,
    xb: torch.Tensor | tuple[torch.Tensor, ...],
    yb: torch.Tensor,
) -> tuple[float, int]:
    """One optimizer step on cross-entropy; return (batch loss, correct predictions).

    ``xb`` is the batch, or a tuple of the model's positional inputs (e.g. cached
    activations fed to the trainable suffix of a fine-tuned model).
    A non-finite loss is returned without stepping, so the caller can name what to change.
    """
    opt.zero_grad(set_to_none=True)
    out = model(*xb) if isinstance(xb, tuple) else model(xb)
    loss = nn.functional.cross_entropy(out, yb)
    value = float(loss.detach())
    if not math.isfinite(value):
        return value, 0
    loss.backward()
    opt.step()
    return value, int((out.detach().argmax(1) == yb).sum())


def cosine_lr(base_lr: float, final_lr: float, step: int, total: int) -> float:
    """Cosine annealing from ``base_lr`` to ``final_lr`` over ``total`` steps."""
    if total <= 1:
        return base_lr
    t = min(step, total - 1) / (total - 1)
    return final_lr + 0.5 * (base_lr - final_lr) * (1 + math.cos(math.pi * t))


def train_classifier(
    model: nn.Module,
    x_train: torch.Tensor,
    y_train: torch.Tensor,
    x_test: torch.Tensor,
    y_test: torch.Tensor,
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    optimizer: str = "adam",
    momentum: float = 0.9,
    weight_decay: float = 0.0,
    schedule: str = "constant",
    final_lr: float | None = None,
    generator: torch.Generator | None = None,
    on_epoch: Callable[[EpochMetrics], None] | None = None,
    on_step: Callable[[int, int], None] | None = None,
    stepper: Stepper | None = None,
    checkpoint_dir: str | Path | None = None,
    checkpoint_every: int = 1,
    resume_from: Checkpoint | None = None,
) -> list[EpochMetrics]:
    """Train with cross-entropy; return one :class:`EpochMetrics` per epoch.

    ``on_step(done, total)`` reports progress in steps; ``on_epoch`` receives each
    epoch's metrics as soon as they are known (for metrics.jsonl and progress bars).
    ``stepper``: runs every step instead of :func:`train_step`; its ``close`` before each
    evaluation and at the end (also on an error), its ``end_epoch`` after ``on_epoch``.

    ``checkpoint_dir``: after every ``checkpoint_every``-th epoch and the last, the
    model, the optimizer's state, the step and every RNG are written there
    (:mod:`edgetrain.checkpoint`), before ``on_epoch`` is called, so a crash loses at most
    the epochs since; ``checkpoint_every=0`` writes none.  ``resume_from`` (e.g.
    :func:`edgetrain.checkpoint.latest_checkpoint` of a run directory) continues after its
    epoch: the run ends with the same metrics and weights as one never interrupted, and
    the returned history holds the checkpoint's epochs too.
    """
    if checkpoint_every < 0:
        raise ConfigError(f"checkpoint_every must be >= 0 (got {checkpoint_every}); 0 writes none")
    # without a generator the batch order comes from torch's global RNG, which a
    # checkpoint holds too; the file format keeps a generator state either way
    rng = generator if generator is not None else torch.Generator()
    with contextlib.ExitStack() as cleanup:
        if stepper is not None:
            cleanup.callback(stepper.close)
        if len(x_train) == 0:
            raise ConfigError("the training split is empty; lower test_fraction or add data")
        check_one_sample_batches(
            model, x_train, [(len(x_train), batch_size, None)], "the training split"
        )
        opt = make_optimizer(model.parameters(), optimizer, lr, momentum, weight_decay)
        steps_per_epoch = math.ceil(len(x_train) / batch_size)
        total_steps = epochs * steps_per_epoch
        final = final_lr if final_lr is not None else lr * 0.05
        history: list[EpochMetrics] = []
        step, first = 0, 1
        if resume_from is not None:
            ckpt = resume_from
            if ckpt.epoch >= epochs:
                raise ConfigError(
                    f"checkpoint {ckpt.path} is after epoch {ckpt.epoch} of {epochs}: the run "
                    "is finished and there is nothing to resume"
                )
            restore_checkpoint(ckpt, model=model, optimizer=opt, generator=rng, strategy="full")
            history = [EpochMetrics.from_dict(m) for m in ckpt.metrics]
            step, first = ckpt.step, ckpt.epoch + 1
        for epoch in range(first, epochs + 1):
            model.train()
            start = time.perf_counter()
            loss_sum, correct, seen = 0.0, 0, 0
            if stepper is not None:
                stepper.begin_epoch(epoch, steps_per_epoch)
            for idx in batches(len(x_train), batch_size, generator):
                if schedule == "cosine":
                    for group in opt.param_groups:
                        group["lr"] = cosine_lr(lr, final, step, total_steps)
                if stepper is not None:
                    loss, hits = stepper.step(model, opt, x_train[idx], y_train[idx])
                else:
                    loss, hits = train_step(model, opt, x_train[idx], y_train[idx])
                if not math.isfinite(loss):
                    raise ConfigError(
                        f"training diverged at epoch {epoch} (loss {loss}); lower train.lr (now {lr})"
                    )
                loss_sum += loss * len(idx)
                correct += hits
                seen += len(idx)
                step += 1
                if on_step is not None:
                    on_step(step, total_steps)
            if stepper is not None:
                stepper.close()  # evaluate the bare model
            test_loss, test_acc = evaluate(model, x_test, y_test)
            metrics = EpochMetrics(
                epoch=epoch,
                train_loss=loss_sum / seen,
                train_accuracy=correct / seen,
                test_loss=test_loss,
                test_accuracy=test_acc,
                lr=opt.param_groups[0]["lr"],
                seconds=time.perf_counter() - start,
            )
            history.append(metrics)
            if (
                checkpoint_dir is not None
                and checkpoint_every
                and (epoch % checkpoint_every == 0 or epoch == epochs)
            ):
                save_checkpoint(
                    checkpoint_dir,
                    epoch=epoch,
                    step=step,
                    strategy="full",
                    model=model,
                    optimizer=opt,
                    generator=rng,
                    metrics=[m.to_dict() for m in history],
                )
            if on_epoch is not None:
                on_epoch(metrics)
            if stepper is not None:
                stepper.end_epoch(epoch)
        return history
