"""View-like ops whose schema lacks alias info (``_unsafe_view``) alias their input."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from edgetrain.graph import ops
from tiny_models import captured


def test_storage_alias_follows_real_storage():
    x = torch.arange(12.0).reshape(3, 4)
    aten = torch.ops.aten
    assert ops.storage_alias((x, [4, 3]), aten._unsafe_view.default(x, [4, 3])) == 0
    assert ops.storage_alias((x,), x.contiguous()) == 0  # no-op contiguous returns self
    assert ops.storage_alias((x.t(),), x.t().contiguous()) is None  # a real copy
    assert ops.storage_alias((x,), x.clone()) is None
    assert ops.storage_alias((x, x), x * 2) is None
    assert ops.storage_alias((x,), (x,)) is None  # not a single tensor
    assert "_unsafe_view" in ops.VIEW_OPS_WITHOUT_ALIAS_INFO


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.booleans())
def test_reshape_aliases_exactly_when_torch_views(m, n, transpose):
    x = torch.zeros(m, n)
    src = x.t() if transpose else x
    out = src.reshape(-1)
    shares = out.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert (ops.storage_alias((src,), out) == 0) == shares


def test_captured_unsafe_views_alias_and_clones_copy():
    _, graph = captured("lora-1", "sgd")
    unsafe = [n for n in graph.nodes if n.op == "aten._unsafe_view.default"]
    assert unsafe
    for n in unsafe:
        assert n.is_layout and n.aliases == n.inputs[0], n
    # clone(memory_format=contiguous) of a transposed tensor is a real copy: own storage
    clones = [n for n in graph.nodes if n.op == "aten.clone.default"]
    assert clones and all(n.aliases is None for n in clones)
    aliased = {o for n in graph.nodes if n.aliases is not None for o in n.outputs}
    assert all(o in aliased for n in unsafe for o in n.outputs)
