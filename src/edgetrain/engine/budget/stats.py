"""Paired comparison of two plans' step times: is a gap real or step noise?

On a CPU shared with other jobs, one plan's ratio to the unplanned step moves by up
to 0.16 between rounds of the same interleaved measurement, so a single ratio (or a
median over 3 rounds) cannot say whether plan A is faster than plan B.  Each round
measures both plans in the same interleaved steps, so the per-round ratio A/B is a
*paired* sample: machine load that slows a whole round hits both alike and cancels.
:func:`paired_summary` reports the median of those per-round ratios, their range, a
distribution-free confidence interval of the median and a verdict: ``below`` /
``above`` when the interval excludes 1, else ``level`` (within noise).

The interval is the order-statistic (sign-test) interval of the median
[x_(k), x_(n+1-k)], with coverage 1 - 2 P(Binomial(n, 1/2) < k) (Conover, "Practical
Nonparametric Statistics", 3rd ed., 1999, §3.2): exact for any continuous
distribution, which a percentile bootstrap is not for the 5-9 rounds a benchmark
affords (with 3 rounds all below 1, a bootstrap interval excludes 1 although that
happens by chance one time in eight).  Its coverage is discrete: the largest k whose
coverage is at least ``level`` is used, and the coverage reached is reported.  With
fewer than 5 rounds even [min, max] covers less than 90 %; no verdict is given then.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from edgetrain.errors import ConfigError


@dataclass(frozen=True)
class PairedSummary:
    """Per-round ratios A/B summarised (see the module docstring)."""

    median: float
    lo: float  # order-statistic interval of the median, lower end
    hi: float  # ... upper end
    coverage: float  # the interval's exact coverage (>= level when a verdict is given)
    min: float
    max: float
    rounds: int
    level: float  # the coverage asked for, e.g. 0.9
    verdict: str  # "below" (A faster), "above" (A slower) or "level" (within noise)

    def to_json(self) -> dict:
        return asdict(self)


def sign_test_p(above: int, below: int) -> float:
    """Two-sided sign test, ties excluded: the chance under a fair coin of a split of
    ``above + below`` signs at least as uneven as this one."""
    m = above + below
    if not m:
        return 1.0
    tail = sum(math.comb(m, i) for i in range(min(above, below) + 1)) / 2.0**m
    return min(1.0, 2.0 * tail)


def _coverage(n: int, k: int) -> float:
    """Coverage of [x_(k), x_(n+1-k)] for the median of n continuous samples."""
    below = sum(math.comb(n, i) for i in range(k)) / 2.0**n
    return 1.0 - 2.0 * below


def paired_summary(ratios: Sequence[float], *, level: float = 0.9) -> PairedSummary:
    """Summarise per-round ratios A/B (each round measured A and B interleaved)."""
    r = np.sort(np.asarray([float(x) for x in ratios], dtype=np.float64))
    if r.size == 0:
        raise ConfigError("paired_summary needs at least one per-round ratio; got none")
    if not np.all(np.isfinite(r)) or np.any(r <= 0):
        raise ConfigError(f"per-round ratios must be finite and > 0; got {r.tolist()}")
    if not 0.0 < level < 1.0:
        raise ConfigError(f"interval level {level}; expected a fraction in (0, 1)")
    n = int(r.size)
    k = 1
    while k + 1 <= (n + 1) // 2 and _coverage(n, k + 1) >= level:
        k += 1
    cov = _coverage(n, k)
    lo, hi = float(r[k - 1]), float(r[n - k])
    verdict = "level"
    if cov >= level and hi < 1.0:
        verdict = "below"
    elif cov >= level and lo > 1.0:
        verdict = "above"
    return PairedSummary(
        median=float(np.median(r)),
        lo=lo,
        hi=hi,
        coverage=cov,
        min=float(r[0]),
        max=float(r[-1]),
        rounds=n,
        level=level,
        verdict=verdict,
    )
