"""Memory accountant: bytes held by autograd's saved tensors, at every moment.

Every saved tensor that the executor keeps, compresses, swaps or recomputes is
registered here together with the Python object that holds it (the object
autograd stores for the saved variable, a recomputed placeholder, a decoded
tensor).  ``weakref.finalize`` on that owner releases the bytes the moment
autograd drops it, so ``current`` follows the real lifetime and ``peak`` is the
maximum over the step.  Tensors are counted per *storage* (views and repeated
saves of one tensor are counted once); model parameters are excluded (they live
before and after the step and are not activations).  Process peak RSS comes from
``resource.getrusage`` (kernel-reported, monotone over the process life).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import resource
import sys
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch


def storage_key(t: torch.Tensor) -> tuple[int, int]:
    """(data pointer, bytes) of the storage behind ``t``."""
    st = t.untyped_storage()
    return st.data_ptr(), st.nbytes()


def peak_rss_bytes() -> int:
    """Peak resident set size of this process (ru_maxrss is KiB on Linux, bytes on macOS)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)


def rss_bytes() -> int:
    """Resident set size of this process now (Linux ``/proc/self/statm``; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()
    except (OSError, IndexError, ValueError):
        return 0


def minor_faults() -> int:
    """Minor page faults of this process so far (``getrusage``): a step's difference is
    the fresh pages it had the kernel map and zero."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


@functools.cache
def _glibc(symbol: str) -> Any:
    """``symbol`` of the C library as a ctypes function, or None where there is none
    (not glibc: ``malloc_trim`` and ``mallopt`` are glibc's)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return getattr(ctypes.CDLL(name), symbol)
    except (OSError, AttributeError):
        return None


def settle_heap() -> tuple[int, bool]:
    """What a measurement does between profiling and timing: :func:`release_heap`, then
    :func:`retain_heap`.  (bytes released, whether the heap is now retained)."""
    released = release_heap()
    return released, retain_heap()


def release_heap() -> int:
    """Return the memory freed since start-up to the system: ``gc.collect()``, then glibc's
    ``malloc_trim(0)`` where the C library has it (a no-op elsewhere).  Bytes of RSS
    released (0 where RSS cannot be read).

    Profiling leaves glibc's heap large and fragmented: on MobileNetV2 b32 the process
    held 1.51 GB after ``profile_model`` and 0.31 GB after a trim.  In that heap the
    unplanned step faulted no pages, where a process that read its profile from a file
    faulted 7-37 k pages (18-32 ms of system time) in every unplanned step; so the
    ratio to the unplanned step depended on whether the profile was measured in the
    same process.  Called between profiling and timing, with :func:`retain_heap` after
    it (:func:`settle_heap`; docs/results/budget.md, round 26)."""
    gc.collect()
    before = rss_bytes()
    trim = _glibc("malloc_trim")
    if trim is not None:
        trim.argtypes = [ctypes.c_size_t]
        trim(0)
    return max(before - rss_bytes(), 0)


#: glibc's ``mallopt`` parameters (malloc.h) and the largest mmap threshold it accepts
#: on 64-bit (``DEFAULT_MMAP_THRESHOLD_MAX``, 32 MiB)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX = -1, -3, 32 * 2**20


def retain_heap() -> bool:
    """Keep freed memory in the process from now on (glibc: ``mallopt`` with trimming
    off and the mmap threshold fixed at its 32 MiB maximum), so that once a step has
    run, the next step of any plan reuses its pages instead of faulting fresh ones in.
    True where it took effect (glibc), False elsewhere (a no-op).

    Under glibc's default, dynamic thresholds whether a step faults depends on the heap
    the steps before it left: on MobileNetV2 b32 the unplanned step faulted 7-37 k pages
    every step in a run of unplanned steps and between plan steps (18-32 ms of system
    time, 5-8 % of the step), and none in a heap that profiling or a larger step had
    grown, while plan steps, whose peak the heap covered, never faulted.  So a step-time
    ratio against the unplanned step moved by that much with what ran before it.  With
    the heap retained no timed step faults after its warm-up, in any order, and the
    ratio is the plan's compute alone -- up to blocks over 32 MiB, which glibc still
    maps and unmaps per allocation: BERT-small b8's unplanned step faulted 15,262 pages
    per step, against 0 for hybrid's plan at 0.5 (``M_MMAP_MAX = 0`` did not keep 64 MiB
    blocks either); a caching allocator (jemalloc's retained extents, PyTorch's CUDA
    caching allocator) behaves the same way.  The setting stays for the rest of the
    process; the peak RSS is still the largest step's, since freed pages are reused, not
    added to."""
    mallopt = _glibc("mallopt")
    if mallopt is None:
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    ok = mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX) == 1
    return mallopt(_M_TRIM_THRESHOLD, 2**31 - 1) == 1 and ok


def model_state_tensors(model: torch.nn.Module) -> list[torch.Tensor]:
    """Parameters and buffers: persistent state, not counted as saved activations."""
    return list(model.parameters()) + list(model.buffers())


class _Held:
    """What autograd stores for a kept saved tensor (so its death is observable).

    Its own ``__del__`` releases the bytes (CPython frees it, and runs ``__del__``, the
    moment autograd drops it, as ``weakref.finalize`` would), so keeping a tensor costs
    one small object instead of a holder plus a finalizer registered in a global
    registry: the keep path runs for every saved tensor of every step."""

    __slots__ = ("t", "acc", "key", "__weakref__")

    def __init__(self, t: torch.Tensor) -> None:
        self.t = t
        self.acc: MemoryAccountant | None = None
        self.key: object = None

    def __del__(self) -> None:
        if self.acc is not None:
            self.acc._release(self.key)


class MemoryAccountant:
    """Counts bytes held by saved tensors; ``peak`` is the maximum since ``reset``."""

    def __init__(self, exclude: Iterable[torch.Tensor] = ()) -> None:
        self._exclude = {storage_key(p)[0] for p in exclude}
        self._refs: dict[object, list[int]] = {}
        self.current = 0
        self.peak = 0
        self.events = 0

    def reset(self) -> None:
        """Start a new measurement window (bytes still held stay counted)."""
        self.peak = self.current

    def is_excluded(self, t: torch.Tensor) -> bool:
        return storage_key(t)[0] in self._exclude

    # -- registration ---------------------------------------------------------
    def hold_tensor(self, t: torch.Tensor, owner: object) -> None:
        """Count ``t``'s storage while ``owner`` is alive (shared storages once)."""
        ptr, nbytes = storage_key(t)
        if ptr in self._exclude or nbytes == 0:
            return
        self._add(("s", ptr), nbytes)
        weakref.finalize(owner, self._release, ("s", ptr))

    def hold_bytes(self, nbytes: int, owner: object) -> None:
        """Count ``nbytes`` (an encoded buffer) while ``owner`` is alive."""
        key = ("b", id(owner))
        self._add(key, nbytes)
        weakref.finalize(owner, self._release, key)

    def mark_outside(self, nbytes: int, owner: object) -> None:
        """A buffer of ``nbytes`` outside torch's allocator that a saved tensor already
        counted here refers to, alive while ``owner`` is: a fast mask's packed bits
        (numpy memory under a ``torch.from_numpy`` tensor).  Only
        :class:`MarkingAccountant` records it (for the all-allocation peak)."""

    def _add(self, key: object, nbytes: int) -> None:
        ref = self._refs.get(key)
        self.events += 1
        if ref is None:
            self._refs[key] = [1, nbytes]
            self.current += nbytes
            if self.current > self.peak:
                self.peak = self.current
        else:
            ref[0] += 1

    def _release(self, key: object) -> None:
        ref = self._refs.get(key)
        if ref is None:
            return
        ref[0] -= 1
        if ref[0] == 0:
            self.current -= ref[1]
            del self._refs[key]

    # -- the default (keep) hooks ------------------------------------------------
    def pack_keep(self, t: torch.Tensor) -> object:
        """The keep path (every saved tensor no plan decision claims): as
        :meth:`hold_tensor` with a fresh holder, one storage lookup, no finalizer."""
        st = t.untyped_storage()
        ptr = st.data_ptr()
        if ptr in self._exclude:
            return t
        h = _Held(t)
        nbytes = st.nbytes()
        if nbytes:
            key = ("s", ptr)
            self._add(key, nbytes)
            h.key, h.acc = key, self
        return h

    @staticmethod
    def unpack_keep(h: object) -> torch.Tensor:
        return h.t if isinstance(h, _Held) else h

    @contextmanager
    def track(self):
        """Count every saved tensor not handled by an inner (planned) hook."""
        with torch.autograd.graph.saved_tensors_hooks(self.pack_keep, self.unpack_keep):
            yield self


