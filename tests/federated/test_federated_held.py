"""Data only low-memory phones hold (``partition.low_memory_classes``): FedHybrid §1's
"unique data" on the devices a memory wall drops, and per-class test accuracy."""

import numpy as np
import pytest

from edgetrain.errors import ConfigError
from edgetrain.federated import FederatedServer, build_environment
from fed_small import small_fleet_config


def held_config(**partition):
    return small_fleet_config(partition={"low_memory_classes": 2, **partition})


@pytest.fixture(scope="module")
def env():
    return build_environment(held_config())


def test_held_classes_live_only_on_phones_below_m_g(env):
    y = env.train.y.numpy()
    held = env.low_memory_classes
    assert len(held) == 2 and list(held) == sorted(held)
    wall = env.hard_limits < env.m_g
    assert wall.any() and not wall.all()
    for cid, part in enumerate(env.parts):
        if not wall[cid]:
            assert not np.isin(y[part], held).any()
    on_wall = np.concatenate([p for c, p in enumerate(env.parts) if wall[c]])
    assert np.isin(y, held).sum() == np.isin(y[on_wall], held).sum() > 0  # all of them
    joined = np.sort(np.concatenate(env.parts))
    assert np.array_equal(joined, np.arange(len(y)))  # still a disjoint cover
    # same fleet, budgets and M_G as without held classes: only the partition moves
    plain = build_environment(small_fleet_config())
    assert plain.low_memory_classes == ()
    assert plain.m_g == env.m_g and np.array_equal(plain.budgets, env.budgets)
    assert [p.name for p in plain.fleet] == [p.name for p in env.fleet]


def test_a_list_names_the_held_classes():
    e = build_environment(held_config(low_memory_classes=[7, 3]))
    assert e.low_memory_classes == (3, 7)


@pytest.mark.parametrize(
    ("sections", "match"),
    [
        ({"partition": {"low_memory_classes": 10}}, "at most 9"),
        ({"partition": {"low_memory_classes": [3, 12]}}, r"classes \[12\] are not in the data"),
        ({"partition": {"low_memory_classes": 2, "scheme": "iid"}}, "scheme: dirichlet"),
        ({"partition": {"low_memory_classes": 2}, "memory": {"m_g": "100MB"}}, "none of the 12"),
    ],
)
def test_bad_held_settings_name_what_is_accepted(sections, match):
    with pytest.raises(ConfigError, match=match):
        build_environment(small_fleet_config(**sections))


@pytest.mark.parametrize("bad", [-1, [], [2, 2], [-3]])
def test_the_config_rejects_a_malformed_held_spec(bad):
    with pytest.raises(ConfigError, match="low_memory_classes"):
        small_fleet_config(partition={"low_memory_classes": bad})


def test_class_accuracy_matches_the_overall_accuracy(env):
    rec = FederatedServer(env, "random", "fedavg", None, None).run(1)[0]
    ca, hist = rec["class_accuracy"], rec["pred_hist"]
    y = env.test.y.numpy()
    support = np.bincount(y, minlength=len(ca))
    assert len(ca) == len(hist) == 10 and sum(hist) == len(y)
    present = [c for c in range(10) if support[c]]
    assert all(ca[c] is None for c in range(10) if not support[c])
    overall = sum(ca[c] * support[c] for c in present) / len(y)
    assert overall == pytest.approx(rec["accuracy"], abs=1e-5)


def test_fedhybrid_explore_samples_reaches_the_selector_and_picks_more_holders():
    """``federated.fedhybrid_explore: samples`` (a variant; round 31) draws unexplored clients
    by sample count. Round 1 is all exploration, so over a few seeds the holders (phones
    below M_G, which hold the held classes' samples too) are drawn more often than by the
    printed system-utility rule, which prefers memory-rich, fast phones."""
    picks = {}
    for explore in ("system", "samples"):
        cfg = small_fleet_config(
            partition={"low_memory_classes": 2}, federated={"fedhybrid_explore": explore}
        )
        env_ = build_environment(cfg)
        server = FederatedServer(env_, "fedhybrid", "fedavg", None, None)
        assert server.selector.explore == explore
        holders = set(np.flatnonzero(env_.hard_limits < env_.m_g).tolist())
        n = 0
        for s in range(20):
            server.selector.rng = np.random.default_rng(s)
            server.selector.selected_before = set()
            n += len(holders & set(server.selector.select(1, server._checkin, 4)))
        picks[explore] = n
    assert picks["samples"] > picks["system"]
    with pytest.raises(ConfigError, match="fedhybrid_explore"):
        small_fleet_config(federated={"fedhybrid_explore": "uniform"})
