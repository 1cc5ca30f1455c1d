"""Save and load what a strategy trains, in PEFT's on-disk adapter format.

A directory holds ``adapter_config.json`` (PEFT ``LoraConfig`` fields) and
``adapter_model.safetensors`` with keys ``base_model.model.<module>.lora_A.weight``,
``...lora_B.weight`` and, for modules trained in full (the head), the plain
``base_model.model.<module>.<param>`` — exactly what ``peft``'s
``save_pretrained`` writes for ``LoraConfig(target_modules=..., modules_to_save=...)``,
so ``PeftModel.from_pretrained(base, directory)`` loads a LoRA adapter saved here.
edgetrain's own description of the strategy travels in the safetensors header
metadata (``edgetrain.*`` string keys), which PEFT ignores.

``full``/``lp``/``ft-k`` runs have no low-rank part; they are saved in the same
layout with ``"peft_type": null`` (PEFT cannot load those; edgetrain can).
Loading checks names, shapes, rank and strategy first and loads nothing unless
everything matches.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from edgetrain.errors import ModelError
from edgetrain.finetune.lora import lora_modules
from edgetrain.finetune.spec import StrategySpec
from edgetrain.finetune.strategy import (
    StrategyInfo,
    StrategyPlan,
    apply_plan,
    planned_trainable,
)

CONFIG_NAME = "adapter_config.json"
WEIGHTS_NAME = "adapter_model.safetensors"
PREFIX = "base_model.model."


def _peft_key(name: str) -> str:
    return PREFIX + name


def _current_info(model: nn.Module) -> StrategyInfo | None:
    info = getattr(model, "edgetrain_strategy", None)
    return info if isinstance(info, StrategyInfo) else None


def save_adapter(model: nn.Module, directory: str | Path, info: StrategyInfo | None = None) -> Path:
    """Write the trainable parameters of ``model`` to ``directory`` (created if needed)."""
    info = info or _current_info(model)
    if info is None:
        raise ModelError(
            "save_adapter needs the StrategyInfo returned by apply_strategy (or a model that "
            "went through apply_strategy); none was given"
        )
    params = dict(model.named_parameters())
    missing = [n for n in info.trainable if n not in params]
    if missing:
        raise ModelError(f"model has no parameter(s) {missing} listed in the strategy info")
    tensors = {_peft_key(n): params[n].detach().contiguous().cpu() for n in info.trainable}
    spec = info.spec
    modules_to_save = [m for m in info.trained_modules if m]
    config: dict = {
        "peft_type": "LORA" if spec.is_lora else None,
        "task_type": None,
        "base_model_name_or_path": None,
        "inference_mode": True,
        "r": spec.rank if spec.is_lora else 0,
        "lora_alpha": spec.alpha if spec.is_lora else 0,
        "lora_dropout": 0.0,
        "target_modules": list(info.lora_targets),
        "modules_to_save": modules_to_save or None,
        "bias": "none",
        "fan_in_fan_out": False,
        "init_lora_weights": True,
        "use_rslora": False,
        "use_dora": False,
        "layers_to_transform": None,
        "layers_pattern": None,
        "rank_pattern": {},
        "alpha_pattern": {},
        "revision": None,
    }
    metadata = {
        "format": "pt",
        "edgetrain.strategy": str(spec),
        "edgetrain.spec": json.dumps(dataclasses.asdict(spec)),
        "edgetrain.stem": json.dumps(list(info.stem)),
        "edgetrain.blocks": json.dumps(list(info.blocks)),
        "edgetrain.head": json.dumps(info.head),
        "edgetrain.lora_targets": json.dumps(list(info.lora_targets)),
        "edgetrain.trained_modules": json.dumps(list(info.trained_modules)),
    }
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / WEIGHTS_NAME), metadata=metadata)
    (out / CONFIG_NAME).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return out


def _read(directory: Path) -> tuple[dict, dict[str, torch.Tensor], dict[str, str]]:
    cfg_path, w_path = directory / CONFIG_NAME, directory / WEIGHTS_NAME
    absent = [str(p) for p in (cfg_path, w_path) if not p.is_file()]
    if absent:
        raise ModelError(
            f"adapter directory {str(directory)!r} lacks {', '.join(absent)}; expected "
            f"{CONFIG_NAME} and {WEIGHTS_NAME} as written by save_adapter or peft's save_pretrained"
        )
    try:
        config = json.loads(cfg_path.read_text())
    except json.JSONDecodeError as exc:
        raise ModelError(f"{cfg_path} is not valid JSON: {exc}") from exc
    tensors: dict[str, torch.Tensor] = {}
    with safe_open(str(w_path), framework="pt") as f:
        metadata = f.metadata() or {}
        for k in f.keys():  # noqa: SIM118 - safe_open has no __iter__
            tensors[k] = f.get_tensor(k)
    return config, tensors, metadata


def _plan_from_files(model: nn.Module, config: dict, metadata: dict[str, str]) -> StrategyPlan:
    """Rebuild the plan the adapter was saved under, without touching ``model``."""
    if "edgetrain.spec" in metadata:
        spec = StrategySpec(**json.loads(metadata["edgetrain.spec"]))
        return StrategyPlan(
            spec=spec,
            lora_targets=tuple(json.loads(metadata["edgetrain.lora_targets"])),
            trained_modules=tuple(json.loads(metadata["edgetrain.trained_modules"])),
            frozen_modules=tuple(json.loads(metadata["edgetrain.stem"]))
            if spec.kind == "full" and spec.freeze_stem
            else (),
            stem=tuple(json.loads(metadata["edgetrain.stem"])),
            blocks=tuple(json.loads(metadata["edgetrain.blocks"])),
            head=json.loads(metadata["edgetrain.head"]),
        )
    # A plain PEFT LoRA adapter: targets and fully trained modules come from its config.
    if config.get("peft_type") != "LORA":
        raise ModelError(
            f"adapter has peft_type {config.get('peft_type')!r} and no edgetrain metadata; "
            "edgetrain loads LoRA adapters (peft_type 'LORA') or adapters written by save_adapter"
        )
    targets = config.get("target_modules") or []
    if isinstance(targets, str):
        raise ModelError(
            f"adapter target_modules is a pattern ({targets!r}); edgetrain needs the explicit "
            "list of qualified module names"
        )
    blocks = list(getattr(model, "blocks", []) or [])
    k = max(1, sum(any(t.startswith(b + ".") for t in targets) for b in blocks))
    spec = StrategySpec("lora", k, int(config.get("r", 4)), float(config.get("lora_alpha", 8)))
    return StrategyPlan(
        spec=spec,
        lora_targets=tuple(targets),
        trained_modules=tuple(config.get("modules_to_save") or ()),
        blocks=tuple(blocks),
        head=getattr(model, "head", None),
        stem=tuple(getattr(model, "stem", []) or []),
    )


def _compare(expected: dict[str, torch.Size], tensors: dict[str, torch.Tensor]) -> list[str]:
    problems = []
    got = {k[len(PREFIX) :] if k.startswith(PREFIX) else k: v for k, v in tensors.items()}
    for name in sorted(set(expected) - set(got)):
        problems.append(f"missing tensor {_peft_key(name)!r} (shape {tuple(expected[name])})")
    for name in sorted(set(got) - set(expected)):
        problems.append(f"unexpected tensor {_peft_key(name)!r} (shape {tuple(got[name].shape)})")
    for name in sorted(set(got) & set(expected)):
        if tuple(got[name].shape) != tuple(expected[name]):
            problems.append(
                f"shape of {_peft_key(name)!r}: adapter {tuple(got[name].shape)} vs model "
                f"{tuple(expected[name])}"
            )
    return problems


def load_adapter(model: nn.Module, directory: str | Path) -> StrategyInfo:
    """Load an adapter into ``model`` in place; all of it or, on any mismatch, nothing.

    ``model`` is either fresh (the strategy and LoRA layers are applied from the
    saved description) or already prepared with the same strategy. Every
    mismatch (strategy, rank, LoRA targets, missing/unexpected names, shapes) is
    listed in one :class:`ModelError`.
    """
    directory = Path(directory)
    config, tensors, metadata = _read(directory)
    plan = _plan_from_files(model, config, metadata)
    problems: list[str] = []
    current = _current_info(model)
    has_lora = bool(lora_modules(model))
    if current is not None or has_lora:
        if current is None:
            problems.append(
                "model carries LoRA layers but no edgetrain strategy; use a fresh model"
            )
            expected: dict[str, torch.Size] = {}
        else:
            if str(current.spec) != str(plan.spec):
                problems.append(f"strategy: adapter '{plan.spec}' vs model '{current.spec}'")
            if plan.spec.is_lora and current.spec.is_lora and current.spec.rank != plan.spec.rank:
                problems.append(
                    f"LoRA rank: adapter r={plan.spec.rank} vs model r={current.spec.rank}"
                )
            if set(current.lora_targets) != set(plan.lora_targets):
                problems.append(
                    f"LoRA targets: adapter {sorted(plan.lora_targets)} vs model "
                    f"{sorted(current.lora_targets)}"
                )
            params = dict(model.named_parameters())
            expected = {n: params[n].shape for n in current.trainable}
    else:
        modules = dict(model.named_modules())
        for t in plan.lora_targets:
            if t not in modules:
                problems.append(f"LoRA target module {t!r} does not exist in the model")
            elif not isinstance(modules[t], nn.Linear):
                problems.append(
                    f"LoRA target {t!r} is a {type(modules[t]).__name__}, not nn.Linear"
                )
        for m in plan.trained_modules:
            if m and m not in modules:
                problems.append(f"trained module {m!r} does not exist in the model")
        for name in (plan.head, *plan.blocks, *plan.stem):
            if name and name not in modules:
                problems.append(f"module {name!r} named by the adapter does not exist in the model")
        expected = {} if problems else planned_trainable(model, plan)
    problems += _compare(expected, tensors)
    if problems:
        raise ModelError(
            f"adapter in {str(directory)!r} does not match the model ({len(problems)} "
            "problem(s)); nothing was loaded:\n  - " + "\n  - ".join(problems)
        )
    if current is None:
        current = apply_plan(model, plan)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for key, value in tensors.items():
            name = key[len(PREFIX) :] if key.startswith(PREFIX) else key
            params[name].copy_(value.to(params[name].dtype))
    return current