# -- every allocation of a step ---------------------------------------------------
#: name prefix of the profiler ranges that mark positions in a step (:func:`alloc_events`)
MARK = "edgetrain_mark:"


def mark(name: str) -> None:
    """An empty profiler range named ``MARK + name``: a timestamp on the clock of the
    profiler's allocation events (used to split a step into the planner's steps)."""
    with torch.profiler.record_function(MARK + name):
        pass


def alloc_events(fn) -> list[tuple[int, int, int, str | None]]:
    """Every CPU allocation and free made while ``fn()`` runs, with the marks
    (:func:`mark`) it emits, in time order: ``(time_ns, size, ptr, mark_name)`` --
    ``size`` > 0 allocates, < 0 frees, 0 with a name is a mark.  From the torch
    profiler's memory events (``profile_memory=True``)."""
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    out: list[tuple[int, int, int, str | None]] = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        n = stack.pop()
        if n.tag == _EventType.Allocation:
            out.append((n.start_time_ns, n.extra_fields.alloc_size, n.extra_fields.ptr, None))
        elif n.tag == _EventType.TorchOp and n.name.startswith(MARK):
            out.append((n.start_time_ns, 0, 0, n.name[len(MARK) :]))
        stack.extend(n.children)
    out.sort(key=lambda e: (e[0], e[3] is None))
    return out


