"""TrainGraph IR: JSON round trips and accessors."""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgetrain.errors import ModelError
from edgetrain.graph import Node, TensorInfo, TensorKind, TrainGraph, execute
from tiny_models import batch, captured

names = st.text(alphabet="abcdefghij._0123456789", min_size=1, max_size=12)


@st.composite
def graphs(draw):
    tnames = draw(st.lists(names, min_size=1, max_size=8, unique=True))
    tensors = {
        n: TensorInfo(
            name=n,
            kind=draw(st.sampled_from(list(TensorKind))),
            shape=tuple(draw(st.lists(st.integers(0, 64), max_size=4))),
            dtype=draw(st.sampled_from(["float32", "int64", "bool"])),
            nbytes=draw(st.integers(0, 10**9)),
            persistent=draw(st.booleans()),
        )
        for n in tnames
    }
    nodes = [
        Node(
            name=f"n{i}",
            op=draw(st.sampled_from(["aten.mm.default", "aten.view.default", "aten.sub_.Tensor"])),
            inputs=tuple(draw(st.lists(st.sampled_from(tnames), max_size=3))),
            outputs=tuple(draw(st.lists(st.sampled_from(tnames), max_size=2))),
            flops=draw(st.integers(0, 10**12)),
            is_layout=draw(st.booleans()),
            phase=draw(st.sampled_from(["forward", "loss", "backward", "update"])),
            module=draw(st.one_of(st.none(), names)),
            aliases=draw(st.one_of(st.none(), st.sampled_from(tnames))),
            args_repr=draw(st.text(max_size=20)),
        )
        for i in range(draw(st.integers(0, 6)))
    ]
    return TrainGraph(nodes=nodes, tensors=tensors, meta={"model": draw(names), "lr": 0.5})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs())
def test_ir_json_round_trip(g):
    back = TrainGraph.from_json(json.loads(json.dumps(g.to_json())))
    assert back == g
    assert back.flops() == sum(n.flops for n in g.nodes)
    for kind in TensorKind:
        assert [t.name for t in back.tensors_of(kind)] == [t.name for t in g.tensors_of(kind)]


@pytest.fixture(scope="module")
def graph():
    return captured("lora-1", "adam")[1]


def test_captured_graph_json_round_trip(graph):
    text = json.dumps(graph.to_json())
    back = TrainGraph.from_json(json.loads(text))
    assert back == graph and back.step is None
    assert back.flops("backward") == graph.flops("backward") > 0
    assert back.meta["optimizer"] == "adam" and back.meta["strategy"] == "lora-1"
    assert back.tensors["optimizer.step"].kind == TensorKind.OPTIMIZER_STATE
    with pytest.raises(ModelError, match="no executable step"):
        execute(back, {}, *batch())


def test_tensor_sizes_and_producers(graph):
    for t in graph.tensors.values():
        numel = 1
        for s in t.shape:
            numel *= s
        assert t.nbytes == numel * torch.empty((), dtype=getattr(torch, t.dtype)).element_size()
    produced = graph.producers()
    placeholders = set(graph.meta["placeholders"])
    for i, n in enumerate(graph.nodes):
        for name in n.inputs:  # every input exists before it is read
            assert name in placeholders or produced[name] < i, (n, name)
    assert graph.bytes_of(TensorKind.WEIGHT) == sum(
        t.nbytes for t in graph.tensors_of(TensorKind.WEIGHT) if t.persistent
    )
    with pytest.raises(ValueError, match="unknown phase"):
        graph.flops("sideways")


def test_graph_cache_captures_once_per_structure():
    from torch import nn

    from edgetrain.graph import GraphCache

    model = nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 2))
    cache = GraphCache()
    x, y = torch.randn(3, 4), torch.tensor([0, 1, 1])
    g1 = cache.get(model, x, y, optimizer="sgd")
    with torch.no_grad():
        model[0].weight.add_(1.0)  # new weight values: same graph
    assert cache.get(model, torch.randn(3, 4), y, optimizer="sgd") is g1 and cache.misses == 1
    cache.get(model, torch.randn(2, 4), y[:2], optimizer="sgd")  # new batch shape
    model[0].weight.requires_grad_(False)  # new strategy
    g3 = cache.get(model, x, y, optimizer="sgd")
    assert cache.misses == 3 and "0.weight" in g3.meta["frozen"]
