"""Flower interoperability: EdgetrainStrategy on Flower's simulation engine.

Needs the ``flower`` extra (flwr[simulation], Python >= 3.11); skipped without it.
One small simulation (4 nodes, 2 rounds, MobileNetV2 x0.25 on 400 MNIST samples) is
shared by the end-to-end checks (module fixture) to keep the file under a minute.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

flwr = pytest.importorskip(
    "flwr", reason="flwr not installed: pip install 'edgetrain[flower]' (needs Python >= 3.11)"
)

import numpy as np  # noqa: E402
import torch  # noqa: E402

from edgetrain.errors import BudgetError, ConfigError  # noqa: E402
from edgetrain.federated import FederatedConfig  # noqa: E402
from edgetrain.federated.aggregators import FedAvg  # noqa: E402
from edgetrain.federated.selectors import CheckIn, FedHybridSelector, RandomSelector  # noqa: E402
from edgetrain.federated.server import _seed, make_plan_service  # noqa: E402
from edgetrain.integrations.flower import (  # noqa: E402
    EdgetrainStrategy,
    simulate,
    train_on_client,
)
from edgetrain.integrations.flower import keys as K  # noqa: E402
from edgetrain.integrations.flower.simulation import environment_for  # noqa: E402

CFG = FederatedConfig.model_validate(
    {
        "seed": 0,
        "fleet": {"clients": 4},
        "data": {"max_samples": 400, "reshape": None},
        "federated": {
            "clients_per_round": 2,
            "rounds": 2,
            "local_steps": 2,
            "batch_size": 8,
            "method": "fedhybrid",
            # eq. 1's MemStat: its first-round draw on this 4-node fleet picks a client below
            # M_G (eq. 4's picks two that fit), so the plan path runs end to end
            "memstat": "eq1",
        },
        "model": {
            "name": "mobilenetv2",
            "options": {"width_mult": 0.25, "in_channels": 1, "input_size": 28, "num_classes": 10},
        },
        "memory": {"plan_batch": 4},
    }
)


@pytest.fixture(scope="module")
def env():
    return environment_for(CFG.model_dump_json())


@pytest.fixture(scope="module")
def result(env):
    return simulate(CFG, num_cpus=2)


def _checkin(env) -> CheckIn:
    return CheckIn(env.n_samples, env.budgets, env.step_time_s(), env.est_duration_s(), env.m_g)


def test_selection_matches_the_in_process_server(env, result):
    # the strategy built its CheckIn from the nodes' query replies; edgetrain's own server
    # on the same config and seed must pick the same clients in round 1 (ids mapped right)
    # (the selector FederatedServer builds, seed _seed(seed, 7); constructing the server
    # itself would precompute every plan bucket: minutes on 2 shared cores)
    assert [r.round for r in result.rounds] == [1, 2]
    seed = _seed(CFG.seed, 7)
    sel = FedHybridSelector(seed=seed, epsilon=CFG.federated.epsilon, memstat=CFG.federated.memstat)
    assert sel.select(1, _checkin(env), 2) == result.rounds[0].selected


def test_plans_ship_to_clients_below_m_g_and_are_executed(env, result):
    below = {c for c in range(len(env.budgets)) if env.budgets[c] < env.m_g}
    assert below, "the fixture fleet must hold a client that cannot fit the model"
    for r in result.rounds:
        assert set(r.plans) == below & set(r.selected)
        for cid, p in r.plans.items():
            assert p["strategy"] == "hybrid" and p["fraction"] <= env.budgets[cid] / env.m_g
        feasible = {c for c, p in r.plans.items() if p["feasible"]}
        assert set(r.planned) == feasible & set(r.aggregated)
    assert any(r.planned for r in result.rounds)


def test_rounds_aggregate_and_the_model_is_evaluated(env, result):
    for r in result.rounds:
        assert sorted(r.aggregated + r.failed + r.late + r.stragglers) == r.selected
        assert len(r.aggregated) <= CFG.federated.clients_per_round
        assert r.round_time_s > 0 and r.train_loss is not None and np.isfinite(r.train_loss)
    assert set(result.accuracy) == {0, 1, 2}
    assert all(0.0 <= a <= 1.0 for a in result.accuracy.values())
    assert result.sim_time_s == pytest.approx(sum(r.round_time_s for r in result.rounds))
    json.loads(json.dumps(result.to_json()))  # plain JSON


def test_recompute_plan_trains_exactly_like_no_plan(env):
    # recomputation changes memory, not maths: the shipped plan must give the same update
    cid = int(np.argmin(env.budgets))
    plans = env.plan_service or make_plan_service(env)
    plan = plans.make_plan("recompute", 0.5)
    assert plan.feasible and plan.decisions.get("recompute", 0) > 0
    state = env.build_model().state_dict()
    base = {K.SEED: 3, K.LOCAL_STEPS: 2, K.BATCH_SIZE: 8, K.LR: 0.05}
    big = dataclasses.replace(env, m_g=1.0)  # fits everywhere: no kill, no pressure
    plain, m0 = train_on_client(big, cid, state, base)
    planned, m1 = train_on_client(
        big, cid, state, {**base, K.PLAN_JSON: json.dumps(plan.plan_json), K.PLAN_FRACTION: 0.5}
    )
    assert m1[K.PLAN_EXECUTED] == 1.0 and m0[K.PLAN_EXECUTED] == 0.0
    assert m1[K.LOSS_SQ_MEAN] == pytest.approx(m0[K.LOSS_SQ_MEAN], rel=1e-5)
    for k, v in plain.items():
        if v.is_floating_point():
            torch.testing.assert_close(planned[k], v, rtol=1e-4, atol=1e-5)


def test_a_client_above_physical_memory_is_killed(env):
    huge = dataclasses.replace(env, m_g=float(env.hard_limits.max()) * 2)
    with pytest.raises(BudgetError, match="physical memory"):
        train_on_client(huge, 0, env.build_model().state_dict(), {K.LOCAL_STEPS: 1})


def test_bad_strategy_arguments_name_the_field():
    with pytest.raises(ConfigError, match="overcommit"):
        EdgetrainStrategy(RandomSelector(), FedAvg(), clients_per_round=1, m_g=1.0, overcommit=0.5)
    with pytest.raises(ConfigError, match="failure_report"):
        EdgetrainStrategy(
            RandomSelector(), FedAvg(), clients_per_round=1, m_g=1.0, failure_report="never"
        )
    with pytest.raises(ConfigError, match="clients_per_round"):
        EdgetrainStrategy(RandomSelector(), FedAvg(), clients_per_round=0, m_g=1.0)
    with pytest.raises(ConfigError, match="plan_strategy"):
        EdgetrainStrategy(
            RandomSelector(), FedAvg(), clients_per_round=1, m_g=1.0, plan_strategy="zip"
        )
    with pytest.raises(ConfigError, match="m_g"):
        EdgetrainStrategy(RandomSelector(), FedAvg(), clients_per_round=1, m_g=0.0)


def test_uniform_table4_baselines_are_refused_with_the_accepted_alternative(env):
    from edgetrain.integrations.flower.simulation import make_strategy

    with pytest.raises(ConfigError, match="baseline_plans: per_client"):
        make_strategy(CFG, env, "oort+recompute")
    per_client = CFG.model_copy(
        update={"federated": CFG.federated.model_copy(update={"baseline_plans": "per_client"})}
    )
    strategy = make_strategy(per_client, env, "oort+recompute")
    assert strategy.plan_service is not None


def test_the_memory_oracle_is_refused_with_the_accepted_alternatives(env):
    from edgetrain.integrations.flower.simulation import make_strategy

    with pytest.raises(ConfigError, match="oort, random or fedhybrid"):
        make_strategy(CFG, env, "oort-oracle")


def test_local_epochs_are_refused_with_the_accepted_alternative(env):
    from edgetrain.integrations.flower.simulation import make_strategy

    epochs = CFG.model_copy(
        update={"federated": CFG.federated.model_copy(update={"local_epochs": 10})}
    )
    with pytest.raises(ConfigError, match="local_epochs: 10 .* set federated.local_steps"):
        make_strategy(epochs, env, "fedhybrid")


def test_partial_work_is_refused_with_the_accepted_alternative(env):
    from edgetrain.integrations.flower.simulation import make_strategy

    partial = CFG.model_copy(
        update={"federated": CFG.federated.model_copy(update={"partial_work": True})}
    )
    with pytest.raises(
        ConfigError, match="partial_work: true .* set federated.partial_work: false"
    ):
        make_strategy(partial, env, "fedhybrid")


def test_unplannable_exclude_hands_the_selector_only_plannable_nodes(env):
    """``federated.unplannable: exclude`` on Flower: the strategy's check-in marks as
    ineligible a node whose budget no server-side plan fits (a budget bucket of 0 of M_G:
    infeasible without planning), keeps nodes at or above M_G, and the selector never picks
    an ineligible node; with no node plannable it raises the server's ConfigError. Methods
    without server-side plans (oort) leave every node eligible."""
    from edgetrain.integrations.flower.simulation import make_strategy

    excl = CFG.model_copy(
        update={"federated": CFG.federated.model_copy(update={"unplannable": "exclude"})}
    )
    strat = make_strategy(excl, env, "fedhybrid")
    assert strat.unplannable == "exclude" and strat.plan_service is not None
    strat.device_class = [env.memory_class(c) for c in range(4)]
    m = env.m_g
    mask = strat.plannable(np.array([2 * m, 0.001 * m, m, 0.001 * m]))
    assert mask.tolist() == [True, False, True, False]
    checkin = CheckIn(env.n_samples, np.array([2 * m, 0.001 * m, m, 0.001 * m]),
                      env.step_time_s(), env.est_duration_s(), m, eligible=mask)  # fmt: skip
    for rnd in range(1, 6):
        assert set(strat.selector.select(rnd, checkin, 2)) == {0, 2}
    with pytest.raises(ConfigError, match="unplannable: exclude leaves no node .* dispatch"):
        strat.plannable(np.full(4, 0.001 * m))
    assert make_strategy(excl, env, "oort").unplannable == "dispatch"
    assert make_strategy(CFG, env, "fedhybrid").unplannable == CFG.federated.unplannable


def test_unplannable_microbatch_is_refused_with_the_accepted_alternatives(env):
    from edgetrain.integrations.flower.simulation import make_strategy

    mb = CFG.model_copy(
        update={"federated": CFG.federated.model_copy(update={"unplannable": "microbatch"})}
    )
    with pytest.raises(ConfigError, match="microbatch .* set federated.unplannable: exclude"):
        make_strategy(mb, env, "fedhybrid")


def test_fedhybrid_selector_settings_reach_the_flower_strategy(env):
    """The strategy builds FedHybrid's selector from the same settings as edgetrain federate
    (``selector_options``), so fedhybrid_stat / fedhybrid_explore are not dropped on Flower;
    and fedhybrid-oortselector (Oort's selector, FedHybrid's plans) is accepted."""
    from edgetrain.federated.config import OortSection
    from edgetrain.integrations.flower.simulation import make_strategy

    variant = CFG.model_copy(
        update={
            "federated": CFG.federated.model_copy(
                update={"fedhybrid_stat": "samples", "fedhybrid_explore": "samples"}
            )
        }
    )
    sel = make_strategy(variant, env, "fedhybrid").selector
    assert (sel.stat, sel.explore, sel.memstat) == ("samples", "samples", "eq1")
    assert make_strategy(CFG, env, "fedhybrid-oortselector").selector.name == "oort"
    tuned = CFG.model_copy(
        update={
            "federated": CFG.federated.model_copy(
                update={"oort": OortSection(round_penalty=0.0, exploit_draw="top")}
            )
        }
    )
    oort = make_strategy(tuned, env, "oort").selector  # federated.oort reaches Flower's Oort
    assert (oort.round_penalty, oort.exploit_draw) == (0.0, "top")


def test_clip_grad_norm_ships_to_the_nodes_and_bounds_their_step(env):
    """federated.clip_grad_norm reaches the strategy from the config, and a node told to clip
    at c moves its parameters by exactly lr x c in one step (its gradient is larger); 0.0,
    the default in the record, does not clip. A norm <= 0 is refused by the strategy."""
    from edgetrain.integrations.flower.simulation import make_strategy

    variant = CFG.model_copy(
        update={"federated": CFG.federated.model_copy(update={"clip_grad_norm": 0.5})}
    )
    assert make_strategy(variant, env, "random").clip_grad_norm == 0.5
    assert make_strategy(CFG, env, "random").clip_grad_norm is None
    big = dataclasses.replace(env, m_g=1.0)  # fits everywhere: no kill, no pressure
    state = env.build_model().state_dict()
    names = [k for k, _ in env.build_model().named_parameters()]
    base = {K.SEED: 3, K.LOCAL_STEPS: 1, K.BATCH_SIZE: 8, K.LR: 0.05}

    def moved(extra):
        new, _ = train_on_client(big, 0, state, {**base, **extra})
        return float(torch.sqrt(sum(((new[k] - state[k]) ** 2).sum() for k in names)))

    assert moved({}) > 0.05 * 1e-3 * 10
    # float32 parameters: the difference of two tables carries rounding of ~0.1 % here
    assert moved({K.CLIP_NORM: 1e-3}) == pytest.approx(0.05 * 1e-3, rel=2e-3)
    with pytest.raises(ConfigError, match="clip_grad_norm"):
        EdgetrainStrategy(RandomSelector(), FedAvg(), clients_per_round=1, m_g=1.0,
                          clip_grad_norm=0.0)  # fmt: skip
