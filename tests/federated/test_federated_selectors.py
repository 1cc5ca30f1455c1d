"""Selector formulas on hand-computed cases: FedHybrid eq. 1-4 + MAB, Oort (FedScale), Random."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgetrain.errors import ConfigError
from edgetrain.federated.config import FederatedSection
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
from edgetrain.federated.server import selector_options

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
    # eq. 4 as printed (default): exponent 1(M_i > M_G) -> 2 GB of 4 GB keeps 1, 8 GB -> 2
    np.testing.assert_allclose(mem_stat([2 * GB, 4 * GB, 8 * GB], 4 * GB), [1.0, 1.0, 2.0])
    # eq. 1: exponent 1(M_G > M_i) -> 2 GB of 4 GB -> 0.5; 8 GB -> 1 (fits, exponent 0)
    np.testing.assert_allclose(mem_stat([2 * GB, 4 * GB, 8 * GB], 4 * GB, "eq1"), [0.5, 1.0, 1.0])
    with pytest.raises(ConfigError, match="eq4, eq1"):
        mem_stat(1.0, 1.0, "eq2")
    # eq. 2: losses 1 and 3 -> sqrt((1 + 9) / 2) = sqrt(5)
    assert float(stat_util(5.0)) == pytest.approx(math.sqrt(5))
    # eq. 3
    assert float(comp_stat(0.25)) == 4.0
    # eq. 4: sqrt(4) x 1 x 1/0.5 = 4 (eq. 4's MemStat); sqrt(4) x (2/4) x 1/0.5 = 2 (eq. 1's)
    assert float(utility(4.0, 2 * GB, 4 * GB, 0.5)) == pytest.approx(4.0)
    assert float(utility(4.0, 2 * GB, 4 * GB, 0.5, "eq1")) == pytest.approx(2.0)
    # a memory-rich client: sqrt(9) x (12/4) x 1/1 = 9 (eq. 4); 3 x 1 x 1 = 3 (eq. 1)
    assert float(utility(9.0, 12 * GB, 4 * GB, 1.0)) == pytest.approx(9.0)
    assert float(utility(9.0, 12 * GB, 4 * GB, 1.0, "eq1")) == pytest.approx(3.0)


@pytest.mark.parametrize(
    ("form", "expected", "top2"),
    [
        # eq. 4: 0: 4 x 1 x 1 = 4; 1: 1 x 1 x 2 = 2; 2: 1 x 2 x 4 = 8; 3: 10 x 2 x .5 = 10
        ("eq4", {0: 4.0, 1: 2.0, 2: 8.0, 3: 10.0}, {3, 2}),
        # eq. 1: 0: 4 x .5 x 1 = 2; 1: 1 x 1 x 2 = 2; 2: 1 x 1 x 4 = 4; 3: 10 x 1 x .5 = 5
        ("eq1", {0: 2.0, 1: 2.0, 2: 4.0, 3: 5.0}, {3, 2}),
    ],
)
def test_fedhybrid_exploits_epsilon_share_and_explores_unselected(form, expected, top2):
    ck = _checkin()
    sel = FedHybridSelector(seed=0, epsilon=0.5, ucb_c=0.0, memstat=form)
    sel.selected_before = {0, 1, 2, 3}
    # Util = sqrt(loss_sq) x MemStat x CompStat
    losses = {0: 16.0, 1: 1.0, 2: 1.0, 3: 100.0}
    sel.update(1, [Feedback(c, True, 1.0, v, 1) for c, v in losses.items()])
    u = {
        c: float(utility(v, ck.memory_budget[c], ck.m_g, ck.step_time_s[c], form))
        for c, v in losses.items()
    }
    assert u == pytest.approx(expected)
    sc = sel.scores(2, ck)  # UCB constant 0: the scores are the utilities over the top one
    assert sc == pytest.approx({c: v / max(expected.values()) for c, v in expected.items()})
    picked = sel.select(2, ck, 4)
    assert top2 <= set(picked)  # the epsilon = 0.5 share: the two highest utilities
    assert {4, 5} <= set(picked)  # the rest explores clients never selected before


def test_fedhybrid_memstat_form_changes_who_is_exploited():
    """A memory-poor client (1 GB, Stat 4) vs a memory-rich one (6 GB, Stat 2), M_G 4 GB:
    eq. 4 exploits the poor one (4 x 1 = 4 > 2 x 6/4 = 3), eq. 1 the rich one
    (4 x 1/4 = 1 < 2 x 1 = 2)."""
    ck = CheckIn(
        n_samples=np.ones(3, dtype=int), memory_budget=np.array([1.0, 6.0, 1.0]) * GB,
        step_time_s=np.ones(3), est_duration_s=np.ones(3), m_g=4 * GB,
    )  # fmt: skip
    picks = {}
    for form in ("eq4", "eq1"):
        sel = FedHybridSelector(seed=0, epsilon=1.0, ucb_c=0.0, memstat=form)
        sel.selected_before = {0, 1, 2}
        sel.update(1, [Feedback(0, True, 1.0, 16.0, 1), Feedback(1, True, 1.0, 4.0, 1)])
        picks[form] = sel.select(2, ck, 1)
    assert picks == {"eq4": [0], "eq1": [1]}
    with pytest.raises(ConfigError, match="memstat"):
        FedHybridSelector(memstat="eq3")


def test_fedhybrid_stat_scaled_by_samples_exploits_the_data_rich_client():
    """stat="samples" (Oort's |B_i| factor, a diagnostic variant): client 0 (Stat 2, 10
    samples) vs client 1 (Stat 3, 2 samples), alike otherwise. Eq. 2 exploits client 1
    (3 > 2); scaled by the samples client 0 (20 > 6)."""
    ck = CheckIn(
        n_samples=np.array([10, 2]), memory_budget=np.full(2, 8.0) * GB,
        step_time_s=np.ones(2), est_duration_s=np.ones(2), m_g=4 * GB,
    )  # fmt: skip
    fb = [Feedback(0, True, 1.0, 4.0, 10), Feedback(1, True, 1.0, 9.0, 2)]
    picks = {}
    for form in ("eq2", "samples"):
        sel = FedHybridSelector(seed=0, epsilon=1.0, ucb_c=0.0, stat=form)
        sel.selected_before = {0, 1}
        sel.update(1, fb)
        picks[form] = sel.select(2, ck, 1)
        again = FedHybridSelector(seed=0, epsilon=1.0, ucb_c=0.0, stat=form)
        again.load_state_dict(sel.state_dict())
        assert again.scores(2, ck) == pytest.approx(sel.scores(2, ck))
    assert picks == {"eq2": [1], "samples": [0]}
    # a checkpoint written before the field existed loads (no sample counts: factor 1)
    old = sel.state_dict()
    del old["n"]
    FedHybridSelector(seed=0).load_state_dict(old)
    with pytest.raises(ConfigError, match="eq2, samples"):
        FedHybridSelector(stat="oort")


def test_fedhybrid_util_stat_drops_eq4_system_factors():
    """util="stat" and the one-factor drops (diagnostic variants): client 0 (Stat 3, 1 GB,
    step 4 s) vs client 1 (Stat 2, 8 GB, step 1 s), M_G 4 GB. Eq. 4 exploits client 1
    (2 x 2 x 1 = 4 against 3 x 1 x 1/4 = 0.75); Stat alone client 0 (3 > 2). The scores are
    the normalised utilities by hand, and the form reaches the selector from the config."""
    ck = CheckIn(
        n_samples=np.ones(2, dtype=int), memory_budget=np.array([1.0, 8.0]) * GB,
        step_time_s=np.array([4.0, 1.0]), est_duration_s=np.ones(2), m_g=4 * GB,
    )  # fmt: skip
    fb = [Feedback(0, True, 1.0, 9.0, 1), Feedback(1, True, 1.0, 4.0, 1)]
    picks, scores = {}, {}
    for form in ("eq4", "stat"):
        sel = FedHybridSelector(seed=0, epsilon=1.0, ucb_c=0.0, util=form)
        sel.selected_before = {0, 1}
        sel.update(1, fb)
        scores[form] = sel.scores(2, ck)
        picks[form] = sel.select(2, ck, 1)
    assert picks == {"eq4": [1], "stat": [0]}
    assert scores["eq4"] == pytest.approx({0: 0.75 / 4, 1: 1.0})
    assert scores["stat"] == pytest.approx({0: 1.0, 1: 2 / 3})
    # one factor dropped: Stat x MemStat 3 x 1 against 2 x 2; Stat x CompStat 3/4 against 2
    for form, raw in (("no-compstat", (3.0, 4.0)), ("no-memstat", (0.75, 2.0))):
        sel = FedHybridSelector(seed=0, epsilon=1.0, ucb_c=0.0, util=form)
        sel.update(1, fb)
        assert sel.scores(2, ck) == pytest.approx({0: raw[0] / max(raw), 1: raw[1] / max(raw)})
    with pytest.raises(ConfigError, match="eq4, stat"):
        FedHybridSelector(util="memstat")
    assert selector_options("fedhybrid", FederatedSection())["util"] == "eq4"
    opts = selector_options("fedhybrid", FederatedSection(fedhybrid_util="stat"))
    assert make_selector("fedhybrid", seed=0, **opts).util == "stat"


def test_fedhybrid_exploration_prefers_rich_clients():
    ck = CheckIn(
        n_samples=np.ones(2, dtype=int), memory_budget=np.array([0.04, 8.0]) * GB,
        step_time_s=np.array([10.0, 0.1]), est_duration_s=np.ones(2), m_g=4 * GB,
    )  # fmt: skip
    counts = np.zeros(2)
    for s in range(200):
        counts[FedHybridSelector(seed=s).select(1, ck, 1)[0]] += 1
    assert counts[1] > 190  # system utility 0.01 x 0.1 vs 1 x 10


def test_fedhybrid_explore_by_samples_draws_in_proportion_to_sample_count():
    """explore="samples" (FedScale's Oort init_reward, a variant): the same two clients as
    above, the poor one holding 9 of 10 samples. The printed rule draws the rich one
    (system utility 200x), the variant the poor one with probability 0.9."""
    ck = CheckIn(
        n_samples=np.array([90, 10]), memory_budget=np.array([0.04, 8.0]) * GB,
        step_time_s=np.array([10.0, 0.1]), est_duration_s=np.ones(2), m_g=4 * GB,
    )  # fmt: skip
    sel = FedHybridSelector(seed=0, explore="samples")
    assert sel._explore_weights(ck, np.array([0, 1])) == pytest.approx([0.9, 0.1])
    system = FedHybridSelector(seed=0)._explore_weights(ck, np.array([0, 1]))
    assert system == pytest.approx([0.1 / 20.1, 20 / 20.1])  # MemStat 1 x 0.1, 2 x 10
    counts = np.zeros(2)
    for s in range(400):
        counts[FedHybridSelector(seed=s, explore="samples").select(1, ck, 1)[0]] += 1
    assert 330 < counts[0] < 390  # binomial(400, 0.9): mean 360, sd 6
    # exploitation is unchanged: once both reported, the variant ranks as eq. 4 does
    fb = [Feedback(0, True, 1.0, 4.0, 90), Feedback(1, True, 1.0, 4.0, 10)]
    for explore in ("system", "samples"):
        sel = FedHybridSelector(seed=0, epsilon=1.0, ucb_c=0.0, explore=explore)
        sel.update(1, fb)
        sel.selected_before = {0, 1}
        assert sel.select(2, ck, 1) == [1]
    with pytest.raises(ConfigError, match="system, samples"):
        FedHybridSelector(explore="uniform")


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


def test_stragglers_get_the_rounds_mean_utility():
    """FedScale's round_completion_handler: a client that reported after the round closed
    is credited with the mean utility of the aggregated ones; a killed client is not."""
    fb = [
        Feedback(0, True, 1.0, 4.0, 10),  # Oort reward sqrt(4) x 10 = 20
        Feedback(1, True, 1.0, 16.0, 10),  # 40
        Feedback(2, False, 3.0, math.nan, 30, straggler=True),
        Feedback(3, False, math.inf, math.nan, 40),  # killed: never reported
    ]
    fh = FedHybridSelector(seed=0)
    fh.update(1, fb)
    assert fh.loss_sq == {0: 4.0, 1: 16.0, 2: 10.0} and fh.count[2] == 1
    oort = OortSelector(seed=0)
    oort._register(_checkin(4))
    oort.update(1, fb)
    assert oort.arms[2]["reward"] == 30.0 and oort.arms[2]["count"] == 1
    assert oort.arms[2]["duration"] == 3.0 and 2 not in oort.unexplored
    assert oort.arms[3]["count"] == 0 and oort.arms[3]["duration"] == 1e12
    # FedScale discards a client from the unexplored set only in update_client_util, which
    # completed clients reach: a killed one stays there and Oort's exploration draws it again
    # (round 48: why Oort's rounds on the MNIST example wait for the deadline more often)
    assert 3 in oort.unexplored


def test_oort_exploits_a_whole_small_cohort_once_exploration_decays():
    """k x exploration < 1 (3 per round, exploration at FedScale's floor 0.3): exploitation
    takes the whole cohort and the unexplored clients wait (it divided by zero)."""
    sel = OortSelector(seed=0)
    ck = _checkin(6)
    sel._register(ck)
    sel.update(1, [Feedback(c, True, 10.0, 1.0 + c, 10) for c in range(4)])
    sel.exploration = sel.exploration_min
    picked = sel.select(50, ck, 3)
    assert len(set(picked)) == 3 and set(picked) <= {0, 1, 2, 3}
    assert sel.explore_clients == [] and sel.unexplored == {4, 5}


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 500), min_size=1, max_size=30),
    st.lists(st.floats(0.1, 16.0), min_size=30, max_size=30),
    st.sampled_from(["system", "samples"]),
)
def test_exploration_draw_is_a_distribution_over_the_unexplored(samples, mem_gb, explore):
    """Either exploration form: non-negative weights that sum to one; "samples" is
    proportional to the sample counts (an empty client weighs as one sample)."""
    n = len(samples)
    ck = CheckIn(
        n_samples=np.array(samples), memory_budget=np.array(mem_gb[:n]) * GB,
        step_time_s=np.linspace(0.5, 2.0, n), est_duration_s=np.ones(n), m_g=4 * GB,
    )  # fmt: skip
    p = FedHybridSelector(seed=0, explore=explore)._explore_weights(ck, np.arange(n))
    assert (p > 0).all() and p.sum() == pytest.approx(1.0)
    if explore == "samples":
        w = np.maximum(np.array(samples, dtype=float), 1.0)
        assert p == pytest.approx(w / w.sum())


@settings(max_examples=40, deadline=None)
@given(
    mask=st.lists(st.booleans(), min_size=12, max_size=12).filter(any),
    k=st.integers(1, 12),
    seed=st.integers(0, 2**16),
)
def test_every_selector_picks_only_eligible_clients(mask, k, seed):
    """``CheckIn.eligible`` (``federated.unplannable: exclude``): whatever the mask, each
    selector returns min(k, |eligible|) distinct eligible clients, in every round, also once
    it has feedback from clients that later became ineligible."""
    rng = np.random.default_rng(seed)
    n = len(mask)
    full = CheckIn(
        n_samples=rng.integers(5, 100, n),
        memory_budget=rng.uniform(1, 12, n) * GB,
        step_time_s=rng.uniform(0.2, 3.0, n),
        est_duration_s=rng.uniform(5.0, 60.0, n),
        m_g=4 * GB,
    )
    masked = CheckIn(**{**full.__dict__, "eligible": np.array(mask)})
    ok = set(np.flatnonzero(mask).tolist())
    for sel in (RandomSelector(seed), FedHybridSelector(seed), OortSelector(seed)):
        # round 1 on every client (feedback from all), then rounds on the masked check-in
        first = sel.select(1, full, min(k, n))
        sel.update(1, [Feedback(c, True, 10.0, 1.0 + c, 20) for c in first])
        for r in (2, 3, 4):
            picked = sel.select(r, masked, k)
            assert len(picked) == len(set(picked)) == min(k, len(ok))
            assert set(picked) <= ok, (sel.name, picked, ok)
            sel.update(r, [Feedback(c, True, 10.0, 1.0, 20) for c in picked])


def test_random_selection_is_unchanged_when_every_client_is_eligible():
    ci = _checkin()
    every = CheckIn(**{**ci.__dict__, "eligible": np.ones(len(ci), dtype=bool)})
    assert RandomSelector(5).select(1, ci, 3) == RandomSelector(5).select(1, every, 3)
    # ... and equal to the draw before eligibility existed: choice(n) on the same generator
    before = sorted(int(i) for i in np.random.default_rng(5).choice(6, size=3, replace=False))
    assert RandomSelector(5).select(1, every, 3) == before
    assert list(every.candidates()) == list(range(6)) and every.is_eligible(5)


def test_fedhybrid_ucb_constant_sets_the_bonus_and_reaches_the_selector():
    """The MAB-UCB bonus is sqrt(c ln t / n_i) on the normalised utility: two clients with
    equal utility, reported 1 and 3 times, at t = 4. c = 1.5 (CUCB's 3/2) gives
    1 + sqrt(1.5 ln 4) and 1 + sqrt(1.5 ln 4 / 3); the setting reaches the selector from the
    ``federated`` section (1.5 by default since round 40), and a negative constant is refused
    there."""
    from pydantic import ValidationError

    ck = CheckIn(
        n_samples=np.ones(2, dtype=int), memory_budget=np.full(2, 8.0) * GB,
        step_time_s=np.ones(2), est_duration_s=np.ones(2), m_g=4 * GB,
    )  # fmt: skip
    sel = FedHybridSelector(seed=0, ucb_c=1.5)
    sel.update(1, [Feedback(0, True, 1.0, 4.0, 1), Feedback(1, True, 1.0, 4.0, 1)])
    sel.update(2, [Feedback(1, True, 1.0, 4.0, 1)])
    sel.update(3, [Feedback(1, True, 1.0, 4.0, 1)])
    b = math.sqrt(1.5 * math.log(4))
    assert sel.scores(4, ck) == pytest.approx({0: 1 + b, 1: 1 + b / math.sqrt(3)})
    assert sel.select(4, ck, 1) == [0]  # the less-reported arm wins the tie in utility
    fcfg = FederatedSection(fedhybrid_ucb_c=0.1)  # FedScale's Oort constant, the old default
    assert selector_options("fedhybrid", fcfg)["ucb_c"] == 0.1
    assert FedHybridSelector(**selector_options("fedhybrid", fcfg)).ucb_c == 0.1
    # CUCB's 3/2 is the default of the config and of the selector alike
    assert FederatedSection().fedhybrid_ucb_c == FedHybridSelector().ucb_c == 1.5
    with pytest.raises(ValidationError, match="fedhybrid_ucb_c"):
        FederatedSection(fedhybrid_ucb_c=-1.0)


def test_oort_section_defaults_are_the_selectors_and_reach_it():
    """``federated.oort`` names FedScale's flags; its defaults build the same selector as
    OortSelector's own, and each setting reaches the selector through ``selector_options``."""
    from pydantic import ValidationError

    default = OortSelector(**selector_options("oort", FederatedSection()))
    plain = OortSelector()
    keys = (
        "exploration", "decay", "exploration_min", "round_threshold", "pacer_delta",
        "pacer_step", "round_penalty", "cut_off", "clip_bound", "sample_window", "exploit_draw",
    )  # fmt: skip
    assert {k: getattr(default, k) for k in keys} == {k: getattr(plain, k) for k in keys}
    fcfg = FederatedSection(oort={"round_penalty": 0.0, "pacer_delta": 0.0, "exploit_draw": "top"})
    sel = make_selector("oort", seed=0, **selector_options("oort", fcfg))
    assert (sel.round_penalty, sel.pacer_delta, sel.exploit_draw) == (0.0, 0.0, "top")
    assert selector_options("random", fcfg) == {}
    with pytest.raises(ValidationError, match="round_penalty"):
        FederatedSection(oort={"round_penalty": -1.0})
    with pytest.raises(ValidationError, match="exploit_draw"):
        FederatedSection(oort={"exploit_draw": "greedy"})
    with pytest.raises(ValidationError, match="explore_factor"):  # a misspelt key is refused
        FederatedSection(oort={"explore_factor": 0.5})


def test_oort_round_penalty_zero_drops_the_deadline_penalty():
    """round_penalty 0: (T / d)^0 = 1, a slow arm keeps its score (the hand case above)."""
    ck = _checkin(4)
    scores = {}
    for alpha in (2.0, 0.0):
        sel = OortSelector(seed=0, round_threshold=50.0, round_penalty=alpha)
        sel._register(ck)
        sel.update(1, [Feedback(0, True, 10.0, 4.0, 10), Feedback(1, True, 80.0, 1.0, 20)])
        scores[alpha] = sel.scores(3, [0, 1, 2, 3])
    assert scores[0.0][1] == pytest.approx(scores[0.0][0])  # equal rewards, no penalty
    assert scores[2.0][1] == pytest.approx(scores[2.0][0] * (40.0 / 80.0) ** 2)


def test_oort_pacer_delta_zero_keeps_the_preferred_percentile():
    """The pacer widens T when the exploited utility goes flat; pacer_delta 0 leaves it."""
    ck = _checkin(6)
    for delta, expected in ((5.0, 35.0), (0.0, 30.0)):
        sel = OortSelector(seed=0, pacer_step=2, pacer_delta=delta)
        sel._register(ck)
        for t in range(1, 5):  # flat utility: the same arms, the same rewards every round
            sel.update(t, [Feedback(c, True, 10.0, 1.0, 10) for c in range(6)])
            sel.exploit_clients = [0, 1]
            sel.successful = {0, 1}
            sel._pacer(t)
        assert sel.round_threshold == expected


def test_oort_top_exploitation_takes_the_highest_scores():
    """exploit_draw "top" (a variant): the exploited share is the k highest scores, the
    default draws it in proportion to the score."""
    ck = _checkin(6)
    fb = [Feedback(c, True, 10.0, float(c + 1) ** 2, 10) for c in range(6)]  # reward c + 1
    picks = set()
    for seed in range(20):
        sel = OortSelector(seed=seed, exploit_draw="top", exploration=0.0, exploration_min=0.0)
        sel._register(ck)
        sel.update(1, fb)
        sc = sel.scores(2, list(range(6)))
        top = sorted(sc, key=lambda c: -sc[c])[:2]
        assert sel.select(2, ck, 2) == sorted(top)
        prop = OortSelector(seed=seed, exploration=0.0, exploration_min=0.0)
        prop._register(ck)
        prop.update(1, fb)
        picks.add(tuple(prop.select(2, ck, 2)))
    assert len(picks) > 1  # the default's draw varies with the seed
    with pytest.raises(ConfigError, match="proportional, top"):
        OortSelector(exploit_draw="best")
