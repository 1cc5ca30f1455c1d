"""The mix codec's float32 grid path: bound without a check pass, chunking, template, rich channels."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from edgetrain.compress import ChannelMixCodec, frame_meta, grid


def _roundtrip(codec: ChannelMixCodec, x: torch.Tensor):
    data = codec.encode(x)
    y = codec.decode(data)
    assert y.shape == x.shape and y.dtype == x.dtype
    return data, y, (y.double() - x.double()).abs().max().item()


@settings(max_examples=60, deadline=None)
@given(
    ks=st.lists(st.integers(-126, 126), min_size=1, max_size=40),
    frac=st.sampled_from([0.0, 0.5, 0.4999999, 0.5000001, -0.5, 0.25]),
    eb=st.floats(1e-6, 1e3),
)
def test_grid_bound_holds_at_half_steps(ks, frac, eb):
    """Values on and between grid points (the rounding worst case) stay within eb."""
    x = torch.tensor([(k + frac) * 2 * eb for k in ks], dtype=torch.float32)
    codec = ChannelMixCodec(error_bound_abs=eb)
    data, _, err = _roundtrip(codec, x)
    assert err <= eb
    if frame_meta(data).get("mode") == "grid":
        assert frame_meta(data)["patches"] == 0


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    scale=st.sampled_from([1e-30, 1e-8, 1.0, 3e4, 1e30]),
    rel=st.sampled_from([0.004, 0.01, 0.05, 0.3]),
    shape=st.sampled_from([(5,), (3, 7), (4, 3, 5), (2, 3, 4, 5)]),
)
def test_grid_bound_holds_across_magnitudes(seed, scale, rel, shape):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=gen) * scale
    codec = ChannelMixCodec(rel_error_bound=rel)
    _, y, err = _roundtrip(codec, x)
    assert err <= codec.error_bound(x)
    assert torch.equal(y[x == 0], x[x == 0])


def test_grid_code_width_and_general_path_fallback():
    eb = 0.01
    codec = ChannelMixCodec(error_bound_abs=eb)
    inside = torch.tensor([0.0, 125.0 * 2 * eb, -125.0 * 2 * eb, 0.3])
    wider = torch.tensor([0.0, 130.0 * 2 * eb, 0.3, -9000 * 2 * eb])
    beyond = torch.tensor([0.0, 40000.0 * 2 * eb, 0.3])
    assert frame_meta(codec.encode(inside))["code_bits"] == 8
    assert frame_meta(codec.encode(wider))["code_bits"] == 16
    assert "mode" not in frame_meta(codec.encode(beyond))  # general path
    for x in (inside, wider, beyond):
        assert (codec.decode(codec.encode(x)) - x).abs().max() <= eb
    # offset data (a narrow range far from zero) cannot use the zero-anchored grid
    far = torch.linspace(1000.0, 1001.0, 50)
    data = ChannelMixCodec().encode(far)
    assert "mode" not in frame_meta(data)
    assert (ChannelMixCodec().decode(data) - far).abs().max() <= ChannelMixCodec().error_bound(far)
    # other dtypes use the general path (its output cast is checked and patched)
    assert "mode" not in frame_meta(codec.encode(inside.half()))


@settings(max_examples=30, deadline=None)
@given(
    ks=st.lists(st.integers(-32000, 32000), min_size=2, max_size=30),
    frac=st.sampled_from([0.0, 0.5, 0.4999999, -0.5]),
    rows=st.sampled_from([1, 2, 3]),
)
def test_int16_grid_bound_and_template(ks, frac, rows):
    eb = 0.003
    base = torch.tensor([(k + frac) * 2 * eb for k in ks], dtype=torch.float32)
    x = base.repeat(rows, 1) if rows > 1 else base
    codec = ChannelMixCodec(error_bound_abs=eb, outlier_fraction=1.0)
    data, _, err = _roundtrip(codec, x)
    assert err <= eb


def test_grid_step_margin_and_refusals():
    s = grid.grid_step(0.5, 10.0)
    assert s is not None and s < 1.0 and np.float32(s) == s
    assert 1.0 - s <= 8 * grid.U32 * (10.0 + 1.0) * 1.01
    assert grid.grid_step(0.0, 1.0) is None
    assert grid.grid_step(1e-9, 1e9) is None  # margin would eat the step
    assert grid.grid_step(float("nan"), 1.0) is None


@pytest.mark.parametrize(
    "shape",
    [
        (3 * grid.CHUNK + 5,),  # 1-D: one channel, split along Q
        (2, 3, grid.CHUNK // 2 + 7),  # one row C*Q > CHUNK, Q <= CHUNK
        (5, 2, 3, 3),  # many rows per chunk
    ],
)
def test_chunk_geometry_roundtrip(shape):
    gen = torch.Generator().manual_seed(7)
    x = torch.relu(torch.randn(shape, generator=gen))
    codec = ChannelMixCodec()
    data, _, err = _roundtrip(codec, x)
    assert frame_meta(data)["mode"] == "grid"
    assert err <= codec.error_bound(x)
    p_, c, q_ = frame_meta(data)["pcq"]
    boxes = list(grid._chunks(p_, c, q_))
    covered = sum((p1 - p0) * (c1 - c0) * (q1 - q0) for p0, p1, c0, c1, q0, q1 in boxes)
    assert covered == x.numel()
    assert max((p1 - p0) * (c1 - c0) * (q1 - q0) for p0, p1, c0, c1, q0, q1 in boxes) <= grid.CHUNK


def test_batch_template_used_when_samples_share_a_pattern():
    gen = torch.Generator().manual_seed(2)
    base = torch.randn(1, 64, 48, generator=gen)
    x = torch.nn.functional.gelu(base + 0.05 * torch.randn(16, 64, 48, generator=gen))
    with_t = ChannelMixCodec(outlier_fraction=1.0)
    without = ChannelMixCodec(outlier_fraction=1.0, template=False)
    d1, _, err1 = _roundtrip(with_t, x)
    d0, _, err0 = _roundtrip(without, x)
    assert frame_meta(d1)["template_rows"] == 16 and frame_meta(d0)["template_rows"] == 0
    assert len(d1) < 0.8 * len(d0)
    assert err1 <= with_t.error_bound(x) and err0 <= without.error_bound(x)
    # independent samples: the template does not pay and is not used
    iid = torch.relu(torch.randn(16, 8, 12, 12, generator=gen))
    assert frame_meta(with_t.encode(iid))["template_rows"] == 0


def test_template_wraparound_codes_decode_exactly():
    """Residuals codes - T beyond int8 wrap around and still decode to the exact code."""
    gen = torch.Generator().manual_seed(3)
    pattern = torch.randint(-110, 111, (1, 2000), generator=gen).float()
    noise = torch.randint(-2, 3, (16, 2000), generator=gen).float()
    k = (pattern + noise).clamp(-120, 120)
    k[15] = -k[15]  # T ~ 0.875 * pattern: row 15's residual ~ -1.875 * pattern leaves int8
    x = k / 120.0
    codec = ChannelMixCodec(error_bound_abs=1 / 240, outlier_fraction=1.0)
    data, y, err = _roundtrip(codec, x)
    meta = frame_meta(data)
    assert meta["mode"] == "grid" and meta["template_rows"] == 16
    codes = grid.quantize_codes(x, meta["step"]).view(16, -1)
    tmpl = grid._template(codes, 16).to(torch.int32)
    assert int((codes.to(torch.int32) - tmpl).abs().max()) > 127  # wrap-around happens
    assert err <= 1 / 240


@pytest.mark.parametrize(
    ("exact", "rel", "bits"), [(True, 0.005, 8), (False, 0.005, 8), (False, 0.0005, 16)]
)
def test_rich_channels_in_grid_mode(exact, rel, bits):
    gen = torch.Generator().manual_seed(4)
    x = torch.relu(torch.randn(8, 12, 16, 16, generator=gen))
    x[:, :3] = torch.relu(torch.randn(8, 3, 16, 16, generator=gen)) * 6  # outlier-rich
    x[:, 3, ::5, ::3] = 5.0  # sparse spiky channel
    codec = ChannelMixCodec(rel_error_bound=rel, exact_outliers=exact)
    data, y, err = _roundtrip(codec, x)
    meta = frame_meta(data)
    assert meta["mode"] == "grid" and meta["rich_channels"] >= 3
    assert meta["code_bits"] == bits
    assert meta["dense_blocks"] + meta["sparse_blocks"] > 0
    assert err <= codec.error_bound(x)
    assert torch.equal(y[x == 0], x[x == 0])
    if exact:
        assert meta["outliers"] > 0
        flat_x = x.reshape(-1)
        mu, sd = flat_x.mean(), flat_x.std(unbiased=False)
        rich_vals = x[:, :3]
        # well past 3 sigma (the codec estimates mean/sd on a row sample)
        big = rich_vals > mu + 3 * sd + 1.0
        assert big.any() and torch.equal(y[:, :3][big], rich_vals[big])  # stored exactly
    else:
        assert meta["outliers"] == 0


def test_general_path_frames_still_decode():
    """Frames without a mode (general path, also every frame written before) decode as before."""
    x = torch.relu(torch.randn(2, 5, 9, 9, generator=torch.Generator().manual_seed(5)))
    for t in (x.double(), x.half(), x.bfloat16()):
        codec = ChannelMixCodec()
        data = codec.encode(t)
        assert "mode" not in frame_meta(data)
        y = codec.decode(data)
        assert y.dtype == t.dtype
        assert (y.double() - t.double()).abs().max().item() <= codec.error_bound(t)
