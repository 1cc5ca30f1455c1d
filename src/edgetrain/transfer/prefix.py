"""Frozen-prefix activation caching: compute what cannot change once, train the rest.

In the few-shot protocol most strategies freeze everything up to some point of the
network (the tokenizer for ``ft-2``/``lora-2``, the tokenizer and the first block for
``ft-1``/``lora-1``, all but the head for ``lp``). When that frozen part is also
*deterministic* — the same input gives the same output in train and eval mode, with
no randomness (no dropout / stochastic depth), no batch statistics (no BatchNorm in
train mode) and no mixing across samples — its output for a sample never changes
during fine-tuning. Computing it once per sample and training only the suffix on the
cached activations is then *exactly* the same optimisation (same batches, same
losses, same updates, up to float rounding), at a fraction of the cost: on CCT-2 the
convolutional tokenizer is most of the forward pass.

How the split is found (no per-model code): the model is traced with ``torch.fx``;
a node is *static* when it depends on no trainable parameter and its op is known to be
deterministic and per-sample (a whitelist of ``torch.nn`` leaf modules; any function
or method except the random / batch-statistics ones). Static nodes that depend on the
input and feed a non-static node are the *cut*: the prefix graph computes them, the
suffix graph takes them as inputs. Both graphs share the model's own modules and
parameters, so training the suffix trains the model. Anything unsafe leaves its part
in the suffix (recomputed each step), and a model the analysis cannot vouch for is
not cached at all — :class:`PrefixPlan` says why.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.fx as fx
from torch import nn

#: Leaf modules whose output depends only on their own input sample and their
#: (frozen) weights, identically in train and eval mode. Deliberately absent:
#: BatchNorm (batch statistics and running-stat updates in train mode), Dropout and
#: its relatives (random), RNNs (optional inter-layer dropout).
DETERMINISTIC_MODULES: tuple[type[nn.Module], ...] = (
    nn.Conv1d,
    nn.Conv2d,
    nn.Conv3d,
    nn.ConvTranspose1d,
    nn.ConvTranspose2d,
    nn.Linear,
    nn.Bilinear,
    nn.Identity,
    nn.Flatten,
    nn.Unflatten,
    nn.ReLU,
    nn.ReLU6,
    nn.LeakyReLU,
    nn.ELU,
    nn.GELU,
    nn.SiLU,
    nn.Mish,
    nn.Tanh,
    nn.Sigmoid,
    nn.Hardswish,
    nn.Hardsigmoid,
    nn.Hardtanh,
    nn.Softmax,
    nn.LogSoftmax,
    nn.MaxPool1d,
    nn.MaxPool2d,
    nn.MaxPool3d,
    nn.AvgPool1d,
    nn.AvgPool2d,
    nn.AdaptiveAvgPool1d,
    nn.AdaptiveAvgPool2d,
    nn.AdaptiveMaxPool1d,
    nn.AdaptiveMaxPool2d,
    nn.LayerNorm,
    nn.GroupNorm,
    nn.LocalResponseNorm,
    nn.ZeroPad2d,
    nn.ConstantPad1d,
    nn.ConstantPad2d,
    nn.Embedding,
)

#: Functions / tensor methods that draw random numbers or use batch statistics.
_RANDOM_FUNCTION_NAMES = frozenset(
    {
        "dropout",
        "dropout1d",
        "dropout2d",
        "dropout3d",
        "alpha_dropout",
        "feature_alpha_dropout",
        "batch_norm",
        "instance_norm",
        "rrelu",
        "rand",
        "randn",
        "randint",
        "rand_like",
        "randn_like",
        "randint_like",
        "randperm",
        "bernoulli",
        "multinomial",
        "normal",
        "poisson",
        "gumbel_softmax",
    }
)
_RANDOM_METHOD_NAMES = frozenset(
    {"bernoulli", "bernoulli_", "uniform_", "normal_", "random_", "exponential_", "geometric_"}
)

#: Rows per prefix batch when caching: large enough to amortise per-op overhead,
#: small enough to bound the activation memory of one batch.
CACHE_BATCH = 128


@dataclass(frozen=True)
class PrefixPlan:
    """Whether the frozen prefix is cached, why (not), and what it covers.

    ``prefix_ops`` counts the traced operations moved out of the training step;
    ``cut`` names the graph values the suffix receives (``x`` alone: nothing to cache).
    """

    used: bool
    reason: str
    cut: tuple[str, ...] = ()
    prefix_ops: int = 0
    suffix_ops: int = 0
    prefix_modules: tuple[str, ...] = ()
    feature_shapes: tuple[tuple[int, ...], ...] = ()
    cached_bytes: int = 0
    cache_seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["cut"] = list(self.cut)
        out["prefix_modules"] = list(self.prefix_modules)
        out["feature_shapes"] = [list(s) for s in self.feature_shapes]
        return out


@dataclass
class PrefixSplit:
    """``prefix(x) -> features``, ``suffix(*features) -> logits``; modules shared with the model."""

    prefix: fx.GraphModule
    suffix: fx.GraphModule
    plan: PrefixPlan


def _function_name(target: Any) -> str:
    return getattr(target, "__name__", str(target))


def _trainable(module: nn.Module) -> bool:
    return any(p.requires_grad for p in module.parameters())


def _op_is_safe(node: fx.Node, modules: dict[str, nn.Module]) -> tuple[bool, str]:
    """Whether ``node``'s operation is deterministic, per-sample and frozen."""
    if node.op == "call_module":
        mod = modules[node.target]
        if _trainable(mod):
            return False, f"{node.target} trains"
        if type(mod) not in DETERMINISTIC_MODULES:
            return False, f"{node.target} is a {type(mod).__name__} (not known deterministic)"
        return True, ""
    if node.op == "call_function":
        name = _function_name(node.target)
        if name in _RANDOM_FUNCTION_NAMES:
            return False, f"{name}() is random or uses batch statistics"
        return True, ""
    if node.op == "call_method":
        if node.target in _RANDOM_METHOD_NAMES:
            return False, f".{node.target}() is random"
        return True, ""
    return True, ""


