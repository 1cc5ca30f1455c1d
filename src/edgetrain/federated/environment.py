"""Everything a federated run holds fixed: data, partitions, fleet, memory figures, costs.

Built once from a :class:`FederatedConfig` (and shared by every method of ``--compare``,
so all methods see the identical fleet, partition and seed). Client state is plain data:
a partition index array and a device profile per client (a few KB each).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from edgetrain import data as data_mod
from edgetrain import models
from edgetrain.data import Dataset, partition_dirichlet, partition_dirichlet_held, partition_iid
from edgetrain.data.text import ppmi_word_vectors
from edgetrain.devices import FEDHYBRID_MEMORY_MIX, DeviceProfile, generate_fleet
from edgetrain.errors import ConfigError, DataError
from edgetrain.federated.config import DEFAULT_M_G_SHARE, FederatedConfig
from edgetrain.sim.clock import TRAIN_FLOPS_PER_FORWARD, client_cost
from edgetrain.sim.memory import MemoryModel

_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(gb|gib|mb|mib)\s*$", re.I)
_UNIT = {"gb": 1e9, "gib": 2**30, "mb": 1e6, "mib": 2**20}


def parse_m_g(text: str, budgets: np.ndarray) -> float:
    """``"6GB"`` -> bytes; ``"share:0.4"`` -> the 0.4-quantile of ``budgets``."""
    s = text.strip().lower()
    if s.startswith("share:"):
        try:
            q = float(s[6:])
        except ValueError:
            q = -1.0
        if not 0.0 < q < 1.0:
            raise ConfigError(f"memory.m_g {text!r}: the share must be in (0, 1), e.g. share:0.4")
        return float(np.quantile(budgets, q))
    m = _SIZE.match(s)
    if not m:
        raise ConfigError(
            f"memory.m_g {text!r} not understood; give a size like 6GB / 5.5GiB / 800MB or "
            "share:P (the model does not fit on a share P of the fleet)"
        )
    return float(m.group(1)) * _UNIT[m.group(2)]


@dataclass
class Environment:
    config: FederatedConfig
    train: Dataset
    test: Dataset
    parts: list[np.ndarray]
    fleet: list[DeviceProfile]
    memory: MemoryModel
    m_g: float
    budgets: np.ndarray  # predicted budget per client (bytes)
    hard_limits: np.ndarray
    flops_per_sample: float
    model_bytes: float
    n_samples: np.ndarray = field(init=False)
    plan_service: Any = None  # the PlanService shared by every server on this environment
    # classes whose training samples only the phones below M_G's physical memory hold
    # (``partition.low_memory_classes``); () when the data is independent of memory
    low_memory_classes: tuple[int, ...] = ()
    # model.word_vectors: ppmi -- the initial word embedding table (vocab x dim), else None
    word_vectors: torch.Tensor | None = None

    def __post_init__(self) -> None:
        self.n_samples = np.array([len(p) for p in self.parts], dtype=np.int64)

    def build_model(self, **overrides) -> nn.Module:
        cfg = self.config.model
        opts = {**cfg.options, **overrides}
        model = models.build(cfg.name, seed=self.config.seed, **opts)
        table = word_table(model)
        vec = self.word_vectors
        # a HeteroFL submodel's narrower table is overwritten by its slice of the global state
        if vec is not None and table is not None and table.shape == vec.shape:
            with torch.no_grad():
                table.copy_(vec)
        return model

    def memory_class(self, cid: int) -> str:
        return f"{self.fleet[cid].memory_gb:g}GB"

    def local_work(self, cid: int) -> tuple[int, int, int]:
        """``(steps, batch, samples)`` of client ``cid``'s local training in one round.

        ``federated.local_epochs`` unset: ``local_steps`` steps of ``batch_size`` samples
        (``local_steps x batch_size`` samples charged, whatever the partition's size). Set
        to E: E epochs over the partition (FedHybrid §5.1) in batches of min(batch_size,
        n_k), so ``E x ceil(n_k / batch)`` steps and ``E x n_k`` samples.
        """
        f = self.config.federated
        if f.local_epochs is None:
            return f.local_steps, f.batch_size, f.local_steps * f.batch_size
        n = max(1, int(self.n_samples[cid]))
        b = min(f.batch_size, n)
        return f.local_epochs * math.ceil(n / b), b, f.local_epochs * n

    def step_time_s(self) -> np.ndarray:
        """Per-step operator time on each device (eq. 3's denominator) at ``batch_size``.

        A device property (FedHybrid §4.2: a lower CompStat means longer times "for
        executing the same NN operations"), so every client is rated at the same batch, also
        under ``local_epochs`` where a small partition trains smaller batches.
        """
        b = self.config.federated.batch_size
        flops = np.array([p.compute_flops for p in self.fleet])
        return b * self.flops_per_sample * TRAIN_FLOPS_PER_FORWARD / flops

    def est_duration_s(self) -> np.ndarray:
        """Round time from the profile alone (no memory effects): Oort's system view."""
        return np.array(
            [
                client_cost(
                    p,
                    samples=self.local_work(i)[2],
                    flops_per_sample=self.flops_per_sample,
                    model_bytes=self.model_bytes,
                ).total_s
                for i, p in enumerate(self.fleet)
            ]
        )


def build_environment(cfg: FederatedConfig) -> Environment:
    ds = data_mod.load(cfg.data.name, **cfg.data.options)
    if cfg.data.max_samples is not None and cfg.data.max_samples < len(ds):
        idx = np.random.default_rng(cfg.seed).permutation(len(ds))[: cfg.data.max_samples]
        ds = ds.subset(np.sort(idx))
    if cfg.data.reshape is not None:
        shape = tuple(cfg.data.reshape)
        if int(np.prod(shape)) != int(np.prod(ds.input_shape)):
            raise ConfigError(
                f"data.reshape {list(shape)} has {int(np.prod(shape))} values per sample; "
                f"{cfg.data.name} samples have shape {list(ds.input_shape)}"
            )
        from dataclasses import replace

        ds = replace(ds, x=ds.x.reshape(len(ds), *shape))
    train, test = ds.train_test_split(cfg.data.test_fraction, seed=cfg.seed)
    n = cfg.fleet.clients
    if n > len(train):
        raise ConfigError(f"fleet.clients={n} exceeds the {len(train)} training samples")
    y = train.y.numpy()
    mix = cfg.fleet.memory_mix or FEDHYBRID_MEMORY_MIX
    fleet = generate_fleet(n, cfg.seed, memory_mix=mix, compute_spread=cfg.fleet.compute_spread)
    mem = MemoryModel()
    budgets = np.array(
        [mem.user_budget(p, np.random.default_rng([cfg.seed, i, 11])) for i, p in enumerate(fleet)]
    )
    limits = np.array([mem.hard_limit(p) for p in fleet])
    m_g_text = cfg.memory.m_g or f"share:{DEFAULT_M_G_SHARE.get(cfg.model.name, 0.4)}"
    m_g = parse_m_g(m_g_text, budgets)
    held = held_classes(cfg, y)
    if held:
        if cfg.partition.scheme != "dirichlet":
            raise ConfigError(
                "partition.low_memory_classes splits the held classes by Dirichlet(alpha); "
                f"it needs partition.scheme: dirichlet, got {cfg.partition.scheme!r} (a large "
                "alpha, e.g. 100, is near IID)"
            )
        holders = np.flatnonzero(limits < m_g)
        if len(holders) == 0:
            raise ConfigError(
                f"partition.low_memory_classes {list(held)} needs phones whose physical memory "
                f"cannot hold M_G ({m_g / 2**30:.2f} GiB), and none of the {n} has less; raise "
                "memory.m_g (e.g. share:0.6) or set partition.low_memory_classes: 0"
            )
        try:
            parts = partition_dirichlet_held(
                y, n, cfg.partition.alpha, held, holders.tolist(), seed=cfg.seed, min_size=1
            )
        except DataError as e:
            raise ConfigError(f"partition.low_memory_classes: {e}") from None
    elif cfg.partition.scheme == "dirichlet":
        parts = partition_dirichlet(y, n, cfg.partition.alpha, seed=cfg.seed, min_size=1)
    else:
        parts = partition_iid(len(train), n, seed=cfg.seed)
    probe = models.build(cfg.model.name, seed=cfg.seed, **cfg.model.options)
    if tuple(probe.input_shape) != tuple(train.input_shape):
        raise ConfigError(
            f"model {cfg.model.name} expects samples of shape {list(probe.input_shape)}, data "
            f"{cfg.data.name} gives {list(train.input_shape)}; set model.options or data.reshape"
        )
    vectors = None
    if cfg.model.word_vectors == "ppmi":
        table = word_table(probe)
        if table is None:
            raise ConfigError(
                f"model.word_vectors: ppmi needs a text model with a word embedding table "
                f"(bert-small, albert-small); {cfg.model.name} has none; use random"
            )
        try:
            vectors = ppmi_word_vectors(train.x.numpy(), table.shape[0], table.shape[1])
        except DataError as e:
            raise ConfigError(f"model.word_vectors: ppmi: {e}") from None
        vectors = torch.from_numpy(vectors)
    flops = cfg.clock.flops_per_sample or float(models.flops_forward(probe))
    nbytes = cfg.clock.model_bytes or float(
        sum(t.numel() * t.element_size() for t in probe.state_dict().values())
    )
    return Environment(
        cfg, train, test, parts, fleet, mem, m_g, budgets, limits, flops, nbytes,
        low_memory_classes=held, word_vectors=vectors,
    )  # fmt: skip


def word_table(model: nn.Module) -> torch.Tensor | None:
    """A text model's word embedding weight (``embeddings.word``), None for other models."""
    emb = getattr(getattr(model, "embeddings", None), "word", None)
    return emb.weight if isinstance(emb, nn.Embedding) else None


def held_classes(cfg: FederatedConfig, y: np.ndarray) -> tuple[int, ...]:
    """The classes ``partition.low_memory_classes`` names: its list as given, or K classes
    drawn by the seed from those the training split holds (sorted); () when 0."""
    spec = cfg.partition.low_memory_classes
    present = np.unique(y)
    if isinstance(spec, int):
        if spec == 0:
            return ()
        if spec >= len(present):
            raise ConfigError(
                f"partition.low_memory_classes: {spec} classes leave none for the other "
                f"phones; the data has {len(present)} classes, so give at most {len(present) - 1}"
            )
        pick = np.random.default_rng([cfg.seed, 23]).choice(present, spec, replace=False)
        return tuple(sorted(int(c) for c in pick))
    unknown = sorted(set(spec) - set(present.tolist()))
    if unknown:
        raise ConfigError(
            f"partition.low_memory_classes: classes {unknown} are not in the data; it has "
            f"classes {present.tolist()}"
        )
    if len(spec) >= len(present):
        raise ConfigError(
            f"partition.low_memory_classes: {spec} names every class; give at most "
            f"{len(present) - 1}"
        )
    return tuple(spec)


def as_tensor_index(idx: np.ndarray) -> torch.Tensor:
    return torch.as_tensor(idx, dtype=torch.long)
