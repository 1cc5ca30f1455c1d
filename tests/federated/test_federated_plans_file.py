"""memory.plans: a saved plans file makes a rerun use the same plans without profiling."""

import json
from dataclasses import replace

import pytest

from edgetrain.errors import ConfigError
from edgetrain.federated import FederatedServer, build_environment
from edgetrain.federated.server import make_plan_service
from edgetrain.runs import RunDir
from fed_small import small_fleet_config


def _strip(recs):
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in recs]


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("plansfile")
    env = build_environment(small_fleet_config(federated={"rounds": 2}))
    plans = make_plan_service(env)
    recs = FederatedServer(env, "fedhybrid", "fedavg", RunDir.create("a", root), plans).run(2)
    return root / "a" / "plans.json", recs, plans


def test_a_saved_plans_file_reproduces_the_run_without_profiling(first_run):
    path, recs, plans = first_run
    rows = json.loads(path.read_text())
    assert rows and {r["model"] for r in rows} == {plans.model_key}
    assert {r["bucket"] for r in rows} == {plans.bucket}
    env = build_environment(
        small_fleet_config(federated={"rounds": 2}, memory={"plans": str(path)})
    )
    fresh = make_plan_service(env)
    assert len(fresh.table) == len(rows)
    again = FederatedServer(env, "fedhybrid", "fedavg", None, fresh).run(2)
    assert fresh._profiles == {} and fresh.planner_calls == 0  # every plan from the file
    assert _strip(again) == _strip(recs)


@pytest.mark.parametrize(
    "content, match",
    [
        (None, "no file"),
        ("{not json", "is not JSON"),
        ('{"strategy": "hybrid"}', "not a list of objects"),
        ('[{"strategy": "hybrid", "fraction": 0.5}]', "lacks feasible, overhead_factor"),
        ('[{"strategy": "hybrid", "fraction": 0.5, "feasible": true, "overhead_factor": 1.1,'
         ' "model": "bert-small"}]', "planned for model 'bert-small'"),
        ('[{"strategy": "hybrid", "fraction": 0.5, "feasible": true, "overhead_factor": 1.1,'
         ' "bucket": 0.25}]', "memory.bucket is"),
        ('[{"strategy": "recompute", "fraction": 0.05, "feasible": true, "overhead_factor": 1.2},'
         ' {"strategy": "hybrid", "fraction": "half", "feasible": true,'
         ' "overhead_factor": 1.1}]', "bad value"),
    ],
)  # fmt: skip
def test_a_bad_plans_file_is_one_clear_error(tmp_path, first_run, content, match):
    _, _, plans = first_run
    path = tmp_path / "plans.json"
    if content is not None:
        path.write_text(content)
    before = dict(plans.table)
    with pytest.raises(ConfigError, match=match):
        plans.load_file(path)
    assert plans.table == before  # nothing half-loaded


def test_kept_profiles_make_the_missing_plans_from_the_same_measurement(tmp_path, first_run):
    """A plan the kept results lack (a client's exact budget, another seed's fleet-wide
    plan) comes from the kept profile, so it is priced as the kept plans were."""
    from edgetrain.federated.plans import profiles_path

    _, _, plans = first_run
    plans.outcome("hybrid", 0.5)  # measured (or already was) in the first run
    path = tmp_path / "kept.json"
    path.write_text(json.dumps(plans.to_json()))
    assert plans.save_profiles(profiles_path(path)) == 1  # hybrid's, shared by recompute
    assert profiles_path(path).name == "kept.profiles.json"
    env = build_environment(
        small_fleet_config(federated={"rounds": 2}, memory={"plans": str(path)})
    )
    fresh = make_plan_service(env)
    assert set(fresh._profiles) == {"hybrid"} and fresh.profile_s == 0.0  # nothing timed
    for f in (0.437, 0.612, 0.873):  # not on the kept grid: planned now, from the kept profile
        for strategy in ("hybrid", "recompute"):
            a, b = fresh.plan_exact(strategy, f), plans.plan_exact(strategy, f)
            assert a.feasible and a.overhead_factor > 1.0
            assert replace(a, plan_s=0.0) == replace(b, plan_s=0.0)  # all but the CPU seconds
    assert fresh.planner_calls > 0


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda d: "{not json", "is not JSON"),
        (lambda d: json.dumps({**d, "format": "x"}), "expected a JSON object"),
        (lambda d: json.dumps({**d, "model": "bert-small"}), "measured for model 'bert-small'"),
        (lambda d: json.dumps({**d, "profiles": {"melon": {}}}), "keyed by"),
        (lambda d: json.dumps({**d, "profiles": {"hybrid": {"format": "nope"}}}),
         "not an edgetrain model profile"),
        (lambda d: json.dumps({**d, "profiles": {"hybrid": {
            **d["profiles"]["hybrid"],
            "fingerprint": {**d["profiles"]["hybrid"]["fingerprint"], "inputs": []}}}}),
         "measured for another setting \\(inputs"),
    ],
)  # fmt: skip
def test_bad_kept_profiles_are_one_clear_error(tmp_path, first_run, edit, match):
    from edgetrain.federated.plans import PlanService, profiles_path

    _, _, plans = first_run
    good = tmp_path / "good.profiles.json"
    plans.save_profiles(good)
    path = tmp_path / "kept.json"
    path.write_text(json.dumps(plans.to_json()))
    profiles_path(path).write_text(edit(json.loads(good.read_text())))
    fresh = PlanService(
        plans.model, plans.inputs, plans.targets, plans.model_key, bucket=plans.bucket
    )
    with pytest.raises(ConfigError, match=match):
        fresh.load_file(path)
    assert fresh.table == {} and fresh._profiles == {}  # nothing half-loaded
