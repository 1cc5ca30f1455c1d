"""DQN for the Chain scheduler, readable top to bottom (in the spirit of cleanrl's dqn.py).

Pieces: a small MLP Q-network, a NumPy replay buffer, a target network synced
every ``target_every`` updates, and the three exploration schedules of
MDLdroid §3.3.2:

- DGE  (decaying greedy exploration): ε decays every episode from the start.
- TGE  (threshold greedy exploration): ε = 1 until an episode's return passes
  the threshold T(N) of eq. 8, then ε = ε_new for good (no decay).
- TDGE (threshold + decay, the paper's proposal, Algorithm 2): ε = 1 until the
  threshold is passed, then ε = ε_new and it decays every episode.

Random exploration draws only among valid actions ("randomly explore an action
from validAction()"); during training the greedy action is the Q-argmax over
all actions, so the network learns that invalid actions are bad (eq. 7's
termination penalty). Convergence is checked every ``eval_every`` episodes
with an *unmasked* greedy rollout: the slot ends when the policy alone builds
a valid schedule whose return reaches T(N) (a masked rollout would pass with
an untrained network, since masking alone guarantees validity), or when the
episode budget (the learning slot) runs out. The deployed schedule is the
masked greedy one, or the best seen if that is better.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from edgetrain.decentralized.env import ChainSchedulingEnv, threshold
from edgetrain.decentralized.schedule import Schedule
from edgetrain.errors import ConfigError

EXPLORATIONS = ("tdge", "dge", "tge")


@dataclass
class DQNConfig:
    """Hyper-parameters; defaults are the usual small-DQN values (cleanrl dqn.py
    uses lr 2.5e-4, γ 0.99, batch 128, target sync 500 on CartPole; our episodes
    are ≤ 16 steps, so we sync and learn faster)."""

    hidden: int = 64
    lr: float = 1e-3
    gamma: float = 0.95
    buffer_size: int = 20_000
    batch_size: int = 32
    learning_starts: int = 64
    train_every: int = 2
    target_every: int = 50
    exploration: str = "tdge"
    eps_new: float = 0.5  # ε after the threshold is passed (TGE/TDGE) / start of DGE decay
    eps_decay: float = 0.97  # per episode
    eps_min: float = 0.02
    eval_every: int = 5  # episodes between greedy convergence checks
    # End the learning slot at convergence (the scheduler's resource saving). False runs
    # the whole budget like Algorithm 2's "while Epoch < max Epoch" and only records the
    # convergence episode, so reward curves of different strategies can be compared.
    stop_at_convergence: bool = True

    def __post_init__(self) -> None:
        if self.exploration not in EXPLORATIONS:
            raise ConfigError(
                f"unknown exploration {self.exploration!r}; choose one of {', '.join(EXPLORATIONS)}"
            )


class QNetwork(nn.Module):
    def __init__(self, obs_dim: int, n_actions: int, hidden: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(obs_dim, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, n_actions),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class ReplayBuffer:
    """Fixed-size ring of transitions, sampled uniformly with a NumPy Generator."""

    def __init__(self, size: int, obs_dim: int, rng: np.random.Generator) -> None:
        self.obs = np.zeros((size, obs_dim), dtype=np.float32)
        self.next_obs = np.zeros((size, obs_dim), dtype=np.float32)
        self.actions = np.zeros(size, dtype=np.int64)
        self.rewards = np.zeros(size, dtype=np.float32)
        self.dones = np.zeros(size, dtype=np.float32)
        self.size, self.pos, self.full, self.rng = size, 0, False, rng

    def add(self, o, a, r, o2, done) -> None:
        i = self.pos
        self.obs[i], self.actions[i], self.rewards[i] = o, a, r
        self.next_obs[i], self.dones[i] = o2, float(done)
        self.pos = (i + 1) % self.size
        self.full = self.full or self.pos == 0

    def __len__(self) -> int:
        return self.size if self.full else self.pos

    def sample(self, n: int):
        idx = self.rng.integers(0, len(self), size=n)
        return (
            torch.from_numpy(self.obs[idx]),
            torch.from_numpy(self.actions[idx]),
            torch.from_numpy(self.rewards[idx]),
            torch.from_numpy(self.next_obs[idx]),
            torch.from_numpy(self.dones[idx]),
        )


def reward_converged_at(returns: list[float], bar: float, window: int = 10) -> int | None:
    """Fig. 8b's convergence of the training reward: the first episode (1-based) at
    which the mean return of the last ``window`` episodes reaches ``bar``."""
    for t in range(window, len(returns) + 1):
        if float(np.mean(returns[t - window : t])) >= bar:
            return t
    return None


@dataclass
class LearnResult:
    """What one learning slot produced."""

    episodes: int
    converged_at: int | None  # episode index (1-based) of convergence, None if not
    returns: list[float] = field(default_factory=list)
    best_return: float = float("-inf")
    best_schedule: Schedule | None = None
    threshold: float = 0.0
    passed_at: int | None = None  # first episode whose return passed the threshold


class DQNAgent:
    """Q-network + target + replay + ε schedule, persistent across learning slots
    so that re-learning (continuous environment learning) starts warm."""

    def __init__(self, obs_dim: int, n_actions: int, cfg: DQNConfig, seed: int = 0) -> None:
        self.cfg = cfg
        self.n_actions = n_actions
        self.gen = torch.Generator().manual_seed(seed)
        self.rng = np.random.default_rng(seed)
        torch_state = torch.random.get_rng_state()
        torch.manual_seed(seed)  # nn.Linear init draws from the global generator
        self.q = QNetwork(obs_dim, n_actions, cfg.hidden)
        torch.random.set_rng_state(torch_state)
        self.target = QNetwork(obs_dim, n_actions, cfg.hidden)
        self.target.load_state_dict(self.q.state_dict())
        self.opt = torch.optim.Adam(self.q.parameters(), lr=cfg.lr)
        self.buffer = ReplayBuffer(cfg.buffer_size, obs_dim, self.rng)
        self.steps = 0
        self.updates = 0

    # -- acting ------------------------------------------------------------
    def greedy(self, obs: np.ndarray, mask: np.ndarray | None = None) -> int:
        with torch.no_grad():
            q = self.q(torch.from_numpy(obs)[None])[0].numpy()
        if mask is not None:
            q = np.where(mask, q, -np.inf)
        return int(np.argmax(q))

    def act(self, obs: np.ndarray, mask: np.ndarray, eps: float) -> int:
        if self.rng.random() < eps:
            return int(self.rng.choice(np.flatnonzero(mask)))
        return self.greedy(obs)

    # -- learning ----------------------------------------------------------
    def _update(self) -> None:
        o, a, r, o2, d = self.buffer.sample(self.cfg.batch_size)
        with torch.no_grad():
            target = r + self.cfg.gamma * self.target(o2).max(1).values * (1.0 - d)
        q = self.q(o).gather(1, a[:, None])[:, 0]
        loss = nn.functional.smooth_l1_loss(q, target)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self.updates += 1
        if self.updates % self.cfg.target_every == 0:
            self.target.load_state_dict(self.q.state_dict())

    def rollout(self, env: ChainSchedulingEnv, masked: bool) -> tuple[float, bool]:
        """One greedy episode on the env's current resources; (return, complete)."""
        obs, info = env.reset()
        total, done = 0.0, False
        while not done:
            a = self.greedy(obs, info["action_mask"] if masked else None)
            obs, r, done, trunc, info = env.step(a)
            total += r
            done = done or trunc
        return total, env.complete()

    def learn(
        self,
        env: ChainSchedulingEnv,
        episodes: int,
        eps_start: float = 1.0,
        threshold_override: float | None = None,
    ) -> LearnResult:
        """Run up to ``episodes`` training episodes on ``env`` (its resources fixed
        by the caller) with the configured exploration; stop at convergence.

        ``threshold_override`` replaces eq. 8's T(N) (both for the TDGE/TGE switch and
        the convergence check), e.g. to compare strategies against another bar."""
        cfg = self.cfg
        torch_threads = torch.get_num_threads()
        torch.set_num_threads(1)  # tiny MLP: threads only add overhead
        try:
            _, info = env.reset()
            thr = (
                threshold(len(env.live), info["n_busy"], env.cfg, env.busy_delay)
                if threshold_override is None
                else float(threshold_override)
            )
            res = LearnResult(0, None, threshold=thr)
            passed = cfg.exploration == "dge"  # DGE decays from the first episode
            eps = eps_start
            for ep in range(1, episodes + 1):
                obs, info = env.reset()
                total, done = 0.0, False
                while not done:
                    a = self.act(obs, info["action_mask"], eps)
                    obs2, r, done, trunc, info = env.step(a)
                    self.buffer.add(obs, a, r, obs2, done)
                    obs, total = obs2, total + r
                    self.steps += 1
                    done = done or trunc
                    if (
                        len(self.buffer) >= cfg.learning_starts
                        and self.steps % cfg.train_every == 0
                    ):
                        self._update()
                res.returns.append(total)
                res.episodes = ep
                if env.complete() and total > res.best_return:
                    res.best_return, res.best_schedule = total, env.schedule()
                if res.passed_at is None and total > thr:
                    res.passed_at = ep
                if not passed and total > thr:  # Algorithm 2: ε ← ε_new once T_R is passed
                    passed, eps = True, cfg.eps_new
                elif passed and cfg.exploration != "tge":
                    eps = max(cfg.eps_min, eps * cfg.eps_decay)
                if ep % cfg.eval_every == 0 and passed and res.converged_at is None:
                    g, ok = self.rollout(env, masked=False)
                    if ok and g >= thr:
                        res.converged_at = ep
                        if cfg.stop_at_convergence:
                            break
            return res
        finally:
            torch.set_num_threads(torch_threads)

    def greedy_schedule(self, env: ChainSchedulingEnv) -> tuple[Schedule, float]:
        """The masked-greedy schedule for the env's current resources (always valid)."""
        g, _ = self.rollout(env, masked=True)
        return env.schedule(), g
