"""Lifetimes and the lower bound on hand-made TrainGraphs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgetrain.errors import DataError
from edgetrain.graph.ir import Node, TensorInfo, TensorKind, TrainGraph
from edgetrain.memory import Buffer, lifetimes, live_bytes, lower_bound

K = TensorKind


def _t(name, kind, n, persistent=False):
    return TensorInfo(name, kind, (n // 4,), "float32", n, persistent)


def _n(name, op, ins, outs, phase="forward", aliases=None, flops=0):
    return Node(name, op, tuple(ins), tuple(outs), flops, aliases is not None, phase, None, aliases)


def tiny_graph() -> TrainGraph:
    """x -> mm(w) -> h -> view -> hv -> relu -> y ; loss ; backward ; in-place update of w."""
    tensors = {
        t.name: t
        for t in [
            _t("x", K.INPUT, 16),
            _t("w", K.WEIGHT, 64, persistent=True),
            _t("h", K.ACTIVATION, 32),
            _t("hv", K.ACTIVATION, 32),
            _t("y", K.ACTIVATION, 32),
            _t("loss", K.TEMPORARY, 4),
            _t("dy", K.GRADIENT, 32),
            _t("dw", K.GRADIENT, 64),
            _t("w_new", K.WEIGHT, 64),
        ]
    }
    nodes = [
        _n("n0", "aten.mm.default", ["x", "w"], ["h"], flops=100),
        _n("n1", "aten.view.default", ["h"], ["hv"], aliases="h"),
        _n("n2", "aten.relu.default", ["hv"], ["y"]),
        _n("n3", "aten.sum.default", ["y"], ["loss"], phase="loss"),
        _n("n4", "aten.ones_like.default", ["y"], ["dy"], phase="backward"),
        _n("n5", "aten.mm.default", ["x", "dy"], ["dw"], phase="backward", flops=100),
        _n("n6", "aten.sub_.Tensor", ["w", "dw"], ["w_new"], phase="update", aliases="w"),
    ]
    return TrainGraph(nodes=nodes, tensors=tensors, meta={"outputs": {"loss": "loss"}})


def test_lifetimes_of_tiny_graph() -> None:
    bufs = {b.name: b for b in lifetimes(tiny_graph())}
    assert set(bufs) == {"x", "w", "h", "y", "loss", "dy", "dw"}  # views / in-place: no storage
    assert (bufs["w"].lower, bufs["w"].upper) == (0, 7)  # persistent: whole step
    assert (bufs["x"].lower, bufs["x"].upper) == (0, 6)  # input, last read by n5
    assert (bufs["h"].lower, bufs["h"].upper) == (0, 3)  # read through its view by n2
    assert (bufs["y"].lower, bufs["y"].upper) == (2, 5)
    assert (bufs["loss"].lower, bufs["loss"].upper) == (3, 7)  # a graph output survives
    assert (bufs["dw"].lower, bufs["dw"].upper) == (5, 7)
    assert bufs["dw"].kind == TensorKind.GRADIENT and bufs["dw"].kind_name == "gradient"


def test_lower_bound_of_tiny_graph() -> None:
    bufs = lifetimes(tiny_graph())
    # step 5: x(16) w(64) loss(4) dy(32) dw(64) = 180 ; step 2: x w h y = 144 (+0)
    assert lower_bound(bufs) == 180
    assert int(live_bytes(bufs).max()) == 180


def test_buffer_rejects_empty_lifetime() -> None:
    with pytest.raises(DataError, match="upper must be greater"):
        Buffer("a", 3, 3, 8)


def test_ends_before_starts_at_equal_time() -> None:
    # [0,2) and [2,4) never coexist: bound is the larger, not the sum
    assert lower_bound([Buffer(0, 0, 2, 10), Buffer(1, 2, 4, 7)]) == 10
    assert lower_bound([Buffer(0, 0, 3, 10), Buffer(1, 2, 4, 7)]) == 17


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 30), st.integers(1, 10), st.integers(0, 100)),
        min_size=1,
        max_size=40,
    )
)
def test_lower_bound_equals_brute_force(spec) -> None:
    bufs = [Buffer(i, lo, lo + ln, s) for i, (lo, ln, s) in enumerate(spec)]
    brute = max(sum(b.size for b in bufs if b.lower <= t < b.upper) for t in range(41))
    assert lower_bound(bufs) == brute
    assert int(np.max(live_bytes(bufs))) == brute
