"""Executors: who runs the selected clients' local training.

The in-process executor (default) trains clients one after another in this process with
one model object per submodel width, reloading the global weights for each client. A
client is just data (its partition indices, its task), never a process, so 1 000 clients
cost a few KB each.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from edgetrain.federated.local import LocalResult


@dataclass(frozen=True)
class ClientTask:
    """One client's work in one round (plain data, so any executor can ship it)."""

    cid: int
    round_idx: int
    width: float  # 1.0 = the full model; < 1 = HeteroFL submodel
    steps: int
    batch_size: int
    lr: float
    proximal_mu: float
    seed: int
    # the plan's compressed share of activation bytes per codec ((name, share), ...):
    # local training passes that share through the codec (edgetrain.federated.local)
    codec_share: tuple[tuple[str, float], ...] = ()
    # the global L2 norm each step's gradient is clipped to (federated.clip_grad_norm)
    clip_grad_norm: float | None = None


def slice_state(global_state: Mapping[str, torch.Tensor], like: Mapping[str, torch.Tensor]):
    """The leading slice of each global tensor with the shape of ``like`` (HeteroFL)."""
    out = {}
    for k, t in like.items():
        g = global_state[k]
        out[k] = g[tuple(slice(0, s) for s in t.shape)].clone() if t.dim() else g.clone()
    return out


class InProcessExecutor:
    """Train tasks sequentially in this process."""

    name = "inprocess"

    def __init__(
        self,
        build_model: Callable[[float], nn.Module],
        data_for: Callable[[int], tuple[torch.Tensor, torch.Tensor]],
    ) -> None:
        self.build_model = build_model
        self.data_for = data_for
        self._models: dict[float, nn.Module] = {}

    def _model(self, width: float) -> nn.Module:
        if width not in self._models:
            self._models[width] = self.build_model(width)
        return self._models[width]

    def run(
        self, global_state: Mapping[str, torch.Tensor], tasks: Sequence[ClientTask]
    ) -> list[LocalResult]:
        from edgetrain.federated.local import local_train  # federated imports sim

        out = []
        for t in tasks:
            model = self._model(t.width)
            model.load_state_dict(slice_state(global_state, model.state_dict()))
            x, y = self.data_for(t.cid)
            gen = torch.Generator().manual_seed(t.seed)
            out.append(
                local_train(
                    model,
                    x,
                    y,
                    steps=t.steps,
                    batch_size=t.batch_size,
                    lr=t.lr,
                    generator=gen,
                    proximal_mu=t.proximal_mu,
                    codec_share=dict(t.codec_share),
                    clip_grad_norm=t.clip_grad_norm,
                )  # fmt: skip
            )
        return out