def replay_allocs(
    events: Iterable[tuple[int, int, int, str | None]],
) -> Iterator[tuple[str | None, int, int, int]]:
    """The running sum of the allocations in ``events`` (:func:`alloc_events`), event by
    event: ``(mark, change, ptr, level)`` -- ``mark`` the mark's name (``change`` 0) or
    None; ``change`` the bytes the event adds (an allocation) or removes (a free of a block
    allocated within ``events``, matched by pointer; a free of an earlier block changes
    nothing); ``level`` the sum after it.  The one replay behind :func:`alloc_peak_bytes`
    and the planner's per-step timeline (:func:`.alloc.measure_alloc_steps`)."""
    live: dict[int, int] = {}
    level = 0
    for _, size, ptr, name in events:
        if name is not None:
            yield name, 0, ptr, level
            continue
        change = 0
        if size > 0:
            live[ptr] = live.get(ptr, 0) + size
            change = size
        elif ptr in live:
            change = -live.pop(ptr)
        level += change
        yield None, change, ptr, level


def alloc_peak_bytes(fn, *, held: bool = False) -> int:
    """Peak of the running sum of *every* CPU allocation made while ``fn()`` runs (bytes).

    The accountant counts autograd's saved tensors only; a compiled min-cut backward
    recomputes activations as graph locals, which it never sees.  This counts what the
    allocator hands out during the call -- saved and recomputed activations, gradients,
    workspace, temporaries -- from the torch profiler's allocation events, in time order.
    A free lowers the sum only when its block was allocated inside the call (matched by
    pointer): blocks allocated before it (the previous step's gradients, the caller's
    tensors) are not part of this step, and the profiler reports their frees in some
    paths and not in others.  Memory already held when ``fn`` starts (parameters,
    inputs) is not included; nor is memory allocated outside torch's allocator (a
    codec's encoded ``bytes``, numpy arrays), which the profiler does not see, unless
    ``fn`` runs under a :class:`MarkingAccountant` and ``held`` is True: then the
    buffers that accountant holds (``hold_bytes``) are added from their marks.
    """
    held_now = peak = 0
    for name, _, _, level in replay_allocs(alloc_events(fn)):
        if name is None:
            peak = max(peak, level + held_now)
        elif held and name[:1] in "+-" and name[1:].isdigit():
            held_now += int(name)
            peak = max(peak, level + held_now)
    return peak


class MarkingAccountant(MemoryAccountant):
    """A :class:`MemoryAccountant` that also marks, on the profiler's clock, every buffer
    it holds outside torch's allocator and its release (marks ``+n`` / ``-n``): a
    codec's encoded ``bytes`` and a mask's packed bits (numpy), which the profiler's
    allocation events do not show.  :func:`alloc_peak_bytes` (``held=True``) adds them,
    so a step's all-allocation peak is what the process held, not only torch's part.
    Measured on MobileNetV2 b8 (hybrid at its all-allocation minimum): 1.6 MB of
    encoded buffers the profiler alone missed."""

    def hold_bytes(self, nbytes: int, owner: object) -> None:
        self.mark_outside(nbytes, owner)
        super().hold_bytes(nbytes, owner)

    def mark_outside(self, nbytes: int, owner: object) -> None:
        mark(f"+{int(nbytes)}")
        weakref.finalize(owner, mark, f"-{int(nbytes)}")


def run_plan_step(model, plan, inputs, loss_fn, acc: MemoryAccountant) -> None:
    """One forward + loss + backward of an ``ExecutionPlan`` under ``acc`` (untimed)."""
    from edgetrain.engine.budget.executor import PlanExecutor

    with PlanExecutor(model, plan, accountant=acc) as ex:
        ex.step(inputs, loss_fn)


def step_alloc_peak(
    model, entry, inputs, loss_fn, seed: int = 0, run=None, *, held: bool = True
) -> tuple[int, int]:
    """(all-allocation peak, accountant peak) of one training step of ``entry``: a
    warm-up step (compilation, lazy buffers), then one step under
    :func:`alloc_peak_bytes`, each from the same weights with the gradients set to None
    (``zero_grad(set_to_none=True)``, so the step allocates its gradients and they
    count).  ``run(model, entry, inputs, loss_fn, acc)`` runs one step (default: an
    ``ExecutionPlan`` through the executor, :func:`run_plan_step`).  ``held`` (default):
    the peak includes the buffers the executor holds outside torch's allocator (encoded
    ``bytes``, packed mask bits; :class:`MarkingAccountant`), i.e. the process's memory;
    ``held=False``: torch's allocations only, as the profiler sees them.  Untimed; the
    model's weights are restored and its gradients cleared afterwards."""
    import copy

    run = run or run_plan_step
    state = copy.deepcopy(model.state_dict())

    def reset() -> None:
        model.load_state_dict(state)
        model.zero_grad(set_to_none=True)

    box: dict[str, int] = {}

    def once() -> None:
        torch.manual_seed(seed)
        cls = MarkingAccountant if held else MemoryAccountant
        acc = cls(exclude=model_state_tensors(model))
        run(model, entry, inputs, loss_fn, acc)
        box["acc"] = acc.peak

    reset()
    once()
    reset()
    peak = alloc_peak_bytes(once, held=held)
    reset()
    return peak, box["acc"]
