"""``release_heap``: what profiling leaves in glibc's heap goes back to the system."""

from __future__ import annotations

import ctypes.util
import sys

import numpy as np
import pytest

from edgetrain.engine.budget.accountant import release_heap, rss_bytes

glibc = pytest.mark.skipif(
    not sys.platform.startswith("linux") or ctypes.util.find_library("c") is None,
    reason="malloc_trim is glibc's (Linux)",
)


@glibc
def test_freed_heap_chunks_below_a_live_one_are_returned():
    # 64 KiB arrays sit in the heap (below glibc's mmap threshold); the one allocated
    # last pins the top, so glibc's own trimming cannot return the ones freed below it
    chunks = [np.ones(8192) for _ in range(1600)]  # 100 MiB
    pin = np.ones(8192)
    before = rss_bytes()
    del chunks
    assert rss_bytes() > before - 50 * 2**20  # still held after the free
    released = release_heap()
    assert released >= 50 * 2**20
    assert rss_bytes() <= before - 50 * 2**20
    assert pin.sum() == 8192  # live memory is untouched


def test_release_heap_is_safe_to_repeat():
    release_heap()
    assert release_heap() >= 0
    assert rss_bytes() >= 0


@glibc
def test_a_retained_heap_reuses_freed_pages_without_faults():
    """Five 20 MiB arrays freed together leave 100 MiB free at the heap's top, over glibc's
    dynamic trim threshold: by default the top is returned and every repeat faults its
    pages in again (measured: 2,573-2,610 faults per repeat; THP makes them fewer than the
    25,600 small pages).  Retained, only the first one does."""
    import resource

    from edgetrain.engine.budget.accountant import retain_heap

    assert retain_heap()

    def touch() -> int:
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        arrs = [np.empty(20 * 2**20 // 8) for _ in range(5)]  # below the 32 MiB mmap threshold
        for a in arrs:
            a.fill(1.0)  # touch every page
        del arrs
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0

    touch()  # the first one may grow the heap
    assert max(touch() for _ in range(3)) < 64
