"""A client's local training: real SGD steps on its partition (FedProx term optional).

Returns the new weights and the per-sample losses' mean square, which both Oort
(``sqrt(mean loss^2) x |samples|``) and FedHybrid (eq. 2) turn into statistical utility.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from edgetrain.engine.trainer import batches


@dataclass
class LocalResult:
    state: dict[str, torch.Tensor]
    n_samples: int  # samples the client holds (the aggregation weight)
    trained_samples: int  # samples processed this round
    loss_sq_mean: float
    mean_loss: float


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
) -> LocalResult:
    """``steps`` SGD steps of ``batch_size`` samples (cycling through shuffled data)."""
    model.train()
    anchor = [p.detach().clone() for p in model.parameters()] if proximal_mu > 0 else None
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    sq_sum, loss_sum, count, done = 0.0, 0.0, 0, 0
    while done < steps:
        for idx in batches(len(x), batch_size, generator):
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
