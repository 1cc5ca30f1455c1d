"""A LoRA-wrapped ``nn.Linear`` laid out like PEFT's ``lora.Linear``.

``y = base_layer(x) + lora_B(lora_A(x)) * (alpha / r)`` with ``W0`` (and its
bias) frozen and only ``A`` (r x in) and ``B`` (out x r) trained (Hu et al.;
TrainDeeploy §II-B, Fig. 1a). Submodule names (``base_layer``, ``lora_A``,
``lora_B``) match PEFT so adapter keys map one to one onto PEFT's on-disk
names. Initialisation follows PEFT's default: A Kaiming-uniform (a=sqrt(5)),
B zero, so an untrained adapter leaves the model's output unchanged.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class LoRALinear(nn.Module):
    """Frozen ``base_layer`` plus a trainable low-rank update ``B @ A``."""

    def __init__(
        self,
        base_layer: nn.Linear,
        rank: int,
        alpha: float,
        generator: torch.Generator | None = None,
    ):
        super().__init__()
        self.base_layer = base_layer
        self.rank = int(rank)
        self.alpha = float(alpha)
        self.scaling = self.alpha / self.rank
        dev, dt = base_layer.weight.device, base_layer.weight.dtype
        self.lora_A = nn.Linear(base_layer.in_features, self.rank, bias=False, device=dev, dtype=dt)
        self.lora_B = nn.Linear(
            self.rank, base_layer.out_features, bias=False, device=dev, dtype=dt
        )
        with torch.no_grad():
            nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5), generator=generator)
            nn.init.zeros_(self.lora_B.weight)
        for p in self.base_layer.parameters():
            p.requires_grad_(False)

    @property
    def in_features(self) -> int:
        return self.base_layer.in_features

    @property
    def out_features(self) -> int:
        return self.base_layer.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base_layer(x) + self.lora_B(self.lora_A(x)) * self.scaling

    def merged(self) -> nn.Linear:
        """A plain ``nn.Linear`` with ``W0 + scaling * B @ A`` folded in (for export)."""
        base = self.base_layer
        out = nn.Linear(
            base.in_features,
            base.out_features,
            bias=base.bias is not None,
            device=base.weight.device,
            dtype=base.weight.dtype,
        )
        with torch.no_grad():
            delta = (self.lora_B.weight @ self.lora_A.weight) * self.scaling
            out.weight.copy_(base.weight + delta)
            if base.bias is not None:
                out.bias.copy_(base.bias)
        out.weight.requires_grad_(base.weight.requires_grad)
        if out.bias is not None:
            out.bias.requires_grad_(base.bias.requires_grad)
        return out

    def extra_repr(self) -> str:
        return f"rank={self.rank}, alpha={self.alpha:g}"


def lora_modules(model: nn.Module) -> dict[str, LoRALinear]:
    """Every :class:`LoRALinear` in ``model`` by qualified name."""
    return {n: m for n, m in model.named_modules() if isinstance(m, LoRALinear)}


def replace_module(model: nn.Module, name: str, new: nn.Module) -> None:
    """Set the submodule at dotted ``name`` to ``new``."""
    parent_name, _, attr = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, attr, new)


def merge_lora(model: nn.Module) -> nn.Module:
    """Fold every adapter into its base weight, in place; returns ``model``.

    The merged model computes the same function with plain ``nn.Linear`` layers,
    which is what an inference-only export wants.
    """
    for name, mod in lora_modules(model).items():
        replace_module(model, name, mod.merged())
    if hasattr(model, "edgetrain_strategy"):
        model.edgetrain_strategy = None
    return model
