"""Captured training steps: equal to eager PyTorch, typed, FLOP-counted like FlopCounterMode."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from edgetrain.errors import ConfigError, UnsupportedOperatorError
from edgetrain.finetune import apply_strategy
from edgetrain.graph import PHASES, TensorKind, capture, execute
from tiny_models import TinyCNN, batch, captured


def eager_steps(model, optimizer: str, data, lr=0.01, momentum=0.9):
    model = copy.deepcopy(model)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = {
        "sgd": lambda: torch.optim.SGD(params, lr=lr),
        "sgd-momentum": lambda: torch.optim.SGD(params, lr=lr, momentum=momentum),
        "adam": lambda: torch.optim.Adam(params, lr=lr),
    }[optimizer]()
    losses = []
    for x, y in data:
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return losses, dict(model.named_parameters())


def graph_steps(model, graph, data):
    params = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    state, losses = None, []
    for x, y in data:
        loss, params, state = execute(graph, params, x, y, state)
        losses.append(loss)
    return losses, params


def _check_equal(model, graph, optimizer):
    data = [batch(seed=1), batch(seed=2), batch(seed=3)]  # same shapes, new values
    ref_losses, ref_params = eager_steps(model, optimizer, data)
    losses, params = graph_steps(model, graph, data)
    for a, b in zip(losses, ref_losses, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    for name, p in ref_params.items():
        torch.testing.assert_close(params[name], p.detach(), rtol=0, atol=1e-5, msg=name)
    moved = [n for n in graph.step.trainable if not torch.equal(params[n], model.get_parameter(n))]
    assert moved, "the step must change the trainable parameters"


@pytest.mark.parametrize("optimizer", ["sgd", "sgd-momentum", "adam"])
def test_execute_matches_eager_per_optimizer(optimizer):
    model, graph = captured("lora-1", optimizer)
    _check_equal(model, graph, optimizer)


# Strategies are compared under SGD with momentum, not Adam: in `full`, the bias of CCT's
# sequence-pooling scorer has a mathematically zero gradient (softmax is shift-invariant), so
# both runs hold ~1e-9 rounding noise there and Adam's m/sqrt(v) turns that noise into +-lr steps
# whose sign differs between any two correct implementations.
@pytest.mark.parametrize("strategy", ["full", "lp", "ft-1"])
def test_execute_matches_eager_per_strategy(strategy):
    model, graph = captured(strategy, "sgd-momentum")
    _check_equal(model, graph, "sgd-momentum")


def test_execute_does_not_touch_caller_tensors():
    model, graph = captured("lora-1", "sgd")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    execute(graph, model, *batch())
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters())


@pytest.mark.parametrize(
    "strategy, optimizer", [("full", "sgd-momentum"), ("lora-1", "sgd"), ("lp", "sgd-momentum")]
)
def test_flops_equal_flop_counter_mode(strategy, optimizer):
    model, graph = captured(strategy, optimizer)
    x, y = batch()
    with FlopCounterMode(display=False) as fwd:
        loss = F.cross_entropy(model(x), y)
    with FlopCounterMode(display=False) as bwd:
        loss.backward()
    model.zero_grad()
    f_graph = graph.flops("forward") + graph.flops("loss")
    b_graph = graph.flops("backward")
    assert f_graph == pytest.approx(fwd.get_total_flops(), rel=0.01)
    assert b_graph == pytest.approx(bwd.get_total_flops(), rel=0.01)
    assert graph.flops() == pytest.approx(fwd.get_total_flops() + bwd.get_total_flops(), rel=0.01)
    assert graph.flops() == sum(graph.flops(p) for p in PHASES)
    assert graph.flops("forward") > 0 and graph.flops("backward") > 0


def test_phases_in_order_and_kinds_follow_phase():
    _, graph = captured("lora-1", "sgd-momentum")
    order = [PHASES.index(n.phase) for n in graph.nodes]
    assert order == sorted(order) and set(order) == {0, 1, 2, 3}
    kinds = {
        "forward": TensorKind.ACTIVATION,
        "loss": TensorKind.TEMPORARY,
        "backward": TensorKind.GRADIENT,
    }
    for n in graph.nodes:
        for o in n.outputs:
            if n.phase in kinds:
                assert graph.tensors[o].kind == kinds[n.phase], (n, o)
    # placeholders
    t = graph.tensors
    assert t["input"].kind == TensorKind.INPUT and t["target"].kind == TensorKind.LABEL
    assert t["encoder.1.fc1.lora_A.weight"].kind == TensorKind.WEIGHT
    assert t["encoder.1.fc1.base_layer.weight"].kind == TensorKind.FROZEN_WEIGHT
    assert t["optimizer.momentum_buffer.fc.weight"].kind == TensorKind.OPTIMIZER_STATE
    for name in graph.meta["trainable"]:
        assert t[name].kind == TensorKind.WEIGHT and t[name].persistent
    assert all(t[n].persistent for n in graph.meta["frozen"])
    assert not t["input"].persistent
    # the SGD update writes in place into each trainable weight
    outs = graph.meta["outputs"]["params"]
    assert set(outs) == set(graph.meta["trainable"])
    producer = {o: n for n in graph.nodes for o in n.outputs}
    for pname, tname in outs.items():
        node = producer[tname]
        assert node.phase == "update" and node.aliases == pname and node.op == "aten.sub_.Tensor"
        assert graph.tensors[tname].kind == TensorKind.WEIGHT
        assert not graph.tensors[tname].persistent  # same storage as the weight: no new buffer
    assert t[graph.meta["outputs"]["loss"]].shape == ()


def test_lp_on_cnn_computes_no_frozen_gradients():
    _, graph = captured("lp", "sgd", model_cls=TinyCNN)
    ops = [n.op for n in graph.nodes if n.phase == "backward"]
    assert "aten.convolution_backward.default" not in ops  # frozen convs: no dW, no dX
    grads = graph.tensors_of(TensorKind.GRADIENT)
    frozen_shapes = {t.shape for t in graph.tensors_of(TensorKind.FROZEN_WEIGHT)}
    assert not any(g.shape in frozen_shapes and len(g.shape) == 4 for g in grads)
    assert len(graph.meta["outputs"]["params"]) == 2


def test_ft1_on_cnn_backpropagates_only_into_last_block():
    _, graph = captured("ft-1", "sgd", model_cls=TinyCNN)
    conv_bwd = [n for n in graph.nodes if n.op == "aten.convolution_backward.default"]
    assert len(conv_bwd) == 1 and conv_bwd[0].module == "conv2.0"
    # output_mask: no input gradient for the first trained conv (nothing trainable before it)
    assert conv_bwd[0].args_repr.endswith("[False, True, True]")
    shapes = {graph.tensors[o].shape for o in conv_bwd[0].outputs}
    assert shapes == {(4, 4, 3, 3), (4,)}


def test_layout_flags_and_aliases():
    _, graph = captured("lora-1", "sgd")
    by_op: dict[str, list] = {}
    for n in graph.nodes:
        by_op.setdefault(n.op.split(".")[1], []).append(n)
    for op in ("view", "transpose", "t", "permute", "expand", "unsqueeze", "squeeze"):
        for n in by_op.get(op, []):
            assert n.is_layout and n.aliases == n.inputs[0] and n.flops == 0, n
    assert by_op["view"] and by_op["transpose"] and by_op["t"]
    for op in ("mm", "addmm", "bmm", "convolution"):
        for n in by_op.get(op, []):
            assert not n.is_layout and n.aliases is None and n.flops > 0, n
    clones = [n for n in by_op.get("clone", []) if "memory_format" in n.args_repr]
    assert all(n.is_layout for n in clones)


def test_nodes_know_their_modules():
    _, graph = captured("lora-1", "sgd")
    mm_fwd = {
        n.module
        for n in graph.nodes
        if n.phase == "forward" and n.op in ("aten.mm.default", "aten.addmm.default")
    }
    assert "encoder.1.attn.q.lora_A" in mm_fwd and "encoder.1.fc1.base_layer" in mm_fwd
    conv = next(n for n in graph.nodes if n.op == "aten.convolution.default")
    assert conv.module == "tokenizer.0"
    bwd_mm = [n for n in graph.nodes if n.phase == "backward" and n.op == "aten.mm.default"]
    assert bwd_mm and all(n.module is not None for n in bwd_mm)
    assert {n.module for n in bwd_mm} & {"encoder.1.fc2.lora_B", "encoder.1.fc2.lora_A"}
    # nothing in the frozen encoder.0 needs a gradient: backward stops at encoder.1's input
    assert not any(
        (n.module or "").startswith("encoder.0") or (n.module or "").startswith("tokenizer")
        for n in graph.nodes
        if n.phase == "backward"
    )
    upd = {n.module for n in graph.nodes if n.phase == "update"}
    assert upd == {"fc"} | {
        f"encoder.1.{m}.lora_{ab}"
        for m in ("attn.q", "attn.k", "attn.v", "attn.out", "fc1", "fc2")
        for ab in "AB"
    }


class _Gate(nn.Module):
    def forward(self, x):
        return x * 2 if x.sum() > 0 else x


class _NonZero(nn.Module):
    def forward(self, x):
        return x[torch.nonzero(x > 0)[:, 0]].sum(0, keepdim=True).expand(x.shape[0], -1)


@torch.library.custom_op("edgetrain_test::no_fake", mutates_args=())
def _no_fake(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


class _Custom(nn.Module):
    def forward(self, x):
        return _no_fake(x)


@pytest.mark.parametrize(
    "block, op",
    [
        (_Gate(), "aten._local_scalar_dense"),
        (_NonZero(), "aten.nonzero"),
        (_Custom(), "edgetrain_test::no_fake"),
    ],
)
def test_unsupported_operator_names_op_and_module(block, op):
    model = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.Identity(), block), nn.Linear(4, 3))
    with pytest.raises(UnsupportedOperatorError) as err:
        capture(model, torch.randn(2, 4), torch.tensor([0, 1]))
    msg = str(err.value)
    assert op in msg and "'1.1'" in msg and type(block).__name__ in msg, msg


def test_capture_rejects_bad_configuration():
    model = TinyCNN()
    x, y = batch()
    with pytest.raises(ConfigError, match="optimizer"):
        capture(model, x, y, optimizer="rmsprop")
    with pytest.raises(ConfigError, match="loss"):
        capture(model, x, y, loss="hinge")
    for p in model.parameters():
        p.requires_grad_(False)
    with pytest.raises(ConfigError, match="no trainable parameter"):
        capture(model, x, y)


def test_mse_and_callable_loss():
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2))
    x, y = torch.randn(3, 4), torch.randn(3, 2)
    g = capture(model, x, y, loss="mse", optimizer="sgd", lr=0.1)
    loss, params, _ = execute(g, model, x, y)
    ref = copy.deepcopy(model)
    F.mse_loss(ref(x), y).backward()
    torch.testing.assert_close(loss, F.mse_loss(model(x), y))
    for n, p in ref.named_parameters():
        torch.testing.assert_close(params[n], p.detach() - 0.1 * p.grad, rtol=0, atol=1e-6)
    g2 = capture(model, x, y, loss=lambda out, t: (out - t).abs().mean(), optimizer="sgd")
    assert g2.meta["loss"] == "<lambda>"
    torch.testing.assert_close(execute(g2, model, x, y)[0], (model(x) - y).abs().mean())


def test_cct2_zoo_lora1_capture():
    models = pytest.importorskip("edgetrain.models")
    net = models.build("cct2", seed=0)
    info = apply_strategy(net, "lora-1")
    x = models.example_input(net, batch=1)
    y = torch.tensor([3])
    graph = capture(net, x, y, optimizer="sgd", strategy_info=info)
    assert graph.meta["strategy"] == "lora-1" and graph.meta["batch_shape"] == [1, 3, 32, 32]
    with FlopCounterMode(display=False) as fc:
        F.cross_entropy(net(x), y).backward()
    assert graph.flops() == pytest.approx(fc.get_total_flops(), rel=0.01)
    # Table I: LoRA-1 costs 86 MFLOPs (forward + backward); we count 83.4 M.
    assert graph.flops() / 1e6 == pytest.approx(86, rel=0.05)
    n_lora = sum(1 for t in graph.tensors_of(TensorKind.WEIGHT) if t.persistent)
    assert n_lora == len(info.trainable) == 14


def test_zoo_batchnorm_model_updates_running_stats_like_eager():
    models = pytest.importorskip("edgetrain.models")
    net = models.build("ds-cnn", seed=0)
    apply_strategy(net, "ft-1")
    x = models.example_input(net, batch=2)
    y = torch.tensor([0, 1])
    graph = capture(net, x, y, optimizer="sgd-momentum")
    bn = [n for n in graph.nodes if "batch_norm" in n.op and n.phase == "forward"]
    assert bn and all(n.aliases is None for n in bn)  # fresh outputs, not the running stats
    state = {k: v.detach().clone() for k, v in net.state_dict().items()}
    params = {**{n: state[n] for n, _ in net.named_parameters()}, **state}
    loss, new, _ = execute(graph, params, x, y)
    ref = copy.deepcopy(net)
    opt = torch.optim.SGD([p for p in ref.parameters() if p.requires_grad], lr=0.01, momentum=0.9)
    ref_loss = F.cross_entropy(ref(x), y)
    ref_loss.backward()
    opt.step()
    torch.testing.assert_close(loss, ref_loss.detach(), rtol=0, atol=1e-5)
    for name, value in ref.state_dict().items():
        torch.testing.assert_close(new[name], value, rtol=0, atol=1e-5, msg=name)


def test_batchnorm_at_batch_one_is_a_model_error():
    import pytest

    from edgetrain.errors import ModelError
    from edgetrain.graph import capture
    from edgetrain.models import build, example_input

    model = build("deep-ae")
    x = example_input(model, 1)
    with pytest.raises(ModelError, match="batchnorm=False"):
        capture(model, x, x.clone(), loss="mse")
