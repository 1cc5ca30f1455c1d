"""Memory budget predictor (FedHybrid §4.4.2, eq. 10) and the plan-regeneration rule.

* ``M_safe = M_avail - alpha * Watermark_high``: ``M_avail`` is ``MemAvailable`` of
  ``/proc/meminfo``; ``Watermark_high`` the sum of the zones' ``high`` watermarks in
  ``/proc/zoneinfo`` (pages x page size); ``alpha = 2`` for zram swap (it takes
  DRAM and triggers reclaim earlier), ``1`` for disk swap or none (``/proc/swaps``).
* Importance weight of a sample: ``w = sum_j Max_Score / score_j`` over running
  processes.  Android's ``oom_adj`` is 0 for the foreground app; Linux's
  ``oom_score_adj`` is in [-1000, 1000], so we use ``score_j = oom_score_adj_j +
  1001`` (in [1, 2001]) and ``Max_Score = 2001``: important processes (low
  score) weigh most, cached ones least; division by zero cannot happen.
* Eq. 10: ``M_pred(t) = sum_{i=t-W+1..t} w_i M_safe(i) / sum w_i``; ``W`` starts
  as the number of samples in one training epoch.
* Regeneration rule: after a round, regenerate the plan when the round's page
  faults exceed ``TP1`` x the average of previous rounds, or the process was
  killed by the low-memory killer more than ``TP2`` times; then
  ``W <- W x WS_adj``.  Paper values (§5.2): TP1 = 2, TP2 = 3, WS_adj = 0.9.
  Page faults of this process come from ``/proc/self/stat`` (minflt + majflt).

The same predictor runs on a live Linux system (:func:`sample_linux`), on a
recorded list of samples, or on a simulated :class:`edgetrain.devices.MemoryTrace`
(:func:`predict_trace`).
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from edgetrain.errors import ConfigError, DataError

SWAP_ALPHA = {"zram": 2.0, "disk": 1.0, "none": 1.0}
MAX_SCORE = 2001.0


# -- /proc readers -------------------------------------------------------------------
def read_meminfo(text: str | None = None) -> dict[str, int]:
    """``/proc/meminfo`` as bytes per field."""
    text = Path("/proc/meminfo").read_text() if text is None else text
    out: dict[str, int] = {}
    for line in text.splitlines():
        if ":" not in line:
            continue
        key, rest = line.split(":", 1)
        parts = rest.split()
        if not parts:
            continue
        mult = 1024 if len(parts) > 1 and parts[1].lower() == "kb" else 1
        out[key.strip()] = int(parts[0]) * mult
    if "MemAvailable" not in out:
        raise DataError("meminfo has no MemAvailable line (Linux >= 3.14 provides it)")
    return out


def read_high_watermark(text: str | None = None, page_size: int | None = None) -> int:
    """Sum of every zone's ``high`` watermark in bytes (``/proc/zoneinfo``)."""
    text = Path("/proc/zoneinfo").read_text() if text is None else text
    page = page_size or os.sysconf("SC_PAGE_SIZE")
    pages = 0
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "high":
            pages += int(parts[1])
    return pages * page


def read_swap_kind(text: str | None = None) -> str:
    """``zram`` if any active swap device is a zram device, ``disk`` if any other, else ``none``."""
    text = Path("/proc/swaps").read_text() if text is None else text
    kinds = []
    for line in text.splitlines()[1:]:
        parts = line.split()
        if parts:
            kinds.append("zram" if "zram" in parts[0] else "disk")
    if "zram" in kinds:
        return "zram"
    return "disk" if kinds else "none"


def oom_weight(scores: list[int] | np.ndarray) -> float:
    """Importance weight ``sum_j Max_Score / (oom_score_adj_j + 1001)``."""
    s = np.asarray(scores, dtype=np.float64)
    if s.size == 0:
        return 1.0
    if (s < -1000).any() or (s > 1000).any():
        raise DataError("oom_score_adj values must lie in [-1000, 1000]")
    return float((MAX_SCORE / (s + 1001.0)).sum())


def read_oom_scores(proc: str = "/proc") -> list[int]:
    """``oom_score_adj`` of every process we may read."""
    out = []
    for entry in os.scandir(proc):
        if entry.name.isdigit():
            try:
                out.append(int(Path(entry.path, "oom_score_adj").read_text()))
            except (OSError, ValueError):
                continue
    return out


def read_page_faults(text: str | None = None) -> int:
    """minflt + majflt of this process (``/proc/self/stat`` fields 10 and 12)."""
    text = Path("/proc/self/stat").read_text() if text is None else text
    after = text[text.rindex(")") + 2 :].split()  # fields from 3 on; comm may hold spaces
    return int(after[7]) + int(after[9])


