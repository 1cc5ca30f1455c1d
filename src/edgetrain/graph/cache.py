"""Capture once per (model, strategy, batch shape): a small cache in front of :func:`capture`.

Weights are graph inputs, so a captured step stays valid while the model
trains; only what changes the graph's structure is part of the key: the model
object, which parameters train, input/target shapes and dtypes, the
optimizer with its hyper-parameters and the loss.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from edgetrain.graph.capture import capture
from edgetrain.graph.ir import TrainGraph


class GraphCache:
    """Maps a step's structural key to its :class:`TrainGraph`; models are held weakly."""

    def __init__(self) -> None:
        self._graphs: weakref.WeakKeyDictionary[nn.Module, dict[tuple, TrainGraph]] = (
            weakref.WeakKeyDictionary()
        )
        self.misses = 0

    @staticmethod
    def key(model: nn.Module, x: torch.Tensor, y: torch.Tensor, options: dict[str, Any]) -> tuple:
        trainable = tuple(n for n, p in model.named_parameters() if p.requires_grad)
        loss = options.get("loss", "cross_entropy")
        loss_key = loss if isinstance(loss, str) else id(loss)
        rest = tuple(
            sorted((k, v) for k, v in options.items() if k not in ("loss", "strategy_info"))
        )
        return (
            trainable,
            model.training,
            tuple(x.shape),
            x.dtype,
            tuple(y.shape),
            y.dtype,
            loss_key,
            rest,
        )

    def get(
        self,
        model: nn.Module,
        example_input: torch.Tensor,
        example_target: torch.Tensor,
        *,
        loss: str | Callable = "cross_entropy",
        **options: Any,
    ) -> TrainGraph:
        """The cached graph for this step, capturing it on first use."""
        key = self.key(model, example_input, example_target, {"loss": loss, **options})
        per_model = self._graphs.setdefault(model, {})
        if key not in per_model:
            self.misses += 1
            per_model[key] = capture(model, example_input, example_target, loss=loss, **options)
        return per_model[key]
