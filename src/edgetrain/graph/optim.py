"""Losses and optimizer updates written as plain tensor code, so they trace into the graph.

Each update mirrors ``torch.optim``'s single-tensor implementation
(weight_decay=0, dampening=0, no nesterov/amsgrad) and writes in place into the
parameter and its state, as an on-device step would. Momentum buffers start at
zero: ``buf = m * 0 + g`` equals torch's first-step ``buf = g``, so one static
graph serves every step. Adam keeps a scalar float32 ``step`` counter.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from edgetrain.errors import ConfigError

LOSSES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "cross_entropy": F.cross_entropy,
    "mse": F.mse_loss,
}
OPTIMIZERS = ("sgd", "sgd-momentum", "adam")


def resolve_loss(loss: str | Callable) -> tuple[str, Callable]:
    """Loss name for the graph's metadata and the function to trace."""
    if callable(loss):
        return getattr(loss, "__name__", "custom"), loss
    if loss not in LOSSES:
        raise ConfigError(f"unknown loss {loss!r}; use one of {sorted(LOSSES)} or a callable")
    return loss, LOSSES[loss]


@dataclass(frozen=True)
class OptimizerSpec:
    """Optimizer choice and hyper-parameters (torch.optim defaults for Adam)."""

    name: str = "sgd"
    lr: float = 0.01
    momentum: float = 0.9
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8

    def __post_init__(self) -> None:
        if self.name not in OPTIMIZERS:
            raise ConfigError(f"unknown optimizer {self.name!r}; use one of {list(OPTIMIZERS)}")
        if not self.lr > 0:
            raise ConfigError(f"learning rate must be > 0, got {self.lr!r}")

    def state_slots(self) -> tuple[str, ...]:
        """Per-parameter state names."""
        return {"sgd": (), "sgd-momentum": ("momentum_buffer",), "adam": ("exp_avg", "exp_avg_sq")}[
            self.name
        ]

    def has_step(self) -> bool:
        return self.name == "adam"

    def init_state(self, params: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Zero state for ``params`` (trainable ones), keyed ``"<slot>.<param>"`` (+ ``"step"``)."""
        state = {
            f"{slot}.{n}": torch.zeros_like(p, memory_format=torch.contiguous_format)
            for n, p in params.items()
            for slot in self.state_slots()
        }
        if self.has_step():
            state["step"] = torch.zeros((), dtype=torch.float32)
        return state

    def update(
        self,
        params: list[torch.Tensor],
        grads: list[torch.Tensor],
        state: list[list[torch.Tensor]],
        step: torch.Tensor | None,
        on_param: Callable[[int], None] | None = None,
    ) -> None:
        """Apply one step in place. ``state[i]`` holds parameter i's slots in ``state_slots`` order."""
        lr = self.lr
        if self.name == "adam":
            assert step is not None
            step.add_(1)
            b1, b2 = self.betas
            bc1 = 1 - torch.pow(b1, step)
            bc2_sqrt = torch.sqrt(1 - torch.pow(b2, step))
        for i, (p, g) in enumerate(zip(params, grads, strict=True)):
            if on_param is not None:
                on_param(i)
            if self.name == "sgd":
                p.sub_(g * lr)
            elif self.name == "sgd-momentum":
                (buf,) = state[i]
                buf.mul_(self.momentum).add_(g)
                p.sub_(buf * lr)
            else:
                m, v = state[i]
                m.lerp_(g, 1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                denom = v.sqrt() / bc2_sqrt + self.eps
                p.sub_(m / denom * (lr / bc1))