def _graph_text(model: nn.Module) -> str:
    return fx.symbolic_trace(model).code


def find_prefix(model: nn.Module) -> tuple[PrefixSplit | None, PrefixPlan]:
    """Split ``model`` at its frozen, deterministic prefix; ``(None, plan)`` with the reason if not."""
    try:
        was_training = model.training
        model.train()
        traced_train = fx.symbolic_trace(model)
        model.eval()
        eval_code = _graph_text(model)
        model.train(was_training)
    except Exception as exc:  # fx raises many types (TraceError, TypeError, ...)
        model.train(was_training)
        return None, PrefixPlan(
            False, f"model is not traceable by torch.fx ({type(exc).__name__}: {exc})"
        )
    if traced_train.code != eval_code:
        return None, PrefixPlan(
            False,
            "the model's forward() branches on self.training, so a traced prefix could not "
            "follow train/eval mode",
        )
    graph = traced_train.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    if len(placeholders) != 1:
        return None, PrefixPlan(
            False, f"forward() takes {len(placeholders)} inputs; caching needs exactly one"
        )
    for node in graph.nodes:
        if node.op in ("call_function", "call_method"):
            name = _function_name(node.target) if node.op == "call_function" else node.target
            if name in _RANDOM_FUNCTION_NAMES or name in _RANDOM_METHOD_NAMES:
                # a functional random op has the trace-time mode baked in; do not touch the model
                return None, PrefixPlan(
                    False, f"forward() calls {name}() (random / batch statistics) directly"
                )
    modules = dict(traced_train.named_modules())
    static: dict[fx.Node, bool] = {}
    input_dep: dict[fx.Node, bool] = {}
    first_blocker = ""
    for node in graph.nodes:
        preds = list(node.all_input_nodes)
        if node.op == "placeholder":
            static[node], input_dep[node] = True, True
            continue
        if node.op == "output":
            continue
        if node.op == "get_attr":
            value = traced_train
            for part in str(node.target).split("."):
                value = getattr(value, part)
            trains = isinstance(value, torch.Tensor) and value.requires_grad
            static[node], input_dep[node] = not trains, False
            if trains and not first_blocker:
                first_blocker = f"parameter {node.target} trains"
            continue
        safe, why = _op_is_safe(node, modules)
        static[node] = safe and all(static[p] for p in preds)
        input_dep[node] = any(input_dep[p] for p in preds)
        if not safe and not first_blocker and input_dep[node]:
            first_blocker = why
    cut = [
        n
        for n in graph.nodes
        if n.op != "output"
        and static.get(n)
        and input_dep.get(n)
        and any(u.op == "output" or not static.get(u, False) for u in n.users)
    ]
    if not cut or all(n.op == "placeholder" for n in cut):
        return None, PrefixPlan(
            False,
            "nothing before the first trained operation to cache"
            + (f" ({first_blocker})" if first_blocker else ""),
        )
    output = next(n for n in graph.nodes if n.op == "output")
    if all(static.get(n, False) for n in output.all_input_nodes):
        return None, PrefixPlan(False, "no operation depends on a trained parameter")

    # prefix: the ancestors of the cut, returning the cut values
    needed: set[fx.Node] = set()
    stack = list(cut)
    while stack:
        n = stack.pop()
        if n in needed:
            continue
        needed.add(n)
        stack.extend(n.all_input_nodes)
    pre_graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for node in graph.nodes:
        if node in needed:
            env[node] = pre_graph.node_copy(node, lambda n: env[n])
    pre_graph.output(tuple(env[n] for n in cut))

    # suffix: the cut values as inputs, then every other node that is not prefix-only
    suf_graph = fx.Graph()
    senv: dict[fx.Node, fx.Node] = {}
    for i, n in enumerate(cut):
        senv[n] = suf_graph.placeholder(f"feature_{i}")
    for node in graph.nodes:
        if node in senv or node.op == "placeholder":
            continue
        if static.get(node) and input_dep.get(node):
            continue  # computed by the prefix; only cut values are used downstream
        senv[node] = suf_graph.node_copy(node, lambda n: senv[n])

    prefix = fx.GraphModule(traced_train, pre_graph, class_name="FrozenPrefix")
    suffix = fx.GraphModule(traced_train, suf_graph, class_name="TrainedSuffix")
    suffix.graph.eliminate_dead_code()  # frozen constants only the prefix used
    suffix.recompile()
    count = lambda g: sum(n.op not in ("placeholder", "output", "get_attr") for n in g.nodes)  # noqa: E731
    prefix_modules = tuple(
        sorted({str(n.target) for n in pre_graph.nodes if n.op == "call_module"})
    )
    plan = PrefixPlan(
        used=True,
        reason="frozen deterministic prefix cached"
        + (f"; stops at: {first_blocker}" if first_blocker else ""),
        cut=tuple(n.name for n in cut),
        prefix_ops=count(pre_graph),
        suffix_ops=count(suf_graph),
        prefix_modules=prefix_modules,
    )
    return PrefixSplit(prefix, suffix, plan), plan


