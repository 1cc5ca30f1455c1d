"""Capture forward, loss, backward and optimizer update as one static graph.

How: the training step is written as a pure function of (trainable weights,
frozen weights, buffers, optimizer state, input, target) — ``functional_call``
for the forward pass, ``torch.autograd.grad`` for the backward pass and the
in-place update of :mod:`edgetrain.graph.optim` — and traced once with
``make_fx`` on fake tensors (shapes only, nothing computed). Autograd expands
the backward pass into explicit aten ops during tracing, so the resulting
``fx.GraphModule`` is the whole step, and only the gradients that are needed
appear: frozen weights get no weight-gradient ops and activation gradients
stop where no trainable parameter lies further back.

While tracing we record where each op came from: phase marks between forward,
loss, backward and update (the tracer's node count at each boundary), module
forward hooks for forward ops, and hooks on autograd nodes (whose sequence
numbers match the forward op that created them, as in
``torch._functorch``'s ``setup_stacktrace_preservation_hooks``) for backward ops.
:func:`edgetrain.graph.lower.lower` then types every tensor into a
:class:`~edgetrain.graph.ir.TrainGraph`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx.traceback as fx_traceback
from torch import nn
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    UnsupportedFakeTensorException,
    UnsupportedOperatorException,
)
from torch.func import functional_call
from torch.fx.experimental.proxy_tensor import get_proxy_mode, make_fx
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

from edgetrain.errors import ConfigError, ModelError, UnsupportedOperatorError
from edgetrain.graph.ir import TrainGraph
from edgetrain.graph.optim import OptimizerSpec, resolve_loss

_CAPTURE_ERRORS = (
    DataDependentOutputException,
    DynamicOutputShapeException,
    UnsupportedOperatorException,
    UnsupportedFakeTensorException,
    GuardOnDataDependentSymNode,
)


@dataclass
class CapturedStep:
    """The executable side of a capture: the ``fx.GraphModule`` and its argument layout.

    Placeholders are, in order: trainable parameters, frozen parameters,
    buffers, optimizer state (``state_keys``), input, target. Outputs are
    ``(loss, *updated trainable parameters, *updated optimizer state)``.
    """

    gm: torch.fx.GraphModule
    trainable: list[str]
    frozen: list[str]
    buffers: list[str]
    state_keys: list[str]
    optimizer: OptimizerSpec
    model: nn.Module | None = field(default=None, repr=False)

    def init_state(self, params: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Fresh (zero) optimizer state for the trainable ``params``."""
        return self.optimizer.init_state({n: params[n] for n in self.trainable})


class _Recorder:
    """Collects phase marks and module attributions while ``make_fx`` traces."""

    def __init__(self) -> None:
        self.phases: list[tuple[int, str]] = []
        self.fwd_events: list[tuple[int, str | None]] = []
        self.bwd_events: list[tuple[int, str | None]] = []
        self.upd_events: list[tuple[int, str | None]] = []
        self.stack: list[str] = []
        self.bwd_module: str | None = None
        self.seq_module: dict[int, str] = {}
        self.phase = "setup"

    @staticmethod
    def count() -> int:
        mode = get_proxy_mode()
        return len(mode.tracer.graph.nodes) if mode is not None else 0

    def mark(self, phase: str) -> None:
        self.phase = phase
        self.phases.append((self.count(), phase))

    def where(self) -> str | None:
        if self.phase == "backward":
            return self.bwd_module
        return self.stack[-1] if self.stack else None

    # forward module hooks
    def pre_hook(self, name: str) -> Callable:
        def hook(_mod, _args):
            self.stack.append(name)
            self.fwd_events.append((self.count(), name))

        return hook

    def post_hook(self, name: str) -> Callable:
        def hook(_mod, _args, _out):
            if self.stack and self.stack[-1] == name:
                self.stack.pop()
            self.fwd_events.append((self.count(), self.stack[-1] if self.stack else None))

        return hook

    # backward (autograd node) hooks
    def watch_backward(self, root: Any) -> None:
        seen, todo = set(), [root]
        while todo:
            fn = todo.pop()
            if fn is None or fn in seen:
                continue
            seen.add(fn)
            todo.extend(f for f, _ in fn.next_functions)
            module = self.seq_module.get(fn._sequence_nr())

            def pre(_grad_outputs, module=module):
                self.bwd_module = module
                self.bwd_events.append((self.count(), module))

            def post(_grad_inputs, _grad_outputs):
                self.bwd_module = None
                self.bwd_events.append((self.count(), None))

            fn.register_prehook(pre)
            fn.register_hook(post)

    def forward_seq_modules(self) -> None:
        """Map autograd sequence numbers to modules from the forward nodes traced so far."""
        mode = get_proxy_mode()
        if mode is None:
            return
        nodes = list(mode.tracer.graph.nodes)
        for i, node in enumerate(nodes):
            seq = node.meta.get("seq_nr")
            mod = _at(self.fwd_events, i)
            if seq is not None and seq >= 0 and mod is not None:
                self.seq_module.setdefault(seq, mod)