@dataclass
class MemorySample:
    t: float
    mem_available_bytes: int
    watermark_high_bytes: int
    swap_kind: str
    weight: float
    page_faults: int = 0
    lmk_kills: int = 0

    @property
    def alpha(self) -> float:
        return SWAP_ALPHA[self.swap_kind]

    @property
    def m_safe(self) -> float:
        return self.mem_available_bytes - self.alpha * self.watermark_high_bytes


def sample_linux(t: float = 0.0) -> MemorySample:
    """One live sample of this Linux system."""
    return MemorySample(
        t=t,
        mem_available_bytes=read_meminfo()["MemAvailable"],
        watermark_high_bytes=read_high_watermark(),
        swap_kind=read_swap_kind(),
        weight=oom_weight(read_oom_scores()),
        page_faults=read_page_faults(),
    )


# -- the predictor ------------------------------------------------------------------
@dataclass
class BudgetPredictor:
    """Eq. 10 over a sliding window of ``window`` samples + the regeneration rule."""

    window: int
    tp1: float = 2.0
    tp2: int = 3
    ws_adj: float = 0.9
    _samples: deque = field(default_factory=deque, repr=False)
    _round_faults: list[int] = field(default_factory=list, repr=False)
    regenerations: int = 0

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ConfigError(f"window={self.window}; expected >= 1 sample (one epoch)")
        if not 0 < self.ws_adj <= 1:
            raise ConfigError(f"ws_adj={self.ws_adj}; expected a factor in (0, 1]")

    def observe(self, m_safe: float, weight: float) -> float:
        """Add one sample; returns the new prediction."""
        if weight <= 0:
            raise DataError(f"sample weight {weight}; expected > 0")
        self._samples.append((float(m_safe), float(weight)))
        while len(self._samples) > self.window:
            self._samples.popleft()
        return self.predict()

    def observe_sample(self, s: MemorySample) -> float:
        return self.observe(s.m_safe, s.weight)

    def predict(self) -> float:
        """M_pred (eq. 10): weighted moving average of M_safe over the window."""
        if not self._samples:
            raise DataError("no memory samples observed yet")
        m = np.array([s[0] for s in self._samples])
        w = np.array([s[1] for s in self._samples])
        return float((w * m).sum() / w.sum())

    def end_round(self, page_faults: int, lmk_kills: int = 0) -> bool:
        """Apply the regeneration rule for a finished round; True means: new plan needed."""
        prev = self._round_faults
        regen = bool(prev) and page_faults > self.tp1 * (sum(prev) / len(prev))
        regen = regen or lmk_kills > self.tp2
        self._round_faults.append(int(page_faults))
        if regen:
            self.window = max(1, int(self.window * self.ws_adj))
            while len(self._samples) > self.window:
                self._samples.popleft()
            self.regenerations += 1
        return regen


def predict_series(m_safe: np.ndarray, weights: np.ndarray, window: int) -> np.ndarray:
    """Eq. 10 at every time step of a series (vectorised with cumulative sums)."""
    m = np.asarray(m_safe, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    if m.shape != w.shape:
        raise DataError(f"m_safe {m.shape} and weights {w.shape} differ in length")
    cw = np.concatenate([[0.0], np.cumsum(w)])
    cwm = np.concatenate([[0.0], np.cumsum(w * m)])
    idx = np.arange(1, m.size + 1)
    lo = np.maximum(idx - window, 0)
    return (cwm[idx] - cwm[lo]) / (cw[idx] - cw[lo])


def predict_trace(trace, swap_kind: str, watermark_high_bytes: int, epoch_s: float) -> np.ndarray:
    """Predicted budget along a simulated :class:`edgetrain.devices.MemoryTrace`."""
    if swap_kind not in SWAP_ALPHA:
        raise ConfigError(f"swap_kind {swap_kind!r}; expected one of {sorted(SWAP_ALPHA)}")
    m_safe = trace.available_bytes.astype(np.float64) - SWAP_ALPHA[swap_kind] * watermark_high_bytes
    window = max(1, int(round(epoch_s / trace.step_s)))
    return predict_series(m_safe, trace.oom_weight, window)


def samples_to_json(samples: list[MemorySample]) -> list[dict]:
    return [asdict(s) for s in samples]


def samples_from_json(rows: list[dict]) -> list[MemorySample]:
    return [MemorySample(**r) for r in rows]


def record_linux(n: int, interval_s: float) -> list[MemorySample]:
    """Record ``n`` live samples ``interval_s`` apart (for fixtures and the predictor service)."""
    import time

    out = []
    t0 = time.monotonic()
    for i in range(n):
        out.append(sample_linux(time.monotonic() - t0))
        if i + 1 < n:
            time.sleep(interval_s)
    return out
