"""DQN for the Chain scheduler, readable top to bottom (in the spirit of cleanrl's dqn.py).

Pieces: a small MLP Q-network, a NumPy replay buffer, a target network synced
every ``target_every`` updates, and the three exploration schedules of
MDLdroid §3.3.2:

- DGE  (decaying greedy exploration): ε decays every episode from the start.
- TGE  (threshold greedy exploration, §4.2: "the exploration only relies on the
  given threshold without decaying"): ε = 1 until a complete episode's return
  passes the threshold T(N) of eq. 8, then ε = ε_new for good.
- TDGE (the paper's proposal, §3.3.2 prose: "fully explore until the reward
  reaches the given threshold, we then switch the exploration to start epsilon
  decaying from the predefined value"): ε = 1 until T is passed, then ε = ε_new,
  decaying every episode.
- ``tdge-greedy``: the prose's "ensure the model to fully explore until the reward
  reaches the given threshold" read as the *model's* reward: ε = 1 until a greedy
  evaluation episode (ε = 0, one after every ``eval_every`` exploring episodes) passes
  T, then ε = ε_new, decaying like TDGE. Under ``tdge`` the compared reward is the
  exploring episode's own, which while ε = 1 is the return of a random schedule; here
  it is what the network has learned. The evaluation episodes are ordinary episodes:
  they count in the episode index and the budget, their return is in ``returns``,
  their transitions go to the replay buffer and their steps train the network.
- ``tdge-a2``: Algorithm 2 read literally. Its loop ends every Epoch (episode)
  with "update ε by decaying" whatever happened, and sets "ε ← ε_new" when a
  terminated episode's reward exceeds T_R: ε decays from 1 like DGE and jumps to
  ε_new at the first pass (the ε = 1 phase is bounded). The prose and the
  pseudo-code disagree only on the phase before the first pass.

The switch happens once (the prose's "switch"; Algorithm 2 would reset ε to ε_new
at every passing episode, which would *raise* ε again once it has decayed below
ε_new). Only a complete schedule counts as passing.

Random exploration draws only among valid actions ("randomly explore an action
from validAction()"). With ``mask_greedy`` (default) the greedy step is masked the
same way; without it the greedy action is the Q-argmax over all actions, which
must then learn validity from eq. 7's severe termination penalty — measured in
round 6 (DGE, N = 7 with 3 busy and N = 9 with 4 busy, 3 seeds): 47-100 % of the
last 100 of 300 episodes still ended on an invalid action, while the masked
agent's greedy schedule reached T(N) by episode 10-15 on the same draws. Convergence is checked
every ``eval_every`` episodes once the agent exploits (DGE and ``tdge-a2`` from
the start, TDGE, TGE and ``tdge-greedy`` after the switch) with a greedy rollout (masked as the
training steps are): the slot ends when the policy alone builds a schedule whose
return reaches T(N), or when the episode budget (the learning slot) runs out. The
deployed schedule is the masked greedy one, or the best seen if that is better.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from edgetrain.decentralized.env import ChainSchedulingEnv, threshold
from edgetrain.decentralized.schedule import Schedule
from edgetrain.errors import ConfigError

EXPLORATIONS = ("tdge", "dge", "tge", "tdge-a2", "tdge-greedy")


@dataclass
class DQNConfig:
    """Hyper-parameters; defaults are the usual small-DQN values (cleanrl dqn.py
    uses lr 2.5e-4, γ 0.99, batch 128, target sync 500 on CartPole; our episodes
    are ≤ 16 steps, so we sync and learn faster)."""

    hidden: int = 64
    lr: float = 1e-3
    # γ = 1: Algorithm 2 compares the *undiscounted* episode reward with T(N), and the
    # threshold and the exact optimum (env.best_return) are undiscounted sums too; an
    # episode ends after at most 2(N−1) steps, so the undiscounted return is finite.
    # (γ = 0.95 in rounds 1-5 made the agent maximise a different objective: the final
    # step's +1 and latency cost weighed 0.95^15 = 0.46 at N = 9.)
    gamma: float = 1.0
    buffer_size: int = 20_000
    batch_size: int = 32
    learning_starts: int = 64
    train_every: int = 2
    target_every: int = 50
    exploration: str = "tdge"
    # ε after the threshold is passed (TGE, TDGE, tdge-a2): the paper's "predefined value"
    # was lost in extraction; DGE starts from ``learn(eps_start=1.0)``
    eps_new: float = 0.5
    eps_decay: float = 0.97  # per episode
    eps_min: float = 0.02
    eval_every: int = 5  # episodes between greedy convergence checks
    # Greedy steps pick among valid actions only (invalid-action masking), like the
    # random ones ("randomly explore an action from validAction()"). False: the argmax
    # over all actions, which must then learn validity from eq. 7's severe penalty.
    mask_greedy: bool = True
    # End the learning slot at convergence (the scheduler's resource saving). False runs
    # the whole budget like Algorithm 2's "while Epoch < max Epoch" and only records the
    # convergence episode, so reward curves of different strategies can be compared.
    stop_at_convergence: bool = True
    # Benchmarks: with ``stop_at_convergence=False``, still stop once the greedy policy
    # has converged *and* the 10-episode mean training reward has reached T (Fig. 8b):
    # later episodes change none of the recorded convergence points.
    stop_when_both_converged: bool = False

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

    def __init__(
        self, size: int, obs_dim: int, rng: np.random.Generator, n_actions: int = 1
    ) -> None:
        self.obs = np.zeros((size, obs_dim), dtype=np.float32)
        self.next_obs = np.zeros((size, obs_dim), dtype=np.float32)
        self.actions = np.zeros(size, dtype=np.int64)
        self.rewards = np.zeros(size, dtype=np.float32)
        self.dones = np.zeros(size, dtype=np.float32)
        self.next_mask = np.ones((size, n_actions), dtype=bool)
        self.size, self.pos, self.full, self.rng = size, 0, False, rng

    def add(self, o, a, r, o2, done, mask2: np.ndarray | None = None) -> None:
        i = self.pos
        self.obs[i], self.actions[i], self.rewards[i] = o, a, r
        self.next_obs[i], self.dones[i] = o2, float(done)
        self.next_mask[i] = True if mask2 is None else mask2
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
            torch.from_numpy(self.next_mask[idx]),
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
    complete: list[bool] = field(default_factory=list)  # per episode: a valid schedule
    # first check (every eval_every episodes, in *any* exploration phase) at which the
    # greedy policy reaches the bar: what the network has learned off-policy even while
    # TDGE/TGE still explore fully (a diagnostic; it does not end the slot)
    greedy_at: int | None = None
    eps: list[float] = field(default_factory=list)  # ε each episode was run with
    # Fig. 8a's training time: per episode, the cumulative environment steps the slot has
    # taken so far (its episodes plus the greedy convergence-check rollouts) and the
    # cumulative CPU seconds of the learning thread (time.thread_time: one thread's own
    # time, not the neighbours' on a shared machine)
    steps_at: list[int] = field(default_factory=list)
    cpu_at: list[float] = field(default_factory=list)


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
        self.buffer = ReplayBuffer(cfg.buffer_size, obs_dim, self.rng, n_actions)
        self.steps = 0
        self.eval_steps = 0  # steps of greedy convergence-check rollouts (not trained on)
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
        return self.greedy(obs, mask if self.cfg.mask_greedy else None)

    # -- learning ----------------------------------------------------------
    def _update(self) -> None:
        o, a, r, o2, d, m2 = self.buffer.sample(self.cfg.batch_size)
        with torch.no_grad():
            # bootstrap from the next state's *valid* actions only: random exploration
            # never takes an invalid one, so their Q-values are untrained and an
            # unmasked max would bootstrap from arbitrary numbers (Huang & Ontañón,
            # "A Closer Look at Invalid Action Masking", 2022). An invalid action's
            # true value is the severe penalty, below every valid one, so the masked max
            # is the true max. Terminal next states have no valid action; d zeroes them.
            q2 = self.target(o2).masked_fill(~m2, -torch.inf).max(1).values
            q2 = torch.where(torch.isfinite(q2), q2, torch.zeros_like(q2))
            target = r + self.cfg.gamma * q2 * (1.0 - d)
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
            self.eval_steps += 1
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
            # DGE and Algorithm 2 read literally decay ε from the first episode
            decay_always = cfg.exploration in ("dge", "tdge-a2")
            # tdge-greedy: only a greedy evaluation episode's reward can end the ε = 1 phase
            by_greedy = cfg.exploration == "tdge-greedy"
            decay_after = cfg.exploration in ("tdge", "tdge-greedy")
            switched = False  # ε ← ε_new has happened (TGE, TDGE, tdge-a2, tdge-greedy)
            eps = eps_start
            steps0, check_steps, cpu0 = self.steps, 0, time.thread_time()
            for ep in range(1, episodes + 1):
                # tdge-greedy, still exploring fully: every (eval_every + 1)-th episode is
                # a greedy evaluation episode (ε = 0) whose reward is compared with T
                evaluating = by_greedy and not switched and ep % (cfg.eval_every + 1) == 0
                ep_eps = 0.0 if evaluating else eps
                res.eps.append(ep_eps)
                obs, info = env.reset()
                total, done = 0.0, False
                while not done:
                    a = self.act(obs, info["action_mask"], ep_eps)
                    obs2, r, done, trunc, info = env.step(a)
                    self.buffer.add(obs, a, r, obs2, done, info["action_mask"])
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
                res.complete.append(env.complete())
                # only a complete schedule can pass (with the severe penalty an invalid
                # episode's return is below T anyway; this keeps it so for any RewardConfig)
                ok_pass = env.complete() and total > thr
                if res.passed_at is None and ok_pass:
                    res.passed_at = ep
                if evaluating and ok_pass:
                    res.greedy_at = res.greedy_at or ep
                can_switch = evaluating if by_greedy else cfg.exploration != "dge"
                if ok_pass and not switched and can_switch:
                    switched, eps = True, cfg.eps_new  # Algorithm 2: ε ← ε_new
                if decay_always or (switched and decay_after):
                    eps = max(cfg.eps_min, eps * cfg.eps_decay)  # "update ε by decaying"
                exploiting = decay_always or switched
                # the greedy check: the convergence test once exploiting; before that the
                # "l" diagnostic (tdge-greedy's evaluation episodes already are that test)
                diag = res.greedy_at is None and not by_greedy
                check = res.converged_at is None and (exploiting or diag)
                stop = False
                if ep % cfg.eval_every == 0 and check:
                    before, t_before = self.eval_steps, time.thread_time()
                    g, ok = self.rollout(env, masked=cfg.mask_greedy)
                    if exploiting:  # part of the slot; the diagnostic is not
                        check_steps += self.eval_steps - before
                    else:
                        cpu0 += time.thread_time() - t_before
                    if ok and g >= thr:
                        res.greedy_at = res.greedy_at or ep
                        if exploiting:
                            res.converged_at = ep
                            stop = cfg.stop_at_convergence
                res.steps_at.append(self.steps - steps0 + check_steps)
                res.cpu_at.append(time.thread_time() - cpu0)
                if stop or (
                    cfg.stop_when_both_converged
                    and res.converged_at is not None
                    and res.passed_at is not None
                    and reward_converged_at(res.returns[-10:], thr) is not None
                ):
                    break
            return res
        finally:
            torch.set_num_threads(torch_threads)

    def greedy_schedule(self, env: ChainSchedulingEnv) -> tuple[Schedule, float]:
        """The masked-greedy schedule for the env's current resources (always valid)."""
        g, _ = self.rollout(env, masked=True)
        return env.schedule(), g