def _at(events: list[tuple[int, Any]], index: int) -> Any:
    """Value of the last event recorded at or before node ``index``."""
    value = None
    for count, v in events:
        if count > index:
            break
        value = v
    return value


def _owner(param: str) -> str:
    return param.rpartition(".")[0]


def capture(
    model: nn.Module,
    example_input: torch.Tensor,
    example_target: torch.Tensor,
    *,
    loss: str | Callable = "cross_entropy",
    optimizer: str = "sgd",
    lr: float = 0.01,
    momentum: float = 0.9,
    strategy_info: Any = None,
    name: str | None = None,
) -> TrainGraph:
    """Trace one training step of ``model`` into a :class:`TrainGraph`.

    What trains is read from ``requires_grad`` (apply a strategy first);
    ``strategy_info`` (default: the one ``apply_strategy`` stored on the model)
    only labels the graph. The graph is specific to the
    example shapes. ``model``'s current mode (train/eval) is traced; random ops
    (dropout) draw from the global generator when the graph executes.
    The executable step is kept on ``graph.step`` for :func:`execute`.
    """
    from edgetrain.graph.lower import lower  # local: lower imports this module's types

    strategy_info = strategy_info or getattr(model, "edgetrain_strategy", None)
    loss_name, loss_fn = resolve_loss(loss)
    opt = OptimizerSpec(optimizer, lr=float(lr), momentum=float(momentum))
    if not isinstance(example_input, torch.Tensor) or not isinstance(example_target, torch.Tensor):
        raise ConfigError("capture needs one example input tensor and one example target tensor")
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    trainable = [n for n, p in params.items() if p.requires_grad]
    frozen = [n for n, p in params.items() if not p.requires_grad]
    if not trainable:
        raise ConfigError(
            f"model {type(model).__name__} has no trainable parameter; apply a strategy "
            "(edgetrain.finetune.apply_strategy) or set requires_grad on what should train"
        )
    state = opt.init_state({n: params[n] for n in trainable})
    state_keys = list(state)
    slots = opt.state_slots()
    n_t, n_f, n_b, n_s = len(trainable), len(frozen), len(buffers), len(state_keys)
    rec = _Recorder()

    def step(*flat: torch.Tensor):
        tr = list(flat[:n_t])
        fr = flat[n_t : n_t + n_f]
        bu = flat[n_t + n_f : n_t + n_f + n_b]
        st = list(flat[n_t + n_f + n_b : n_t + n_f + n_b + n_s])
        x, y = flat[-2], flat[-1]
        values = {
            **dict(zip(trainable, tr, strict=True)),
            **dict(zip(frozen, fr, strict=True)),
            **dict(zip(buffers, bu, strict=True)),
        }
        rec.mark("forward")
        out = functional_call(model, values, (x,))
        if not isinstance(out, torch.Tensor):
            raise UnsupportedOperatorError(
                f"model {type(model).__name__} returns {type(out).__name__}; capture needs a "
                "forward that returns one tensor (wrap the model to select it)"
            )
        rec.mark("loss")
        rec.stack.clear()
        loss_value = loss_fn(out, y)
        if loss_value.dim() != 0:
            raise ConfigError(f"the loss must be a scalar, got shape {tuple(loss_value.shape)}")
        rec.forward_seq_modules()
        rec.watch_backward(loss_value.grad_fn)
        rec.mark("backward")
        grads = torch.autograd.grad(loss_value, tr, allow_unused=True)
        unused = [trainable[i] for i, g in enumerate(grads) if g is None]
        if unused:
            raise ModelError(
                f"trainable parameter(s) {unused} do not influence the loss; freeze them "
                "(requires_grad=False) or use them in forward"
            )
        rec.mark("update")
        per_param = [[st[i * len(slots) + j] for j in range(len(slots))] for i in range(n_t)]
        step_t = st[-1] if opt.has_step() else None

        def on_param(i: int) -> None:
            rec.upd_events.append((rec.count(), _owner(trainable[i])))

        with torch.no_grad():
            opt.update(tr, list(grads), per_param, step_t, on_param=on_param)
        return (loss_value, *tr, *st)

    flat = [
        *(params[n].detach().requires_grad_(True) for n in trainable),
        *(params[n].detach() for n in frozen),
        *(buffers[n].detach() for n in buffers),
        *state.values(),
        example_input.detach(),
        example_target.detach(),
    ]
    handles = []
    for mod_name, mod in model.named_modules():
        handles.append(mod.register_forward_pre_hook(rec.pre_hook(mod_name)))
        handles.append(mod.register_forward_hook(rec.post_hook(mod_name)))
    try:
        with fx_traceback.preserve_node_meta():
            gm = make_fx(step, tracing_mode="fake")(*flat)
    except _CAPTURE_ERRORS as exc:
        raise _unsupported(model, exc, rec.where()) from None
    except ValueError as exc:
        if "more than 1 value per channel" in str(exc):
            raise ModelError(
                f"BatchNorm module {rec.where() or '?'} cannot train at batch "
                f"{example_input.shape[0]}: batch statistics need at least 2 values per "
                "channel; use batch >= 2 or a model option without BatchNorm "
                "(e.g. deep-ae batchnorm=False)"
            ) from None
        raise
    except (RuntimeError, NotImplementedError) as exc:
        msg = str(exc)
        if "fake" in msg.lower() or "meta" in msg.lower() or "data-dependent" in msg.lower():
            raise _unsupported(model, exc, rec.where()) from None
        raise
    finally:
        for h in handles:
            h.remove()
    captured = CapturedStep(gm, trainable, frozen, list(buffers), state_keys, opt, model)
    meta = {
        "model": name or getattr(model, "name", None) or type(model).__name__,
        "strategy": str(getattr(strategy_info, "spec", "custom")),
        "batch_shape": list(example_input.shape),
        "input_dtype": str(example_input.dtype).removeprefix("torch."),
        "target_shape": list(example_target.shape),
        "target_dtype": str(example_target.dtype).removeprefix("torch."),
        "optimizer": opt.name,
        "lr": opt.lr,
        "momentum": opt.momentum if opt.name == "sgd-momentum" else None,
        "betas": list(opt.betas) if opt.name == "adam" else None,
        "eps": opt.eps if opt.name == "adam" else None,
        "loss": loss_name,
        "trainable": trainable,
        "frozen": frozen,
        "buffers": list(buffers),
    }
    graph = lower(captured, rec, meta)
    graph.step = captured
    return graph


