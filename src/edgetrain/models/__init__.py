"""The model zoo: every model is an ``nn.Module`` built by name with keyword options.

>>> from edgetrain import models
>>> net = models.build("cct2", num_classes=10)
>>> net(models.example_input(net, batch=2)).shape
torch.Size([2, 10])

Each model carries ``input_shape``, ``num_classes``, ``input_dtype``, ``stem``,
``blocks`` and ``head`` (see :mod:`edgetrain.models.base`). Every builder also
accepts ``seed`` (int): weights are then drawn from a private generator state,
so the same seed and options give the same weights without touching the global
RNG. Without ``seed`` the global torch RNG is used, as ``nn.Module`` does.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from edgetrain.errors import ModelError
from edgetrain.models.cct import build_cct2
from edgetrain.models.cnn_lstm import build_cnn_lstm
from edgetrain.models.deep_ae import build_deep_ae
from edgetrain.models.ds_cnn import build_ds_cnn
from edgetrain.models.mobilenetv2 import build_mobilenetv2
from edgetrain.models.registry import ModelSpec, check_options
from edgetrain.models.sensor_cnn import build_alexnet, build_lenet
from edgetrain.models.shufflenetv2 import build_shufflenetv2
from edgetrain.models.text import build_albert_small, build_bert_small

__all__ = ["ModelSpec", "build", "catalog", "count_params", "example_input", "names", "spec"]

_SPECS: dict[str, ModelSpec] = {
    s.name: s
    for s in [
        ModelSpec(
            "lenet",
            build_lenet,
            "DL4J LeNet with 1-D kernels for C x T sensor windows",
            family="cnn",
            task="sensor-classification",
            notes="MDLdroid §1/§5 (DL4J zoo LeNet); defaults: UCI HAR, 9 x 128, 6 classes",
        ),
        ModelSpec(
            "alexnet",
            build_alexnet,
            "DL4J AlexNet with 1-D kernels for C x T sensor windows",
            family="cnn",
            task="sensor-classification",
            notes="MDLdroid §1/§5 (DL4J zoo AlexNet, dropout omitted); defaults: UCI HAR",
        ),
        ModelSpec(
            "cnn-lstm",
            build_cnn_lstm,
            "Conv1d feature extractor + 2-layer unrolled LSTM for multichannel sensor data",
            family="cnn-rnn",
            task="sensor-classification",
            notes="MDLdroid §2 uses a CNN-LSTM on PAMAP2 (11.61M params) without giving its "
            "layers; ours is a compact DeepConvLSTM-style model, the 11.61M is not claimed",
        ),
        ModelSpec(
            "cct2",
            build_cct2,
            "Compact Convolutional Transformer CCT-2/3x2 (conv tokenizer, 2 blocks, SeqPool)",
            family="transformer",
            task="image-classification",
            paper_params=280_000,
            paper_source="TrainDeeploy §V-A (0.28 M params, 67 MFLOPs)",
            paper_flops_forward=67_000_000,
        ),
        ModelSpec(
            "deep-ae",
            build_deep_ae,
            "MLPerf Tiny anomaly-detection autoencoder 640-128x4-8-128x4-640",
            family="mlp",
            task="reconstruction",
            paper_params=270_000,
            paper_source="TrainDeeploy Table II (Deep-AE, 270K params)",
            notes="num_classes = reconstructed features (640); head = decoder's last Linear",
        ),
        ModelSpec(
            "ds-cnn",
            build_ds_cnn,
            "MLPerf Tiny keyword-spotting DS-CNN (1 x 49 x 10 MFCC)",
            family="cnn",
            task="keyword-spotting",
            notes="MLPerf Tiny KWS variant (~24K params); TrainDeeploy Table II cites a 52.5K "
            "PULP-TrainLib DS-CNN whose layers are not given, so no paper figure is claimed",
        ),
        ModelSpec(
            "mobilenetv2",
            build_mobilenetv2,
            "MobileNetV2 with width multiplier; small-input strides below 64 px",
            family="cnn",
            task="image-classification",
            notes="FedHybrid §2/§6 (OpenImage); 3.50M params at 224 px, 1000 classes "
            "(Sandler et al.: 3.4M)",
        ),
        ModelSpec(
            "shufflenetv2",
            build_shufflenetv2,
            "ShuffleNetV2 (widths 0.5/1.0/1.5/2.0); small-input stem below 64 px",
            family="cnn",
            task="image-classification",
            notes="FedHybrid §6 (OpenImage); 2.28M params at 224 px, 1000 classes "
            "(Ma et al.: 2.3M)",
        ),
        ModelSpec(
            "bert-small",
            build_bert_small,
            "BERT-Small (4 layers, 512 hidden, 8 heads) text classifier, random init",
            family="transformer",
            task="text-classification",
            notes="FedHybrid §6 (AG News / 20News, max length 128); shape of Turc et al. "
            "BERT-Small (29.1M params at 512 positions)",
        ),
        ModelSpec(
            "albert-small",
            build_albert_small,
            "ALBERT (factorized embedding, one shared layer) text classifier, random init",
            family="transformer",
            task="text-classification",
            notes="FedHybrid §6; ALBERT-base options give 11.7M params (Lan et al.: 12M)",
        ),
    ]
}


def names() -> list[str]:
    """Names accepted by :func:`build`, in catalog order."""
    return list(_SPECS)


def spec(name: str) -> ModelSpec:
    """The :class:`ModelSpec` registered under ``name``."""
    if not isinstance(name, str) or name not in _SPECS:
        raise ModelError(f"unknown model {name!r}; accepted names: {', '.join(_SPECS)}")
    return _SPECS[name]


def build(name: str, **options: Any) -> nn.Module:
    """Build model ``name`` with keyword ``options`` over its defaults.

    Raises :class:`ModelError` for an unknown name, an unknown option, a value of
    the wrong type or out of range; the message lists what is accepted.
    """
    model_spec = spec(name)
    seed = options.pop("seed", None)
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise ModelError(f"option 'seed' must be an int or None, got {seed!r}")
    merged = check_options(model_spec, options)
    if seed is None:
        return model_spec.builder(**merged)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return model_spec.builder(**merged)


def example_input(
    model: nn.Module, batch: int = 1, generator: torch.Generator | None = None
) -> torch.Tensor:
    """A valid input batch for a zoo model.

    Float models get standard-normal values of shape ``(batch, *input_shape)``.
    Text models get token ids in ``[1, vocab_size)`` with a random valid length
    per row (at least half of ``max_len``) and padding id 0 after it, so the
    padding mask is exercised.
    """
    if not hasattr(model, "input_shape"):
        raise ModelError(
            f"{type(model).__name__} is not a zoo model (no 'input_shape'); build it with "
            f"edgetrain.models.build(name) for one of: {', '.join(_SPECS)}"
        )
    if not isinstance(batch, int) or batch < 1:
        raise ModelError(f"batch must be a positive int, got {batch!r}")
    shape = (batch, *model.input_shape)
    if model.input_dtype == torch.long:
        vocab = int(model.vocab_size)
        length = shape[-1]
        ids = torch.randint(1, vocab, shape, generator=generator)
        lengths = torch.randint((length + 1) // 2, length + 1, (batch, 1), generator=generator)
        return torch.where(torch.arange(length)[None, :] < lengths, ids, torch.zeros_like(ids))
    return torch.randn(shape, generator=generator, dtype=model.input_dtype)


def count_params(model: nn.Module) -> int:
    """Number of parameter elements (shared tensors counted once)."""
    return sum(p.numel() for p in model.parameters())


def flops_forward(model: nn.Module) -> int:
    """Forward FLOPs at batch 1 counted by ``torch.utils.flop_counter`` (eval mode)."""
    was_training = model.training
    model.eval()
    try:
        x = example_input(model, 1, torch.Generator().manual_seed(0))
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(x)
    finally:
        model.train(was_training)
    return int(counter.get_total_flops())


@functools.lru_cache(maxsize=1)
def _catalog() -> tuple[dict[str, Any], ...]:
    rows = []
    for name, s in _SPECS.items():
        model = build(name, seed=0)
        rows.append(
            {
                "name": name,
                "family": s.family,
                "task": s.task,
                "params": count_params(model),
                "paper_params": s.paper_params,
                "paper_source": s.paper_source,
                "input_shape": list(model.input_shape),
                "input_dtype": str(model.input_dtype).removeprefix("torch."),
                "num_classes": model.num_classes,
                "flops_forward": flops_forward(model),
                "paper_flops_forward": s.paper_flops_forward,
                "description": s.description,
                "notes": s.notes,
                "options": dict(s.defaults),
            }
        )
    return tuple(rows)


def catalog() -> list[dict[str, Any]]:
    """One JSON-ready dict per model at default options (built once, then cached)."""
    return copy.deepcopy(list(_catalog()))
