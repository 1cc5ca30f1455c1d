"""Local training under a plan: the codec's error reaches the gradients, in the plan's share."""

import pytest
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


def test_clip_grad_norm_bounds_each_step_and_reaches_the_clients():
    """One SGD step of lr 0.1 with the gradient clipped to norm c moves the parameters by
    exactly 0.1 x min(|g|, c); a norm above |g| changes nothing (bit-equal); the setting
    reaches every client task of a round, and a norm <= 0 is refused by the config."""
    from edgetrain.errors import ConfigError
    from edgetrain.federated import FederatedServer, build_environment
    from fed_small import small_fleet_config

    model, x, y = _setup()
    start = {k: v.clone() for k, v in model.state_dict().items()}

    def moved(clip):
        model.load_state_dict(start)
        res = local_train(model, x, y, steps=1, batch_size=32, lr=0.1,
                          generator=torch.Generator().manual_seed(0), clip_grad_norm=clip)  # fmt: skip
        d = [res.state[k] - start[k] for k, _ in model.named_parameters()]
        return res, float(torch.sqrt(sum((t * t).sum() for t in d)))

    free, n_free = moved(None)
    g_norm = n_free / 0.1
    clipped, n_clip = moved(1e-3)
    assert g_norm > 1e-2 and abs(n_clip - 0.1 * 1e-3) < 1e-7
    loose, _ = moved(10 * g_norm)
    assert all(torch.equal(loose.state[k], free.state[k]) for k in free.state)

    seen = []
    env = build_environment(small_fleet_config(federated={"clip_grad_norm": 0.5}))
    server = FederatedServer(env, method="random")
    run = server.executor.run
    server.executor.run = lambda state, tasks: seen.extend(tasks) or run(state, tasks)
    server.run_round()
    assert seen and {t.clip_grad_norm for t in seen} == {0.5}
    with pytest.raises(ConfigError, match="clip_grad_norm"):
        small_fleet_config(federated={"clip_grad_norm": 0.0})
