"""Selector formulas on hand-computed cases: FedHybrid eq. 1-4 + MAB, Oort (FedScale), Random."""

import math

import numpy as np
import pytest

from edgetrain.errors import ConfigError
from edgetrain.federated.selectors import (
    CheckIn,
    FedHybridSelector,
    Feedback,
    OortSelector,
    RandomSelector,
    comp_stat,
    get_norm,
    make_selector,
    mem_stat,
    stat_util,
    utility,
)

GB = 1e9


def _checkin(n=6):
    return CheckIn(
        n_samples=np.array([10, 20, 30, 40, 50, 60][:n]),
        memory_budget=np.array([2, 4, 8, 8, 12, 3][:n]) * GB,
        step_time_s=np.array([1.0, 0.5, 0.25, 2.0, 1.0, 0.5][:n]),
        est_duration_s=np.array([10.0, 20, 30, 40, 50, 60][:n]),
        m_g=4 * GB,
    )


def test_fedhybrid_utilities_hand_computed():
    # eq. 1: 2 GB of 4 GB -> 0.5; 8 GB -> 1 (fits, exponent 0)
    np.testing.assert_allclose(mem_stat([2 * GB, 4 * GB, 8 * GB], 4 * GB), [0.5, 1.0, 1.0])
    # eq. 2: losses 1 and 3 -> sqrt((1 + 9) / 2) = sqrt(5)
    assert float(stat_util(5.0)) == pytest.approx(math.sqrt(5))
    # eq. 3
    assert float(comp_stat(0.25)) == 4.0
    # eq. 4: sqrt(4) x (2/4) x 1/0.5 = 2
    assert float(utility(4.0, 2 * GB, 4 * GB, 0.5)) == pytest.approx(2.0)


def test_fedhybrid_exploits_epsilon_share_and_explores_unselected():
    ck = _checkin()
    sel = FedHybridSelector(seed=0, epsilon=0.5, ucb_c=0.0)
    sel.selected_before = {0, 1, 2, 3}
    # Util = sqrt(loss_sq) x MemStat x CompStat
    losses = {0: 16.0, 1: 1.0, 2: 1.0, 3: 100.0}
    sel.update(1, [Feedback(c, True, 1.0, v, 1) for c, v in losses.items()])
    u = {
        c: float(utility(v, ck.memory_budget[c], ck.m_g, ck.step_time_s[c]))
        for c, v in losses.items()
    }
    # client 0: 4 x .5 x 1 = 2; 1: 1 x 1 x 2 = 2; 2: 1 x 1 x 4 = 4; 3: 10 x 1 x .5 = 5
    assert u == pytest.approx({0: 2.0, 1: 2.0, 2: 4.0, 3: 5.0})
    picked = sel.select(2, ck, 4)
    assert {3, 2} <= set(picked)  # the epsilon = 0.5 share: the two highest utilities
    assert {4, 5} <= set(picked)  # the rest explores clients never selected before


def test_fedhybrid_exploration_prefers_rich_clients():
    ck = CheckIn(
        n_samples=np.ones(2, dtype=int), memory_budget=np.array([0.04, 8.0]) * GB,
        step_time_s=np.array([10.0, 0.1]), est_duration_s=np.ones(2), m_g=4 * GB,
    )  # fmt: skip
    counts = np.zeros(2)
    for s in range(200):
        counts[FedHybridSelector(seed=s).select(1, ck, 1)[0]] += 1
    assert counts[1] > 190  # system utility 0.01 x 0.1 vs 1 x 10


def test_oort_get_norm_and_scores_hand_computed():
    mx, mn, rng, avg, clip = get_norm([4.0, 1.0, 3.0, 2.0], clip_bound=0.95)
    assert (mx, clip) == (4.0, 4.0) and mn == pytest.approx(0.999) and rng == pytest.approx(3.001)
    sel = OortSelector(seed=0, round_threshold=50.0)
    ck = _checkin(4)
    sel._register(ck)
    sel.update(1, [Feedback(0, True, 10.0, 4.0, 10), Feedback(1, True, 40.0, 1.0, 20)])
    # rewards: sqrt(4) x 10 = 20 and sqrt(1) x 20 = 20 -> equal, normalised to ~0.0005
    assert sel.arms[0]["reward"] == 20.0 and sel.arms[1]["reward"] == 20.0
    t = 3
    sc = sel.scores(t, [0, 1, 2, 3])
    # preferred duration: 50th percentile of durations [10, 40, 30, 40] sorted -> index 2 -> 40
    assert sel.prefer_duration == 40.0
    rewards = sorted([20.0, 20.0, 30.0, 40.0])  # unexplored arms keep their size reward
    mn = rewards[0] * 0.999
    base = (20.0 - mn) / max(rewards[-1] - mn, 1e-4) + math.sqrt(0.1 * math.log(t) / 1)
    assert sc[0] == pytest.approx(base) and sc[1] == pytest.approx(base)
    sel.update(2, [Feedback(1, True, 80.0, 1.0, 20)])  # slower than T -> (T/d)^2 penalty
    sc = sel.scores(t, [0, 1, 2, 3])
    assert sel.prefer_duration == 40.0
    base1 = (20.0 - mn) / max(rewards[-1] - mn, 1e-4) + math.sqrt(0.1 * math.log(t) / 2)
    assert sc[1] == pytest.approx(base1 * (40.0 / 80.0) ** 2)


def test_oort_first_round_explores_by_size_and_decays():
    sel = OortSelector(seed=1)
    picked = sel.select(1, _checkin(), 2)
    assert len(picked) == 2 and sel.exploration == pytest.approx(0.9 * 0.98)
    state = sel.state_dict()
    other = OortSelector(seed=99)
    other.load_state_dict(state)
    assert other.select(2, _checkin(), 3) == sel.select(2, _checkin(), 3)


def test_random_selector_deterministic_and_unique():
    a = RandomSelector(seed=5).select(1, _checkin(), 4)
    assert a == RandomSelector(seed=5).select(1, _checkin(), 4) and len(set(a)) == 4
    with pytest.raises(ConfigError, match="accepted"):
        make_selector("greedy")
