"""Codec bounds, shapes, dtypes and input rejection (hypothesis for the invariants)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from edgetrain.compress import (
    ChannelMixCodec,
    CodecInputError,
    UniformCodec,
    frame_meta,
    make_codec,
)
from edgetrain.errors import ConfigError, DataError

SHAPES = st.sampled_from([(1,), (7,), (3, 5), (2, 3, 9), (2, 4, 5, 6), (1, 3, 17, 11), ()])


@st.composite
def activations(draw):
    shape = draw(SHAPES)
    seed = draw(st.integers(0, 2**31 - 1))
    kind = draw(st.sampled_from(["relu", "gauss", "zeros", "const", "spiky"]))
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=gen) * draw(st.sampled_from([1e-3, 1.0, 50.0]))
    if kind == "relu":
        x = torch.relu(x)
    elif kind == "zeros":
        x = torch.zeros(shape)
    elif kind == "const":
        x = torch.full(shape, draw(st.floats(-100, 100)))
    elif kind == "spiky" and x.numel():
        x.view(-1)[:: max(1, x.numel() // 5)] *= 300
    dtype = draw(st.sampled_from([torch.float32, torch.float16, torch.bfloat16, torch.float64]))
    return x.to(dtype)


@settings(max_examples=60, deadline=None)
@given(x=activations(), rel=st.sampled_from([0.001, 0.01, 0.1]), block=st.sampled_from([1, 4, 8]))
def test_mix_error_within_bound_and_shape_dtype_restored(x, rel, block):
    codec = ChannelMixCodec(rel_error_bound=rel, block=block)
    data = codec.encode(x)
    assert isinstance(data, bytes)
    y = codec.decode(data)
    assert y.shape == x.shape and y.dtype == x.dtype
    err = (y.double() - x.double()).abs().max().item() if x.numel() else 0.0
    assert err <= codec.error_bound(x)


@settings(max_examples=30, deadline=None)
@given(x=activations(), eb=st.sampled_from([1e-4, 0.05, 2.0]))
def test_mix_absolute_bound(x, eb):
    codec = ChannelMixCodec(error_bound_abs=eb)
    y = codec.decode(codec.encode(x))
    if x.numel():
        assert (y.double() - x.double()).abs().max().item() <= eb


def test_zeros_are_exact_and_all_zero_compresses_well():
    x = torch.zeros(8, 16, 32, 32)
    codec = ChannelMixCodec()
    data = codec.encode(x)
    assert torch.equal(codec.decode(data), x)
    assert len(data) * 50 < x.numel() * 4


def test_relu_zeros_preserved_exactly_and_ratio_real():
    gen = torch.Generator().manual_seed(3)
    x = torch.relu(torch.randn(16, 24, 28, 28, generator=gen))
    x[:, :2] *= 40  # outlier-rich channels
    codec = ChannelMixCodec(rel_error_bound=0.01)
    data = codec.encode(x)
    y = codec.decode(data)
    assert torch.equal(y[x == 0], x[x == 0])
    meta = frame_meta(data)
    assert meta["rich_channels"] >= 2 and meta["normal_channels"] >= 20
    assert x.numel() * 4 / len(data) > 6.0


def test_dense_blocks_use_lorenzo_and_sparse_blocks_csr():
    gen = torch.Generator().manual_seed(1)
    smooth = torch.linspace(0, 5, 64).reshape(1, 1, 8, 8).repeat(2, 4, 4, 4)
    sparse = torch.zeros(2, 4, 32, 32)
    sparse[:, :, ::9, ::7] = 3.0
    x = torch.cat([smooth, sparse], 1)
    x[:, :, 0, 0] = 1000.0  # make every channel outlier-rich
    codec = ChannelMixCodec(outlier_fraction=0.0, rel_error_bound=0.001)
    data = codec.encode(x)
    meta = frame_meta(data)
    assert meta["dense_blocks"] > 0 and meta["sparse_blocks"] > 0
    assert (codec.decode(data) - x).abs().max().item() <= codec.error_bound(x)
    del gen


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_nan_inf_rejected(bad):
    x = torch.ones(4, 4)
    x[1, 2] = bad
    with pytest.raises(CodecInputError, match="NaN/inf"):
        ChannelMixCodec().encode(x)
    with pytest.raises(DataError):
        UniformCodec(8).encode(x)


def test_integer_input_rejected_and_bad_options():
    with pytest.raises(CodecInputError, match="dtype"):
        ChannelMixCodec().encode(torch.arange(5))
    with pytest.raises(ConfigError):
        ChannelMixCodec(rel_error_bound=0.0)
    with pytest.raises(ConfigError):
        UniformCodec(bits=3)
    with pytest.raises(ConfigError):
        make_codec("zfp")
    with pytest.raises(DataError):
        ChannelMixCodec().decode(b"not a frame at all")


@settings(max_examples=30, deadline=None)
@given(x=activations(), bits=st.sampled_from([8, 4, 2]))
def test_uniform_baseline_bound_and_size(x, bits):
    codec = UniformCodec(bits)
    data = codec.encode(x)
    y = codec.decode(data)
    assert y.shape == x.shape and y.dtype == x.dtype
    if x.numel() and x.dtype == torch.float32:
        assert (y - x).abs().max().item() <= codec.error_bound(x) + 1e-6 * x.abs().max().item()


def test_uniform_int4_is_half_int8_payload():
    x = torch.randn(4, 8, 16, 16, generator=torch.Generator().manual_seed(0))
    n8, n4 = len(UniformCodec(8).encode(x)), len(UniformCodec(4).encode(x))
    assert n4 < 0.6 * n8 and n8 < x.numel() * 4 / 3.5


def test_mix_deterministic_bytes():
    x = torch.relu(torch.randn(2, 5, 9, 9, generator=torch.Generator().manual_seed(5)))
    assert ChannelMixCodec().encode(x) == ChannelMixCodec().encode(x.clone())
    assert np.isfinite(ChannelMixCodec().error_bound(x))
