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
