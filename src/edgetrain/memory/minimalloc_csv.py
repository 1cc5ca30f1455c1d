"""MiniMalloc's CSV problem format, so the allocator runs on public benchmarks.

Header ``id,lower,upper,size`` (``upper`` exclusive); a solution adds ``offset``.
Like MiniMalloc's own reader (src/converter.cc) we also accept the older header
names ``buffer``/``buffer_id`` for ``id``, ``start``/``begin`` for ``lower`` and
``end`` for ``upper`` — an ``end`` column is inclusive, so 1 is added to it.
Extra columns (``alignment``, ``gaps``) are not supported and are rejected.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path

from edgetrain.errors import DataError
from edgetrain.memory.liveness import Buffer

EXPECTED_HEADER = "id,lower,upper,size"
_RENAME = {"buffer": "id", "buffer_id": "id", "start": "lower", "begin": "lower", "end": "upper"}


def read_minimalloc_csv(path: str | Path) -> list[Buffer]:
    """Buffers of a MiniMalloc CSV problem (an ``offset`` column, if any, is ignored)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file; expected a MiniMalloc CSV ({EXPECTED_HEADER})")
    with path.open(newline="") as fh:
        rows = list(csv.reader(fh))
    if not rows:
        raise DataError(f"{path}:1: empty file; expected header {EXPECTED_HEADER!r}")
    header = [c.strip() for c in rows[0]]
    names = [_RENAME.get(c, c) for c in header]
    addend = 1 if "end" in header else 0
    missing = [c for c in ("id", "lower", "upper", "size") if c not in names]
    unknown = [c for c in names if c not in ("id", "lower", "upper", "size", "offset")]
    if missing or unknown or len(set(names)) != len(names):
        raise DataError(
            f"{path}:1: bad header {','.join(header)!r}; expected {EXPECTED_HEADER!r} "
            "(optionally followed by ',offset')"
        )
    col = {c: names.index(c) for c in names}
    buffers: list[Buffer] = []
    seen: set[str] = set()
    for line_no, row in enumerate(rows[1:], start=2):
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != len(names):
            raise DataError(
                f"{path}:{line_no}: {len(row)} fields, expected {len(names)} ({','.join(header)})"
            )
        bid = row[col["id"]].strip()
        try:
            lower = int(row[col["lower"]])
            upper = int(row[col["upper"]]) + addend
            size = int(row[col["size"]])
        except ValueError as exc:
            raise DataError(
                f"{path}:{line_no}: lower, upper and size must be integers ({exc})"
            ) from None
        if bid in seen:
            raise DataError(f"{path}:{line_no}: duplicate id {bid!r}; ids must be unique")
        if upper <= lower or size < 0:
            raise DataError(
                f"{path}:{line_no}: buffer {bid!r} needs lower < upper and size >= 0 "
                f"(got lower={lower}, upper={upper}, size={size})"
            )
        seen.add(bid)
        buffers.append(Buffer(id=bid, lower=lower, upper=upper, size=size, name=bid))
    return buffers


def write_minimalloc_csv(
    path: str | Path, buffers: Sequence[Buffer], offsets: Mapping[int | str, int]
) -> None:
    """Write ``id,lower,upper,size,offset`` rows (MiniMalloc's solution format)."""
    path = Path(path)
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(["id", "lower", "upper", "size", "offset"])
        for b in buffers:
            writer.writerow([b.id, b.lower, b.upper, b.size, offsets[b.id]])
