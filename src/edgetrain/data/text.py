"""A deterministic word-level tokenizer and vocabulary for small text classifiers.

Lowercase, words are runs of letters/digits (an inner apostrophe is kept:
"don't"), the vocabulary is the ``size - 2`` most frequent words with ties broken
alphabetically, id 0 is padding and id 1 is unknown. Same texts -> same ids on
every machine, which federated clients sharing one embedding table depend on.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from edgetrain.errors import DataError

PAD_ID = 0
UNK_ID = 1
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z0-9]+)*")


def tokenize(text: str) -> list[str]:
    """Lowercased word tokens of ``text``."""
    return _WORD.findall(text.lower())


@dataclass(frozen=True)
class Vocabulary:
    """Words in id order; ``words[0]`` is '<pad>', ``words[1]`` is '<unk>'."""

    words: tuple[str, ...]

    @classmethod
    def build(cls, texts: Iterable[str], size: int) -> Vocabulary:
        """The ``size - 2`` most frequent words of ``texts`` (ties alphabetical) + pad, unk."""
        counts: Counter[str] = Counter()
        for t in texts:
            counts.update(tokenize(t))
        return cls.from_counts(counts, size)

    @classmethod
    def from_counts(cls, counts: Counter[str], size: int) -> Vocabulary:
        if not isinstance(size, int) or isinstance(size, bool) or size < 3:
            raise DataError(f"vocab_size must be an integer >= 3 (pad, unk, a word), got {size!r}")
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[: size - 2]
        return cls(("<pad>", "<unk>", *(w for w, _ in ranked)))

    def __len__(self) -> int:
        return len(self.words)

    def encode(self, text: str, max_len: int) -> np.ndarray:
        """Ids of the first ``max_len`` tokens, right-padded with 0."""
        return self.encode_many([text], max_len)[0]

    def encode_many(self, texts: Iterable[str], max_len: int) -> np.ndarray:
        """N x ``max_len`` int64 ids of ``texts``."""
        return self.encode_tokens((tokenize(t) for t in texts), max_len)

    def encode_tokens(self, token_lists: Iterable[Sequence[str]], max_len: int) -> np.ndarray:
        """N x ``max_len`` int64 ids of already tokenized texts."""
        if not isinstance(max_len, int) or isinstance(max_len, bool) or max_len < 1:
            raise DataError(f"max_len must be a positive integer, got {max_len!r}")
        index = {w: i for i, w in enumerate(self.words)}
        rows = []
        for tokens in token_lists:
            ids = [index.get(w, UNK_ID) for w in tokens[:max_len]]
            row = np.full(max_len, PAD_ID, dtype=np.int64)
            row[: len(ids)] = ids
            rows.append(row)
        return np.stack(rows) if rows else np.zeros((0, max_len), dtype=np.int64)


def ppmi_word_vectors(
    ids: np.ndarray,
    vocab_size: int,
    dim: int,
    *,
    window: int = 5,
    alpha: float = 0.75,
    std: float = 0.02,
) -> np.ndarray:
    """Word vectors from co-occurrence counts alone: positive PMI + truncated SVD.

    ``ids`` is N x L token ids (0 = pad, 1 = unknown; both skipped). Two words co-occur when
    at most ``window`` tokens apart in one text (both directions, unweighted). PMI uses
    context-distribution smoothing ``alpha`` (Levy, Goldberg & Dagan, TACL 2015: 0.75) and
    keeps the positive entries (PPMI, Bullinaria & Levy 2007); the vectors are
    ``U sqrt(S)`` of its rank-``dim`` SVD (the symmetric weighting of Levy et al. §3.3),
    signs fixed so each column's largest entry is positive, scaled to standard deviation
    ``std`` (BERT's initializer range, 0.02), row 0 (padding) zero. Deterministic: ARPACK
    starts from a fixed vector. Returns a float32 ``vocab_size x dim`` array. Labels are
    never seen; a stand-in, where no pretrained model can be downloaded, for the word
    knowledge a pretrained encoder brings.
    """
    import scipy.sparse as sp
    from scipy.sparse.linalg import svds

    ids = np.asarray(ids)
    if ids.ndim != 2 or not np.issubdtype(ids.dtype, np.integer):
        raise DataError(f"ppmi_word_vectors needs an N x L integer id array, got {ids.shape}")
    if not 1 <= dim < vocab_size - 1:
        raise DataError(f"dim={dim}; expected 1 <= dim < vocab_size - 1 = {vocab_size - 1}")
    if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
        raise DataError(f"token ids must lie in [0, {vocab_size}), got {ids.min()}..{ids.max()}")
    rows, cols = [], []
    for doc in ids:
        d = doc[doc > UNK_ID]
        for off in range(1, window + 1):
            rows.append(d[:-off])
            cols.append(d[off:])
    r = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
    c = np.concatenate(cols) if cols else np.zeros(0, dtype=np.int64)
    if not r.size:
        raise DataError("ppmi_word_vectors: the texts hold no pair of known words to count")
    counts = sp.coo_matrix((np.ones(r.size), (r, c)), shape=(vocab_size, vocab_size)).tocsr()
    counts = (counts + counts.T).tocoo()
    word = np.asarray(counts.sum(axis=1)).ravel()
    ctx = np.asarray(counts.sum(axis=0)).ravel() ** alpha
    pmi = np.log(counts.data * ctx.sum() / (word[counts.row] * ctx[counts.col]))
    keep = pmi > 0
    ppmi = sp.csr_matrix(
        (pmi[keep], (counts.row[keep], counts.col[keep])), shape=(vocab_size, vocab_size)
    )
    v0 = np.full(vocab_size, 1.0 / np.sqrt(vocab_size))
    u, s, _ = svds(ppmi, k=dim, v0=v0)
    vec = u * np.sqrt(s)
    pivot = np.abs(vec).argmax(axis=0)
    vec = vec * np.sign(vec[pivot, np.arange(dim)])
    vec = vec / (vec.std() + 1e-12) * std
    vec[PAD_ID] = 0.0
    return vec.astype(np.float32)
