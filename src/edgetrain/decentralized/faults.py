"""Fault tolerance (MDLdroid §3.2.4): per-device file cache and rejoin.

Every iteration each device caches its parameters (safetensors) and its
iteration record (JSON). A lost device is skipped by the scheduler; when it
reconnects it sends its last record, the MA answers with the current iteration
and the device takes the aggregated global model, so no gradient is lost or
counted twice (the Σθ check in the trainer verifies it every iteration).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from edgetrain.errors import ConfigError
from edgetrain.runs import load_state, save_state


@dataclass(frozen=True)
class Fault:
    """Device ``device`` is lost before iteration ``lost_at`` and rejoins before
    ``rejoin_at`` (exclusive range of missed iterations; None = never rejoins)."""

    device: int
    lost_at: int
    rejoin_at: int | None = None

    def __post_init__(self) -> None:
        if self.lost_at < 0 or (self.rejoin_at is not None and self.rejoin_at <= self.lost_at):
            raise ConfigError(
                f"fault for device {self.device}: need 0 <= lost_at < rejoin_at, got "
                f"{self.lost_at}, {self.rejoin_at}"
            )

    def down(self, iteration: int) -> bool:
        return self.lost_at <= iteration and (self.rejoin_at is None or iteration < self.rejoin_at)

    @classmethod
    def parse(cls, text: str) -> Fault:
        """``"DEVICE@LOST[:REJOIN]"``, e.g. ``"2@3:5"``."""
        try:
            dev, rest = text.split("@")
            lost, _, rejoin = rest.partition(":")
            return cls(int(dev), int(lost), int(rejoin) if rejoin else None)
        except ValueError:
            raise ConfigError(
                f"cannot read fault {text!r}; write DEVICE@LOST_ITERATION[:REJOIN_ITERATION], "
                "e.g. 2@3:5"
            ) from None


class DeviceCache:
    """``root/device_<i>/params.safetensors`` + ``record.json``, written atomically."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)

    def _dir(self, device: int) -> Path:
        d = self.root / f"device_{device}"
        d.mkdir(parents=True, exist_ok=True)
        return d

    def save(self, device: int, state: Mapping[str, torch.Tensor], record: Mapping) -> None:
        d = self._dir(device)
        save_state(d / "params.safetensors", state)
        tmp = d / "record.json.tmp"
        tmp.write_text(json.dumps(dict(record), sort_keys=True))
        os.replace(tmp, d / "record.json")

    def record(self, device: int) -> dict | None:
        p = self.root / f"device_{device}" / "record.json"
        return json.loads(p.read_text()) if p.exists() else None

    def params(self, device: int) -> dict[str, torch.Tensor]:
        return load_state(self.root / f"device_{device}" / "params.safetensors")