def _unsupported(model: nn.Module, exc: Exception, where: str | None) -> UnsupportedOperatorError:
    func = getattr(exc, "func", None)
    if func is not None:
        op = str(func)
    elif isinstance(exc, DataDependentOutputException | GuardOnDataDependentSymNode):
        op = "aten._local_scalar_dense.default (Tensor.item() / bool(tensor))"
    else:
        found = re.search(r"CustomOpDef\(([\w:.]+)\)|\b(aten\.[\w.]+|\w+::\w+(?:\.\w+)?)", str(exc))
        op = next((g for g in found.groups() if g), None) if found else None
        op = op or type(exc).__name__
    if isinstance(exc, DataDependentOutputException | GuardOnDataDependentSymNode):
        why = "a tensor value decides Python control flow or becomes a Python number"
    elif isinstance(exc, DynamicOutputShapeException):
        why = "its output shape depends on tensor values (no static shape)"
    else:
        why = "it has no meta/fake kernel, so its output shape cannot be derived"
    if where is None:
        loc = f"model {type(model).__name__} (outside any submodule)"
    else:
        mod = model.get_submodule(where) if where else model
        loc = f"module {where or '<root>'!r} ({type(mod).__name__})"
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return UnsupportedOperatorError(
        f"cannot capture operator {op} in {loc}: {why}. The training graph must be static: "
        f"replace it with shape-static tensor ops. ({type(exc).__name__}: {first[:200]})"
    )


def execute(
    graph: TrainGraph | CapturedStep,
    params: dict[str, torch.Tensor] | nn.Module,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    opt_state: dict[str, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Run one captured step on real tensors.

    ``params`` maps parameter and buffer names to tensors (or is the model);
    the caller's tensors are not modified (buffers excepted, which the step may
    update in place as eager training would, e.g. BatchNorm statistics).
    ``opt_state`` defaults to a fresh zero state. Returns ``(loss, params
    with the trainable ones updated, new optimizer state)``.
    """
    step = graph.step if isinstance(graph, TrainGraph) else graph
    if not isinstance(step, CapturedStep):
        raise ModelError(
            "this TrainGraph has no executable step (it was read from JSON); capture it again"
        )
    if isinstance(params, nn.Module):
        params = {**dict(params.named_parameters()), **dict(params.named_buffers())}
    needed = [*step.trainable, *step.frozen, *step.buffers]
    missing = [n for n in needed if n not in params]
    if missing:
        raise ModelError(f"execute: params lack {missing}; pass every parameter and buffer by name")
    if opt_state is None:
        opt_state = step.init_state(params)
    absent = [k for k in step.state_keys if k not in opt_state]
    if absent:
        raise ModelError(f"execute: optimizer state lacks {absent}")
    flat = [
        *(params[n].detach().clone() for n in step.trainable),
        *(params[n].detach() for n in step.frozen),
        *(params[n].detach() for n in step.buffers),
        *(opt_state[k].detach().clone() for k in step.state_keys),
        inputs,
        targets,
    ]
    with torch.no_grad():
        out = step.gm(*flat)
    n_t = len(step.trainable)
    loss = out[0]
    new_params = {n: params[n].detach() for n in [*step.trainable, *step.frozen, *step.buffers]}
    new_params.update(dict(zip(step.trainable, out[1 : 1 + n_t], strict=True)))
    new_state = dict(zip(step.state_keys, out[1 + n_t :], strict=True))
    return loss, new_params, new_state
