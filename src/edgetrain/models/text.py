"""Small BERT and ALBERT text classifiers in plain PyTorch (random init, no download).

FedHybrid trains BERT and ALBERT on AG News and 20 Newsgroups (max length 128).
Both models take a ``LongTensor`` of token ids ``(B, L)`` with ``L <= max_len``;
id 0 is padding and is masked out of attention (an additive ``-1e9`` on its
keys). Every projection is an ``nn.Linear`` (``attn.q/k/v/out``, ``fc1``,
``fc2``) so LoRA can target it, and nothing comes from ``transformers``, so the
models trace with ``torch.fx`` / ``make_fx``.

* ``bert-small``: post-norm BERT encoder (Devlin et al., 2019) with the
  BERT-Small shape of Turc et al. (2019): 4 layers, hidden 512, 8 heads, MLP
  2048, WordPiece vocabulary 30522. Turc et al. report 29.1 M parameters at
  512 positions; we default to 128 positions (FedHybrid's max length), which
  is 0.2 M fewer. Token-type embeddings are omitted (single-segment input).
* ``albert-small``: ALBERT (Lan et al., 2020): factorized embedding (vocab x
  128, then a Linear to the hidden size) and *one* encoder layer whose weights
  are shared by all ``num_layers`` applications; same 4/512/8/2048 shape as
  bert-small. At ALBERT-base size (12 layers, hidden 768, 12 heads, MLP 3072,
  vocab 30000, 512 positions) it has 11.7 M parameters (paper: 12 M).

Both end with BERT's pooler (Linear + tanh on the first token) and a linear
classifier, the ``head``.
"""

from __future__ import annotations

import torch
from torch import nn

from edgetrain.models.attention import SelfAttention
from edgetrain.models.base import annotate
from edgetrain.models.registry import positive, require


class EncoderLayer(nn.Module):
    """Post-norm transformer layer: LN(x + attn(x)), LN(x + fc2(GELU(fc1(x))))."""

    def __init__(self, hidden: int, heads: int, intermediate: int, model: str):
        super().__init__()
        self.attn = SelfAttention(hidden, heads, qkv_bias=True, model=model)
        self.norm1 = nn.LayerNorm(hidden, eps=1e-12)
        self.fc1 = nn.Linear(hidden, intermediate)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(intermediate, hidden)
        self.norm2 = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x: torch.Tensor, attn_bias: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.attn(x, attn_bias))
        return self.norm2(x + self.fc2(self.act(self.fc1(x))))


class Embeddings(nn.Module):
    """Word + learned position embeddings, LayerNorm, optional projection (ALBERT)."""

    def __init__(self, vocab_size: int, max_len: int, dim: int, hidden: int):
        super().__init__()
        self.word = nn.Embedding(vocab_size, dim, padding_idx=0)
        self.position = nn.Embedding(max_len, dim)
        self.norm = nn.LayerNorm(dim, eps=1e-12)
        self.project = nn.Linear(dim, hidden) if dim != hidden else nn.Identity()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.word(ids) + self.position.weight[: ids.shape[1]]
        return self.project(self.norm(x))


def padding_bias(ids: torch.Tensor) -> torch.Tensor:
    """Additive attention bias ``(B, 1, 1, L)``: -1e9 at padding keys (id 0), else 0."""
    return (ids == 0).to(torch.float32)[:, None, None, :] * -1e9


