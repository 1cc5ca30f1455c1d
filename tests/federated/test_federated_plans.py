"""Server-side plans: buckets, k-means clusters planned for their weakest member, the cache."""

import numpy as np
import pytest

from edgetrain.federated.plans import PlanService, bucket_of, kmeans_labels
from fed_small import tiny_plan_service


@pytest.fixture(scope="module")
def service():
    return tiny_plan_service(2)


def test_bucket_floors_to_grid():
    assert bucket_of(0.57, 0.05) == 0.55
    assert bucket_of(0.6, 0.05) == 0.6
    assert bucket_of(0.049, 0.05) == 0.0


def test_kmeans_separates_memory_groups():
    f = np.array([0.2, 0.21, 0.22, 0.9, 0.91, 0.92])
    c = np.array([1e9, 1.1e9, 1.2e9, 1e9, 1.1e9, 1.2e9])
    labels = kmeans_labels(f, c, n_clusters=2, seed=0)
    assert len(set(labels[:3])) == 1 and len(set(labels[3:])) == 1 and labels[0] != labels[3]
    assert (kmeans_labels([0.5] * 4, [1e9] * 4) == 0).all()  # one distinct point -> one cluster


def test_plans_overheads_shrink_with_budget_and_cache_hits(service):
    tight = service.plan_for("hybrid", 0.35, "phone-6GB")
    loose = service.plan_for("hybrid", 0.85, "phone-6GB")
    assert tight.feasible and loose.feasible
    assert tight.fraction == 0.3 and loose.fraction == 0.8
    assert tight.overhead_factor >= loose.overhead_factor >= 1.0
    assert tight.decisions["keep"] <= loose.decisions["keep"]
    calls = service.planner_calls
    again = service.plan_for("hybrid", 0.39, "phone-6GB")  # same bucket and class -> cache
    assert again is tight and service.planner_calls == calls and service.cache_hits >= 1
    assert service.plan_for("hybrid", 1.5, "phone-12GB").overhead_factor == 1.0
    assert not service.plan_for("hybrid", 0.01, "phone-4GB").feasible


def test_clustered_plans_fit_every_member(service):
    fr = [0.31, 0.36, 0.34, 0.82, 0.88, 0.86]
    comp = [1e9, 1.2e9, 1.1e9, 1e9, 1.2e9, 1.1e9]
    cls = ["a"] * 6
    plans = service.plans_for_clients("hybrid", fr, comp, cls, n_clusters=2, seed=0)
    for f, p in zip(fr, plans, strict=True):
        assert p.fraction <= f  # planned for the weakest member: never more than it has
    assert plans[0] is plans[1] is plans[2]
    single = service.plans_for_clients("hybrid", fr[:2], comp[:2], cls[:2], cluster=False)
    assert [p.fraction for p in single] == fr[:2]  # exact fractions, one planner run each
    rows = service.to_json()
    fresh = PlanService(service.model, service.inputs, service.targets, "m", bucket=0.1)
    fresh.load_json(rows)
    assert fresh.outcome("hybrid", 0.3).overhead_factor == tight_factor(service)


def tight_factor(service):
    return service.outcome("hybrid", 0.3).overhead_factor


def test_recompute_and_swap_plan_on_hybrids_profile(service):
    """One measurement prices FedHybrid's plans and the recompute-only plans of its
    compression ablation (and Melon's, Capuchin's): the same plan gets the same factor,
    and hybrid's is never above recompute's where both fit (the engine's cap)."""
    assert service.profile("recompute") is service.profile("hybrid")
    assert service.profile("swap") is service.profile("hybrid")
    assert service.profile("compress") is not service.profile("hybrid")  # GACT's codecs
    both = same = 0
    for j in range(1, 10):
        h, r = service.outcome("hybrid", j / 10), service.outcome("recompute", j / 10)
        if not (h.feasible and r.feasible):
            continue
        both += 1
        assert h.overhead_factor <= r.overhead_factor
        if h.decisions == r.decisions:
            same += 1
            assert h.overhead_factor == r.overhead_factor
    assert both >= 3 and same >= 1
