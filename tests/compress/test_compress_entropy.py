"""Huffman-only zstd for the code stream, qint8 kernels and their fallbacks."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from edgetrain.compress import ChannelMixCodec, entropy, frame_meta, grid

needs_lib = pytest.mark.skipif(
    entropy.literal_compressor() is None, reason="no loadable libzstd >= 1.4"
)


def _skewed(n: int, seed: int) -> np.ndarray:
    """Bytes like ReLU codes: half zeros, the rest a rounded half-normal."""
    rng = np.random.default_rng(seed)
    v = np.rint(np.abs(rng.normal(0, 8, n))).clip(0, 50)
    v[rng.random(n) < 0.5] = 0
    return v.astype(np.int8)


def test_order0_bits_known_values():
    assert entropy.order0_bits(np.zeros(0, np.int8)) == 0.0
    assert entropy.order0_bits(np.full(100, 7, np.int8)) == 0.0
    assert entropy.order0_bits(np.tile(np.arange(4, dtype=np.int8), 25)) == pytest.approx(200.0)


@needs_lib
@settings(max_examples=15, deadline=None)
@given(n=st.integers(0, 300_000), seed=st.integers(0, 2**31 - 1))
def test_literal_frames_are_plain_zstd_and_near_order0(n, seed):
    codes = _skewed(n, seed)
    blob = entropy.literal_compressor().compress(codes)
    back = zstandard.ZstdDecompressor().decompress(blob, max_output_size=max(n, 1))
    assert back == codes.tobytes()
    if n >= 50_000:  # Huffman: within a few % of the order-0 entropy (+ tables, headers)
        assert len(blob) <= entropy.order0_bits(codes) / 8 * 1.04 + 200 * (n // 131072 + 1)


@needs_lib
def test_literal_mode_beats_lz_fast_strategy_on_codes():
    """The measured reason for the mode: no matches, smaller output on literal-heavy codes."""
    codes = _skewed(1 << 20, 1)
    lit = len(entropy.literal_compressor().compress(codes))
    lz = len(grid.compressor().compress(codes))
    assert lit < lz


def test_qint8_kernels_match_the_magic_rounding():
    if not grid.qint8_kernels():
        pytest.skip("torch's qint8 kernels unavailable here")
    gen = torch.Generator().manual_seed(0)
    step = grid.grid_step(0.05, 6.0)
    x = torch.relu(torch.randn(4, 8, 33, 31, generator=gen)) * 2
    k = torch.round(x / step)
    x = x[(x / step - k).abs() < 0.49]  # away from ties, where any rounding agrees
    fast = grid.quantize_codes(x, step)
    grid._q8_ok = False
    try:
        slow = grid.quantize_codes(x, step)
        slow_back = grid.dequantize(slow.numpy(), step, list(slow.shape))
    finally:
        grid._q8_ok = None
    assert torch.equal(fast, slow)
    back = grid.dequantize(fast.numpy(), step, list(fast.shape))
    assert torch.equal(back, slow_back)  # bit-identical reconstruction


@pytest.fixture
def fallbacks(monkeypatch):
    """No libzstd Huffman-only mode and no qint8 kernels: the portable paths."""
    monkeypatch.setattr(entropy, "literal_compressor", lambda: None)
    monkeypatch.setattr(grid, "_q8_ok", False)


@settings(max_examples=25, deadline=None)
@given(
    ks=st.lists(st.integers(-126, 126), min_size=1, max_size=40),
    frac=st.sampled_from([0.0, 0.5, 0.4999999, -0.5, 0.25]),
    eb=st.floats(1e-6, 1e3),
)
def test_fast_frames_decode_on_portable_paths_and_back(ks, frac, eb):
    """Frames from either pair of paths decode identically on the other; bound holds."""
    x = torch.tensor([(k + frac) * 2 * eb for k in ks], dtype=torch.float32).repeat(3, 1)
    codec = ChannelMixCodec(error_bound_abs=eb)
    data = codec.encode(x)
    y = codec.decode(data)
    saved = entropy.literal_compressor, grid._q8_ok
    entropy.literal_compressor, grid._q8_ok = (lambda: None), False
    try:
        y_slow = codec.decode(data)
        data_slow = codec.encode(x)
    finally:
        entropy.literal_compressor, grid._q8_ok = saved
    y2 = codec.decode(data_slow)
    assert torch.equal(y, y_slow)
    assert (y - x).abs().max().item() <= eb and (y2 - x).abs().max().item() <= eb


def test_portable_paths_keep_ratio_and_template(fallbacks):
    gen = torch.Generator().manual_seed(2)
    base = torch.randn(1, 64, 48, generator=gen)
    x = torch.nn.functional.gelu(base + 0.05 * torch.randn(16, 64, 48, generator=gen))
    codec = ChannelMixCodec(outlier_fraction=1.0)
    data = codec.encode(x)
    assert frame_meta(data)["template_rows"] == 16
    assert (codec.decode(data) - x).abs().max() <= codec.error_bound(x)
    assert x.numel() * 4 / len(data) > 6


@pytest.mark.parametrize("shape", [(6, 3, 50), (1, 5, grid.CHUNK + 9), (400, 700, 1)])
def test_outlier_share_counts_every_chunk(shape):
    gen = torch.Generator().manual_seed(9)
    sub = torch.randn(shape, generator=gen)
    got = grid.outlier_share(sub, 1.5, -2.0)
    ref = ((sub > 1.5) | (sub < -2.0)).double().mean(dim=(0, 2)).numpy()
    np.testing.assert_allclose(got, ref)
    np.testing.assert_allclose(grid.outlier_share(sub, None, None), 0.0)


def test_lazy_sections_decode_into_buffers_and_reject_corruption():
    from edgetrain.compress.container import Section, pack_frame, read_section, unpack_frame
    from edgetrain.errors import DataError

    codes = _skewed(5000, 3)
    small = np.arange(10, dtype=np.int16)
    data = pack_frame(
        {"k": 1},
        {"codes": codes, "small": small},
        entropy=True,
        cctx=grid.compressor(),
        section_cctx={"codes": grid.code_compressor()},
    )
    meta, arr = unpack_frame(data, lazy=("codes", "small"))
    assert meta == {"k": 1} and isinstance(arr["codes"], Section)
    assert arr["codes"].z and not arr["small"].z  # 20 bytes: stored raw
    np.testing.assert_array_equal(read_section(arr["codes"]), codes)
    buf = np.empty(5000, np.int8)
    assert read_section(arr["codes"], buf) is buf
    np.testing.assert_array_equal(buf, codes)
    np.testing.assert_array_equal(read_section(arr["small"], np.empty(10, np.int16)), small)
    _, eager = unpack_frame(data)
    np.testing.assert_array_equal(eager["codes"], codes)
    with pytest.raises(ValueError, match="needs 5000"):
        read_section(arr["codes"], np.empty(4999, np.int8))
    # a corrupt zstd payload is a DataError, into a buffer or not
    sec = arr["codes"]
    bad = bytearray(sec.blob)
    bad[len(bad) // 2 :] = bytes(len(bad) - len(bad) // 2)
    broken = Section(memoryview(bytes(bad)), True, sec.dtype, sec.shape)
    with pytest.raises(DataError):
        read_section(broken, np.empty(5000, np.int8))
    short = Section(sec.blob, True, sec.dtype, (4000,))
    with pytest.raises(DataError):
        read_section(short, np.empty(4000, np.int8))
    with pytest.raises(DataError):
        read_section(short)


def test_read_section_without_libzstd(monkeypatch):
    from edgetrain.compress.container import Section, read_section
    from edgetrain.errors import DataError

    monkeypatch.setattr(entropy, "decompress_into", lambda blob, out: False)
    codes = _skewed(3000, 4)
    blob = memoryview(grid.compressor().compress(codes))
    sec = Section(blob, True, np.dtype(np.int8), (3000,))
    np.testing.assert_array_equal(read_section(sec, np.empty(3000, np.int8)), codes)
    with pytest.raises(DataError):
        read_section(Section(blob, True, np.dtype(np.int8), (2000,)), np.empty(2000, np.int8))


def test_int16_planes_split_and_old_single_section_frames_decode():
    from edgetrain.compress.container import pack_frame, unpack_frame

    gen = torch.Generator().manual_seed(6)
    x = torch.relu(torch.randn(4, 6, 20, 20, generator=gen))
    codec = ChannelMixCodec(rel_error_bound=0.0005, outlier_fraction=1.0)
    data = codec.encode(x)
    meta, arr = unpack_frame(data)
    assert meta["code_bits"] == 16 and arr["codes"].dtype == np.uint8
    assert arr["codes"].shape == arr["codes_hi"].shape == (x.numel(),)
    y = codec.decode(data)
    assert (y - x).abs().max() <= codec.error_bound(x)
    # the layout before the split: one [2, n] section of byte planes
    old = dict(arr)
    old["codes"] = np.stack([old.pop("codes"), old.pop("codes_hi")])
    old_frame = pack_frame(meta, old, entropy=True, cctx=grid.compressor())
    assert torch.equal(codec.decode(old_frame), y)
