"""Tokenizer / vocabulary, the .ts parser, windowing and the synthetic generator."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from edgetrain.data import Vocabulary, read_ts, synthetic_sensor, tokenize
from edgetrain.data.windows import label_runs, window_step, windows_by_label
from edgetrain.errors import DataError

TS = """# a comment
@problemName Tiny
@timeStamps false
@missing true
@univariate false
@dimensions 2
@equalLength true
@seriesLength 3
@classLabel true up down
@data
1,2,3:4,5,6:up
0.5,?,1e-3:7,8,9:down
"""


def test_tokenizer_and_vocabulary_are_deterministic():
    assert tokenize("Don't STOP: 3 dogs, 3 cats!") == ["don't", "stop", "3", "dogs", "3", "cats"]
    vocab = Vocabulary.build(["b a c", "a c", "zeta c"], size=5)
    # c (3) > a (2) > b = zeta (1, alphabetical) -> b kept, zeta cut
    assert vocab.words == ("<pad>", "<unk>", "c", "a", "b")
    assert vocab.encode("a zeta c", max_len=5).tolist() == [3, 1, 2, 0, 0]
    assert vocab.encode("c c c", max_len=2).tolist() == [2, 2]
    with pytest.raises(DataError, match="vocab_size must be an integer >= 3"):
        Vocabulary.build(["a"], size=2)
    with pytest.raises(DataError, match="max_len must be a positive integer"):
        vocab.encode_many(["a"], max_len=0)


@settings(max_examples=30, deadline=None)
@given(texts=st.lists(st.text(alphabet="ab c'\n", max_size=30), min_size=1, max_size=8))
def test_vocabulary_is_order_independent_and_ids_in_range(texts):
    v1 = Vocabulary.build(texts, size=6)
    v2 = Vocabulary.build(list(reversed(texts)), size=6)
    assert v1 == v2
    ids = v1.encode_many(texts, max_len=7)
    assert ids.shape == (len(texts), 7) and ids.min() >= 0 and ids.max() < len(v1)


def test_read_ts_parses_cases_and_missing_values(tmp_path):
    path = tmp_path / "Tiny_TRAIN.ts"
    path.write_text(TS)
    ts = read_ts(path)
    assert ts.problem_name == "Tiny" and ts.class_labels == ["up", "down"]
    assert ts.labels == ["up", "down"] and ts.x.shape == (2, 2, 3)
    assert ts.x[0].tolist() == [[1, 2, 3], [4, 5, 6]]
    assert np.isnan(ts.x[1, 0, 1]) and ts.x[1, 0, 2] == pytest.approx(1e-3)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (TS.replace("1,2,3:4,5,6:up", "1,2:4,5,6:up"), "only equal-length series"),
        (TS.replace(":up\n", ":left\n"), r"labels \['left'\] are not declared"),
        (TS.replace("@data\n", ""), "data before '@data'"),
        (TS.replace("@classLabel true up down", "@classLabel false"), "@classLabel' must be"),
        (TS.replace("1,2,3:4,5,6:up", "1,x,3:4,5,6:up"), "line 11"),
        (TS.replace("@dimensions 2", "@dimensions 3"), "@dimensions 3 but cases have 2"),
    ],
)
def test_read_ts_rejects_malformed_files(tmp_path, text, message):
    path = tmp_path / "Bad.ts"
    path.write_text(text)
    with pytest.raises(DataError, match=message) as err:
        read_ts(path)
    assert "Bad.ts" in str(err.value)


def test_read_ts_missing_file(tmp_path):
    with pytest.raises(DataError, match=r"Nope\.ts does not exist; expected a \.ts file"):
        read_ts(tmp_path / "Nope.ts")


def test_windows_stay_inside_label_runs():
    labels = np.array([0] * 5 + [1] * 10 + [2] * 3 + [1] * 4)
    assert label_runs(labels) == [(0, 5, 0), (5, 15, 1), (15, 18, 2), (18, 22, 1)]
    signal = np.arange(22, dtype=np.float64)[:, None] * np.array([[1.0, -1.0]])
    x, y = windows_by_label(signal, labels, window=4, step=window_step(4, 0.5), skip=frozenset({0}))
    assert y.tolist() == [1, 1, 1, 1, 1]  # run 5..15 gives starts 5, 7, 9, 11; 18..22 gives 18
    assert x[:, 0, 0].tolist() == [5, 7, 9, 11, 18] and x.shape == (5, 2, 4)
    assert x[0, 1].tolist() == [-5, -6, -7, -8]


def test_synthetic_sensor_is_deterministic_grouped_and_learnable():
    ds = synthetic_sensor(n=300, channels=3, length=64, classes=4, seed=7, subjects=6)
    assert ds.input_shape == (3, 64) and ds.x.dtype == torch.float32
    assert ds.y.bincount().tolist() == [75] * 4 and sorted(ds.groups.unique().tolist()) == list(
        range(6)
    )
    assert torch.equal(ds.x, synthetic_sensor(300, 3, 64, 4, seed=7, subjects=6).x)
    assert not torch.equal(ds.x, synthetic_sensor(300, 3, 64, 4, seed=8, subjects=6).x)
    tr, te = ds.train_test_split(0.3, seed=0)
    # nearest class centroid of per-channel magnitude spectra, fitted on train only
    feats = [np.abs(np.fft.rfft(d.x.numpy(), axis=-1)).reshape(len(d), -1) for d in (tr, te)]
    centroids = np.stack([feats[0][tr.y.numpy() == k].mean(0) for k in range(4)])
    dist = ((feats[1][:, None, :] - centroids[None]) ** 2).sum(-1)
    accuracy = (dist.argmin(1) == te.y.numpy()).mean()
    assert accuracy > 0.9  # chance is 0.25
    with pytest.raises(DataError, match="classes must be an integer >= 2"):
        synthetic_sensor(10, 1, 32, 1)


def test_ppmi_word_vectors_place_co_occurring_words_together():
    """Two topics of 8 words each, texts drawn from one topic: a word's nearest vector is
    from its own topic; the table is deterministic, std 0.02, padding zero; bad input is
    refused with what is accepted."""
    from edgetrain.data.text import ppmi_word_vectors

    rng = np.random.default_rng(0)
    topics = [np.arange(2, 10), np.arange(10, 18)]
    ids = np.zeros((200, 24), dtype=np.int64)
    for i in range(200):
        ids[i, :20] = rng.choice(topics[i % 2], 20)  # 4 padding ids at the end
    vec = ppmi_word_vectors(ids, 20, 4)
    assert vec.shape == (20, 4) and vec.dtype == np.float32
    assert np.array_equal(vec, ppmi_word_vectors(ids, 20, 4))
    assert abs(float(vec.std()) - 0.02) < 1e-6 and not vec[0].any()
    unit = vec[2:18] / np.linalg.norm(vec[2:18], axis=1, keepdims=True)
    sim = unit @ unit.T
    np.fill_diagonal(sim, -np.inf)
    nearest = sim.argmax(axis=1)
    assert all((nearest[w] < 8) == (w < 8) for w in range(16))
    with pytest.raises(DataError, match="dim"):
        ppmi_word_vectors(ids, 20, 19)
    with pytest.raises(DataError, match="token ids"):
        ppmi_word_vectors(ids, 12, 4)
    with pytest.raises(DataError, match="no pair"):
        ppmi_word_vectors(np.zeros((3, 5), dtype=np.int64), 20, 4)
