"""Profiling leaves nothing behind: no tensors kept alive, no hooks, same thread / grad state.

The recording forward of ``profile_model`` is never run backward, so its autograd graph is
freed by reference counts alone; a reference the C++ graph holds back into Python (the pack
hook's closure, a node's own output, an unpack hook's list) made a cycle Python's gc cannot
collect, and every call kept its whole graph (+592 MiB per profile on MobileNetV2 b32).
"""

from __future__ import annotations

import gc
import warnings

import torch
from tests.tiny_models import TinyCNN, batch
from torch import nn

from edgetrain.engine.budget import profile_model
from edgetrain.engine.budget.profile import _leaf_recompute_cost, _record_forward


def _live_tensors() -> int:
    gc.collect()
    with warnings.catch_warnings():  # the scan touches torch.distributed's deprecated reduce_op
        warnings.simplefilter("ignore", FutureWarning)
        return sum(1 for o in gc.get_objects() if torch.is_tensor(o))


def _task():
    model = TinyCNN()
    x, y = batch()
    return model, (x,), lambda out: nn.functional.cross_entropy(out, y)


def test_record_forward_graph_is_freed_with_its_result():
    model, inputs, loss_fn = _task()
    _record_forward(model, inputs, loss_fn)  # warm-up: lazily created state
    before = _live_tensors()
    for _ in range(3):
        _record_forward(model, inputs, loss_fn)
    assert _live_tensors() == before


def test_profile_model_keeps_no_tensors_hooks_or_settings():
    model, inputs, loss_fn = _task()
    kw = {"codecs": {}, "repeats": 1, "in_situ_steps": 0}
    profile_model(model, inputs, loss_fn, **kw)  # warm-up: caches, lazily created state
    threads, grad = torch.get_num_threads(), torch.is_grad_enabled()
    before = _live_tensors()
    for _ in range(2):
        profile_model(model, inputs, loss_fn, **kw)
    assert _live_tensors() == before
    assert all(
        not (m._forward_hooks or m._forward_pre_hooks or m._backward_hooks) for m in model.modules()
    )
    assert all(p.grad is None for p in model.parameters())
    assert torch._C._autograd._top_saved_tensors_default_hooks(False) is None
    assert (torch.get_num_threads(), torch.is_grad_enabled()) == (threads, grad)
    assert not torch.autograd._profiler_enabled()


class _Mul(nn.Module):
    def forward(self, a, b):
        return torch.relu(a * b).sigmoid()


def test_leaf_recompute_cost_frees_its_graphs():
    a = torch.randn(8, 8, requires_grad=True) * 1
    b = torch.randn(8, 8, requires_grad=True) * 1
    before = _live_tensors()
    # a module repr not used elsewhere: the cost cache must not answer instead of running
    _leaf_recompute_cost(_Mul(), (a, b), {}, repeats=3)
    assert _live_tensors() == before
