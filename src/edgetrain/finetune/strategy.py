"""Apply a fine-tuning strategy to a model in place.

A strategy is resolved in two steps: :func:`plan_strategy` decides, without
touching the model, which modules get LoRA adapters and which parameters train;
:func:`apply_plan` then freezes, wraps and unfreezes. Keeping the decision apart
from the mutation lets :func:`edgetrain.finetune.load_adapter` check a saved
adapter against the plan before it changes anything.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from edgetrain.errors import ConfigError, ModelError
from edgetrain.finetune.lora import LoRALinear, lora_modules, replace_module
from edgetrain.finetune.spec import StrategySpec


@dataclass(frozen=True)
class StrategyInfo:
    """What a strategy made trainable; plain data (JSON via :meth:`to_json`).

    ``trainable`` lists parameter names after LoRA injection (e.g.
    ``encoder.1.attn.q.lora_A.weight``); ``trainable_bytes`` counts their storage,
    which is what a device keeps gradients for and sends to its peers.
    """

    spec: StrategySpec
    trainable: tuple[str, ...]
    trainable_params: int
    trainable_bytes: int
    total_params: int
    lora_targets: tuple[str, ...] = ()
    trained_modules: tuple[str, ...] = ()
    stem: tuple[str, ...] = ()
    blocks: tuple[str, ...] = ()
    head: str | None = None

    @property
    def strategy(self) -> str:
        return str(self.spec)

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["spec"] = dataclasses.asdict(self.spec)
        d["strategy"] = self.strategy
        return d


@dataclass(frozen=True)
class StrategyPlan:
    """The model-independent outcome of resolving a strategy against module names."""

    spec: StrategySpec
    lora_targets: tuple[str, ...]
    trained_modules: tuple[str, ...]  # every parameter under these trains ("" = whole model)
    frozen_modules: tuple[str, ...] = ()  # ...except those under these (the stem in `full`)
    stem: tuple[str, ...] = ()
    blocks: tuple[str, ...] = ()
    head: str | None = None
    extra: dict = field(default_factory=dict)


def _under(name: str, prefixes: Sequence[str]) -> bool:
    return any(p == "" or name == p or name.startswith(p + ".") for p in prefixes)


def _resolve_names(model: nn.Module, blocks, head, stem, need_blocks: bool, need_head: bool):
    mtype = type(model).__name__
    blocks = list(blocks) if blocks is not None else getattr(model, "blocks", None)
    head = head if head is not None else getattr(model, "head", None)
    stem = list(stem) if stem is not None else list(getattr(model, "stem", []) or [])
    if need_blocks and not blocks:
        raise ModelError(
            f"model {mtype} has no block names: pass blocks=[...] with the qualified names of its "
            "repeated blocks in order (e.g. ['encoder.0', 'encoder.1']) or set model.blocks"
        )
    if need_head and not head:
        raise ModelError(
            f"model {mtype} has no head name: pass head='...' with the qualified name of its "
            "classifier module (e.g. 'fc') or set model.head"
        )
    modules = dict(model.named_modules())
    wanted = [*(blocks or []), *([head] if head else []), *stem]
    unknown = [n for n in wanted if n not in modules]
    if unknown:
        sample = ", ".join(repr(n) for n in list(modules)[1:13])
        raise ModelError(
            f"model {mtype} has no submodule(s) {', '.join(map(repr, unknown))}; "
            f"known submodules include {sample}"
        )
    return list(blocks or []), head, stem


def _coerce_spec(strategy, rank, alpha, freeze_stem) -> StrategySpec:
    if isinstance(strategy, StrategySpec):
        if freeze_stem is not None and freeze_stem != strategy.freeze_stem:
            strategy = dataclasses.replace(strategy, freeze_stem=bool(freeze_stem))
        return strategy
    return StrategySpec.parse(strategy, rank=rank, alpha=alpha, freeze_stem=freeze_stem)


def plan_strategy(
    model: nn.Module,
    strategy: str | StrategySpec,
    *,
    blocks: Sequence[str] | None = None,
    head: str | None = None,
    stem: Sequence[str] | None = None,
    rank: int = 4,
    alpha: float = 8.0,
    freeze_stem: bool | None = None,
) -> StrategyPlan:
    """Decide targets and trained modules for ``strategy`` without changing ``model``."""
    spec = _coerce_spec(strategy, rank, alpha, freeze_stem)
    blocks, head, stem = _resolve_names(
        model,
        blocks,
        head,
        stem,
        need_blocks=spec.kind in ("ft", "lora"),
        need_head=spec.kind != "full",
    )
    if spec.kind in ("ft", "lora") and spec.k > len(blocks):
        raise ConfigError(
            f"strategy '{spec}' trains the last {spec.k} blocks but model {type(model).__name__} "
            f"has {len(blocks)} ({', '.join(blocks)}); use k between 1 and {len(blocks)}"
        )
    frozen: tuple[str, ...] = ()
    targets: list[str] = []
    if spec.kind == "full":
        trained = [""]
        frozen = tuple(stem) if spec.freeze_stem else ()
    elif spec.kind == "lp":
        trained = [head]
    elif spec.kind == "ft":
        trained = [*blocks[-spec.k :], head]
    else:
        trained = [head]
        for b in blocks[-spec.k :]:
            block = model.get_submodule(b)
            for name, mod in block.named_modules():
                if isinstance(mod, nn.MultiheadAttention):
                    raise ModelError(
                        f"block {b!r} uses nn.MultiheadAttention ({b}.{name}), whose fused q/k/v "
                        "projection cannot carry LoRA adapters; build attention from separate "
                        "nn.Linear q/k/v/out layers (see edgetrain.models.attention.SelfAttention)"
                    )
                if isinstance(mod, nn.Linear) and not _under(f"{b}.{name}", [head]):
                    targets.append(f"{b}.{name}" if name else b)
        if not targets:
            raise ModelError(
                f"strategy '{spec}': the last {spec.k} block(s) {blocks[-spec.k :]} contain no "
                "nn.Linear layer to adapt; use 'ft-k' for this model"
            )
    if spec.kind != "full" and not spec.freeze_stem:
        trained += [s for s in stem if s not in trained]
    return StrategyPlan(
        spec=spec,
        lora_targets=tuple(targets),
        trained_modules=tuple(trained),
        frozen_modules=frozen,
        stem=tuple(stem),
        blocks=tuple(blocks),
        head=head,
    )


def planned_trainable(model: nn.Module, plan: StrategyPlan) -> dict[str, torch.Size]:
    """Trainable parameter names and shapes ``plan`` would produce on ``model`` (no mutation)."""
    out: dict[str, torch.Size] = {}
    for name, p in model.named_parameters():
        owner = name.rpartition(".")[0]
        if owner in plan.lora_targets:
            continue  # the wrapped base layer is frozen
        if _under(name, plan.trained_modules) and not _under(name, plan.frozen_modules):
            out[name] = p.shape
    for t in plan.lora_targets:
        lin = model.get_submodule(t)
        out[f"{t}.lora_A.weight"] = torch.Size([plan.spec.rank, lin.in_features])
        out[f"{t}.lora_B.weight"] = torch.Size([lin.out_features, plan.spec.rank])
    return out


def apply_plan(model: nn.Module, plan: StrategyPlan, seed: int = 0) -> StrategyInfo:
    """Freeze, inject LoRA and unfreeze per ``plan``; returns the resulting info."""
    existing = lora_modules(model)
    if existing:
        raise ModelError(
            f"model {type(model).__name__} already carries LoRA adapters ({', '.join(existing)}); "
            "apply a strategy to a fresh model, or call edgetrain.finetune.merge_lora first"
        )
    for p in model.parameters():
        p.requires_grad_(False)
    gen = torch.Generator().manual_seed(int(seed))
    for t in plan.lora_targets:
        base = model.get_submodule(t)
        if not isinstance(base, nn.Linear):
            raise ModelError(f"LoRA target {t!r} is a {type(base).__name__}, expected nn.Linear")
        replace_module(model, t, LoRALinear(base, plan.spec.rank, plan.spec.alpha, generator=gen))
    for name, p in model.named_parameters():
        if ".base_layer." in f".{name}" and name.rpartition(".base_layer.")[0] in plan.lora_targets:
            continue
        if _under(name, plan.trained_modules) and not _under(name, plan.frozen_modules):
            p.requires_grad_(True)
        if ".lora_A." in name or ".lora_B." in name:
            p.requires_grad_(True)
    info = describe(model, plan)
    model.edgetrain_strategy = info
    return info


def describe(model: nn.Module, plan: StrategyPlan) -> StrategyInfo:
    """Count what currently trains in ``model`` under ``plan``'s labels."""
    params = dict(model.named_parameters())
    trainable = tuple(n for n, p in params.items() if p.requires_grad)
    return StrategyInfo(
        spec=plan.spec,
        trainable=trainable,
        trainable_params=sum(params[n].numel() for n in trainable),
        trainable_bytes=sum(params[n].numel() * params[n].element_size() for n in trainable),
        total_params=sum(p.numel() for p in params.values()),
        lora_targets=plan.lora_targets,
        trained_modules=plan.trained_modules,
        stem=plan.stem,
        blocks=plan.blocks,
        head=plan.head,
    )


