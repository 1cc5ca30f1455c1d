"""Which parameters a fine-tuning run trains, as a small value object.

The strategy names follow TrainDeeploy (Fig. 3, Table I): ``full`` trains
everything, ``lp`` (linear probing) only the classifier head, ``ft-k`` the last
``k`` blocks plus the head, and ``lora-k`` rank-``r`` LoRA adapters on every
``nn.Linear`` of the last ``k`` blocks plus the (fully trained) head.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from edgetrain.errors import ConfigError

#: LoRA defaults. r=4 is the rank TrainDeeploy uses (§V-A, Fig. 3). alpha=8
#: (scaling alpha/r = 2) is PEFT's ``LoraConfig`` default ``lora_alpha``; the
#: paper does not state alpha.
DEFAULT_RANK = 4
DEFAULT_ALPHA = 8.0

_KINDS = ("full", "lp", "ft", "lora")
_ACCEPTED = "'full', 'lp', 'ft-K' or 'lora-K' (K >= 1, e.g. 'ft-2', 'lora-1')"


@dataclass(frozen=True)
class StrategySpec:
    """A parsed strategy: kind, number of trained blocks and LoRA hyper-parameters.

    ``k`` is 0 for ``full`` and ``lp``. ``freeze_stem`` is True by default, as in
    TrainDeeploy where the convolutional tokenizer is frozen; :meth:`parse`
    leaves the stem trainable for ``full`` unless asked otherwise.
    """

    kind: str
    k: int = 0
    rank: int = DEFAULT_RANK
    alpha: float = DEFAULT_ALPHA
    freeze_stem: bool = True

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ConfigError(f"unknown fine-tuning strategy kind {self.kind!r}; use {_ACCEPTED}")
        if self.kind in ("ft", "lora") and self.k < 1:
            raise ConfigError(f"strategy '{self.kind}-{self.k}' needs k >= 1; use {_ACCEPTED}")
        if self.kind in ("full", "lp") and self.k != 0:
            raise ConfigError(f"strategy {self.kind!r} takes no block count (got k={self.k})")
        if self.kind == "lora" and (int(self.rank) != self.rank or self.rank < 1):
            raise ConfigError(f"LoRA rank must be a positive integer, got {self.rank!r}")
        if self.kind == "lora" and not self.alpha > 0:
            raise ConfigError(f"LoRA alpha must be > 0, got {self.alpha!r}")

    @classmethod
    def parse(
        cls,
        text: str,
        *,
        rank: int = DEFAULT_RANK,
        alpha: float = DEFAULT_ALPHA,
        freeze_stem: bool | None = None,
    ) -> StrategySpec:
        """Parse ``"full" | "lp" | "ft-2" | "lora-1"`` (case-insensitive)."""
        if not isinstance(text, str):
            raise ConfigError(f"strategy must be a string like 'lora-2', got {text!r}")
        t = text.strip().lower()
        m = re.fullmatch(r"(full|lp|ft|lora)(?:-(\d+))?", t)
        if m is None:
            raise ConfigError(f"unknown fine-tuning strategy {text!r}; use {_ACCEPTED}")
        kind, k = m.group(1), m.group(2)
        if kind in ("ft", "lora") and k is None:
            raise ConfigError(f"strategy {text!r} needs a block count; use {_ACCEPTED}")
        if kind in ("full", "lp") and k is not None:
            raise ConfigError(f"strategy {text!r}: {kind!r} takes no block count; use {_ACCEPTED}")
        if freeze_stem is None:
            freeze_stem = kind != "full"
        return cls(kind, int(k or 0), int(rank), float(alpha), bool(freeze_stem))

    @property
    def is_lora(self) -> bool:
        return self.kind == "lora"

    def __str__(self) -> str:
        return self.kind if self.kind in ("full", "lp") else f"{self.kind}-{self.k}"
