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

import resource
import sys
import weakref
from collections.abc import Iterable
from contextlib import contextmanager

import torch


def storage_key(t: torch.Tensor) -> tuple[int, int]:
    """(data pointer, bytes) of the storage behind ``t``."""
    st = t.untyped_storage()
    return st.data_ptr(), st.nbytes()


def peak_rss_bytes() -> int:
    """Peak resident set size of this process (ru_maxrss is KiB on Linux, bytes on macOS)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)


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
