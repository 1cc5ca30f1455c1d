"""Where a fine-tune starts from and what it trains on, as plain, JSON-able data.

* :class:`DataRef` names a data set, its loader options and (for wearables) which
  subjects to keep or drop, so "pretrain on 8 subjects, adapt to the 9th" is two
  references to the same data set.
* A pretrained model is ``model.safetensors`` plus its :class:`Card` (model name
  and options, data, classes, seed, accuracy). The card is written both as
  ``card.json`` beside the weights and into the safetensors header metadata, so a
  single ``.safetensors`` file copied to another machine still says what it is.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import safe_open

from edgetrain.errors import ConfigError, DataError, ModelError
from edgetrain.runs import load_state

CARD = "card.json"
WEIGHTS = "model.safetensors"
CARD_FORMAT = "edgetrain-pretrained-1"


@dataclass(frozen=True)
class DataRef:
    """A data set by name with loader ``options`` and an optional subject filter."""

    name: str
    options: dict[str, Any] = field(default_factory=dict)
    groups: tuple[int, ...] | None = None
    exclude_groups: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        for attr in ("groups", "exclude_groups"):
            value = getattr(self, attr)
            if value is not None:
                object.__setattr__(self, attr, tuple(int(v) for v in value))

    def load(self):
        """Load the data set and apply the subject filter."""
        from edgetrain import data as data_mod

        dataset = data_mod.load(self.name, **dict(self.options))
        return select_groups(dataset, self.groups, self.exclude_groups)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        for k in ("groups", "exclude_groups"):
            out[k] = None if out[k] is None else list(out[k])
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DataRef:
        return cls(
            name=data["name"],
            options=dict(data.get("options") or {}),
            groups=data.get("groups"),
            exclude_groups=data.get("exclude_groups"),
        )

    def describe(self) -> str:
        parts = [self.name]
        parts += [f"{k}={v}" for k, v in self.options.items()]
        if self.groups is not None:
            parts.append("groups=" + ",".join(map(str, self.groups)))
        if self.exclude_groups is not None:
            parts.append("without groups " + ",".join(map(str, self.exclude_groups)))
        return " ".join(parts)


def select_groups(dataset, groups: Sequence[int] | None, exclude: Sequence[int] | None):
    """Keep the samples of ``groups`` (subjects) and drop those of ``exclude``."""
    if groups is None and exclude is None:
        return dataset
    if dataset.groups is None:
        raise DataError(
            f"data set {dataset.name!r} records no subjects/groups, so --groups / "
            "--exclude-groups cannot be applied (use a data set such as 'watch')"
        )
    g = dataset.groups.numpy()
    present = sorted(int(v) for v in np.unique(g))
    asked = list(groups or []) + list(exclude or [])
    unknown = sorted(set(asked) - set(present))
    if unknown:
        raise DataError(
            f"data set {dataset.name!r} has no group(s) {unknown}; its groups are {present}"
        )
    mask = np.ones(len(g), dtype=bool)
    if groups is not None:
        mask &= np.isin(g, list(groups))
    if exclude is not None:
        mask &= ~np.isin(g, list(exclude))
    if not mask.any():
        raise DataError(f"the group filter leaves no samples of data set {dataset.name!r}")
    return dataset.subset(np.flatnonzero(mask))


@dataclass(frozen=True)
class Card:
    """What a pretrained model is: enough to rebuild it and to judge a transfer."""

    model: str
    model_options: dict[str, Any]
    data: DataRef
    classes: list[str]
    input_shape: list[int]
    seed: int
    accuracy: float | None
    train: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": CARD_FORMAT,
            "model": self.model,
            "model_options": dict(self.model_options),
            "data": self.data.to_json(),
            "classes": list(self.classes),
            "input_shape": list(self.input_shape),
            "seed": self.seed,
            "accuracy": self.accuracy,
            "train": dict(self.train),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str) -> Card:
        if data.get("format") != CARD_FORMAT:
            raise ModelError(
                f"{where} is not an edgetrain pretrained-model card (format "
                f"{data.get('format')!r}, expected {CARD_FORMAT!r})"
            )
        try:
            return cls(
                model=data["model"],
                model_options=dict(data["model_options"]),
                data=DataRef.from_json(data["data"]),
                classes=list(data["classes"]),
                input_shape=[int(v) for v in data["input_shape"]],
                seed=int(data["seed"]),
                accuracy=data.get("accuracy"),
                train=dict(data.get("train") or {}),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelError(f"{where}: card is missing or has a bad field ({exc})") from exc


@dataclass
class Pretrained:
    """A loaded pretrained model: its card, its weights and where they came from."""

    card: Card
    state: dict[str, torch.Tensor]
    path: Path


def load_pretrained(source: str | Path) -> Pretrained:
    """Read a pretrain run directory or a bare ``.safetensors`` file with its card."""
    path = Path(source)
    if path.is_dir():
        weights = path / WEIGHTS
        card_path = path / CARD
        if not weights.is_file() or not card_path.is_file():
            raise ModelError(
                f"{path} is not a pretrain run directory: expected {WEIGHTS} and {CARD} in it "
                "(create one with `edgetrain pretrain`)"
            )
        try:
            card_data = json.loads(card_path.read_text())
        except json.JSONDecodeError as exc:
            raise ModelError(f"{card_path} is not valid JSON ({exc})") from exc
        card = Card.from_json(card_data, str(card_path))
    elif path.is_file():
        weights = path
        card = Card.from_json(_card_from_metadata(path), f"{path} (safetensors metadata)")
    else:
        raise ConfigError(
            f"--from {source}: no such run directory or file (expected a directory written by "
            "`edgetrain pretrain` or its model.safetensors)"
        )
    return Pretrained(card=card, state=load_state(weights), path=weights.resolve())


def _card_from_metadata(path: Path) -> dict[str, Any]:
    try:
        with safe_open(str(path), framework="pt") as fh:
            meta = fh.metadata() or {}
    except Exception as exc:  # safetensors raises several types for a bad header
        raise ModelError(f"{path} is not a readable safetensors file ({exc})") from exc
    if "card" not in meta:
        raise ModelError(
            f"{path} carries no edgetrain card in its metadata, so its model is unknown; "
            "pass the pretrain run directory instead, or a file written by `edgetrain pretrain`"
        )
    try:
        return json.loads(meta["card"])
    except json.JSONDecodeError as exc:
        raise ModelError(f"{path}: the card in its metadata is not valid JSON ({exc})") from exc