class TextClassifier(nn.Module):
    """Embeddings -> encoder layers (own or shared weights) -> pooler -> classifier."""

    def __init__(
        self,
        *,
        vocab_size: int,
        max_len: int,
        embedding_dim: int,
        hidden: int,
        layers: int,
        heads: int,
        intermediate: int,
        num_classes: int,
        shared: bool,
        model: str,
    ):
        super().__init__()
        self.embeddings = Embeddings(vocab_size, max_len, embedding_dim, hidden)
        self.num_layers = layers
        if shared:
            self.shared_layer = EncoderLayer(hidden, heads, intermediate, model)
            self.encoder = None
        else:
            self.shared_layer = None
            self.encoder = nn.ModuleList(
                EncoderLayer(hidden, heads, intermediate, model) for _ in range(layers)
            )
        self.pooler = nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh())
        self.classifier = nn.Linear(hidden, num_classes)
        self.apply(_init_weights)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embeddings(ids)
        bias = padding_bias(ids).to(x.dtype)
        if self.encoder is not None:
            for layer in self.encoder:
                x = layer(x, bias)
        else:
            for _ in range(self.num_layers):
                x = self.shared_layer(x, bias)
        return self.classifier(self.pooler(x[:, 0]))


def _init_weights(module: nn.Module) -> None:
    """BERT initialisation: N(0, 0.02) weights, zero biases, zero padding embedding."""
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, std=0.02)
        if module.padding_idx is not None:
            with torch.no_grad():
                module.weight[module.padding_idx].zero_()


def _check(name: str, vocab_size: int, max_len: int, hidden: int, heads: int, **rest: int):
    positive(name, vocab_size=vocab_size, max_len=max_len, hidden=hidden, heads=heads, **rest)
    require(
        vocab_size >= 2,
        f"option 'vocab_size' of model {name!r} must be >= 2 (id 0 is padding), got {vocab_size}",
    )
    require(
        hidden % heads == 0,
        f"model {name!r}: 'hidden' ({hidden}) must be divisible by 'heads' ({heads})",
    )


def _annotate(
    model: TextClassifier, max_len: int, num_classes: int, vocab_size: int, blocks: list[str]
) -> nn.Module:
    annotate(
        model,
        input_shape=(max_len,),
        num_classes=num_classes,
        stem=["embeddings"],
        blocks=blocks,
        head="classifier",
        input_dtype=torch.long,
    )
    model.vocab_size = vocab_size
    return model


def build_bert_small(
    num_classes: int = 4,
    vocab_size: int = 30522,
    max_len: int = 128,
    hidden: int = 512,
    num_layers: int = 4,
    heads: int = 8,
    intermediate: int = 2048,
) -> nn.Module:
    """BERT-Small (4/512/8) text classifier."""
    _check(
        "bert-small",
        vocab_size,
        max_len,
        hidden,
        heads,
        num_classes=num_classes,
        num_layers=num_layers,
        intermediate=intermediate,
    )
    model = TextClassifier(
        vocab_size=vocab_size,
        max_len=max_len,
        embedding_dim=hidden,
        hidden=hidden,
        layers=num_layers,
        heads=heads,
        intermediate=intermediate,
        num_classes=num_classes,
        shared=False,
        model="bert-small",
    )
    return _annotate(
        model, max_len, num_classes, vocab_size, [f"encoder.{i}" for i in range(num_layers)]
    )


def build_albert_small(
    num_classes: int = 4,
    vocab_size: int = 30000,
    max_len: int = 128,
    embedding_dim: int = 128,
    hidden: int = 512,
    num_layers: int = 4,
    heads: int = 8,
    intermediate: int = 2048,
) -> nn.Module:
    """ALBERT text classifier: factorized embedding, one layer shared ``num_layers`` times.

    ``blocks`` is ``["shared_layer"]``: the one module every layer application uses.
    """
    _check(
        "albert-small",
        vocab_size,
        max_len,
        hidden,
        heads,
        num_classes=num_classes,
        num_layers=num_layers,
        intermediate=intermediate,
        embedding_dim=embedding_dim,
    )
    model = TextClassifier(
        vocab_size=vocab_size,
        max_len=max_len,
        embedding_dim=embedding_dim,
        hidden=hidden,
        layers=num_layers,
        heads=heads,
        intermediate=intermediate,
        num_classes=num_classes,
        shared=True,
        model="albert-small",
    )
    return _annotate(model, max_len, num_classes, vocab_size, ["shared_layer"])
