"""Exact search for an arena of a given capacity, in the spirit of MiniMalloc.

Moffitt, "MiniMalloc: A Lightweight Memory Allocator for Hardware-Accelerated
Machine Learning", ASPLOS 2023 (github.com/google/minimalloc). The decision problem
"do all buffers fit in ``capacity`` bytes?" is solved by depth-first search over
*canonical* solutions only:

* every buffer sits at its minimum offset, the top of the highest already-placed
  buffer that overlaps it in time (so offsets are 0 or the end of another buffer);
* buffers are placed in non-decreasing offset order (ties: preorder index), which
  makes each canonical solution reachable by exactly one branch;
* dominance: a buffer is never placed at or above the lowest height some other
  unplaced buffer could reach, since that would leave a gap another canonical
  solution fills;
* section inference: time is cut into *sections* (intervals between lifetime
  ends); in each, the highest placed top (or the current offset, or the lowest
  minimum offset of its unplaced buffers — the "unallocated floor" — whichever
  is largest) plus the bytes still to place there must fit the capacity;
* round robin: several preorders (by section total, width, size) take turns
  with a node budget that doubles each round, against heavy-tailed run times.

Not implemented from MiniMalloc: dynamic decomposition during search. The search
is pure Python (a few thousand nodes per second), so it closes small gaps on real
graphs but not MiniMalloc's hardest benchmarks within seconds.

Time is split into independent *partitions* (no buffer crosses a partition cut),
each searched separately. The search stops at a deadline; the caller then keeps
the best heuristic solution.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from edgetrain.memory.liveness import Buffer


class SearchTimeout(Exception):
    """Raised inside the search when the deadline passes."""


class _NodeLimit(Exception):
    """Raised when one round-robin attempt exhausts its node budget."""


@dataclass
class _Problem:
    sizes: list[int]
    sec_lo: list[int]  # first section index of each buffer
    sec_hi: list[int]  # one past its last section
    overlaps: list[list[int]]
    features: dict[str, list[int]]  # "total", "width", "size": larger goes first
    n_sections: int


# MiniMalloc's preordering heuristics (solver.h): buffers sorted by the largest
# section total they cross (T), the number of sections they span (W) and size (S),
# in these priority orders; attempts rotate with a doubling node limit.
PREORDERS = (("total", "width", "size"), ("width", "total", "size"), ("size", "total", "width"))


def partitions(buffers: Sequence[Buffer]) -> list[list[int]]:
    """Groups of buffer indices whose lifetimes chain together (no cut between them)."""
    order = sorted(range(len(buffers)), key=lambda i: (buffers[i].lower, buffers[i].upper))
    groups: list[list[int]] = []
    reach = None
    for i in order:
        b = buffers[i]
        if reach is None or b.lower >= reach:
            groups.append([i])
            reach = b.upper
        else:
            groups[-1].append(i)
            reach = max(reach, b.upper)
    return groups


def _build(buffers: Sequence[Buffer]) -> _Problem:
    points = sorted({t for b in buffers for t in (b.lower, b.upper)})
    index = {t: i for i, t in enumerate(points)}
    sec_lo = [index[b.lower] for b in buffers]
    sec_hi = [index[b.upper] for b in buffers]
    n = len(buffers)
    lo = np.array([b.lower for b in buffers], dtype=np.int64)
    hi = np.array([b.upper for b in buffers], dtype=np.int64)
    overlaps = []
    for i in range(n):
        mask = (lo < hi[i]) & (hi > lo[i])
        mask[i] = False
        overlaps.append(np.nonzero(mask)[0].tolist())
    totals = np.zeros(max(len(points) - 1, 1), dtype=np.int64)
    for i, b in enumerate(buffers):
        totals[sec_lo[i] : sec_hi[i]] += b.size
    features = {
        "total": [int(totals[sec_lo[i] : sec_hi[i]].max()) for i in range(n)],
        "width": [sec_hi[i] - sec_lo[i] for i in range(n)],
        "size": [b.size for b in buffers],
    }
    return _Problem(
        sizes=[b.size for b in buffers],
        sec_lo=sec_lo,
        sec_hi=sec_hi,
        overlaps=overlaps,
        features=features,
        n_sections=max(len(points) - 1, 1),
    )


def _ranks(p: _Problem, order: tuple[str, ...]) -> list[int]:
    n = len(p.sizes)
    pre = sorted(range(n), key=lambda i: tuple(-p.features[f][i] for f in order) + (i,))
    rank = [0] * n
    for r, i in enumerate(pre):
        rank[i] = r
    return rank


def solve_capacity(
    buffers: Sequence[Buffer], capacity: int, deadline: float, *, alignment: int = 1
) -> list[int] | None:
    """Offsets fitting ``capacity`` bytes, or None if none exists (proven).

    Raises :class:`SearchTimeout` when ``time.perf_counter()`` passes ``deadline``.
    """
    offsets = [0] * len(buffers)  # empty buffers stay at 0: they can clash with nothing
    sized = [i for i, b in enumerate(buffers) if b.size > 0]
    for part in partitions([buffers[i] for i in sized]):
        group = [sized[i] for i in part]
        sub = [buffers[i] for i in group]
        found = _round_robin(sub, capacity, deadline, alignment)
        if found is None:
            return None
        for i, off in zip(group, found, strict=True):
            offsets[i] = off
    return offsets


def _round_robin(
    buffers: Sequence[Buffer], capacity: int, deadline: float, alignment: int
) -> list[int] | None:
    """MiniMalloc's RoundRobin: each preorder gets a node budget that doubles per round.

    A run that finishes within its budget is conclusive either way (found, or
    proven infeasible); only exhausting the budget moves on to the next preorder.
    """
    p = _build(buffers)
    ranks = [_ranks(p, order) for order in PREORDERS]
    limit = len(buffers)
    while True:
        limit *= 2
        for rank in ranks:
            try:
                return _solve_partition(p, rank, capacity, deadline, alignment, limit)
            except _NodeLimit:
                continue


def _solve_partition(
    p: _Problem,
    rank: list[int],
    capacity: int,
    deadline: float,
    alignment: int,
    node_limit: int,
) -> list[int] | None:
    n = len(p.sizes)
    sizes = p.sizes
    floor = np.zeros(p.n_sections, dtype=np.int64)
    total = np.zeros(p.n_sections, dtype=np.int64)
    for i in range(n):
        total[p.sec_lo[i] : p.sec_hi[i]] += sizes[i]
    if int(total.max()) > capacity:
        return None
    offset = [-1] * n
    min_off = [0] * n
    unplaced = set(range(n))
    counter = [0]
    # Unallocated floor (MiniMalloc): unplaced buffers of a section all sit at or
    # above the lowest of their minimum offsets. ``member`` is the section x buffer
    # incidence; ``low`` mirrors ``min_off`` with placed buffers at +inf.
    member = np.zeros((p.n_sections, n), dtype=bool)
    for i in range(n):
        member[p.sec_lo[i] : p.sec_hi[i], i] = True
    big = np.iinfo(np.int64).max // 4
    low = np.zeros(n, dtype=np.int64)

    def search(cur: int, cur_rank: int) -> bool:
        counter[0] += 1
        if counter[0] > node_limit:
            raise _NodeLimit
        if counter[0] & 7 == 0 and time.perf_counter() > deadline:
            raise SearchTimeout
        if not unplaced:
            return True
        ordering = sorted(unplaced, key=lambda i: (min_off[i], rank[i]))
        min_height = min(min_off[i] + sizes[i] for i in ordering)
        for i in ordering:
            off = min_off[i]
            if off < cur or (off == cur and rank[i] < cur_rank):
                continue  # not canonical: reached by another branch
            if off >= min_height:
                break  # dominated: leaves a gap below (ordering is by offset)
            height = off + sizes[i]
            if height > capacity:
                continue
            offset[i] = off
            unplaced.discard(i)
            low[i] = big
            changed = []
            for j in p.overlaps[i]:
                if offset[j] < 0 and min_off[j] < height:
                    changed.append((j, min_off[j]))
                    min_off[j] = -(-height // alignment) * alignment
                    low[j] = min_off[j]
            s0, s1 = p.sec_lo[i], p.sec_hi[i]
            saved_floor = floor[s0:s1].copy()
            floor[s0:s1] = height
            total[s0:s1] -= sizes[i]
            lowest = np.where(member, low, big).min(axis=1)
            base = np.maximum(np.maximum(floor, off), np.where(total > 0, lowest, 0))
            ok = int((base + total).max()) <= capacity
            if ok and search(off, rank[i]):
                return True
            floor[s0:s1] = saved_floor
            total[s0:s1] += sizes[i]
            for j, old in reversed(changed):
                min_off[j] = old
                low[j] = old
            low[i] = min_off[i]
            offset[i] = -1
            unplaced.add(i)
        return False

    import sys

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, n * 4 + 1000))
    try:
        return list(offset) if search(0, -1) else None
    finally:
        sys.setrecursionlimit(limit)
