"""Parameter counts and FLOPs against published figures, and layers against torch references.

Tolerance is 5% (issue #2). Sources: TrainDeeploy §V-A / Table II for CCT-2 and
Deep-AE; Sandler et al. 2018 (MobileNetV2 3.4M), Ma et al. 2018 (ShuffleNetV2
1x 2.3M), Turc et al. 2019 (BERT-Small 29.1M), Lan et al. 2020 (ALBERT-base 12M).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from edgetrain import models
from edgetrain.models.attention import SelfAttention
from edgetrain.models.cnn_lstm import UnrolledLSTM


def within(value: int, reference: float, tolerance: float = 0.05) -> bool:
    return abs(value - reference) <= tolerance * reference


def test_catalog_matches_every_paper_figure():
    rows = [r for r in models.catalog() if r["paper_params"] is not None]
    assert {r["name"] for r in rows} >= {"cct2", "deep-ae"}
    for row in rows:
        assert within(row["params"], row["paper_params"]), row


def test_cct2_counts():
    model = models.build("cct2")
    assert within(models.count_params(model), 0.28e6)
    assert models.count_params(model) == 283_723  # layer-by-layer sum, see cct.py docstring
    assert within(models.flops_forward(model), 67e6, 0.06)  # paper: 67 MFLOPs, LP row: 71 M
    # tokens: 32 -> 16 -> 8 per side => 64 tokens of dim 128
    assert model.pos_embedding.shape == (1, 64, 128)


def test_deep_ae_counts():
    model = models.build("deep-ae")
    assert models.count_params(model) == 267_928
    assert within(models.count_params(model), 270e3)


@pytest.mark.parametrize(
    ("name", "options", "reference"),
    [
        ("mobilenetv2", {"num_classes": 1000, "input_size": 224}, 3.4e6),
        ("shufflenetv2", {"num_classes": 1000, "input_size": 224}, 2.3e6),
        ("bert-small", {"max_len": 512}, 29.1e6),
        (
            "albert-small",
            {"num_layers": 12, "hidden": 768, "heads": 12, "intermediate": 3072, "max_len": 512},
            12e6,
        ),
    ],
)
def test_reference_architectures(name, options, reference):
    assert within(models.count_params(models.build(name, **options)), reference)


def test_albert_shares_one_layer():
    a4 = models.build("albert-small", num_layers=4)
    a8 = models.build("albert-small", num_layers=8)
    assert models.count_params(a4) == models.count_params(a8)
    assert a4.blocks == ["shared_layer"]
    emb = a4.embeddings
    assert emb.word.embedding_dim == 128 and emb.project.out_features == 512


def test_ds_cnn_same_padding_and_size():
    model = models.build("ds-cnn").eval()
    feats = model.conv_stem(torch.zeros(1, 1, 49, 10))
    assert feats.shape == (1, 64, 25, 5)  # TF 'same': ceil(49/2) x ceil(10/2)
    assert 20e3 <= models.count_params(model) <= 40e3  # MLPerf Tiny DS-CNN range


def test_small_input_strides():
    m = models.build("mobilenetv2", input_size=32).eval()
    assert m.last_conv(m.features(m.conv_stem(torch.zeros(1, 3, 32, 32)))).shape[-1] == 4
    s = models.build("shufflenetv2", input_size=32).eval()
    assert s.conv5(s.stages(s.conv_stem(torch.zeros(1, 3, 32, 32)))).shape[-1] == 4
    big = models.build("shufflenetv2", input_size=224).eval()
    assert big.conv5(big.stages(big.conv_stem(torch.zeros(1, 3, 224, 224)))).shape[-1] == 7


def test_unrolled_lstm_equals_torch_lstm():
    torch.manual_seed(0)
    ours = UnrolledLSTM(5, 7, steps=6)
    ref = nn.LSTM(5, 7, batch_first=True)
    with torch.no_grad():
        ref.weight_ih_l0.copy_(ours.input_proj.weight)
        ref.bias_ih_l0.copy_(ours.input_proj.bias)
        ref.weight_hh_l0.copy_(ours.hidden_proj.weight)
        ref.bias_hh_l0.zero_()
    x = torch.randn(3, 6, 5)
    torch.testing.assert_close(ours(x), ref(x)[0])


def test_self_attention_equals_torch_multihead_attention_with_padding():
    torch.manual_seed(0)
    ours = SelfAttention(8, 2)
    ref = nn.MultiheadAttention(8, 2, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([ours.q.weight, ours.k.weight, ours.v.weight]))
        ref.in_proj_bias.copy_(torch.cat([ours.q.bias, ours.k.bias, ours.v.bias]))
        ref.out_proj.weight.copy_(ours.out.weight)
        ref.out_proj.bias.copy_(ours.out.bias)
    x = torch.randn(2, 5, 8)
    pad = torch.tensor([[False] * 5, [False, False, False, True, True]])
    bias = pad.float()[:, None, None, :] * -1e9
    torch.testing.assert_close(ours(x, bias), ref(x, x, x, key_padding_mask=pad)[0])


def test_edgetrain_models_command_prints_paper_matching_counts():
    import json

    from typer.testing import CliRunner

    from edgetrain.cli import app

    result = CliRunner().invoke(app, ["models", "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    assert set(rows) == set(models.names())
    for name in ("cct2", "deep-ae"):
        assert within(rows[name]["params"], rows[name]["paper_params"])
