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


#: (dtype, dims, channels-last) -> whether :func:`_affine` reproduces this machine's
#: training-mode BatchNorm output bit for bit (:func:`_affine_exact`)
_EXACT: dict[tuple, bool] = {}


def batchnorm_stats(mod: nn.Module, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The batch mean and inverse std a training-mode BatchNorm ``mod`` computed for
    ``out`` (what its autograd node keeps for backward anyway), or ``None``."""
    if not isinstance(mod, nn.modules.batchnorm._BatchNorm) or out.dim() < 2:
        return None
    gf = out.grad_fn
    if type(gf).__name__ != "NativeBatchNormBackward0":
        return None
    try:
        mean, invstd = gf._saved_result1, gf._saved_result2
    except (AttributeError, RuntimeError):
        return None
    c = out.shape[1]
    if mean.shape != (c,) or invstd.shape != (c,) or mean.dtype != out.dtype:
        return None  # eval mode (empty statistics) or another kernel's layout
    return mean, invstd


def _affine(
    bn: nn.Module, x: torch.Tensor, mean: torch.Tensor, invstd: torch.Tensor
) -> torch.Tensor:
    """BatchNorm's output from its batch statistics in one pass over ``x``, as ATen's CPU
    kernel computes it: ``alpha = invstd * w``, ``beta = fma(-mean, alpha, b)``,
    ``out = fma(x, alpha, beta)`` (``addcmul`` is that fused multiply-add)."""
    alpha = invstd if bn.weight is None else invstd * bn.weight.detach()
    if bn.bias is None:
        beta = (mean * alpha).neg_()
    else:
        beta = torch.addcmul(bn.bias.detach(), mean, alpha, value=-1)
    shape = (1, x.shape[1]) + (1,) * (x.dim() - 2)
    return torch.addcmul(beta.view(shape), x, alpha.view(shape))


def _affine_exact(x: torch.Tensor) -> bool:
    """Whether :func:`_affine` equals this build's BatchNorm kernel bit for bit for
    inputs like ``x`` (dtype, rank, memory format); probed once per process on a small
    random input (its own generator: the global RNG does not move).  Only contiguous
    and channels-last inputs: a strided one takes another path of the kernel (a
    transposed (B, C, L) input differs from the fused multiply-add in the last bit)."""
    cl = x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last)
    if not (cl or x.is_contiguous()):
        return False  # another kernel path (e.g. a transposed input): not probed
    key = (x.dtype, x.dim(), cl)
    if key not in _EXACT:
        ok = x.dtype in (torch.float32, torch.float64) and x.device.type == "cpu"
        if ok:
            gen = torch.Generator().manual_seed(0)
            shape = (3, 19, 5, 7, 2)[: x.dim()] if x.dim() > 2 else (37, 19)
            probe = torch.randn(shape, generator=gen, dtype=x.dtype) * 3 + 1
            if cl:
                probe = probe.contiguous(memory_format=torch.channels_last)
            w = torch.rand(19, generator=gen, dtype=x.dtype) + 0.5
            b = torch.randn(19, generator=gen, dtype=x.dtype)
            bn = nn.BatchNorm1d(19, dtype=x.dtype)
            with torch.no_grad():
                bn.weight.copy_(w)
                bn.bias.copy_(b)
                out, mean, invstd = torch.native_batch_norm(
                    probe, w, b, torch.zeros(19, dtype=x.dtype), torch.ones(19, dtype=x.dtype),
                    True, 0.1, 1e-5,
                )  # fmt: skip
                mine = _affine(bn, probe, mean, invstd)
            ok = torch.equal(mine, out) and mine.stride() == out.stride()
        _EXACT[key] = ok
    return _EXACT[key]


def _clamp_(mod: nn.Module) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """A Hardtanh-family tail applied in place to a fresh tensor (same values as its
    forward), or ``None``."""
    if type(mod) in (nn.Hardtanh, nn.ReLU6):
        lo, hi = float(mod.min_val), float(mod.max_val)
        return lambda t: torch.nn.functional.hardtanh_(t, lo, hi)
    if type(mod) is nn.ReLU:
        return torch.relu_
    return None


def affine_shape(mods: Sequence[nn.Module]) -> bool:
    """A training-mode BatchNorm head with at most Hardtanh / ReLU6 / ReLU leaves after it:
    the chains :func:`_affine` can regenerate (given :func:`_affine_exact`)."""
    return (
        isinstance(mods[0], nn.modules.batchnorm._BatchNorm)
        and mods[0].training
        and all(_clamp_(m) is not None for m in mods[1:])
    )


def affine_chain(mods: Sequence[nn.Module], x: torch.Tensor) -> bool:
    """Whether the chain regenerates through :func:`_affine`: :func:`affine_shape`, and a
    float input this build's kernel matches bit for bit."""
    return affine_shape(mods) and _affine_exact(x)


def batchnorm_from_stats_ok(mod: nn.Module, x: Any) -> bool:
    """Whether :func:`batchnorm_call` can stand in for ``mod(x)`` bit for bit: a
    training-mode BatchNorm with running statistics and affine parameters, a float input
    of its features for which :func:`_affine` matches this build's kernel."""
    return (
        isinstance(mod, nn.modules.batchnorm._BatchNorm)
        and mod.training
        and mod.track_running_stats
        and mod.running_mean is not None
        and mod.running_var is not None
        and mod.weight is not None
        and mod.bias is not None
        and isinstance(x, torch.Tensor)
        and x.dim() >= 2
        and x.shape[1] == mod.num_features
        and x.dtype == mod.weight.dtype
        and _affine_exact(x)
    )


class _BatchNormFromStats(torch.autograd.Function):
    """A training-mode BatchNorm whose backward is the one autograd runs for it
    (``native_batch_norm_backward`` on the input, weight and batch statistics), and
    whose forward either runs the kernel (``stats is None``: the statistics are
    computed, the running statistics updated, and the statistics appended to ``sink``)
    or, given the statistics of that first forward, is one fused multiply-add
    (:func:`_affine`) -- the same values, without the reduction over the batch and
    without touching the running statistics.  Both save the same four tensors in the
    same order, so a recomputation's saves line up with the forward's placeholders."""

    @staticmethod
    def forward(ctx, x, weight, bias, mod, stats, momentum, sink):  # noqa: ANN001, ANN205
        if stats is None:
            out, mean, invstd = torch.native_batch_norm(
                x, weight, bias, mod.running_mean, mod.running_var, True, momentum, mod.eps
            )
            sink.append((mean, invstd))
        else:
            mean, invstd = stats
            out = _affine(mod, x, mean, invstd)
        ctx.eps = mod.eps
        ctx.save_for_backward(x, weight, mean, invstd)
        return out

    @staticmethod
    def backward(ctx, grad):  # noqa: ANN001, ANN205
        x, weight, mean, invstd = ctx.saved_tensors
        mask = [bool(n) for n in ctx.needs_input_grad[:3]]
        gx, gw, gb = torch.ops.aten.native_batch_norm_backward(
            grad, x, weight, None, None, mean, invstd, True, ctx.eps, mask
        )
        return gx, gw, gb, None, None, None, None


def batchnorm_call(
    mod: nn.Module, x: torch.Tensor, stats: tuple[torch.Tensor, torch.Tensor] | None
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None]:
    """``mod(x)`` for a :func:`batchnorm_from_stats_ok` call, through
    :class:`_BatchNormFromStats`: with ``stats=None`` as ``_BatchNorm.forward`` does it
    (the batch counter and the momentum it implies, the kernel) returning the batch
    statistics too; given those statistics, the recomputation of the same output from
    them (returns ``(out, None)``).  Gradients are autograd's own for the kernel."""
    if stats is not None:
        return _BatchNormFromStats.apply(x, mod.weight, mod.bias, mod, stats, 0.0, None), None
    mod._check_input_dim(x)
    momentum = 0.0 if mod.momentum is None else mod.momentum
    if mod.num_batches_tracked is not None:  # as _BatchNorm.forward, in training
        mod.num_batches_tracked.add_(1)
        if mod.momentum is None:
            momentum = 1.0 / float(mod.num_batches_tracked)
    sink: list = []
    out = _BatchNormFromStats.apply(x, mod.weight, mod.bias, mod, None, momentum, sink)
    return out, sink[0]


def regenerate(
    mods: Sequence[nn.Module],
    fns: Sequence[Callable],
    arg: torch.Tensor,
    stats: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """Run ``fns`` (the leaves' forwards, head first) on ``arg`` without autograd; buffers
    are restored afterwards.

    With ``stats`` (:func:`batchnorm_stats` of a BatchNorm head's forward) and an
    :func:`affine_chain`, the head's output is one fused multiply-add over ``arg`` from
    the statistics forward computed (no second pass for the batch statistics, no running
    statistics to restore) and the clamps of the tail run in place on it: bit for bit
    the forward's values, checked once per process against the kernel
    (:func:`_affine_exact`)."""
    if stats is not None and affine_chain(mods, arg):
        with torch.no_grad():
            out = _affine(mods[0], arg, *stats)
            for m in mods[1:]:
                out = _clamp_(m)(out)
        return out
    buffers = [(b, b.detach().clone()) for m in mods for b in m.buffers()]
    with torch.no_grad():
        out = arg
        for fn in fns:
            out = fn(out)
    for b, old in buffers:
        b.data.copy_(old)
    return out


def inplace_regen(mod: nn.Module) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """The leaf's forward in place, for a leaf that may regenerate over its own input.

    Hardtanh / ReLU6 (not already in place) read their saved input in backward only
    through ``lo < x < hi``; clamping ``x`` into ``[lo, hi]`` keeps that predicate for
    every value (``lo`` and ``hi`` map to themselves and fail it, NaN stays NaN), so
    the leaf's output can be regenerated by clamping the held input itself and the
    leaf's own backward on it is bit-identical.  ``None`` for any other leaf.
    """
    if type(mod) not in (nn.Hardtanh, nn.ReLU6) or mod.inplace:
        return None
    if not float(mod.min_val) < float(mod.max_val):
        return None
    clamp = _clamp_(mod)

    def run(t: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return clamp(t)

    return run


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


def regen_cost_s(
    mods: Sequence[nn.Module], x: torch.Tensor, repeats: int, inplace: bool = False
) -> float:
    """Measured (cached) time of :func:`regenerate` for this chain on an input like ``x``
    (``inplace``: of :func:`inplace_regen` of the one leaf, on a scratch copy of ``x``)."""
    fn = inplace_regen(mods[0]) if inplace and len(mods) == 1 else None
    if fn is not None:
        scratch = x.detach().clone()
        return cached_cost(
            ("regen-inplace", *signature(mods, x)),
            lambda: median_cpu_s(lambda: fn(scratch), repeats),
        )
    fns = [type(m).forward.__get__(m) for m in mods]
    arg = x.detach()
    stats = None
    if affine_chain(mods, arg):  # the executor regenerates from forward's statistics
        bn = mods[0]
        with torch.no_grad():
            _, mean, invstd = torch.native_batch_norm(
                arg, bn.weight, bn.bias, None, None, True, 0.0, bn.eps
            )
        stats = (mean, invstd)
    return cached_cost(
        ("regen-affine" if stats is not None else "regen", *signature(mods, x)),
        lambda: median_cpu_s(lambda: regenerate(mods, fns, arg, stats), repeats),
    )
