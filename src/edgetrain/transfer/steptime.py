"""What one on-device training step costs: measured time on this CPU, counted FLOPs.

The device trains one sample at a time (TrainDeeploy Fig. 5 reports "runtime per
sample per step"), so the step measured here is batch 1: forward, loss, backward
and the optimizer update, timed with ``time.perf_counter`` over many steps after a
warm-up, reported as the median. It runs on a deep copy, so the measured model's
weights are never touched.
"""

from __future__ import annotations

import copy
import statistics
import time
from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from edgetrain.engine.trainer import make_optimizer
from edgetrain.errors import ConfigError


@dataclass(frozen=True)
class StepTiming:
    """Batch-1 training-step wall time on this machine, in milliseconds."""

    median_ms: float
    p10_ms: float
    p90_ms: float
    steps: int
    warmup: int
    threads: int

    def to_json(self) -> dict:
        return asdict(self)


def _sample(model: nn.Module, input_shape: tuple[int, ...], num_classes: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn((1, *input_shape), generator=g)
    y = torch.randint(0, num_classes, (1,), generator=g)
    return x, y


def measure_step_time(
    model: nn.Module,
    input_shape: tuple[int, ...],
    num_classes: int,
    *,
    optimizer: str = "sgd",
    lr: float = 0.01,
    warmup: int = 5,
    steps: int = 30,
    seed: int = 0,
) -> StepTiming:
    """Median wall time of a batch-1 training step (after ``warmup`` untimed steps)."""
    if steps < 1 or warmup < 0:
        raise ConfigError(f"step timing needs steps >= 1 and warmup >= 0 (got {steps}, {warmup})")
    work = copy.deepcopy(model)
    work.train()
    opt = make_optimizer(work.parameters(), optimizer, lr)
    x, y = _sample(work, input_shape, num_classes, seed)
    times = []
    for i in range(warmup + steps):
        began = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(work(x), y)
        loss.backward()
        opt.step()
        if i >= warmup:
            times.append((time.perf_counter() - began) * 1e3)
    times.sort()
    deciles = statistics.quantiles(times, n=10) if len(times) > 1 else [times[0]] * 9
    return StepTiming(
        median_ms=statistics.median(times),
        p10_ms=deciles[0],
        p90_ms=deciles[-1],
        steps=steps,
        warmup=warmup,
        threads=torch.get_num_threads(),
    )


_FLOPS_CACHE: dict[str, int] = {}


def _structure_key(model: nn.Module, input_shape: tuple[int, ...], num_classes: int) -> str:
    """Class, every parameter's name/shape/trainability and the input: what FLOPs depend on."""
    params = [(n, tuple(p.shape), p.requires_grad) for n, p in model.named_parameters()]
    return repr((type(model).__qualname__, params, tuple(input_shape), num_classes))


def count_train_flops(model: nn.Module, input_shape: tuple[int, ...], num_classes: int) -> int:
    """FLOPs of one batch-1 forward + backward, counted by ``torch.utils.flop_counter``.

    Autograd computes weight gradients only for parameters that train, so the count
    reflects the strategy (frozen layers cost forward FLOPs and, if anything before
    them trains, input-gradient FLOPs). Counted ops are matmuls and convolutions;
    element-wise ops are not counted (as in the paper's GEMM-dominated figures).
    Counts are cached per model structure (repeated seeds of one strategy share one).
    """
    key = _structure_key(model, input_shape, num_classes)
    if key in _FLOPS_CACHE:
        return _FLOPS_CACHE[key]
    work = copy.deepcopy(model)
    work.train()
    x, y = _sample(work, input_shape, num_classes, 0)
    counter = FlopCounterMode(display=False)
    with counter:
        loss = nn.functional.cross_entropy(work(x), y)
        if loss.requires_grad:
            loss.backward()
    _FLOPS_CACHE[key] = int(counter.get_total_flops())
    return _FLOPS_CACHE[key]
