"""Breaking eq. 7's ties toward eq. 4's objective (time and eq. 6's energy balance).

MDLdroid's scheduling objective is eq. 4, arg min N(T) + N(E): the iteration time T
(eq. 5) and the variance E of each device's energy consumption (eq. 6). The DQN is
trained on eq. 7, its RL surrogate, whose energy term only counts aggregations
(α ∓ β·n_agg) and which sees a device only through its busy flag, its aggregation
count and when it becomes available. Two schedules that differ only by relabelling
devices alike in those three therefore collect *exactly* the same eq. 7 return,
whatever α, β and ρ are, yet they can spend the energy very differently: the
broadcast that follows the reduce forwards through the best-resourced devices
(§3.2.3), so which device ends the reduce holding what decides who transmits more.
At N = 3 those ties are 4 schedules per allocation on average whose eq. 6 variance
differs 4× (0.278 vs 1.114 J²; benchmarks/mdldroid.py ``--sections evar``).

The MA sees every device's resources and can simulate an iteration
(:func:`~edgetrain.decentralized.costs.simulate_iteration`), so it breaks the tie
itself: starting from the DQN's schedule it swaps the roles of two *alike* devices
(both busy or both free — relabellings eq. 7 cannot tell apart) while the swap
lowers eq. 4's N(T) + N(E), and keeps a swap only if replaying it through eq. 7
gives the DQN's return to the last bit (the check, not an assumption, is what
guarantees the tie-break never trades eq. 7's ranking away).

N(·) of eq. 4 is not given in the paper; we normalise each term by the DQN's own
schedule (T/T₀ + E/E₀): scale-free, so a 1 % change in time weighs as much as a 1 %
change in variance. In practice the swaps move T by milliseconds (only the phones'
compute rates differ; every link runs at the same rate) and E by up to 4×, so the
rule picks the least-variance relabelling and keeps the latency.

Local search, not enumeration: a pass tries every alike swap (at most N(N−1)/2
simulated iterations) and takes the best improving one; at most N passes. At N = 3
one swap reaches every relabelling of a chain that matters (the balanced split puts
the best-resourced device off the reduce's middle); larger N are measured in the
benchmark, not assumed optimal.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from edgetrain.decentralized.costs import IterationCost
from edgetrain.decentralized.env import ChainSchedulingEnv, replay_return
from edgetrain.decentralized.resources import DeviceStatus
from edgetrain.decentralized.schedule import Pair, Schedule
from edgetrain.errors import ConfigError

# What the MA simulates a candidate schedule with: (schedule, statuses) -> cost.
Evaluator = Callable[[Schedule, Sequence[DeviceStatus]], IterationCost]
# "eq4": break eq. 7's ties toward eq. 4 (default); "none": the DQN's schedule as is.
TIE_BREAKS = ("eq4", "none")
# eq. 7 returns are sums of a few constants: equal returns agree far below this
RETURN_TOL = 1e-9


@dataclass(frozen=True)
class TieBreak:
    """The outcome of one tie-break: the schedule kept and what it changed."""

    schedule: Schedule
    swaps: int
    eq4_before: float  # N(T) + N(E) of the DQN's schedule: 2.0 (or 1.0 if E₀ = 0)
    eq4_after: float
    cost: IterationCost


def relabel(schedule: Schedule, mapping: dict[int, int]) -> Schedule:
    """``schedule`` with every device ``d`` replaced by ``mapping.get(d, d)`` in its
    pairs; ``mapping`` must permute the schedule's devices, whose listed order is kept
    (the broadcast ranks devices by resources, ties by that order)."""
    if sorted(mapping.get(d, d) for d in schedule.devices) != sorted(schedule.devices):
        raise ConfigError(f"relabelling {mapping} does not permute the devices {schedule.devices}")
    m = lambda d: mapping.get(d, d)  # noqa: E731
    return Schedule(
        schedule.devices,
        tuple(Pair(m(p.sender), m(p.receiver)) for p in schedule.pairs),
        synchronous=schedule.synchronous,
    )


def eq4_score(cost: IterationCost, ref: IterationCost) -> float:
    """Eq. 4's N(T) + N(E), each term relative to ``ref`` (T = eq. 5's T(t), E = eq. 6).

    A term whose reference is 0 cannot improve: it contributes 0 when the candidate
    is also 0 and +inf otherwise."""

    def term(x: float, x0: float) -> float:
        if x0 > 0:
            return x / x0
        return 0.0 if x <= 0 else math.inf

    return term(cost.eq5_time_s, ref.eq5_time_s) + term(cost.energy_variance, ref.energy_variance)


def alike_pairs(schedule: Schedule, statuses: Sequence[DeviceStatus]) -> list[tuple[int, int]]:
    """Pairs of the schedule's devices that eq. 7 cannot tell apart (same busy flag)."""
    busy = {s.device: s.busy for s in statuses}
    devs = sorted(schedule.devices)
    return [
        (a, b)
        for i, a in enumerate(devs)
        for b in devs[i + 1 :]
        if busy.get(a, False) == busy.get(b, False)
    ]


def break_ties(
    schedule: Schedule,
    statuses: Sequence[DeviceStatus],
    evaluate: Evaluator,
    env: ChainSchedulingEnv,
    max_passes: int | None = None,
) -> TieBreak:
    """The relabelling of ``schedule`` with the least eq. 4 score among those with
    exactly ``schedule``'s eq. 7 return on ``env`` (local search over alike swaps).

    ``env`` must hold the same resources the schedule was chosen on (it is reset and
    stepped to replay candidates)."""
    target = replay_return(env, schedule)
    ref = evaluate(schedule, statuses)
    cur, cur_cost = schedule, ref
    cur_score = before = eq4_score(ref, ref)
    swaps = 0
    pairs = alike_pairs(schedule, statuses)
    for _ in range(len(schedule.devices) if max_passes is None else max_passes):
        best = None
        for a, b in pairs:
            cand = relabel(cur, {a: b, b: a})
            cost = evaluate(cand, statuses)
            score = eq4_score(cost, ref)
            better = score < cur_score - 1e-12 and (best is None or score < best[0])
            # the tie check: only a relabelling with the DQN's exact eq. 7 return counts
            if better and math.isclose(replay_return(env, cand), target, abs_tol=RETURN_TOL):
                best = (score, cand, cost)
        if best is None:
            break
        cur_score, cur, cur_cost = best
        swaps += 1
    return TieBreak(cur, swaps, before, cur_score, cur_cost)
