"""Command-line ``key=value`` options and id lists, parsed once for both commands.

Values are read as YAML scalars/lists (``size=28``, ``digits=[5,6,7,8,9]``,
``window=64``), so what a user types is what the loader or builder receives.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

from edgetrain.errors import ConfigError


def parse_options(pairs: Sequence[str] | None, flag: str) -> dict[str, Any]:
    """``["size=28", "digits=[5,6]"]`` -> ``{"size": 28, "digits": [5, 6]}``."""
    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"{flag} {pair!r}: expected KEY=VALUE, e.g. {flag} size=28")
        try:
            value = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError as exc:
            raise ConfigError(f"{flag} {pair!r}: the value is not valid YAML ({exc})") from None
        if key in out:
            raise ConfigError(f"{flag} {key} given twice")
        out[key] = value
    return out


def parse_ids(text: str | None, flag: str) -> tuple[int, ...] | None:
    """``"1,2,3"`` -> ``(1, 2, 3)``; None stays None."""
    if text is None:
        return None
    try:
        ids = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ConfigError(
            f"{flag} {text!r}: expected comma-separated integers, e.g. 1,2,3"
        ) from None
    if not ids:
        raise ConfigError(f"{flag} needs at least one id")
    return ids
