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
  receiver): −2 and the episode terminates; exceeding the step limit: −2 and
  terminates. −2 is larger than any balance or busy term can add up to in one
  step, so an invalid move is never worth it ("severe penalty").
- completing the chain: +1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from edgetrain.decentralized.resources import DeviceStatus, random_statuses
from edgetrain.decentralized.schedule import Pair, Schedule

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
    invalid: float = -2.0
    exceed: float = -2.0
    complete: float = 1.0
    # Eq. 4's latency term T, which eq. 7 leaves to the busy penalty alone: every
    # receiver step costs `latency` per transfer-time the reduce's simulated
    # makespan grows (transfers take 1 unit, a busy device joins after
    # `busy_delay` units). Equal to β so one extra sequential round weighs as
    # much as one extra aggregation on a device: the Tree/Ring trade-off of §3.3.
    latency: float = 0.2
    # Φ of eq. 8: slack under the estimated optimum so the threshold is reachable
    # by near-optimal (not only optimal) schedules; 3β measured sufficient for
    # N = 2..9 with up to half the devices busy (tests/decentralized).
    phi: float = 0.6


def _f(n: int, beta: float) -> float:
    """Eq. 9: f(N) = β(N mod 2) + f(⌊N/2⌋), f(1) = 0 (the base case was lost; 0
    is the only value that keeps f(2^k) = 0, a perfectly balanced tree)."""
    return 0.0 if n <= 1 else beta * (n % 2) + _f(n // 2, beta)


def threshold(
    n: int, n_busy: int, cfg: RewardConfig = RewardConfig(), busy_delay: float = 2.0
) -> float:
    """Eq. 8: T(N) = f(N) + g(N) − Φ, g(N) = β⌈log2 N⌉ (eq. 10).

    The paper measures T against its own reward baseline; ours adds what every
    complete episode collects regardless of the order, 2(N−1)α + R_complete,
    and the least busy penalty that k busy devices must pay when picked last,
    ≈ ρk²/(2(N−1)), and the latency cost of the shortest possible reduce
    (⌈log2 N⌉ rounds, or a busy device's delay plus one transfer) — otherwise a
    threshold fixed in β units could never be reached once a device is busy and
    TDGE would explore forever.
    """
    if n < 2:
        return cfg.complete
    base = 2 * (n - 1) * cfg.alpha + cfg.complete
    busy_floor = cfg.rho * n_busy * n_busy / (2 * (n - 1))
    depth = math.ceil(math.log2(n))
    g = cfg.beta * depth
    makespan = max(depth, (busy_delay + 1) if n_busy else 0)
    return base + busy_floor - cfg.latency * makespan + _f(n, cfg.beta) + g - cfg.phi


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
            return self._obs(), cfg.invalid, True, False, self._info()
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
            r += cfg.exceed
            terminated = True
        return self._obs(), float(r), terminated, False, self._info()

    # -- helpers -----------------------------------------------------------
    def schedule(self) -> Schedule:
        """The finished episode's schedule (raises if the episode did not finish)."""
        return Schedule(tuple(self.live), tuple(self.pairs))

    def complete(self) -> bool:
        return len(self.pairs) == len(self.live) - 1
