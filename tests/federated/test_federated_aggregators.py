"""Aggregators: FedAvg is a sample-weighted mean, FedProx(mu=0) == FedAvg, FedYogi's step."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from edgetrain.federated.aggregators import FedAvg, FedProx, FedYogi, weighted_mean
from edgetrain.federated.local import local_train


def _states(seed, n):
    g = torch.Generator().manual_seed(seed)
    return [{"w": torch.randn(3, 2, generator=g), "b": torch.randn(2, generator=g),
             "steps": torch.tensor(n)} for _ in range(n)]  # fmt: skip


def test_fedavg_is_sample_weighted_mean():
    glob = _states(0, 1)[0]
    ups = _states(1, 3)
    weights = [10.0, 30.0, 60.0]
    out = FedAvg().aggregate(glob, list(zip(ups, weights, strict=True)))
    want = sum(w * u["w"] for u, w in zip(ups, weights, strict=True)) / 100.0
    torch.testing.assert_close(out["w"], want)
    assert torch.equal(out["steps"], glob["steps"])  # integer buffers keep the global value


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(0.5, 100.0), min_size=1, max_size=5), st.integers(0, 1000))
def test_weighted_mean_of_identical_states_is_that_state(ws, seed):
    s = _states(seed, 1)[0]
    out = weighted_mean(_states(seed + 1, 1)[0], [(s, w) for w in ws])
    torch.testing.assert_close(out["w"], s["w"])


def test_weighted_mean_of_slices_counts_only_holders():
    glob = {"w": torch.zeros(4)}
    full = ({"w": torch.full((4,), 2.0)}, 1.0)
    half = ({"w": torch.full((2,), 8.0)}, 1.0)  # a HeteroFL width-1/2 submodel
    out = weighted_mean(glob, [full, half])
    torch.testing.assert_close(out["w"], torch.tensor([5.0, 5.0, 2.0, 2.0]))


def test_fedprox_mu0_equals_fedavg_end_to_end():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    init = {k: v.clone() for k, v in model.state_dict().items()}
    x, y = torch.randn(32, 4), torch.randint(0, 3, (32,))
    res = []
    for mu in (0.0, 0.0):
        model.load_state_dict(init)
        res.append(local_train(model, x, y, steps=3, batch_size=8, lr=0.1,
                               generator=torch.Generator().manual_seed(1), proximal_mu=mu))  # fmt: skip
    a = FedAvg().aggregate(init, [(res[0].state, 32.0)])
    b = FedProx(mu=0.0).aggregate(init, [(res[1].state, 32.0)])
    for k in a:
        torch.testing.assert_close(a[k], b[k])
    # and mu > 0 pulls the client towards the global weights
    model.load_state_dict(init)
    prox = local_train(model, x, y, steps=3, batch_size=8, lr=0.1,
                       generator=torch.Generator().manual_seed(1), proximal_mu=5.0)  # fmt: skip

    def dist(s):
        return sum(float(((s[k] - init[k]) ** 2).sum()) for k in init)

    assert dist(prox.state) < dist(res[0].state)
    assert FedProx(0.3).proximal_mu == 0.3 and FedAvg().proximal_mu == 0.0


def test_fedyogi_first_step_hand_computed():
    agg = FedYogi(eta=0.1, tau=1e-3, beta1=0.9, beta2=0.99)
    glob = {"w": torch.tensor([1.0, -1.0])}
    out = agg.aggregate(glob, [({"w": torch.tensor([1.5, -1.0])}, 1.0)])
    delta = torch.tensor([0.5, 0.0])
    m = 0.1 * delta
    v0 = torch.full((2,), 1e-6)
    v = v0 - 0.01 * delta**2 * torch.sign(v0 - delta**2)
    want = glob["w"] + 0.1 * m / (v.sqrt() + 1e-3)
    torch.testing.assert_close(out["w"], want)
    # state survives a checkpoint round-trip
    other = FedYogi(eta=0.1, tau=1e-3, beta1=0.9, beta2=0.99)
    other.load_state_tensors(agg.state_tensors())
    nxt = {"w": torch.tensor([2.0, 0.0])}
    torch.testing.assert_close(
        agg.aggregate(out, [(nxt, 1.0)])["w"], other.aggregate(out, [(nxt, 1.0)])["w"]
    )
