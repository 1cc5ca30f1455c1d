"""Round 7: FedHybrid §5.1's local work (E local epochs over the partition, batch up to B)
applied to every method, charged by the clock, and the predictor's error diagnostics."""

import math

import pytest
import torch

from edgetrain.errors import ConfigError
from edgetrain.federated import build_environment
from edgetrain.federated.api import exposure
from edgetrain.federated.local import local_train
from edgetrain.federated.server import FederatedServer
from edgetrain.sim.clock import client_cost
from fed_small import small_fleet_config


@pytest.fixture(scope="module")
def envs():
    steps = build_environment(small_fleet_config())
    epochs = build_environment(small_fleet_config(federated={"local_epochs": 3, "batch_size": 16}))
    return steps, epochs


def test_local_work_is_epochs_over_the_partition(envs):
    steps_env, env = envs
    # both regimes occur: partitions smaller than the batch and ones of several batches
    assert env.n_samples.min() < 16 and env.n_samples.max() > 2 * 16
    for cid, n in enumerate(env.n_samples.tolist()):
        b = min(16, n)
        assert env.local_work(cid) == (3 * math.ceil(n / b), b, 3 * n)
        # without local_epochs: local_steps x batch_size, whatever the partition
        assert steps_env.local_work(cid) == (2, 8, 16)


def test_clock_charges_the_samples_trained(envs):
    steps_env, env = envs
    est = env.est_duration_s()
    for cid, p in enumerate(env.fleet):
        want = client_cost(
            p, samples=3 * int(env.n_samples[cid]), flops_per_sample=env.flops_per_sample,
            model_bytes=env.model_bytes,
        ).total_s  # fmt: skip
        assert est[cid] == pytest.approx(want)
    # CompStat's step time is a device property, rated at batch_size for every client
    ratio = env.step_time_s() / steps_env.step_time_s()
    assert ratio == pytest.approx([16 / 8] * len(env.fleet))
    # a client that fits trains (and is charged) E x n_k samples in the server's round
    server = FederatedServer(env, "random")
    fits = [server._client_round(1, c) for c in range(len(env.fleet))]
    fits = [c for c in fits if c.outcome == "fit"]
    assert fits
    for c in fits:
        p, n = env.fleet[c.cid], int(env.n_samples[c.cid])
        want = client_cost(
            p, samples=3 * n, flops_per_sample=env.flops_per_sample, model_bytes=env.model_bytes
        )  # fmt: skip
        assert c.cost.compute_s == pytest.approx(want.compute_s)
        assert c.budget_err is None  # no plan technique: no predictor diagnostics


def test_epoch_steps_visit_every_sample_epochs_times():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3))
    x, y = torch.randn(21, 4), torch.randint(0, 3, (21,))
    for epochs, b in ((1, 64), (3, 8), (2, 21)):
        n_b = min(b, 21)
        res = local_train(
            model, x, y, steps=epochs * math.ceil(21 / n_b), batch_size=n_b, lr=0.01,
            generator=torch.Generator().manual_seed(1),
        )  # fmt: skip
        assert res.trained_samples == epochs * 21


def test_local_epochs_must_be_positive():
    with pytest.raises(ConfigError, match="local_epochs"):
        small_fleet_config(federated={"local_epochs": 0})


def test_exposure_reports_the_predictor_error():
    recs = [
        {"sim_time_s": 1.0, "budget_n": 2, "budget_err_sum": 0.04, "budget_over": 1,
         "compress_planned": 1},
        {"sim_time_s": 2.0, "budget_n": 2, "budget_err_sum": 0.02, "budget_over": 0},
        {"sim_time_s": 3.0, "budget_n": 4, "budget_err_sum": 4.0, "budget_over": 4},
    ]  # fmt: skip
    e = exposure(recs, 2.0)
    assert e["budget_err_pct"] == pytest.approx(100 * 0.06 / 4)
    assert e["budget_over"] == 1 and e["compress_planned"] == 1 and e["rounds"] == 2
    assert exposure([{"sim_time_s": 1.0}], None)["budget_err_pct"] is None
