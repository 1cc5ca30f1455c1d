"""Shared printing helpers for commands: JSON on stdout, tables and progress on stderr-safe consoles."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from edgetrain.runs import _jsonable

console = Console()
err_console = Console(stderr=True)


def print_json(obj: Any) -> None:
    """Print exactly one JSON document on stdout (NaN/inf as null, so it is valid JSON)."""
    print(json.dumps(_jsonable(obj), indent=2))


def fmt(value: Any) -> str:
    if isinstance(value, float):
        if not math.isfinite(value):
            return "-"
        return f"{value:,.4g}" if abs(value) < 1e5 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, (list, tuple)):
        return "×".join(str(v) for v in value)
    if value is None:
        return "-"
    return str(value)


def print_table(title: str, rows: Sequence[dict[str, Any]], columns: Iterable[str]) -> None:
    columns = list(columns)
    table = Table(title=title, header_style="bold")
    for col in columns:
        table.add_column(col, justify="right" if rows and _numeric(rows[0].get(col)) else "left")
    for row in rows:
        table.add_row(*(fmt(row.get(col)) for col in columns))
    console.print(table)


def _numeric(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def step_progress(disable: bool = False, unit: str = "steps"):
    """The progress bar every training command shows on stderr (``unit``, status, elapsed).

    Use ``progress.add_task(description, total=None, status="")`` and update it from the
    library's ``on_step(done, total)`` / ``on_epoch`` callbacks. Disabled for ``--json``.
    """
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn(f"{{task.completed}}/{{task.total}} {unit}".rstrip()),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        console=err_console,
        transient=disable,
        disable=disable,
    )


def check_output_file(path: Path | None, option: str) -> None:
    """Fail before any work if ``option``'s file could not be written: its folder must be an
    existing, writable directory and the path itself must not be a directory."""
    if path is None:
        return
    from edgetrain.errors import ConfigError

    parent = Path(path).parent
    if Path(path).is_dir():
        raise ConfigError(f"{option} {path} is a directory; give a file path")
    if not parent.is_dir():
        raise ConfigError(
            f"{option} {path}: folder {parent} does not exist or is not a directory; "
            "give a path in an existing, writable folder"
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{option} {path}: folder {parent} is not writable")
