"""Regenerate a leaf (or leaf chain) output in backward, and the measured cost of doing so.

The executor and the profiler share :func:`regenerate`, so that the cost the planner
ranks a regeneration by (eq. 5 denominator) is the time of the very code the executor
runs in backward: the chain's forwards under ``no_grad`` plus the snapshot / restore of
the leaves' buffers (BatchNorm running statistics must not move twice), not the leaf's
forward under autograd.

Measured costs are cached per process (:data:`_COSTS`): keyed by what the time depends
on (the leaves' types and hyper-parameters, the input's shape and dtype), so profiling
the same architecture again (benchmarks, tests, the plan service) reuses them.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

import torch
from torch import nn

T = TypeVar("T")

#: measured executor costs: key -> median process CPU time (s), or a dict of in-step
#: overheads (s) for :func:`.profile._in_situ_costs`
_COSTS: dict[Hashable, Any] = {}


def regenerate(
    mods: Sequence[nn.Module], fns: Sequence[Callable], arg: torch.Tensor
) -> torch.Tensor:
    """Run ``fns`` (the leaves' forwards, head first) on ``arg`` without autograd; buffers
    are restored afterwards."""
    buffers = [(b, b.detach().clone()) for m in mods for b in m.buffers()]
    with torch.no_grad():
        out = arg
        for fn in fns:
            out = fn(out)
    for b, old in buffers:
        b.data.copy_(old)
    return out


def median_cpu_s(fn: Callable[[], object], repeats: int) -> float:
    """Median process CPU time of ``fn()`` over ``repeats`` runs (after one warm-up)."""
    fn()
    times = []
    for _ in range(max(repeats, 1)):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return statistics.median(times)


def cached_cost(key: Hashable, measure: Callable[[], float]) -> float:
    """``measure()`` once per ``key`` in this process."""
    if key not in _COSTS:
        _COSTS[key] = measure()
    return _COSTS[key]


def cached_measure(key: Hashable, measure: Callable[[], T]) -> T:
    """``measure()`` once per ``key`` in this process (any measured value)."""
    if key not in _COSTS:
        _COSTS[key] = measure()
    return _COSTS[key]


def clear_cost_cache() -> None:
    """Forget every measured executor cost (e.g. after the machine's load changed)."""
    _COSTS.clear()


def signature(mods: Sequence[nn.Module], x: torch.Tensor) -> tuple:
    """What a leaf chain's time depends on: leaf types + hyper-parameters, input shape/dtype."""
    return (tuple(repr(m) for m in mods), tuple(x.shape), x.dtype, any(m.training for m in mods))


def regen_cost_s(mods: Sequence[nn.Module], x: torch.Tensor, repeats: int) -> float:
    """Measured (cached) time of :func:`regenerate` for this chain on an input like ``x``."""
    fns = [type(m).forward.__get__(m) for m in mods]
    arg = x.detach()
    return cached_cost(
        ("regen", *signature(mods, x)),
        lambda: median_cpu_s(lambda: regenerate(mods, fns, arg), repeats),
    )
