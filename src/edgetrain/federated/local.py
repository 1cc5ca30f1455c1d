"""A client's local training: real SGD steps on its partition (FedProx term optional).

Returns the new weights and the per-sample losses' mean square, which both Oort
(``sqrt(mean loss^2) x |samples|``) and FedHybrid (eq. 2) turn into statistical utility.

**Compression error of the client's plan.** A plan that compresses activations makes the
backward pass use *decoded* activations, so the gradients carry the codec's error
(FedHybrid §3: GACT's "accuracy decline results from the error introduced during the
compression process"; §4.4.1 / Fig. 18(b) for the mix codec). The plans are made for the
planned model (e.g. MobileNetV2) while a smaller proxy may be what trains, so its unit
decisions cannot be executed on the proxy one by one. The documented equivalent: during
local training every float saved activation of the proxy (not its parameters, not tensors
under ``MIN_COMPRESS_NUMEL`` elements, which the planner never compresses either) is
encoded and decoded with the plan's codec (:mod:`edgetrain.compress`, real bytes) for the
same share of saved-activation bytes as the plan compresses, per codec
(:func:`edgetrain.federated.plans.compress_share`). Which tensors are chosen is a
deterministic running-share rule (a tensor is compressed while the codec's compressed bytes
stay within its share of the bytes packed so far), so runs are reproducible.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from edgetrain.engine.trainer import batches

# The planner only compresses float saved tensors of at least this many elements
# (edgetrain.engine.budget.profile.MIN_COMPRESS_NUMEL = 1024).
MIN_COMPRESS_NUMEL = 1024


@dataclass
class LocalResult:
    state: dict[str, torch.Tensor]
    n_samples: int  # samples the client holds (the aggregation weight)
    trained_samples: int  # samples processed this round
    loss_sq_mean: float
    mean_loss: float


class _Encoded:
    __slots__ = ("codec", "data")

    def __init__(self, codec, data: bytes) -> None:
        self.codec, self.data = codec, data


@contextmanager
def plan_compression(
    model: nn.Module, codec_share: Mapping[str, float] | None, stats: dict[str, int] | None = None
) -> Iterator[None]:
    """Pass the saved activations of ``model``'s training through the plan's codecs.

    ``codec_share`` maps a codec name (``mix``, ``int8``, ``int4``) to the share of saved
    activation bytes it holds; ``stats`` (optional) counts ``packed`` / ``compressed`` bytes.
    """
    shares = {c: float(v) for c, v in (codec_share or {}).items() if v > 0}
    if not shares:
        yield
        return
    from edgetrain.compress import make_codec

    codecs = {c: make_codec(c) for c in sorted(shares)}
    params = {p.data_ptr() for p in model.parameters()}
    acc = stats if stats is not None else {}
    acc.setdefault("packed", 0)
    acc.setdefault("compressed", 0)
    done = dict.fromkeys(codecs, 0)

    def pack(t: torch.Tensor):
        if not t.is_floating_point() or t.numel() < MIN_COMPRESS_NUMEL or t.data_ptr() in params:
            return t
        n = t.numel() * t.element_size()
        acc["packed"] += n
        for c in codecs:
            if done[c] + n / 2 <= shares[c] * acc["packed"]:
                done[c] += n
                acc["compressed"] += n
                return _Encoded(codecs[c], codecs[c].encode(t.detach()))
        return t

    def unpack(obj):
        if isinstance(obj, _Encoded):
            return obj.codec.decode(obj.data)
        return obj

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        yield


def local_train(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    steps: int,
    batch_size: int,
    lr: float,
    generator: torch.Generator,
    proximal_mu: float = 0.0,
    codec_share: Mapping[str, float] | None = None,
    clip_grad_norm: float | None = None,
) -> LocalResult:
    """``steps`` SGD steps of ``batch_size`` samples (cycling through shuffled data).

    ``codec_share``: the client's plan compresses this share of activation bytes per codec
    (see the module doc); ``None`` or empty trains exactly. ``clip_grad_norm``: each step's
    gradient is scaled to at most this global L2 norm before the step (None: not clipped).
    """
    model.train()
    anchor = [p.detach().clone() for p in model.parameters()] if proximal_mu > 0 else None
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    sq_sum, loss_sum, count, done = 0.0, 0.0, 0, 0
    while done < steps:
        for idx in batches(len(x), batch_size, generator):
            with plan_compression(model, codec_share):
                out = model(x[idx])
                per = nn.functional.cross_entropy(out, y[idx], reduction="none")
                loss = per.mean()
            if anchor is not None:
                prox = sum(
                    ((p - a) ** 2).sum() for p, a in zip(model.parameters(), anchor, strict=True)
                )
                loss = loss + 0.5 * proximal_mu * prox
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if clip_grad_norm is not None:
                nn.utils.clip_grad_norm_(model.parameters(), clip_grad_norm)
            opt.step()
            d = per.detach()
            sq_sum += float((d * d).sum())
            loss_sum += float(d.sum())
            count += len(idx)
            done += 1
            if done >= steps:
                break
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return LocalResult(state, len(x), count, sq_sum / max(count, 1), loss_sum / max(count, 1))
