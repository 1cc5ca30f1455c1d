"""Swap to storage (Capuchin-like) and its I/O-contention cost model.

Executor side: a swapped saved tensor is written to a file (real I/O, ``tofile``)
at pack time and read back at unpack time; only a small handle stays in memory.

Cost model (used by the planner, and reported as the *simulated* phone cost):

    t_write(b) = L + b / (W / (1 + k))      t_read(b) = L + b / (R / (1 + k))

* ``R = 2100 MB/s`` and ``W = 1200 MB/s``: eUFS 3.1 sequential read/write,
  FedHybrid §4.3.1 ("eUFS 3.1 offers throughput of 2,100 MB/s read and
  1,200 MB/s write").
* ``k``: background apps issuing I/O.  UFS has a *single command queue* with no
  internal concurrency (FedHybrid §3, Fig. 4b), so the bandwidth is shared
  round-robin among the ``1 + k`` issuers; default ``k = 4``, the middle of the
  "3-5 background apps" users run (FedHybrid §4.4.2, Fig. 11b).
* ``L = 0.2 ms`` per command: UFS driver/interrupt handling on the issuing core
  (FedHybrid §3, Fig. 4a shows ms-scale latency for 128 MB; 0.2 ms is the
  order of one UFS 3.1 4K random-read command, Samsung eUFS 3.1 data sheet).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import weakref
from dataclasses import dataclass

import numpy as np
import torch

MB = 1e6


@dataclass(frozen=True)
class IoContentionModel:
    read_mb_s: float = 2100.0
    write_mb_s: float = 1200.0
    background_apps: int = 4
    latency_s: float = 0.2e-3

    def write_s(self, nbytes: int) -> float:
        return self.latency_s + nbytes / (self.write_mb_s * MB / (1 + self.background_apps))

    def read_s(self, nbytes: int) -> float:
        return self.latency_s + nbytes / (self.read_mb_s * MB / (1 + self.background_apps))


class _Swapped:
    __slots__ = ("path", "shape", "dtype", "__weakref__")

    def __init__(self, path: str, shape: torch.Size, dtype: torch.dtype) -> None:
        self.path, self.shape, self.dtype = path, shape, dtype


_RAW_VIEW = {torch.bfloat16: torch.int16}


def swap_out(t: torch.Tensor, directory: str) -> _Swapped:
    """Write ``t`` to a fresh file under ``directory``; the file goes when the handle dies."""
    fd, path = tempfile.mkstemp(suffix=".swap", dir=directory)
    os.close(fd)
    src = t.detach().contiguous()
    src = src.view(_RAW_VIEW.get(src.dtype, src.dtype))
    src.numpy().tofile(path)
    h = _Swapped(path, t.shape, t.dtype)
    weakref.finalize(h, _unlink, path)
    return h


def swap_in(h: _Swapped) -> torch.Tensor:
    raw_dtype = _RAW_VIEW.get(h.dtype, h.dtype)
    np_dtype = torch.empty(0, dtype=raw_dtype).numpy().dtype
    arr = np.fromfile(h.path, dtype=np_dtype)
    return torch.from_numpy(arr).view(h.dtype).reshape(h.shape)


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
