"""The Chain-scheduler's environment (MDLdroid §3.3.1) as a Gymnasium env.

One episode builds one chain-reduce schedule. Each pair takes two steps: the
agent first picks a sender (S_free/S_busy -> S_send), then a receiver
(-> S_get); the pair aggregates at once, the sender becomes S_done and the
receiver returns to free/busy on the next step. A complete episode therefore
has 2(N-1) steps, the paper's "best learning steps".

Observation, per device: one-hot of its five states (free, busy, send, get,
done), its five resource reports (free memory, battery, in-use, charging, CPU;
all in [0, 1]) and its aggregation count n_agg/(N-1); then the phase (0 =
choose sender, 1 = choose receiver) and the step fraction t/(2(N-1)).

Reward (eq. 7). The paper's default constants were lost in extraction; only
their signs survive ("α to −·, β to 0.·, ρ to −·"). Our choices and why:

- choose a receiver (free -> get): α − β·n_agg. α = −0.1 is a small per-step
  cost; β = 0.2 makes a second aggregation on the same device cost three times
  the first, so the agent spreads aggregations (energy balance, eq. 6).
- choose a sender (free -> send): α + β·n_agg: the incentive for letting a
  device that already aggregated leave the chain (it pushes chain-like
  forwarding, like the ring, over star-like piling on one receiver).
- choosing a busy device adds the decaying busy penalty ρ·(1 − t/(2(N−1))),
  ρ = −1: a busy device picked first costs a full ρ, picked at the last step
  almost nothing, so busy devices go last. (The extracted "ρ + tρ/(N−1)" has
  lost its signs; this is the reading consistent with "the later S_busy is
  chosen, the smaller the penalty".) ρ dominates α and β so that avoiding
  busy devices wins over balancing when they conflict.
- invalid action (a device that already sent, or the sender again as
  receiver) and exceeding the step limit terminate the episode with a "severe
  penalty": :func:`worst_complete_return` (a lower bound on the return of *any*
  complete episode with the live N) minus 2. It must be that low: with a flat
  −2 (rounds 1-5) an invalid move *beat* finishing the chain whenever the busy
  penalties made every completion worse than −2 (e.g. N = 7 with 3 busy: best
  complete return −2.34), so the Q-optimal policy was to stop at step 2, and an
  invalid episode (−2.1) passed eq. 8's threshold (−2.54) — measured in round 6:
  DGE's "converged" training reward at N = 7 and 9 was partly invalid episodes.
  With the bound, an invalid move is worse than every complete schedule, as
  "severe" requires, and can never pass T(N); the extra −2 keeps the old
  constant's meaning (more than any one step can add).
- completing the chain: +1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import gymnasium as gym
import numpy as np

from edgetrain.decentralized.resources import DeviceStatus, random_statuses
from edgetrain.decentralized.schedule import Pair, Schedule
from edgetrain.errors import ConfigError

FREE, BUSY, SEND, GET, DONE = range(5)
STATE_NAMES = ("free", "busy", "send", "get", "done")
PER_DEVICE = 5 + 5 + 2
GLOBAL = 2


@dataclass(frozen=True)
class RewardConfig:
    """Constants of eq. 7 and eq. 8 (see the module docstring for the reasons)."""

    alpha: float = -0.1
    beta: float = 0.2
    rho: float = -1.0
    # termination penalties, *below* :func:`worst_complete_return` (see the docstring)
    invalid: float = -2.0
    exceed: float = -2.0
    complete: float = 1.0
    # Eq. 4's latency term T, which eq. 7 leaves to the busy penalty alone: every
    # receiver step costs `latency` per transfer-time the reduce's simulated
    # makespan grows (transfers take 1 unit, a busy device joins after
    # `busy_delay` units). Equal to β so one extra sequential round weighs as
    # much as one extra aggregation on a device: the Tree/Ring trade-off of §3.3.
    latency: float = 0.2
    # Φ of eq. 8 ("an offset value obtained from our experiment"): slack under the
    # estimated optimum so that near-optimal (not only optimal) schedules pass. 3β:
    # with it T lies 0.2-0.6 below the exact best return for N = 2..9 and any number
    # of busy devices (tests/decentralized, benchmarks/mdldroid.py --sections threshold).
    phi: float = 0.6


def _f(n: int, beta: float) -> float:
    """Eq. 9: f(N) = β(N mod 2) + f(⌊N/2⌋), f(1) = 0 (the base case was lost; 0
    is the only value that keeps f(2^k) = 0, a perfectly balanced tree)."""
    return 0.0 if n <= 1 else beta * (n % 2) + _f(n // 2, beta)


def worst_complete_return(
    n: int, cfg: RewardConfig = RewardConfig(), busy_delay: float = 2.0
) -> float:
    """A lower bound on the return of any complete episode with ``n`` live devices.

    Every step costs at least α plus the busy penalty's floor min(ρ, 0) (2(N−1) steps);
    the balance term −β·n_agg of the receivers adds up to at most β(0 + 1 + … + N−2)
    (one device receiving everything); the latency term adds up to the final makespan,
    at most the busy delay plus one transfer per pair (N−1); completing adds
    R_complete. Each of those floors is ≤ 0, so the bound also holds for the rest of any
    partly built episode: an invalid move is worse than every way to finish."""
    if n < 2:
        return cfg.complete
    m = n - 1
    return (
        2 * m * min(0.0, cfg.alpha + min(cfg.rho, 0.0))
        - abs(cfg.beta) * m * (m - 1) / 2
        - abs(cfg.latency) * (max(busy_delay, 0.0) + m)
        + cfg.complete
    )


def threshold(
    n: int, n_busy: int, cfg: RewardConfig = RewardConfig(), busy_delay: float = 2.0
) -> float:
    """Eq. 8: T(N) = f(N) + g(N) − Φ, g(N) = β⌈log2 N⌉ (eq. 10), on our reward's scale.

    f and g are in reward units (multiples of β): f is the balance reward a
    ⌈log2 N⌉-round tree can collect (β per odd level, eq. 9), g the latency part.
    Eq. 8 leaves out what every complete episode collects whatever the order,
    2(N−1)α + R_complete, and our reward's latency cost of the shortest possible
    reduce, −latency·⌈log2 N⌉ (eq. 7 has no latency term; ours does, see
    :class:`RewardConfig`); both are added so that T is on the scale of a return —
    with eq. 8 alone, T lies above every reachable return from N = 5 on.

    Busy devices (not in eq. 8, whose T depends on N only) lower T by exactly what
    they lower the best reachable return, :func:`optimum` (N, 0) − (N, k): an
    earlier closed-form estimate (ρk²/(2(N−1)) and one transfer after the busy
    delay) put T above the exact optimum at N ≥ 5 with k = ⌊N/2⌋ busy, so TDGE and
    TGE could never leave ε = 1 on those allocations. The gap T leaves below the
    optimum is then the all-free one, 0.2-0.6 for N = 2..9 (benchmarks/mdldroid.py
    ``--sections threshold``).
    """
    if n < 2:
        return cfg.complete
    base = 2 * (n - 1) * cfg.alpha + cfg.complete
    depth = math.ceil(math.log2(n))
    g = cfg.beta * depth
    free = base - cfg.latency * depth + _f(n, cfg.beta) + g - cfg.phi
    if n_busy <= 0:
        return free
    return free - (optimum(n, 0, cfg, busy_delay) - optimum(n, n_busy, cfg, busy_delay))


@lru_cache(maxsize=256)
def optimum(
    n: int, n_busy: int, cfg: RewardConfig = RewardConfig(), busy_delay: float = 2.0
) -> float:
    """The best return any complete episode can reach with ``n_busy`` of ``n`` devices
    busy (exact, :func:`best_return`). The reward sees devices only through their busy
    flag, so which devices are busy does not matter."""
    if not 0 <= n_busy <= n:
        raise ConfigError(f"n_busy must be in 0..{n} (the devices), got {n_busy}")
    st = [DeviceStatus(d, in_use=d < n_busy) for d in range(n)]
    env = ChainSchedulingEnv(n, st, reward=cfg, busy_delay=busy_delay)
    env.reset()
    return best_return(env)[0]


class ChainSchedulingEnv(gym.Env):
    """Pick devices two at a time until one holds the whole aggregate.

    ``statuses`` fixes the devices' resources; without it every reset draws a
    random allocation with at most half the devices busy (§4.2). ``absent``
    devices (lost, see fault tolerance) start as S_done and take no part.
    ``reset(options={"statuses": [...], "absent": [...]})`` changes both.
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        n_devices: int,
        statuses: Sequence[DeviceStatus] | None = None,
        absent: Sequence[int] = (),
        reward: RewardConfig = RewardConfig(),
        max_busy_share: float = 0.5,
        busy_delay: float = 2.0,
    ) -> None:
        super().__init__()
        self.n = int(n_devices)
        self.busy_delay = float(busy_delay)
        self.cfg = reward
        self.max_busy_share = max_busy_share
        self._fixed = list(statuses) if statuses is not None else None
        self._absent = frozenset(absent)
        self.observation_space = gym.spaces.Box(
            0.0, 1.0, shape=(self.n * PER_DEVICE + GLOBAL,), dtype=np.float32
        )
        self.action_space = gym.spaces.Discrete(self.n)
        self.statuses: list[DeviceStatus] = [DeviceStatus(d) for d in range(self.n)]
        self._busy = np.zeros(self.n, dtype=bool)
        self._features = np.zeros((self.n, 5), dtype=np.float32)
        self._reset_state()

    # -- bookkeeping -------------------------------------------------------
    def _reset_state(self) -> None:
        self.state = np.zeros(self.n, dtype=np.int64)
        self.n_agg = np.zeros(self.n, dtype=np.int64)
        self.t = 0
        self.sender: int | None = None
        self.pairs: list[Pair] = []
        self.avail = np.where(self._busy, self.busy_delay, 0.0)
        self.makespan = 0.0

    @property
    def live(self) -> list[int]:
        return [d for d in range(self.n) if d not in self._absent]

    @property
    def best_steps(self) -> int:
        return 2 * (len(self.live) - 1)

    def _rest(self, d: int) -> int:
        return BUSY if self._busy[d] else FREE

    def _obs(self) -> np.ndarray:
        o = np.zeros((self.n, PER_DEVICE), dtype=np.float32)
        o[np.arange(self.n), self.state] = 1.0
        o[:, 5:10] = self._features
        o[:, 10] = self.n_agg / max(1, self.n - 1)
        o[:, 11] = np.minimum(1.0, self.avail / (self.n + self.busy_delay))
        g = np.array(
            [float(self.sender is not None), min(1.0, self.t / max(1, self.best_steps))],
            dtype=np.float32,
        )
        return np.concatenate([o.ravel(), g])

    def action_mask(self) -> np.ndarray:
        """Valid actions now: live devices that have not sent (and not the sender)."""
        m = self.state <= GET
        m[self.state == SEND] = False
        if self.sender is not None:
            m[self.sender] = False
        return m

    def _info(self) -> dict:
        return {
            "action_mask": self.action_mask(),
            "pairs": [(p.sender, p.receiver) for p in self.pairs],
            "n_busy": int(sum(self._busy[d] for d in self.live)),
        }

    # -- gym API -----------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        options = options or {}
        if "absent" in options:
            self._absent = frozenset(int(a) for a in options["absent"])
        if "statuses" in options:
            self._fixed = list(options["statuses"])
        if self._fixed is not None:
            if len(self._fixed) != self.n:
                raise ValueError(f"expected {self.n} statuses, got {len(self._fixed)}")
            self.statuses = list(self._fixed)
        else:
            self.statuses = random_statuses(self.n, self.np_random, self.max_busy_share)
        self._busy = np.array([s.busy for s in self.statuses], dtype=bool)
        self._features = np.clip(
            np.array([s.features() for s in self.statuses], dtype=np.float32), 0.0, 1.0
        )
        self._reset_state()
        for d in range(self.n):
            self.state[d] = DONE if d in self._absent else self._rest(d)
        return self._obs(), self._info()

    def severe(self, penalty: float) -> float:
        """Eq. 7's termination penalty: ``penalty`` below the worst complete return,
        so stopping early never pays (see the module docstring)."""
        return worst_complete_return(len(self.live), self.cfg, self.busy_delay) + penalty

    def _busy_penalty(self, d: int) -> float:
        if not self._busy[d]:
            return 0.0
        return self.cfg.rho * (1.0 - self.t / max(1, self.best_steps))

    def step(self, action):
        a = int(action)
        cfg = self.cfg
        # the previous receiver's S_get lasts one step
        for d in np.flatnonzero(self.state == GET):
            self.state[d] = self._rest(int(d))
        if not self.action_mask()[a]:
            self.t += 1
            return self._obs(), self.severe(cfg.invalid), True, False, self._info()
        if self.sender is None:
            r = cfg.alpha + cfg.beta * self.n_agg[a] + self._busy_penalty(a)
            self.state[a] = SEND
            self.sender = a
        else:
            r = cfg.alpha - cfg.beta * self.n_agg[a] + self._busy_penalty(a)
            end = max(self.avail[a], self.avail[self.sender]) + 1.0
            self.avail[a] = self.avail[self.sender] = end
            r -= cfg.latency * max(0.0, end - self.makespan)
            self.makespan = max(self.makespan, end)
            self.pairs.append(Pair(self.sender, a))
            self.state[self.sender] = DONE
            self.state[a] = GET
            self.n_agg[a] += 1
            self.sender = None
        self.t += 1
        alive = int((self.state <= GET).sum()) - int(self.sender is not None)
        terminated = False
        if alive <= 1 and self.sender is None:
            r += cfg.complete
            terminated = True
        elif self.t >= self.best_steps:
            r += self.severe(cfg.exceed)
            terminated = True
        return self._obs(), float(r), terminated, False, self._info()

    # -- helpers -----------------------------------------------------------
    def schedule(self) -> Schedule:
        """The finished episode's schedule (raises if the episode did not finish)."""
        return Schedule(tuple(self.live), tuple(self.pairs))

    def complete(self) -> bool:
        return len(self.pairs) == len(self.live) - 1