@torch.no_grad()  # not inference_mode: the cached tensors later feed autograd-recorded ops
def _run_prefix(prefix: fx.GraphModule, x: torch.Tensor, batch: int) -> tuple[torch.Tensor, ...]:
    parts: list[tuple[torch.Tensor, ...]] = []
    for start in range(0, len(x), batch):
        out = prefix(x[start : start + batch])
        parts.append(tuple(out))
    return tuple(torch.cat([p[i] for p in parts]) for i in range(len(parts[0])))


def _check_per_sample(prefix: fx.GraphModule, x: torch.Tensor) -> str | None:
    """Catch a prefix that mixes samples or drops the batch dimension (cheap, on a few rows)."""
    n = min(len(x), 6)
    if n < 2:
        return None
    whole = _run_prefix(prefix, x[:n], n)
    split = _run_prefix(prefix, x[:n], max(1, n // 2))
    for i, (a, b) in enumerate(zip(whole, split, strict=True)):
        if not isinstance(a, torch.Tensor) or a.dim() == 0 or a.shape[0] != n:
            return f"cut value {i} has no leading batch dimension"
        if not torch.allclose(a, b, rtol=1e-4, atol=1e-5):
            return f"cut value {i} depends on the other samples of its batch"
    return None


@dataclass
class CachedFeatures:
    """The prefix outputs of a whole data set, row-aligned with its samples."""

    tensors: tuple[torch.Tensor, ...]

    def __len__(self) -> int:
        return len(self.tensors[0])

    def __getitem__(self, idx) -> tuple[torch.Tensor, ...]:
        return tuple(t[idx] for t in self.tensors)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors)


def cache_prefix(
    model: nn.Module, datasets: Sequence[torch.Tensor], *, enabled: bool = True
) -> tuple[PrefixSplit | None, list[CachedFeatures] | None, PrefixPlan]:
    """Split ``model`` and run its frozen prefix over each of ``datasets`` once.

    Returns the split, the cached features (one per data set, same row order) and the
    plan recorded in the run metadata. With ``enabled=False`` or when the model has
    no cacheable prefix, returns ``(None, None, plan)`` with the reason.
    """
    if not enabled:
        return None, None, PrefixPlan(False, "disabled by the caller (cache_prefix=False)")
    split, plan = find_prefix(model)
    if split is None:
        return None, None, plan
    non_empty = [x for x in datasets if len(x)]
    if non_empty:
        problem = _check_per_sample(split.prefix, non_empty[0])
        if problem is not None:
            return None, None, PrefixPlan(False, f"prefix is not per-sample: {problem}")
    began = time.perf_counter()
    feats = [CachedFeatures(_run_prefix(split.prefix, x, CACHE_BATCH)) for x in datasets]
    seconds = time.perf_counter() - began
    plan = PrefixPlan(
        **{
            **asdict(split.plan),
            "feature_shapes": tuple(tuple(t.shape[1:]) for t in feats[0].tensors),
            "cached_bytes": sum(f.nbytes for f in feats),
            "cache_seconds": seconds,
        }
    )
    split.plan = plan
    return split, feats, plan


__all__ = [
    "CACHE_BATCH",
    "DETERMINISTIC_MODULES",
    "CachedFeatures",
    "PrefixPlan",
    "PrefixSplit",
    "cache_prefix",
    "find_prefix",
]
