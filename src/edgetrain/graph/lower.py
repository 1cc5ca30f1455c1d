"""Lower a traced ``fx.GraphModule`` into the typed :class:`TrainGraph` IR.

Typing rules (see ``graph_contract``): placeholders become INPUT, LABEL,
WEIGHT (trainable), FROZEN_WEIGHT (frozen parameters, buffers, constants) or
OPTIMIZER_STATE, all but the data persistent. Op outputs take their kind from
the phase that produced them: forward -> ACTIVATION, loss -> TEMPORARY,
backward -> GRADIENT (weight and activation gradients), update -> TEMPORARY.
An in-place op's output is the tensor it wrote into, so it keeps that tensor's
kind (an SGD ``sub_`` on a weight yields a WEIGHT) and records it in
``Node.aliases``, as view ops do: neither owns storage.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch.fx import Node as FxNode

from edgetrain.errors import UnsupportedOperatorError
from edgetrain.graph import ops
from edgetrain.graph.ir import PERSISTENT_KINDS, Node, TensorInfo, TensorKind, TrainGraph

_PHASE_KIND = {
    "forward": TensorKind.ACTIVATION,
    "loss": TensorKind.TEMPORARY,
    "backward": TensorKind.GRADIENT,
    "update": TensorKind.TEMPORARY,
}


def _info(name: str, kind: TensorKind, val: torch.Tensor, persistent: bool) -> TensorInfo:
    return TensorInfo(
        name=name,
        kind=kind,
        shape=tuple(int(s) for s in val.shape),
        dtype=str(val.dtype).removeprefix("torch."),
        nbytes=int(val.numel() * val.element_size()),
        persistent=persistent,
    )


def _short(a: Any) -> str:
    if isinstance(a, FxNode):
        return "%"
    if isinstance(a, list | tuple):
        return "[" + ", ".join(_short(x) for x in a) + "]"
    if isinstance(a, torch.dtype | torch.device | torch.memory_format | torch.layout):
        return str(a).removeprefix("torch.")
    return repr(a)


def lower(step: Any, rec: Any, meta: dict) -> TrainGraph:
    """Build the IR for ``step.gm`` using the phase/module events in ``rec``."""
    from edgetrain.graph.capture import _at  # shared helper

    gm = step.gm
    fx_nodes = list(gm.graph.nodes)
    placeholders = [n for n in fx_nodes if n.op == "placeholder"]
    roles: list[tuple[str, TensorKind]] = []
    roles += [(n, TensorKind.WEIGHT) for n in step.trainable]
    roles += [(n, TensorKind.FROZEN_WEIGHT) for n in step.frozen]
    roles += [(n, TensorKind.FROZEN_WEIGHT) for n in step.buffers]
    roles += [(f"optimizer.{k}", TensorKind.OPTIMIZER_STATE) for k in step.state_keys]
    roles += [("input", TensorKind.INPUT), ("target", TensorKind.LABEL)]
    assert len(roles) == len(placeholders), (len(roles), len(placeholders))

    reserved = {r for r, _ in roles}
    names: dict[FxNode, str] = {}  # fx node -> IR tensor name (single-tensor values)
    tensors: dict[str, TensorInfo] = {}

    def fresh(base: str) -> str:
        name = base if base not in reserved and base not in tensors else f"%{base}"
        reserved.add(name)
        return name

    for fx, (ir_name, kind) in zip(placeholders, roles, strict=True):
        names[fx] = ir_name
        tensors[ir_name] = _info(ir_name, kind, fx.meta["val"], kind in PERSISTENT_KINDS)

    def phase_of(i: int) -> str:
        return _at(rec.phases, i) or "forward"

    def module_of(i: int, phase: str) -> str | None:
        if phase == "forward":
            return _at(rec.fwd_events, i)
        if phase == "backward":
            return _at(rec.bwd_events, i)
        if phase == "update":
            return _at(rec.upd_events, i)
        return None

    def tensor_names(a: Any) -> list[str]:
        if isinstance(a, FxNode):
            return [names[a]] if a in names else []
        if isinstance(a, list | tuple):
            return [n for x in a for n in tensor_names(x)]
        return []

    def vals(a: Any) -> Any:
        if isinstance(a, FxNode):
            return a.meta.get("val")
        if isinstance(a, list | tuple):
            return type(a)(vals(x) for x in a)
        return a

    nodes: list[Node] = []
    outputs_fx: Any = None
    for i, fx in enumerate(fx_nodes):
        if fx.op == "placeholder":
            continue
        if fx.op == "output":
            outputs_fx = fx.args[0]
            continue
        if fx.op == "get_attr":
            val = getattr(gm, fx.target)
            name = fresh(fx.name)
            names[fx] = name
            tensors[name] = _info(name, TensorKind.FROZEN_WEIGHT, val, True)
            continue
        if fx.op != "call_function":
            raise UnsupportedOperatorError(f"captured graph has a {fx.op} node {fx.name}; only ops")
        if fx.target is operator.getitem:
            continue  # named with its producer below
        if not isinstance(fx.target, torch._ops.OpOverload):
            raise UnsupportedOperatorError(
                f"cannot capture {ops.op_name(fx.target)}: only aten operators can be typed"
            )
        phase = phase_of(i)
        module = module_of(i, phase)
        val = fx.meta.get("val")
        _check_static(fx, val, module, step.model)
        in_names = tensor_names(list(fx.args) + list(fx.kwargs.values()))
        aliases = None
        src = ops.aliased_arg(fx.target)
        if src is None and ops.is_layout(fx.target, dict(fx.kwargs)):
            # schema without alias info (``_unsafe_view``, composite reshapes):
            # ask the traced fake tensors whether the output reuses an input's storage
            src = ops.storage_alias(vals(tuple(fx.args)), val)
            if src is None and ops.base_name(fx.target) in ops.VIEW_OPS_WITHOUT_ALIAS_INFO:
                src = 0  # no traced values (e.g. a meta-less graph): the op is a view
        if src is not None and src < len(fx.args) and tensor_names(fx.args[src]):
            aliases = tensor_names(fx.args[src])[0]
        kind = _PHASE_KIND[phase]
        if aliases is not None and ops.is_inplace(fx.target):
            kind = tensors[aliases].kind  # the result *is* the tensor written (a weight, state...)
        out_names: list[str] = []
        if isinstance(val, torch.Tensor):
            name = fresh(fx.name)
            names[fx] = name
            tensors[name] = _info(name, kind, val, False)
            out_names.append(name)
        elif isinstance(val, list | tuple):
            users = {u.args[1]: u for u in fx.users if u.target is operator.getitem}
            for idx, v in enumerate(val):
                if not isinstance(v, torch.Tensor):
                    continue
                if idx in users:
                    name = fresh(users[idx].name)
                    names[users[idx]] = name
                else:
                    name = fresh(f"{fx.name}.{idx}")
                tensors[name] = _info(name, kind, v, False)
                out_names.append(name)
        flops = ops.op_flops(fx.target, vals(fx.args), vals(dict(fx.kwargs)), val)
        args_repr = ", ".join(
            [_short(a) for a in fx.args] + [f"{k}={_short(v)}" for k, v in fx.kwargs.items()]
        )
        nodes.append(
            Node(
                name=fx.name,
                op=ops.op_name(fx.target),
                inputs=tuple(in_names),
                outputs=tuple(out_names),
                flops=flops,
                is_layout=ops.is_layout(fx.target, dict(fx.kwargs)),
                phase=phase,
                module=module,
                aliases=aliases,
                args_repr=args_repr,
            )
        )
    _fill_backward_modules(nodes)
    outs = [names.get(o) if isinstance(o, FxNode) else None for o in outputs_fx]
    n_t = len(step.trainable)
    meta = dict(meta)
    meta["outputs"] = {
        "loss": outs[0],
        "params": dict(zip(step.trainable, outs[1 : 1 + n_t], strict=True)),
        "optimizer_state": {
            f"optimizer.{k}": v for k, v in zip(step.state_keys, outs[1 + n_t :], strict=True)
        },
    }
    meta["placeholders"] = [r for r, _ in roles]
    return TrainGraph(nodes=nodes, tensors=tensors, meta=meta)


def _check_static(fx: FxNode, val: Any, module: str | None, model: Any) -> None:
    """Reject data-dependent scalars and dynamic shapes, naming the op and its module."""
    leaves = list(val) if isinstance(val, list | tuple) else [val]
    why = None
    if any(isinstance(v, torch.SymInt | torch.SymFloat | torch.SymBool) for v in leaves):
        why = "it turns a tensor value into a Python number (data-dependent)"
    elif any(
        isinstance(v, torch.Tensor) and not all(isinstance(s, int) for s in v.shape) for v in leaves
    ):
        why = "its output shape depends on tensor values (no static shape)"
    if why is not None:
        if module is not None and model is not None:
            sub = model.get_submodule(module) if module else model
            where = f"module {module or '<root>'!r} ({type(sub).__name__})"
        else:
            where = "the model (outside any submodule)"
        raise UnsupportedOperatorError(
            f"cannot capture operator {ops.op_name(fx.target)} in {where}: {why}. The training "
            "graph must be static: replace it with shape-static tensor ops (e.g. masks and "
            "torch.where instead of nonzero/boolean indexing)."
        )


def _fill_backward_modules(nodes: list[Node]) -> None:
    """Give backward ops run between autograd nodes (gradient sums) their producer's module."""
    producer_module: dict[str, str | None] = {}
    for i, n in enumerate(nodes):
        if n.phase == "backward" and n.module is None:
            guess = next(
                (producer_module[t] for t in n.inputs if producer_module.get(t) is not None), None
            )
            if guess is not None:
                nodes[i] = Node(**{**n.__dict__, "module": guess})
                n = nodes[i]
        for o in n.outputs:
            producer_module[o] = n.module