def best_return(env: ChainSchedulingEnv) -> tuple[float, Schedule]:
    """The highest return any complete episode can collect on ``env``'s current
    resources, and one schedule that collects it (exact, by dynamic programming).

    Eq. 7's reward depends on a device only through its busy flag, its aggregation
    count and the time it becomes available, so two devices alike in those three are
    interchangeable; memoising on the sorted multiset of them keeps the search small
    (N = 9 in well under a second). Used to check how far eq. 8's threshold is from
    what can be reached at all. Call after ``env.reset()``; the env is not stepped.
    """
    cfg = env.cfg
    steps = env.best_steps
    live = env.live
    busy = {d: bool(env._busy[d]) for d in live}
    start_avail = {d: (env.busy_delay if busy[d] else 0.0) for d in live}

    def pen(d_busy: bool, t: int) -> float:
        return cfg.rho * (1.0 - t / max(1, steps)) if d_busy else 0.0

    memo: dict[tuple, float] = {}

    def key(alive: dict[int, tuple], sender: int | None, makespan: float) -> tuple:
        rest = sorted((b, c, round(a, 9)) for d, (b, c, a) in alive.items() if d != sender)
        s = None if sender is None else alive[sender][:2] + (round(alive[sender][2], 9),)
        return (tuple(rest), s, round(makespan, 9))

    def moves(alive: dict[int, tuple], sender: int | None, makespan: float, t: int):
        """(device, reward, next alive, next sender, next makespan) for each valid action."""
        for d, (b, c, a) in alive.items():
            if d == sender:
                continue
            if sender is None:
                yield d, cfg.alpha + cfg.beta * c + pen(b, t), alive, d, makespan
                continue
            sb, sc, sa = alive[sender]
            end = max(a, sa) + 1.0
            r = cfg.alpha - cfg.beta * c + pen(b, t) - cfg.latency * max(0.0, end - makespan)
            nxt = {k: v for k, v in alive.items() if k != sender}
            nxt[d] = (b, c + 1, end)
            if len(nxt) <= 1:
                r += cfg.complete
            yield d, r, nxt, None, max(makespan, end)

    def value(alive: dict[int, tuple], sender: int | None, makespan: float) -> float:
        if len(alive) <= 1 and sender is None:
            return 0.0
        k = key(alive, sender, makespan)
        if k not in memo:
            t = 2 * (len(live) - len(alive)) + (sender is not None)
            memo[k] = max(
                r + value(nxt, s, m) for _, r, nxt, s, m in moves(alive, sender, makespan, t)
            )
        return memo[k]

    alive = {d: (busy[d], 0, start_avail[d]) for d in live}
    best = value(alive, None, 0.0)
    # walk the optimum back to device ids
    pairs, sender, makespan, t = [], None, 0.0, 0
    while not (len(alive) <= 1 and sender is None):
        target = value(alive, sender, makespan)
        for d, r, nxt, s, m in moves(alive, sender, makespan, t):
            if math.isclose(r + value(nxt, s, m), target, abs_tol=1e-9):
                if sender is not None:
                    pairs.append(Pair(sender, d))
                alive, sender, makespan = nxt, s, m
                break
        t += 1
    return best, Schedule(tuple(live), tuple(pairs))


def replay_return(env: ChainSchedulingEnv, schedule: Schedule) -> float:
    """Eq. 7's return of ``schedule`` on ``env``'s current resources: the schedule's
    pairs replayed as sender/receiver steps from a fresh ``reset``. The env is left at
    the end of that episode."""
    env.reset()
    total = 0.0
    for p in schedule.pairs:
        for a in (p.sender, p.receiver):
            total += env.step(a)[1]
    return total
