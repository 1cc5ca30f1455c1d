"""The Chain scheduler: the MA's DQN agent ordering pair aggregations (§3.3).

Continuous environment learning: when the reported resource condition (which
devices are busy, which are connected) differs from the last one, the agent
re-learns for a short slot of episodes, starting from its current network.
If the slot ends before the agent converges (the third condition of Fig. 5b:
scheduling is needed while re-learning is unfinished), the scheduler falls back
to the best schedule seen so far for this condition (by episode return) rather
than trusting a half-trained policy.

Eq. 7's ties: schedules that relabel devices alike to eq. 7 (same busy flag) collect
the same return but can differ 4x in eq. 6's energy variance (the broadcast after the
reduce decides who transmits more). With ``tie_break="eq4"`` (default) and a cost
model to simulate with (``evaluate``), the MA relabels the chosen schedule toward
eq. 4's time + energy-variance objective without changing its eq. 7 return
(:mod:`edgetrain.decentralized.tiebreak`); ``tie_break="none"`` keeps the DQN's pick.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from edgetrain.decentralized.dqn import DQNAgent, DQNConfig, LearnResult
from edgetrain.decentralized.env import GLOBAL, PER_DEVICE, ChainSchedulingEnv, RewardConfig
from edgetrain.decentralized.resources import DeviceStatus
from edgetrain.decentralized.schedule import Schedule
from edgetrain.decentralized.schedulers import Scheduler
from edgetrain.decentralized.tiebreak import TIE_BREAKS, Evaluator, break_ties
from edgetrain.errors import ConfigError


@dataclass
class SchedulerLog:
    """Per-call record: whether it re-learned, converged, or fell back."""

    relearned: bool
    episodes: int
    converged_at: int | None
    fallback: bool
    greedy_return: float
    best_return: float
    learn: LearnResult | None = field(default=None, repr=False)
    # eq. 7 tie-break: alike-device swaps applied, eq. 4's N(T) + N(E) before / after
    tie_swaps: int = 0
    eq4_before: float | None = None
    eq4_after: float | None = None


class ChainScheduler(Scheduler):
    """DQN scheduler over a fixed set of ``n_devices`` (absent ones are skipped)."""

    name = "chain"

    def __init__(
        self,
        n_devices: int,
        seed: int = 0,
        dqn: DQNConfig | None = None,
        reward: RewardConfig = RewardConfig(),
        first_episodes: int = 400,
        relearn_episodes: int = 80,
        busy_delay: float = 2.0,
        tie_break: str = "eq4",
        evaluate: Evaluator | None = None,
    ) -> None:
        if n_devices < 1:
            raise ConfigError(f"the chain scheduler needs at least 1 device, got {n_devices}")
        if tie_break not in TIE_BREAKS:
            raise ConfigError(f"tie_break {tie_break!r} is not one of {', '.join(TIE_BREAKS)}")
        self.tie_break = tie_break
        # the MA's cost model, (schedule, statuses) -> IterationCost; the trainer sets it
        # each iteration (the training FLOPs change); without one ties stay the DQN's
        self.evaluate = evaluate
        self.n = n_devices
        self.reward = reward
        self.cfg = dqn or DQNConfig()
        self.agent = DQNAgent(n_devices * PER_DEVICE + GLOBAL, n_devices, self.cfg, seed)
        self.first_episodes = first_episodes
        self.relearn_episodes = relearn_episodes
        self.busy_delay = busy_delay  # a busy device's delay in model-transfer times
        self._last_key: tuple | None = None
        self._best: dict[tuple, tuple[float, Schedule]] = {}
        self.log: list[SchedulerLog] = []

    @staticmethod
    def condition(statuses: Sequence[DeviceStatus], absent: frozenset[int]) -> tuple:
        """The resource condition the MA compares with its previous record."""
        return (tuple(sorted(absent)), tuple(s.busy for s in statuses))

    def schedule(self, statuses: Sequence[DeviceStatus]) -> Schedule:
        """Schedule the connected devices among ``statuses`` (devices whose id is
        missing from ``statuses`` are treated as lost)."""
        present = {s.device for s in statuses}
        bad = [d for d in present if not 0 <= d < self.n]
        if bad:
            raise ConfigError(f"device ids {bad} out of range 0..{self.n - 1}")
        full = [
            next((s for s in statuses if s.device == d), DeviceStatus(d)) for d in range(self.n)
        ]
        absent = frozenset(range(self.n)) - present
        if len(present) == 1:
            return Schedule(tuple(present), ())
        env = ChainSchedulingEnv(self.n, full, absent, self.reward, busy_delay=self.busy_delay)
        key = self.condition(full, absent)
        relearn = key != self._last_key
        learn = None
        if relearn:
            budget = self.first_episodes if self._last_key is None else self.relearn_episodes
            learn = self.agent.learn(env, budget)
            if learn.best_schedule is not None:
                prev = self._best.get(key)
                if prev is None or learn.best_return > prev[0]:
                    self._best[key] = (learn.best_return, learn.best_schedule)
            self._last_key = key
        sched, g = self.agent.greedy_schedule(env)
        best = self._best.get(key)
        fallback = False
        if best is not None and best[0] > g:  # unconverged slot or a worse greedy policy
            sched, fallback = best[1], True
        if best is None or g > best[0]:
            self._best[key] = (g, sched)
        tb = None
        if self.tie_break == "eq4" and self.evaluate is not None:
            tb = break_ties(sched, [full[d] for d in sorted(present)], self.evaluate, env)
            sched = tb.schedule
        self.log.append(
            SchedulerLog(
                relearned=relearn,
                episodes=learn.episodes if learn else 0,
                converged_at=learn.converged_at if learn else None,
                fallback=fallback,
                greedy_return=g,
                best_return=self._best[key][0],
                learn=learn,
                tie_swaps=tb.swaps if tb else 0,
                eq4_before=tb.eq4_before if tb else None,
                eq4_after=tb.eq4_after if tb else None,
            )
        )
        return sched
