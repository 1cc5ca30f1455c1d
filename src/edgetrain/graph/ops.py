"""Operator registry: FLOPs, layout transforms and aliasing of aten ops.

FLOPs come from ``torch.utils.flop_counter.flop_registry`` — the formulas
``FlopCounterMode`` uses — evaluated on the node's traced (fake) shapes, so a
graph's totals equal what ``FlopCounterMode`` reports for the same eager step.
Like ``FlopCounterMode``, only matrix products, convolutions and fused
attention are counted; elementwise, reduction and update ops count 0.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.flop_counter import flop_registry

# Ops that move or reinterpret data without arithmetic. View ops are detected
# from the schema (``OpOverload.is_view``); these are the variants whose schema
# does not say so: ``*_copy`` always copy, the composite ones (``reshape``,
# ``contiguous``, ``flatten``...) copy only when strides force it, and
# ``_unsafe_view`` never copies (see ``VIEW_OPS_WITHOUT_ALIAS_INFO``).
_LAYOUT_COPY_OPS = frozenset(
    {
        "contiguous",
        "reshape",
        "_reshape_copy",
        "view_copy",
        "_unsafe_view",
        "permute_copy",
        "transpose_copy",
        "t_copy",
        "expand_copy",
        "squeeze_copy",
        "unsqueeze_copy",
        "slice_copy",
        "select_copy",
        "as_strided_copy",
        "unbind_copy",
        "split_copy",
        "split_with_sizes_copy",
        "flatten",
        "unflatten",
        "movedim",
    }
)


def op_name(target: Any) -> str:
    """``aten.mm.default`` style name of an fx call target."""
    if isinstance(target, torch._ops.OpOverload):
        return f"{target.namespace}.{target._schema.name.split('::')[-1]}.{target._overloadname}"
    return getattr(target, "__name__", str(target))


def base_name(target: Any) -> str:
    """The op's base name without namespace or overload (``mm``, ``sub_``)."""
    if isinstance(target, torch._ops.OpOverload):
        return target._schema.name.split("::")[-1]
    return getattr(target, "__name__", str(target))


def is_view(target: Any) -> bool:
    return isinstance(target, torch._ops.OpOverload) and bool(target.is_view)


def aliased_arg(target: Any) -> int | None:
    """Index of the argument the op's first output shares storage with, else None.

    True for views (``t``: its input) and for in-place ops that return what
    they wrote (``sub_``: argument 0), read from the schema's alias sets. Ops
    that write an argument but return fresh tensors (BatchNorm updating its
    running statistics) return None: their outputs own storage.
    """
    if not isinstance(target, torch._ops.OpOverload):
        return None
    returns = target._schema.returns
    if not returns or returns[0].alias_info is None:
        return 0 if target.is_view else None  # e.g. split/unbind: Tensor(a)[] views of self
    wanted = set(returns[0].alias_info.before_set)
    for i, arg in enumerate(target._schema.arguments):
        info = arg.alias_info
        if info is not None and wanted & set(info.before_set):
            return i
    return None


# View-like ops whose schema carries no alias annotation, so ``aliased_arg`` cannot
# see that they return their input's storage. ``_unsafe_view`` is ``view`` that
# autograd does not track as a view (ATen TensorShape.cpp: it "differs from view()
# in that the returned tensor isn't treated as a view for the purposes of automatic
# differentiation"; autograd emits it after ``mm``/``bmm``/``clone`` on temporaries)
# -- it still returns its input's storage. ``alias``/``lift_fresh`` return ``self``.
# For composite reshapes (``reshape``, ``contiguous``...) a copy happens or not
# depending on strides, so they are decided from the traced tensors by
# :func:`storage_alias`.
VIEW_OPS_WITHOUT_ALIAS_INFO = frozenset({"_unsafe_view", "alias", "lift_fresh"})


def storage_alias(args: Any, out: Any) -> int | None:
    """Index of the tensor in ``args`` whose storage ``out`` shares, from traced values.

    ``make_fx(tracing_mode="fake")`` keeps real storage identity on its fake
    tensors: a view or a no-op ``contiguous``/``reshape`` returns a tensor on
    its input's storage, a real copy (``clone`` of a transposed tensor) a new
    one. This is the ground truth for ops whose schema has no alias info.
    Returns None when ``out`` is not a single tensor or owns fresh storage.
    """
    if not isinstance(out, torch.Tensor):
        return None
    try:
        out_ref = out.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError):
        return None
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            try:
                if a.untyped_storage()._cdata == out_ref:
                    return i
            except (RuntimeError, NotImplementedError):
                continue
    return None


def is_inplace(target: Any) -> bool:
    """The op writes into the argument it returns (``add_``, ``sub_``, ``mul_``...)."""
    i = aliased_arg(target)
    if i is None:
        return False
    info = target._schema.arguments[i].alias_info
    return bool(info.is_write)


def is_layout(target: Any, kwargs: dict | None = None) -> bool:
    """View/reshape/transpose/permute/contiguous-like: no arithmetic, only data movement."""
    if is_view(target):
        return True
    name = base_name(target)
    if name == "clone":
        return (kwargs or {}).get("memory_format") is not None
    return name in _LAYOUT_COPY_OPS


def op_flops(target: Any, args: tuple, kwargs: dict, out: Any) -> int:
    """FLOPs of one op application as ``FlopCounterMode`` counts it.

    ``args``/``kwargs``/``out`` hold tensors (real, fake or meta) in place of
    graph nodes; only their shapes are read.
    """
    packet = getattr(target, "_overloadpacket", None)
    formula = flop_registry.get(packet)
    if formula is None:
        return 0
    return int(formula(*args, **kwargs, out_val=out))
