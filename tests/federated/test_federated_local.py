"""Local training under a plan: the codec's error reaches the gradients, in the plan's share."""

import torch

from edgetrain.federated.local import local_train, plan_compression
from edgetrain.models import build


def _setup():
    model = build("lenet", seed=0, in_channels=28, length=28, num_classes=10)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, 28, 28, generator=g)
    y = torch.randint(0, 10, (32,), generator=g)
    return model, x, y


def _grads(model, x, y, share):
    model.zero_grad(set_to_none=True)
    stats: dict[str, int] = {}
    with plan_compression(model, share, stats):
        loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    return [p.grad.clone() for p in model.parameters()], stats


def test_codec_share_controls_what_is_compressed_and_perturbs_gradients():
    model, x, y = _setup()
    exact, s0 = _grads(model, x, y, None)
    assert s0 == {}
    again, _ = _grads(model, x, y, {})
    assert all(torch.equal(a, b) for a, b in zip(exact, again, strict=True))
    for codec in ("int4", "mix"):
        g, stats = _grads(model, x, y, {codec: 1.0})
        assert stats["compressed"] == stats["packed"] > 0
        err = max(float((a - b).abs().max()) for a, b in zip(exact, g, strict=True))
        assert err > 0  # the decoded activations carry the codec's error into the gradients
        assert all(torch.isfinite(t).all() for t in g)
    _, half = _grads(model, x, y, {"int8": 0.5})
    assert 0 < half["compressed"] < half["packed"]
    # the running-share rule keeps the compressed bytes near the share
    assert abs(half["compressed"] / half["packed"] - 0.5) < 0.35


def test_local_train_is_deterministic_under_compression():
    model, x, y = _setup()
    state = {k: v.clone() for k, v in model.state_dict().items()}

    def run(share):
        model.load_state_dict(state)
        return local_train(
            model, x, y, steps=3, batch_size=8, lr=0.05,
            generator=torch.Generator().manual_seed(1), codec_share=share,
        )  # fmt: skip

    a, b, exact = run({"int4": 1.0}), run({"int4": 1.0}), run(None)
    assert all(torch.equal(a.state[k], b.state[k]) for k in a.state)
    assert any(not torch.equal(a.state[k], exact.state[k]) for k in a.state)
