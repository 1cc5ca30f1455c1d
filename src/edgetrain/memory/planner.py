"""One call from a model name to a full memory and latency plan of its training step.

``plan_training`` chains the stages of DESIGN.md: model -> fine-tuning strategy ->
TrainGraph -> lifetimes -> static allocation -> memory hierarchy -> latency
estimate, and returns a :class:`TrainingPlan` whose ``to_json()`` is what
``edgetrain plan --json`` prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgetrain.memory.allocator import Allocation, allocate
from edgetrain.memory.cost_model import LatencyEstimate, estimate_latency
from edgetrain.memory.fusion import fuse_lora as fuse_lora_graph
from edgetrain.memory.hierarchy import PLACEMENTS, HierarchyPlan, place_hierarchy
from edgetrain.memory.liveness import STATIC_KINDS, Buffer, lifetimes, live_bytes
from edgetrain.memory.peak import PeakReport, peak_report

# Kinds stacked in the timeline plot, in drawing order (TrainDeeploy Fig. 1b).
TIMELINE_KINDS = (
    "weight",
    "frozen_weight",
    "optimizer_state",
    "input",
    "label",
    "activation",
    "gradient",
    "temporary",
)


@dataclass
class TrainingPlan:
    """Everything ``edgetrain plan`` reports about one (model, strategy, batch, target)."""

    model: str
    strategy: str
    batch: int
    target: str
    optimizer: str
    params: int
    trainable_params: int
    trainable_bytes: int
    flops_forward: int
    flops_train: int
    allocation: Allocation
    dynamic_allocation: Allocation
    hierarchy: HierarchyPlan
    latency: LatencyEstimate
    placement: str = "spill"
    fused_lora: bool = False
    double_buffering: bool = False
    dynamic_peak: PeakReport | None = None
    buffers: list[Buffer] = field(repr=False, default_factory=list)
    nodes: int = 0
    phases: list[str] = field(repr=False, default_factory=list)

    @property
    def dynamic_peak_bytes(self) -> int:
        """Arena of activations, gradients and temporaries (weights and inputs excluded,
        as TrainDeeploy Fig. 6a)."""
        return self.dynamic_allocation.arena_bytes

    def timeline(self) -> dict[str, np.ndarray]:
        """Live bytes per kind at every node (for the Fig. 1b-style plot)."""
        out = {}
        for kind in TIMELINE_KINDS:
            bufs = [b for b in self.buffers if b.kind_name == kind]
            if bufs:
                out[kind] = live_bytes(bufs, self.nodes)
        return out

    def to_json(self) -> dict[str, Any]:
        h = self.hierarchy.to_json()
        return {
            "model": self.model,
            "strategy": self.strategy,
            "batch": self.batch,
            "target": self.target,
            "optimizer": self.optimizer,
            "placement": self.placement,
            "params": self.params,
            "trainable_params": self.trainable_params,
            "trainable_bytes": self.trainable_bytes,
            "flops_forward": self.flops_forward,
            "flops_train": self.flops_train,
            "nodes": self.nodes,
            "tensors": len(self.buffers),
            "lower_bound_bytes": self.allocation.lower_bound_bytes,
            "arena_bytes": self.allocation.arena_bytes,
            "arena_optimal": self.allocation.optimal,
            "dynamic_peak_bytes": self.dynamic_peak_bytes,
            "dynamic_lower_bound_bytes": self.dynamic_allocation.lower_bound_bytes,
            "dynamic_peak_at": self.dynamic_peak.to_json() if self.dynamic_peak else None,
            "fused_lora": self.fused_lora,
            "double_buffering": self.double_buffering,
            "tiers": h["tiers"],
            "transfers": h["transfers"],
            "latency_ms": {
                "cores": self.latency.ms_cores,
                "accelerated": self.latency.ms_accelerated,
                "estimate": True,
            },
            "flop_per_cycle": self.latency.flop_per_cycle,
            "flop_per_cycle_cores": self.latency.flop_per_cycle_cores,
            "allocator_seconds": self.allocation.seconds,
        }


def _labels(model: Any, x: Any, batch: int, seed: int) -> tuple[Any, str]:
    import torch

    num_classes = getattr(model, "num_classes", None)
    task = getattr(model, "task", "")
    if not num_classes or task == "reconstruction" or model.__class__.__name__ == "DeepAE":
        return x.detach().clone(), "mse"
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, int(num_classes), (batch,), generator=gen), "cross_entropy"


def plan_training(
    model_name_or_module: Any,
    strategy: str = "full",
    batch: int = 1,
    target: Any = "pulp",
    optimizer: str = "sgd",
    *,
    seed: int = 0,
    time_limit_s: float = 1.0,
    model_options: dict | None = None,
    placement: str = "spill",
    fuse_lora: bool = True,
    double_buffering: bool = False,
) -> TrainingPlan:
    """Capture the training step of a model and plan its memory and latency on ``target``."""
    import torch

    from edgetrain import models
    from edgetrain.devices import get_target
    from edgetrain.errors import ConfigError
    from edgetrain.finetune import apply_strategy
    from edgetrain.graph import capture

    if batch < 1:
        raise ConfigError(f"batch must be >= 1, got {batch}")
    if placement not in PLACEMENTS:  # checked before the (slow) capture
        raise ConfigError(f"unknown placement {placement!r}; use one of {list(PLACEMENTS)}")
    if isinstance(model_name_or_module, str):
        name = model_name_or_module
        model = models.build(name, seed=seed, **(model_options or {}))
    else:
        model = model_name_or_module
        name = type(model).__name__
    soc = get_target(target) if isinstance(target, str) else target
    info = apply_strategy(model, strategy, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    x = models.example_input(model, batch, generator=gen)
    y, loss = _labels(model, x, batch, seed)
    graph = capture(model, x, y, loss=loss, optimizer=optimizer, strategy_info=info)

    return plan_graph(
        graph,
        info,
        soc,
        optimizer=optimizer,
        batch=batch,
        model_name=name,
        time_limit_s=time_limit_s,
        placement=placement,
        fuse_lora=fuse_lora,
        double_buffering=double_buffering,
    )


def plan_graph(
    graph: Any,
    info: Any,
    target: Any,
    *,
    optimizer: str = "sgd",
    batch: int = 1,
    model_name: str = "",
    time_limit_s: float = 1.0,
    placement: str = "spill",
    fuse_lora: bool = True,
    double_buffering: bool = False,
) -> TrainingPlan:
    """Plan an already captured TrainGraph (``info`` is the strategy's StrategyInfo).

    ``fuse_lora`` (default) plans each LoRA linear as one RedMulE accumulation chain
    (:func:`edgetrain.memory.fusion.fuse_lora`); ``False`` plans the captured ops one
    by one, as TrainDeeploy's deployment treats LoRA ("as standard GEMMs", §IV).
    ``double_buffering`` overlaps DMA with compute in the latency estimate
    (:func:`edgetrain.memory.cost_model.estimate_latency`; default: serialised).
    """
    from edgetrain.devices import get_target

    soc = get_target(target) if isinstance(target, str) else target
    if fuse_lora:
        graph = fuse_lora_graph(graph)
    buffers = lifetimes(graph)
    alloc = allocate(buffers, time_limit_s=time_limit_s)
    dynamic = [b for b in buffers if b.kind_name not in STATIC_KINDS]
    dyn_alloc = allocate(dynamic, time_limit_s=time_limit_s)
    hplan = place_hierarchy(graph, buffers, soc, placement=placement, allocation=alloc)
    latency = estimate_latency(graph, hplan, soc, double_buffering=double_buffering)
    return TrainingPlan(
        model=model_name or str(graph.meta.get("model", "")),
        strategy=str(info.strategy),
        batch=batch,
        target=soc.name,
        optimizer=optimizer,
        params=int(info.total_params),
        trainable_params=int(info.trainable_params),
        trainable_bytes=int(info.trainable_bytes),
        flops_forward=int(graph.flops("forward")),
        flops_train=int(graph.flops()),
        allocation=alloc,
        dynamic_allocation=dyn_alloc,
        hierarchy=hplan,
        latency=latency,
        placement=placement,
        fused_lora=bool(fuse_lora and graph.meta.get("fused")),
        double_buffering=double_buffering,
        dynamic_peak=peak_report(graph, buffers),
        buffers=buffers,
        nodes=len(graph.nodes),
        phases=[n.phase for n in graph.nodes],
    )


def plot_timeline(plan: TrainingPlan, path: str) -> None:
    """Stacked live bytes by kind over the step (TrainDeeploy Fig. 1b style), as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = plan.timeline()
    fig, ax = plt.subplots(figsize=(9, 4))
    xs = np.arange(plan.nodes)
    if series:
        ax.stackplot(
            xs, *[v / 1024 for v in series.values()], labels=list(series.keys()), step="post"
        )
    # phase boundaries
    for i in range(1, len(plan.phases)):
        if plan.phases[i] != plan.phases[i - 1]:
            ax.axvline(i, color="k", lw=0.6, ls="--")
            ax.text(i, ax.get_ylim()[1] * 0.98, plan.phases[i], fontsize=7, va="top")
    ax.set_xlabel("node (execution order)")
    ax.set_ylabel("live KiB")
    ax.set_title(f"{plan.model} {plan.strategy} batch {plan.batch}: memory over one step")
    ax.legend(loc="upper left", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
