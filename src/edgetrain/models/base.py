"""The attributes every zoo model carries.

Fine-tuning strategies, LoRA and TrainGraph read these instead of guessing a
model's layout: which modules are the stem (frozen by "frozen tokenizer"),
which are the repeated blocks (for "last k blocks") and which is the head.
"""

from __future__ import annotations

import torch
from torch import nn


def annotate(
    model: nn.Module,
    *,
    input_shape: tuple[int, ...],
    num_classes: int,
    stem: list[str],
    blocks: list[str],
    head: str,
    input_dtype: torch.dtype = torch.float32,
) -> nn.Module:
    """Attach the zoo contract attributes to ``model`` and check the names exist."""
    names = dict(model.named_modules())
    for name in [*stem, *blocks, head]:
        if name not in names:  # a bug in the zoo, not a user mistake
            raise AssertionError(f"{type(model).__name__} has no submodule {name!r}")
    model.input_shape = tuple(int(s) for s in input_shape)
    model.num_classes = int(num_classes)
    model.input_dtype = input_dtype
    model.stem = list(stem)
    model.blocks = list(blocks)
    model.head = head
    return model
