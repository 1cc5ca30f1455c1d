"""Static allocation: one arena, an offset per buffer, no two live buffers overlapping.

Three stages, cheapest first:

1. buffers live for the whole horizon are stacked at the bottom. This loses
   nothing: such a buffer occupies a horizontal band in every solution, and
   removing the band shifts the rest down by exactly its size;
2. greedy by size with best-fit gaps (:mod:`edgetrain.memory.greedy`); when it
   misses the lower bound, bottom-up "skyline" placement and more orders are
   tried (MiniMalloc's "total" order: buffers crossing the most crowded moment
   first; size x lifetime) while half the time limit lasts;
3. if the arena is still above the lower bound, an exact MiniMalloc-style search
   (:mod:`edgetrain.memory.search`) tries the lower bound first (often optimal
   for real graphs), then bisects between what is proven infeasible and the best
   found, until ``time_limit_s`` runs out. ``optimal`` is True only when proven.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from edgetrain.errors import ConfigError
from edgetrain.memory.greedy import (
    greedy_place,
    order_by_area,
    order_by_size,
    order_by_total,
    skyline_place,
)
from edgetrain.memory.liveness import Buffer, lower_bound
from edgetrain.memory.search import SearchTimeout, solve_capacity

# Above this many (non-full-span) buffers the exact search is skipped: its Python
# nodes cost O(n log n) each, and greedy is within 1% of the bound on real graphs.
SEARCH_MAX_BUFFERS = 3000


@dataclass
class Allocation:
    """Offsets (by buffer id), the arena they need, and how good it is."""

    offsets: dict[int | str, int]
    arena_bytes: int
    lower_bound_bytes: int
    optimal: bool
    seconds: float
    method: str = "greedy"
    stats: dict = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        """Arena over lower bound (1.0 is optimal)."""
        return self.arena_bytes / self.lower_bound_bytes if self.lower_bound_bytes else 1.0


def _align_up(value: int, alignment: int) -> int:
    return -(-value // alignment) * alignment


def check_allocation(buffers: Sequence[Buffer], offsets: dict, alignment: int = 1) -> None:
    """Raise AssertionError if two time-overlapping buffers share an address.

    Vectorised per buffer (O(n^2) element work, fine for 10 000 buffers).
    """
    n = len(buffers)
    lo = np.array([b.lower for b in buffers], dtype=np.int64)
    hi = np.array([b.upper for b in buffers], dtype=np.int64)
    size = np.array([b.size for b in buffers], dtype=np.int64)
    off = np.array([offsets[b.id] for b in buffers], dtype=np.int64)
    bad = np.flatnonzero(off % alignment)
    assert bad.size == 0, f"buffer {buffers[bad[0]].id} offset not aligned to {alignment}"
    assert (off >= 0).all(), "negative offset"
    for i in range(n - 1):
        if size[i] == 0:
            continue
        j = slice(i + 1, n)
        clash = (
            (lo[j] < hi[i])
            & (hi[j] > lo[i])
            & (off[j] < off[i] + size[i])
            & (off[i] < off[j] + size[j])
            & (size[j] > 0)
        )
        if clash.any():
            other = buffers[i + 1 + int(np.flatnonzero(clash)[0])]
            raise AssertionError(
                f"buffers {buffers[i].id} and {other.id} overlap in time and address"
            )


def allocate(
    buffers: Sequence[Buffer], time_limit_s: float = 1.0, alignment: int = 1
) -> Allocation:
    """Assign an offset to every buffer in one arena; see the module docstring."""
    if alignment < 1:
        raise ConfigError(f"alignment must be a positive integer, got {alignment}")
    ids = [b.id for b in buffers]
    if len(set(ids)) != len(ids):
        raise ConfigError("buffer ids must be unique; found duplicates")
    start = time.perf_counter()
    deadline = start + max(time_limit_s, 0.0)
    lb = lower_bound(buffers)
    if not buffers:
        return Allocation({}, 0, 0, True, 0.0, "empty")
    t0 = min(b.lower for b in buffers)
    t1 = max(b.upper for b in buffers)
    offsets: dict[int | str, int] = {}
    base = 0
    rest: list[Buffer] = []
    for b in sorted(buffers, key=lambda b: -b.size):
        if b.lower == t0 and b.upper == t1:
            base = _align_up(base, alignment)
            offsets[b.id] = base
            base += b.size
        else:
            rest.append(b)
    stack_top = base
    base = _align_up(base, alignment)

    best_offsets: list[int] = []
    best = 0
    method = "stack"  # only full-span buffers: stacking them is optimal
    if rest:
        rest_lb = lower_bound(rest)
        if len(rest) <= SEARCH_MAX_BUFFERS:
            tries = [
                ("skyline-area", skyline_place, order_by_area),
                ("greedy-size", greedy_place, order_by_size),
                ("greedy-total", greedy_place, order_by_total),
                ("skyline-total", skyline_place, order_by_total),
                ("greedy-area", greedy_place, order_by_area),
            ]
        else:  # skyline's overlap scans are O(n^2): greedy only
            tries = [
                ("greedy-size", greedy_place, order_by_size),
                ("greedy-total", greedy_place, order_by_total),
                ("greedy-area", greedy_place, order_by_area),
            ]
        best = -1
        for name, place, order_fn in tries:
            if best >= 0 and (best <= rest_lb or time.perf_counter() - start > 0.5 * time_limit_s):
                break
            offs2, arena2 = place(rest, order_fn(rest), alignment=alignment)
            if best < 0 or arena2 < best:
                best_offsets, best, method = offs2, arena2, name
        proven_lo = rest_lb  # every capacity below this is infeasible
        if best > rest_lb and len(rest) <= SEARCH_MAX_BUFFERS:
            # The bound first (often optimal on real graphs) with half the time, then
            # bisect between what is proven infeasible and the best found; a capacity
            # that times out is skipped upwards (not proven infeasible).
            lo, hi, first = rest_lb, best - 1, True
            while lo <= hi and time.perf_counter() < deadline:
                now = time.perf_counter()
                cap = lo if first else (lo + hi) // 2
                until = now + (deadline - now) / 2 if first else deadline
                try:
                    found = solve_capacity(rest, cap, until, alignment=alignment)
                except SearchTimeout:
                    lo, first = cap + 1, False
                    continue
                first = False
                if found is None:
                    lo = cap + 1
                    proven_lo = max(proven_lo, cap + 1)  # infeasible at cap: so below it too
                else:
                    best_offsets = found
                    best = max(o + b.size for o, b in zip(found, rest, strict=True))
                    method = "search"
                    hi = best - 1
        optimal_rest = best <= proven_lo
    else:
        optimal_rest = True
    for b, off in zip(rest, best_offsets, strict=True):
        offsets[b.id] = base + off
    arena = base + best if rest else stack_top
    optimal = arena == lb or (alignment == 1 and optimal_rest)
    return Allocation(
        offsets=offsets,
        arena_bytes=arena,
        lower_bound_bytes=lb,
        optimal=optimal,
        seconds=time.perf_counter() - start,
        method=method,
        stats={"full_span_bytes": base, "buffers": len(buffers)},
    )
