"""Gymnasium env, reward of eq. 7, thresholds of eq. 8-10, DQN chain scheduler."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import given, settings
from hypothesis import strategies as st

from edgetrain.decentralized.chain_scheduler import ChainScheduler
from edgetrain.decentralized.dqn import DQNAgent, DQNConfig
from edgetrain.decentralized.env import (
    GLOBAL,
    PER_DEVICE,
    ChainSchedulingEnv,
    RewardConfig,
    _f,
    best_return,
    optimum,
    threshold,
    worst_complete_return,
)
from edgetrain.decentralized.resources import DeviceStatus, random_statuses
from edgetrain.errors import ConfigError


def test_env_passes_gymnasium_checker():
    check_env(ChainSchedulingEnv(5), skip_render_check=True)


def test_reward_terms_follow_eq7():
    cfg = RewardConfig()
    st = [DeviceStatus(0), DeviceStatus(1), DeviceStatus(2, in_use=True)]
    env = ChainSchedulingEnv(3, st)
    env.reset(seed=0)
    _, r, done, _, _ = env.step(0)  # sender, n_agg 0
    assert r == pytest.approx(cfg.alpha) and not done
    _, r, done, _, _ = env.step(1)  # receiver, n_agg 0; reduce makespan 0 -> 1
    assert r == pytest.approx(cfg.alpha - cfg.latency)
    _, r, _, _, _ = env.step(1)  # sender that aggregated once: incentive
    assert r == pytest.approx(cfg.alpha + cfg.beta)
    # busy receiver at t=3 of 4 (joins after busy_delay=2): makespan 1 -> 3, then complete
    _, r, done, _, info = env.step(2)
    assert r == pytest.approx(cfg.alpha + cfg.rho * (1 - 3 / 4) - 2 * cfg.latency + cfg.complete)
    assert done and info["pairs"] == [(0, 1), (1, 2)]
    assert env.schedule().root == 2
    env.reset()
    env.step(0)
    _, r, done, _, _ = env.step(0)  # sender as its own receiver: invalid
    # severe: below the worst complete return (3 devices, busy delay 2 transfers)
    low = 4 * (cfg.alpha + cfg.rho) - cfg.beta * 1 - cfg.latency * (2 + 2) + cfg.complete
    assert worst_complete_return(3, cfg, 2.0) == pytest.approx(low)
    assert r == pytest.approx(low + cfg.invalid) and done


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(2, 7),
    seed=st.integers(0, 10_000),
    cut=st.integers(0, 12),
    delay=st.sampled_from([1.0, 2.0, 6.7]),
)
def test_invalid_move_is_worse_than_any_way_to_finish(n, seed, cut, delay):
    """Eq. 7's "severe penalty": from any partly built episode, an invalid move earns
    less than the rest of any complete episode, so stopping never pays."""
    rng = np.random.default_rng(seed)
    st_ = random_statuses(n, rng, 0.5)
    env = ChainSchedulingEnv(n, st_, busy_delay=delay)
    _, info = env.reset()
    prefix = []
    for _ in range(min(cut, env.best_steps - 1)):
        a = int(rng.choice(np.flatnonzero(info["action_mask"])))
        prefix.append(a)
        _, _, _, _, info = env.step(a)
    bad = np.flatnonzero(~info["action_mask"])
    if len(bad) == 0:  # nothing invalid yet (first step, no device sent)
        return
    _, penalty, done, _, _ = env.step(int(rng.choice(bad)))
    assert done
    env.reset()
    for a in prefix:
        _, _, _, _, info = env.step(a)
    rest, done = 0.0, False
    while not done:
        _, r, done, _, info = env.step(int(rng.choice(np.flatnonzero(info["action_mask"]))))
        rest += r
    assert env.complete() and penalty < rest


def test_threshold_equations():
    beta = RewardConfig().beta
    assert _f(1, beta) == 0 and _f(8, beta) == 0
    assert _f(7, beta) == pytest.approx(2 * beta)  # 7 -> 3 -> 1: two odd levels
    t0 = threshold(8, 0)
    assert threshold(8, 2) < t0  # busy devices lower what can be reached


def test_absent_devices_are_skipped():
    env = ChainSchedulingEnv(4, absent=[2])
    _, info = env.reset(seed=1)
    assert not info["action_mask"][2]
    assert env.best_steps == 4


def test_tdge_switches_after_threshold_and_learns_valid_schedule():
    n = 4
    st = [DeviceStatus(0), DeviceStatus(1, in_use=True), DeviceStatus(2), DeviceStatus(3)]
    env = ChainSchedulingEnv(n, st)
    agent = DQNAgent(n * PER_DEVICE + GLOBAL, n, DQNConfig(exploration="tdge"), seed=0)
    res = agent.learn(env, 150)
    assert res.converged_at is not None and res.converged_at <= 150
    assert any(r > res.threshold for r in res.returns)
    sched, g = agent.greedy_schedule(env)
    assert g >= res.threshold
    # the busy device 1 must not take part in the first pair
    assert 1 not in (sched.pairs[0].sender, sched.pairs[0].receiver)


def test_chain_scheduler_relearns_and_falls_back():
    rng = np.random.default_rng(3)
    sch = ChainScheduler(4, seed=0, first_episodes=60, relearn_episodes=1)
    st = random_statuses(4, rng)
    s1 = sch.schedule(st)
    assert sch.log[-1].relearned and len(s1.pairs) == 3
    sch.schedule(st)
    assert not sch.log[-1].relearned
    st2 = [DeviceStatus(0, in_use=True), DeviceStatus(1), DeviceStatus(2), DeviceStatus(3)]
    s3 = sch.schedule(st2)
    log = sch.log[-1]
    assert log.relearned and log.episodes == 1
    # with a one-episode slot the result is the better of greedy and best seen
    assert log.best_return >= log.greedy_return
    assert len(s3.pairs) == 3
    # a lost device is left out of the schedule
    s4 = sch.schedule([s for s in st2 if s.device != 3])
    assert 3 not in s4.devices and len(s4.pairs) == 2
    with pytest.raises(ConfigError):
        sch.schedule([DeviceStatus(7)])
    with pytest.raises(ConfigError):
        DQNConfig(exploration="boltzmann")


def test_status_busy_rule_matches_devices_package():
    from edgetrain.devices import phones, random_resource_states
    from edgetrain.devices.state import is_busy

    states = random_resource_states(phones("mdldroid") * 3, 0.5, seed=4)
    for d, s in enumerate(states):
        assert DeviceStatus.from_state(d, s).busy == is_busy(s)
    rng = np.random.default_rng(0)
    for _ in range(20):
        st = random_statuses(8, rng, 0.5)
        assert sum(s.busy for s in st) <= 4


def test_threshold_override_and_first_pass_episode():
    st = [DeviceStatus(0), DeviceStatus(1, in_use=True), DeviceStatus(2)]
    env = ChainSchedulingEnv(3, st)
    agent = DQNAgent(3 * PER_DEVICE + GLOBAL, 3, DQNConfig(exploration="tge"), seed=0)
    low = agent.learn(env, 10, threshold_override=-100.0)
    assert low.threshold == -100.0 and low.passed_at == 1
    agent = DQNAgent(3 * PER_DEVICE + GLOBAL, 3, DQNConfig(exploration="tdge"), seed=0)
    high = agent.learn(env, 10, threshold_override=100.0)
    # an unreachable bar: never passed, never converged, the whole slot is spent
    assert high.passed_at is None and high.converged_at is None and high.episodes == 10


def test_exploration_schedules_follow_algorithm_2():
    """ε per episode: DGE decays from 1; TDGE holds 1 until a complete episode passes
    T, then ε_new and decay; TGE holds ε_new without decay; tdge-a2 (Algorithm 2 read
    literally) decays from 1 and jumps to ε_new at the first pass."""
    st = [DeviceStatus(0), DeviceStatus(1, in_use=True), DeviceStatus(2)]
    env = ChainSchedulingEnv(3, st)
    d, new = DQNConfig().eps_decay, DQNConfig().eps_new

    def eps(expl: str, bar: float) -> list[float]:
        agent = DQNAgent(3 * PER_DEVICE + GLOBAL, 3, DQNConfig(exploration=expl), seed=0)
        cfg = agent.cfg
        cfg.stop_at_convergence = False
        return agent.learn(env, 6, threshold_override=bar).eps

    assert eps("dge", 100.0) == pytest.approx([d**k for k in range(6)])
    assert eps("tdge", 100.0) == [1.0] * 6  # unreachable bar: explores fully
    assert eps("tdge-a2", 100.0) == pytest.approx([d**k for k in range(6)])
    assert eps("tdge", -100.0) == pytest.approx([1.0] + [new * d**k for k in range(1, 6)])
    assert eps("tge", -100.0) == pytest.approx([1.0] + [new] * 5)
    assert eps("tdge-a2", -100.0) == pytest.approx([1.0] + [new * d**k for k in range(1, 6)])


def test_tdge_greedy_compares_a_greedy_evaluation_episode_with_the_threshold():
    """tdge-greedy: ε = 1 while exploring fully, every (eval_every + 1)-th episode is a
    greedy one (ε = 0) and only its reward can end the ε = 1 phase; the evaluation
    episodes are ordinary episodes (returns, budget, replay buffer, steps)."""
    st = [DeviceStatus(0), DeviceStatus(1, in_use=True), DeviceStatus(2)]
    env = ChainSchedulingEnv(3, st)
    d, new = DQNConfig().eps_decay, DQNConfig().eps_new

    def run(expl: str, bar: float, episodes: int = 14):
        cfg = DQNConfig(exploration=expl, stop_at_convergence=False)
        agent = DQNAgent(3 * PER_DEVICE + GLOBAL, 3, cfg, seed=0)
        return agent, agent.learn(env, episodes, threshold_override=bar)

    # any complete episode passes: TDGE switches after its first (random) episode,
    # tdge-greedy only after its first greedy evaluation episode (episode 6)
    _, low = run("tdge-greedy", -100.0)
    assert low.eps[:6] == [1.0] * 5 + [0.0]
    assert low.eps[6:] == pytest.approx([new * d**k for k in range(1, 9)])
    assert low.passed_at == 1 and low.greedy_at == 6
    _, tdge = run("tdge", -100.0)
    assert tdge.eps[1] == pytest.approx(new * d)
    # an unreachable bar: ε = 1 for good, with a greedy episode every 6th
    agent, high = run("tdge-greedy", 100.0, 12)
    assert high.eps == ([1.0] * 5 + [0.0]) * 2
    assert high.converged_at is None and high.greedy_at is None and high.episodes == 12
    assert len(high.returns) == 12 and len(agent.buffer) == agent.steps
    # N = 3: every valid episode has 2(N-1) = 4 steps, evaluation episodes included;
    # no convergence check runs while exploring fully, so steps_at counts episodes only
    assert high.steps_at == [4 * k for k in range(1, 13)] and agent.steps == 48
    assert all(b >= a for a, b in zip(high.cpu_at, high.cpu_at[1:], strict=False))
    # once exploiting, the convergence checks' rollouts count in the slot's steps
    _, low_tdge = run("tdge", -100.0, 10)
    assert low_tdge.steps_at[-1] > 4 * 10
    # the Chain scheduler runs with it and deploys a complete schedule
    sched = ChainScheduler(3, seed=0, dqn=DQNConfig(exploration="tdge-greedy"), first_episodes=40)
    plan = sched.schedule(st)
    assert sorted(plan.devices) == [0, 1, 2] and len(plan.pairs) == 2
    assert sched.log[-1].learn.eps[5] == 0.0


def test_only_complete_episodes_pass_and_masked_greedy_stays_valid():
    st = [DeviceStatus(d, in_use=d == 2) for d in range(5)]
    env = ChainSchedulingEnv(5, st)
    # an untrained, unmasked, purely greedy agent ends episodes on invalid moves
    cfg = DQNConfig(exploration="tge", mask_greedy=False, eps_new=0.0)
    agent = DQNAgent(5 * PER_DEVICE + GLOBAL, 5, cfg, seed=1)
    res = agent.learn(env, 12, eps_start=0.0, threshold_override=-1e9)
    assert not all(res.complete)
    assert res.passed_at is None or res.complete[res.passed_at - 1]
    assert all(not c for c in res.complete[: (res.passed_at or 13) - 1])
    # masked greedy steps (the default): every training episode builds a schedule
    agent = DQNAgent(5 * PER_DEVICE + GLOBAL, 5, DQNConfig(exploration="dge"), seed=1)
    res = agent.learn(env, 12, eps_start=0.0)
    assert all(res.complete) and DQNConfig().gamma == 1.0


def test_reward_convergence_point_is_first_full_window_at_the_bar():
    from edgetrain.decentralized.dqn import reward_converged_at

    returns = [0.0] * 5 + [1.0] * 10
    assert reward_converged_at(returns, 1.0, window=10) == 15
    assert reward_converged_at(returns, 0.5, window=10) == 10  # mean of eps 1-10 is 0.5
    assert reward_converged_at(returns, 2.0, window=10) is None
    assert reward_converged_at([3.0] * 4, 1.0, window=10) is None  # shorter than a window


def _exhaustive_best(env: ChainSchedulingEnv) -> float:
    """Every valid action sequence from reset, stepped on copies of the env."""
    import copy

    best = float("-inf")

    def walk(e: ChainSchedulingEnv, total: float) -> None:
        nonlocal best
        for a in np.flatnonzero(e.action_mask()):
            e2 = copy.deepcopy(e)
            _, r, done, _, _ = e2.step(int(a))
            if not done:
                walk(e2, total + r)
            elif e2.complete():
                best = max(best, total + r)

    walk(env, 0.0)
    return best


@settings(max_examples=12, deadline=None)
@given(
    n=st.integers(2, 4),
    busy_mask=st.integers(0, 15),
    busy_delay=st.sampled_from([0.5, 2.0, 6.7]),
)
def test_best_return_is_the_exhaustive_maximum_and_its_schedule_collects_it(
    n, busy_mask, busy_delay
):
    statuses = [DeviceStatus(d, in_use=bool(busy_mask >> d & 1)) for d in range(n)]
    env = ChainSchedulingEnv(n, statuses, busy_delay=busy_delay)
    env.reset()
    best, sched = best_return(env)
    env.reset()
    assert best == pytest.approx(_exhaustive_best(env))
    env.reset()
    total = 0.0
    for p in sched.pairs:
        for a in (p.sender, p.receiver):
            total += env.step(a)[1]
    assert env.complete() and total == pytest.approx(best)
    # which devices are busy does not matter, only how many
    k = sum(s.busy for s in statuses)
    assert optimum(n, k, env.cfg, busy_delay) == pytest.approx(best)


def test_threshold_is_reachable_for_every_busy_count():
    """Eq. 8's T sits below the exact optimum by at most Φ for N = 2..7 and any number
    of busy devices (the closed-form busy estimate it replaced put T above the optimum
    at k = 3 of 7, so TDGE never left ε = 1 there)."""
    cfg = RewardConfig()
    for n in range(2, 8):
        for k in range(n // 2 + 1):
            gap = optimum(n, k, cfg, 6.7) - threshold(n, k, cfg, 6.7)
            assert 0.0 < gap <= cfg.phi + 1e-9, (n, k, gap)
        # every extra busy device costs something, so T falls with k
        ts = [threshold(n, k, cfg, 6.7) for k in range(n // 2 + 1)]
        assert all(a > b for a, b in zip(ts, ts[1:], strict=False))
    with pytest.raises(ConfigError, match="n_busy"):
        optimum(3, 4)


def test_as_free_clears_busy_causes_and_keeps_free_reports():
    from edgetrain.decentralized.resources import as_free

    rng = np.random.default_rng(5)
    for s in random_statuses(9, rng, 0.5) + [DeviceStatus(0, battery_frac=0.05)]:
        f = as_free(s)
        assert not f.busy and f.device == s.device
        if not s.busy:
            assert f == s