def apply_strategy(
    model: nn.Module,
    strategy: str | StrategySpec,
    *,
    blocks: Sequence[str] | None = None,
    head: str | None = None,
    stem: Sequence[str] | None = None,
    rank: int = 4,
    alpha: float = 8.0,
    freeze_stem: bool | None = None,
    seed: int = 0,
) -> StrategyInfo:
    """Make ``model`` train per ``strategy`` (``full``/``lp``/``ft-k``/``lora-k``), in place.

    Block, head and stem names default to the zoo attributes ``model.blocks``,
    ``model.head`` and ``model.stem``; pass them for a model of your own. The
    stem is frozen in lp/ft/lora and trainable in ``full`` unless
    ``freeze_stem`` says otherwise. LoRA A matrices are drawn from ``seed``.
    The returned info is also stored as ``model.edgetrain_strategy``.
    """
    plan = plan_strategy(
        model,
        strategy,
        blocks=blocks,
        head=head,
        stem=stem,
        rank=rank,
        alpha=alpha,
        freeze_stem=freeze_stem,
    )
    return apply_plan(model, plan, seed=seed)


def trainable_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The parameters that train (LoRA A/B, head, unfrozen blocks), detached.

    This is what a device stores between steps and sends to peers; frozen
    weights never change and need not travel. Tensors share storage with the
    model; clone them if the model keeps training.
    """
    return {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}
