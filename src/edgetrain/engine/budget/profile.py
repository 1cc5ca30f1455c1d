"""Profile a model for budget planning: units, saved tensors, op times, codec costs.

A *unit* is an ``nn.Module`` whose forward the executor can wrap (keep / recompute
/ compress / swap).  Units form an antichain of the module tree, chosen by
splitting the module with the most saved bytes into its children until no unit
holds more than ``1 / max_units`` of the total (or it is a leaf).  Saved tensors
produced outside every unit (residual adds in a parent's forward, the loss) are
*glue*: always kept.

One forward pass under ``saved_tensors_hooks`` + module hooks records, for every
saved tensor, its storage (bytes), the module stack that produced it and its
position in forward order.  Per-unit forward time is the median of ``repeats``
re-runs on the captured inputs on this CPU (FedHybrid §4.4: op costs are times
collected on the device), in process CPU time so that other jobs sharing the CPU
do not distort the costs (run with one intra-op thread).  A ``TorchFunctionMode`` marks units whose forward
makes a layout *copy* (a layout function -- reshape/flatten/contiguous/... -- whose output
is new storage, not a view of its input), which sets psi = 2 in the recompute cost
(eq. 6, :meth:`UnitProfile.rc_eq6`).  Block recomputation is then re-costed in situ
(:func:`_in_situ_costs`): the measured step overheads of recomputing two groups of the
recomputable units (the costliest by eq. 6, and the rest) give every unit's recompute
cost as ``a * eq. 6 + b``, a factor and a cost per recomputation (and likewise for
regenerations).

Finer than units, *regen* candidates (:class:`RegenProfile`) are leaf modules
(GELU, LayerNorm, BatchNorm, ReLU6, ...) whose output is saved by a later
consumer while the leaf itself already saves its own input: the consumer's copy
can be dropped and regenerated from that input in backward at the price of one
cheap leaf forward, without holding anything extra (high MPS, eq. 5).  GEMM /
convolution outputs are never such candidates (their backward saves the input,
not the output they produce is regenerated cheaply), so they stay for keep /
compress.  A *chain* regen candidate (``chain = (head, tail)``, e.g. BatchNorm ->
ReLU6) regenerates the tail's output from the head's saved input through both
leaves, so the tail's own saved input is not needed either.

*Mask* candidates (:class:`MaskProfile`) are ReLU / ReLU6 / Hardtanh leaves whose
only saved tensor is their input (Hardtanh family) or output (ReLU) and is saved
by nobody else: their backward reads nothing but whether each element lies in
the linear range, so the tensor can be held as a 1-bit mask (exact, 32x smaller
for float32; Jain et al., "Gist", ISCA'18 §3.1 "binarize" encoding).

*Leaf recompute* candidates (:class:`LeafRecomputeProfile`) are parameter-free leaves
with several tensor inputs (attention's :class:`~edgetrain.models.attention.AttentionCore`):
recomputing one inside a kept unit holds its inputs (q, k, v) instead of what it saves
(per-head copies made by ``torch.matmul`` and the softmax output).

Mask, regen and leaf-recompute costs are the measured times of the executor's own code
for them (cached per process by signature, :mod:`.regen`), not proxies: the masked op's
forward + backward minus the op's own, the no-grad regeneration with buffer restore,
the grad-enabled re-run of the leaf.  Masks are then re-costed in situ
(:func:`_in_situ_costs`): the measured overhead of training steps with every mask
applied, split by bytes, because the isolated per-op figure under-predicted it 3-4x;
regenerations get an in-step factor the same way, one per kind (:func:`regen_kind`).

Codec size and speed are measured by
really encoding the unit's saved float tensors (a batch slice of at most
``codec_sample_bytes`` per tensor, scaled linearly).
"""

from __future__ import annotations

import functools
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from edgetrain.compress.base import Codec
from edgetrain.engine.budget.accountant import storage_key
from edgetrain.engine.budget.alloc import AllocTimeline, build_timeline
from edgetrain.engine.budget.regen import (
    affine_shape,
    cached_cost,
    cached_measure,
    inplace_regen,
    median_cpu_s,
    regen_cost_s,
    signature,
)
from edgetrain.errors import ConfigError

LAYOUT_FUNCS = frozenset(
    {
        "view", "reshape", "permute", "transpose", "flatten", "contiguous", "expand",
        "t", "squeeze", "unsqueeze", "movedim", "unflatten", "swapaxes", "view_as",
        "expand_as", "unfold", "narrow", "chunk", "split", "unbind", "as_strided",
    }
)  # fmt: skip
CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)
#: leaves never regenerated: random (dropout) or identity-like (output aliases the input)
_NO_REGEN = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.Identity)
#: compress / swap only tensors at least this large (smaller ones cost more than they save)
MIN_COMPRESS_NUMEL = 1024


@dataclass
class CodecCost:
    held_bytes: int  # bytes the unit holds when compressed (encoded + uncompressible raw)
    encode_s: float
    decode_s: float
    #: encoded bytes per float storage key (the tensors of that storage, as measured):
    #: what the unit still encodes when some of its float storages are regenerated or
    #: masked instead.  Activations do not compress alike (a ReLU6 output's zeros encode to
    #: far less than a convolution's output), so the remainder is not ``held_bytes``
    #: scaled by the bytes left.  Empty (a cost made by hand): the planner then scales
    #: (:func:`.planner.simulate`); saved profiles without it (version 1) are refused
    per_key: dict[int, int] = field(default_factory=dict)


@dataclass
class UnitProfile:
    index: int
    name: str
    step: int  # position in the forward item order
    calls: int
    fwd_s: float
    last_op_s: float
    has_layout: bool
    saved: dict[int, int]  # storage key -> bytes, saved inside the unit (params excluded)
    inputs: dict[int, int]  # storage key -> bytes of the unit's tensor inputs
    float_bytes: int  # bytes of compressible saved tensors (float, >= MIN_COMPRESS_NUMEL)
    float_keys: set[int]  # their storages
    leaf_max_bytes: int  # largest per-leaf saved bytes (decode transient in backward)
    codecs: dict[str, CodecCost] = field(default_factory=dict)
    #: storages of the batch statistics (mean, inverse std) its inner BatchNorms save:
    #: kept from forward to backward when the unit is recomputed, which then needs no
    #: second reduction over the batch (``PlanExecutor._wrap_batchnorm``)
    stats_keys: set[int] = field(default_factory=set)
    #: packed bits the executor holds beside the encoded bytes when the unit is compressed:
    #: it masks every ReLU-family leaf of a compressed unit (``PlanExecutor.__enter__``),
    #: also those whose saved tensor another op saves too (no mask candidate, so the
    #: tensor is still encoded for that op); the candidates' masks are in
    #: :func:`.planner.auto_masks`
    auto_mask_bytes: int = 0
    #: of those leaves' storages, the ones no other op of the unit saves: their mask
    #: replaces the unit's encoding of them (the op that saves them too is outside)
    auto_mask_keys: set[int] = field(default_factory=set)
    #: in-step recompute cost (:func:`_in_situ_costs`): ``rc_scale * eq. 6 + rc_fixed_s``,
    #: fitted to the measured step overheads of recomputing two groups of the model's
    #: recomputable units (the costliest ones by eq. 6 and the rest)
    rc_scale: float = 1.0
    rc_fixed_s: float = 0.0
    #: which call of the module this is (0-based): a module called ``calls`` times (shared
    #: weights: ALBERT's layer, a block applied twice) is one unit per call, all taking the
    #: module's one decision, each with its own step, inputs and saved tensors
    call: int = 0

    @property
    def saved_bytes(self) -> int:
        return sum(self.saved.values())

    @property
    def entry(self) -> str:
        """This call's key where per-call measurements are kept (the module's name for its
        first call, ``name#k`` for its k-th later one)."""
        return self.name if self.call == 0 else f"{self.name}#{self.call}"

    def rc_eq6(self) -> float:
        """FedHybrid eq. 6: OpTime(j) + psi * sum of the chain's other op times.

        psi = 2 when the unit's forward makes a layout *copy* (``has_layout``: a layout
        function whose output is new storage, :func:`layout_copies`), else 1.  The paper's
        psi is the price of re-running a layout conversion with the chain (MNN's NC4HW4
        <-> NCHW copies on a mobile GPU); a metadata-only view (``view``, ``transpose``,
        ``permute``, ``expand``, ...) converts nothing and costs nothing to redo, so a
        chain of views and compute ops is priced at psi = 1.
        """
        psi = 2.0 if self.has_layout else 1.0
        return self.last_op_s + psi * max(self.fwd_s - self.last_op_s, 0.0)

    def rc_compute(self) -> float:
        """Recompute cost the planner ranks by: eq. 6 times the in-step factor, plus the
        in-step cost per recomputation (:func:`fit_in_step`)."""
        return self.rc_scale * self.rc_eq6() + self.rc_fixed_s

    def recomputable(self) -> bool:
        """Recomputing it frees memory (it saves more than its inputs) and the executor
        can wrap it (not the whole model).  Each call of a shared module is recomputed
        from its own inputs (:class:`~.executor.PlanExecutor` keeps one state per call)."""
        return bool(self.name) and self.saved_bytes > sum(self.inputs.values())


@dataclass
class RegenProfile:
    """A leaf whose output consumers may drop and regenerate from the leaf's own saved input."""

    name: str
    step: int  # forward item the leaf runs in
    #: measured time of the executor's regeneration (:func:`.regen.regenerate`: the
    #: leaves' no-grad forwards + buffer restore), median process CPU time
    fwd_s: float
    out_key: int
    out_bytes: int
    in_key: int
    in_bytes: int
    saves: int  # save events of the output storage (each may regenerate once)
    calls: int = 1
    chain: tuple[str, ...] = ()  # (head, ..., tail=name) when regenerated through several leaves
    #: how the executor regenerates it (:func:`regen_kind`): ``"forward"`` (the leaves'
    #: forwards again), ``"elementwise"`` (a BatchNorm head from its batch statistics and
    #: clamp tails, or a clamp in place over the held input); each kind gets its own
    #: in-step factor (:func:`_in_situ_costs`)
    kind: str = "forward"
    #: which call of the leaf (a leaf of a shared module regenerates at every call: one
    #: profile per call, all taking the one decision of :attr:`state_key`)
    call: int = 0

    @functools.cached_property
    def state_key(self) -> str:
        return "regen:" + ">".join(self.chain) if self.chain else "regen:" + self.name

    @property
    def entry(self) -> str:
        """This call's key for per-call measurements (``state_key``, ``#k`` after it)."""
        return self.state_key if self.call == 0 else f"{self.state_key}#{self.call}"

    #: in-step factor (:func:`_in_situ_costs`): measured step overhead of regenerating /
    #: the isolated price, shared by the model's regenerations of the same :attr:`kind`
    scale: float = 1.0

    def regen_cost(self) -> float:
        return self.scale * self.fwd_s * max(self.saves, 1)


#: leaves whose backward only needs a range mask of one saved tensor:
#: type -> (which tensor the backward saves, open interval the gradient passes through)
MASKABLE: dict[type, str] = {nn.ReLU6: "input", nn.Hardtanh: "input", nn.ReLU: "output"}


def mask_range(mod: nn.Module) -> tuple[float, float] | None:
    """Open interval where the leaf's gradient is 1 (None: not a maskable leaf)."""
    if type(mod) not in MASKABLE or getattr(mod, "inplace", False):
        return None
    if isinstance(mod, nn.Hardtanh):  # ReLU6 is a Hardtanh(0, 6)
        return float(mod.min_val), float(mod.max_val)
    return 0.0, math.inf


@dataclass
class MaskProfile:
    """A ReLU-family leaf whose one saved tensor can be held as a 1-bit range mask (exact)."""

    name: str
    step: int  # forward item the leaf runs in
    fwd_s: float  # leaf forward time (FLT term of eq. 5)
    key: int  # storage of the saved tensor
    nbytes: int
    mask_bytes: int  # ceil(numel / 8)
    #: measured added time of the executor's masked op: (masked forward + backward) minus
    #: (the op's own forward + backward), >= 0 (eq. 5 denominator)
    cost_s: float
    #: runs as one autograd function (no float stand-in in backward); False: hook
    #: fallback that expands the mask to a full tensor while the op's backward runs
    fast: bool = True
    call: int = 0  # which call of the leaf (as :attr:`RegenProfile.call`)

    @functools.cached_property
    def state_key(self) -> str:
        return "mask:" + self.name

    @property
    def entry(self) -> str:
        return self.state_key if self.call == 0 else f"{self.state_key}#{self.call}"


@dataclass
class AliasProfile(MaskProfile):
    """A Hardtanh-family leaf (ReLU6, Hardtanh) that can save its *output* for backward
    instead of its input, where another op saves that output anyway (the next
    convolution): ``lo < y < hi`` holds exactly where ``lo < x < hi`` does for ``y =
    clamp(x, lo, hi)``, so ``hardtanh_backward(g, y)`` is bit-identical to
    ``hardtanh_backward(g, x)`` (:func:`.mask.alias_call`), and the input's storage is
    freed after the forward at no cost.  PyTorch's in-place ReLU6 gets the same saving
    by saving its result; a model written with ``inplace=False`` (the zoo's MobileNetV2,
    torchvision's ``ReLU6(inplace=False)`` users) holds input and output both.

    A subclass of :class:`MaskProfile` (one leaf's saved tensor replaced by something
    smaller: here nothing new), with ``mask_bytes = 0``.  Its own decision (state key
    ``alias:<leaf>``), exclusive with the leaf's mask (:func:`.planner._clash`: both
    drop ``key``) and with any regeneration that drops ``alias_key`` (the alias holds it
    whole).  Only where the leaf's unit is kept: inside a compressed or swapped unit
    the executor holds the 1-bit mask instead, and a recomputed unit holds nothing of
    the leaf."""

    #: storage of the leaf's output, which another op saves as well
    alias_key: int = 0
    alias_bytes: int = 0
    #: the 1-bit mask's bytes, held instead inside a compressed or swapped unit
    bits_bytes: int = 0

    @functools.cached_property
    def state_key(self) -> str:
        return "alias:" + self.name


@dataclass
class LeafRecomputeProfile:
    """A parameter-free leaf with several tensor inputs whose saved tensors can be
    dropped and recomputed from those inputs in backward (selective checkpointing of
    one leaf inside a kept unit, e.g. attention's :class:`AttentionCore`: it holds
    q/k/v instead of the per-head copies and the softmax output that matmul saves)."""

    name: str
    step: int  # forward item of the unit the leaf runs in
    fwd_s: float  # measured time of the executor's recomputation (grad-enabled forward)
    saved: dict[int, int]  # storage -> bytes the leaf saves (not its inputs)
    inputs: dict[int, int]  # storage -> bytes of its tensor inputs (held when recomputed)
    unit: str = ""  # the unit it runs in (recomputing that unit voids this choice)

    @functools.cached_property
    def state_key(self) -> str:
        return "leafrc:" + self.name

    @property
    def saved_bytes(self) -> int:
        return sum(self.saved.values())

    @property
    def input_bytes(self) -> int:
        return sum(self.inputs.values())


@dataclass
class ModelProfile:
    units: list[UnitProfile]
    glue: list[tuple[int, dict[int, int]]]  # (step, storage key -> bytes)
    n_steps: int
    item_s: list[float]  # forward time per item (glue items: 0, not separately timed)
    total_saved_bytes: int
    regens: list[RegenProfile] = field(default_factory=list)
    masks: list[MaskProfile] = field(default_factory=list)
    leaf_recomputes: list[LeafRecomputeProfile] = field(default_factory=list)
    #: Hardtanh-family leaves that may save their output instead of their input
    aliases: list[AliasProfile] = field(default_factory=list)
    #: every allocation of the step besides saved tensors (``scope="all"``), measured by
    #: ``profile_model(..., alloc_timeline=True)``; None: saved-tensor planning only
    alloc: AllocTimeline | None = None
    #: storages of the step's own inputs (the batch): the caller holds them for the whole
    #: step, so encoding or swapping their saves frees no allocation (``scope="all"``)
    input_keys: set[int] = field(default_factory=set)

    @property
    def leaf_masks(self) -> list[MaskProfile]:
        """The masks and the aliases (an :class:`AliasProfile` is a mask that holds
        nothing): every leaf whose one saved tensor a fine decision replaces."""
        return [*self.masks, *self.aliases]

    def unit(self, name: str) -> UnitProfile:
        for u in self.units:
            if u.name == name:
                return u
        raise KeyError(name)


@dataclass
class _Rec:
    order: int
    key: int
    nbytes: int
    stack: tuple[str, ...]
    tensor: torch.Tensor
    tid: int
    call: int = 0  # which call of the innermost module on the stack saved it


def _storage_ptrs(x: Any) -> set[int]:
    """Data pointers of the storages behind a tensor or a tuple/list of tensors."""
    if isinstance(x, torch.Tensor):
        return {x.untyped_storage().data_ptr()}
    if isinstance(x, (tuple, list)):
        return {p for t in x if isinstance(t, torch.Tensor) for p in _storage_ptrs(t)}
    return set()


def layout_copies(func: Any, args: tuple, out: Any) -> bool:
    """Whether a call of ``func`` was a *layout copy*: a layout function
    (:data:`LAYOUT_FUNCS`) whose output lives in new storage.

    Eq. 6's psi = 2 prices the layout conversions of the paper's mobile runtime (MNN's
    NC4HW4 <-> NCHW copies), which re-run with the recomputed chain.  On a strided CPU
    tensor most layout functions (view, transpose, permute, expand, squeeze, ...) are
    metadata-only views that share the input's storage and cost nothing to redo; only
    those that really move the data -- ``contiguous`` / ``reshape`` / ``flatten`` of a
    non-contiguous tensor -- allocate new storage.  Storage identity of the first tensor
    argument and the output tells the two apart, on the real tensors of the traced call.
    """
    if getattr(func, "__name__", "") not in LAYOUT_FUNCS:
        return False
    src = next((a for a in args if isinstance(a, torch.Tensor)), None)
    if src is None:
        return False
    dst = _storage_ptrs(out)
    return bool(dst) and not dst <= _storage_ptrs(src)


class _LayoutMode(TorchFunctionMode):
    """Marks every module on the call stack whose forward makes a layout copy."""

    def __init__(self, stack: list[str], hits: set[str]) -> None:
        super().__init__()
        self.stack, self.hits = stack, hits

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.stack and layout_copies(func, args, out):
            self.hits.update(self.stack)
        return out


def _record_forward(
    model: nn.Module,
    inputs: Sequence[Any],
    loss_fn: Callable[[Any], torch.Tensor],
) -> tuple[
    list[tuple[str, Any]],
    dict[str, tuple[tuple, dict]],
    dict[str, int],
    set[str],
    dict[str, list[tuple[tuple, dict]]],
]:
    """One forward + loss; events in order, captured module inputs (first call), call
    counts, layout modules, and every call's inputs (a module called several times, such
    as ALBERT's shared layer, is one unit per call)."""
    names = {id(m): n for n, m in model.named_modules()}
    leaves = {
        n
        for n, m in model.named_modules()
        if n and not list(m.children()) and not isinstance(m, _NO_REGEN)
    }
    params = {storage_key(p)[0] for p in model.parameters()}
    params |= {storage_key(b)[0] for b in model.buffers()}
    stack: list[str] = []
    events: list[tuple[str, Any]] = []
    captured: dict[str, tuple[tuple, dict]] = {}
    every_call: dict[str, list[tuple[tuple, dict]]] = {}
    calls: dict[str, int] = {}
    layout: set[str] = set()
    order = [0]

    def pre(mod, args, kwargs):
        n = names[id(mod)]
        stack.append(n)
        calls[n] = calls.get(n, 0) + 1
        if n not in captured:
            captured[n] = (args, kwargs)
        every_call.setdefault(n, []).append((args, kwargs))
        events.append(("call", n))

    def post(mod, args, kwargs, out):
        n = stack.pop()
        if (
            n in leaves
            and len(args) == 1
            and not kwargs
            and isinstance(args[0], torch.Tensor)
            and isinstance(out, torch.Tensor)
            and out.is_floating_point()
        ):
            # the tensor rides along so its storage cannot be reused while recording
            events.append(("out", (n, storage_key(out), storage_key(args[0]), out, calls[n] - 1)))

    def pack(t: torch.Tensor):
        ptr, nbytes = storage_key(t)
        if ptr not in params and nbytes > 0:
            call = calls[stack[-1]] - 1 if stack else 0
            sink[0].append(("save", _Rec(order[0], ptr, nbytes, tuple(stack), t, id(t), call)))
            order[0] += 1
        # a detached alias, not ``t`` itself: a node that saves its own output (ReLU,
        # ...) would hold ``t`` -> ``t.grad_fn`` -> that node
        return t.detach()

    # The recorded graph is never run backward, so nothing frees its saved tensors but
    # refcounts, and Python's gc cannot follow a reference held by the C++ graph: if
    # the graph holds the pack hook (it can) and the hook's closure holds the recorded
    # tensors, whose ``grad_fn`` is the graph, or a node holds its own output, the
    # whole graph is never freed (+592 MiB per profile on MobileNetV2 b32).  The hook
    # reaches ``events`` only through ``sink``, emptied after the forward, and packs a
    # detached alias.
    sink = [events]
    handles = []
    for m in model.modules():
        handles.append(m.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(m.register_forward_hook(post, with_kwargs=True))
    try:
        with (
            torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t),
            _LayoutMode(stack, layout),
        ):
            out = model(*inputs)
            loss = loss_fn(out)
        del out, loss
    finally:
        sink.clear()
        for h in handles:
            h.remove()
    return events, captured, calls, layout, every_call


def select_units(model: nn.Module, saved_by_module: dict[str, int], max_units: int) -> list[str]:
    """Antichain of modules ("blocks") that the executor wraps.

    Start from the model and split a unit into its children when it has a
    non-leaf child and it is the model itself, a pure container
    (Sequential/ModuleList/ModuleDict) or holds more than ``1/max_units`` of all
    saved bytes.  A module whose children are all leaves (conv-bn-act, an MLP) is
    never split: recomputing a single leaf saves nothing (its input stays held),
    so blocks are the useful granularity for recompute.
    """
    total = max(saved_by_module.get("", 0), 1)
    mods = dict(model.named_modules())
    children = {n: [f"{n}.{c}" if n else c for c, _ in m.named_children()] for n, m in mods.items()}

    def splittable(u: str) -> bool:
        if not any(children[c] for c in children[u]):
            return u == "" and bool(children[u])
        return (
            u == ""
            or isinstance(mods[u], CONTAINERS)
            or saved_by_module.get(u, 0) > total / max_units
        )

    units = [""]
    while True:
        cands = [u for u in units if splittable(u)]
        if not cands:
            break
        u = max(cands, key=lambda n: saved_by_module.get(n, 0))
        i = units.index(u)
        units[i : i + 1] = [c for c in children[u] if saved_by_module.get(c, 0) > 0]
    return units


def _median_time(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return statistics.median(times)


def _time_unit(
    model: nn.Module, name: str, args: tuple, kwargs: dict, repeats: int
) -> tuple[float, float]:
    """Median forward time of a unit and of its last-called leaf (grad enabled, buffers restored)."""
    mod = model.get_submodule(name)
    snap = {n: b.detach().clone() for n, b in mod.named_buffers()}
    leaf_times: list[tuple[str, float]] = []
    t_start: dict[int, float] = {}

    def pre(m, a):
        t_start[id(m)] = time.process_time()

    def post(m, a, o):
        leaf_times.append((id(m), time.process_time() - t_start.pop(id(m), time.process_time())))

    leaves = [m for m in mod.modules() if not list(m.children()) and m is not mod]
    hs = [
        h for m in leaves for h in (m.register_forward_pre_hook(pre), m.register_forward_hook(post))
    ]
    rng = torch.get_rng_state()
    try:
        with torch.enable_grad():
            mod(*args, **kwargs)  # warm-up
            leaf_times.clear()
            fwd = _median_time(lambda: mod(*args, **kwargs), repeats)
    finally:
        for h in hs:
            h.remove()
        torch.set_rng_state(rng)
        for n, b in mod.named_buffers():
            b.data.copy_(snap[n])
    if leaf_times:
        last_id = leaf_times[-1][0]
        last = statistics.median([t for i, t in leaf_times if i == last_id])
    else:
        last = fwd
    return fwd, min(last, fwd)


def _codec_cost(codec: Codec, tensors: list[torch.Tensor], sample_bytes: int) -> CodecCost:
    """Encoded bytes and encode / decode process seconds of ``tensors`` (each tensor
    larger than ``sample_bytes`` measured on a slice of its first dimension and scaled),
    in all and per storage."""
    held = 0
    enc = dec = 0.0
    per_key: dict[int, int] = {}
    for t in tensors:
        key = storage_key(t)[0]
        x = t.detach()
        scale = 1.0
        nbytes = x.numel() * x.element_size()
        if nbytes > sample_bytes and x.dim() > 0 and x.shape[0] > 1:
            k = max(1, math.ceil(x.shape[0] * sample_bytes / nbytes))
            scale = x.shape[0] / k
            x = x[:k]
        t0 = time.process_time()
        data = codec.encode(x)
        t1 = time.process_time()
        codec.decode(data)
        t2 = time.process_time()
        nb = math.ceil(len(data) * scale)
        held += nb
        per_key[key] = per_key.get(key, 0) + nb
        enc += (t1 - t0) * scale
        dec += (t2 - t1) * scale
    return CodecCost(held, enc, dec, per_key)


def profile_model(
    model: nn.Module,
    inputs: Sequence[Any],
    loss_fn: Callable[[Any], torch.Tensor],
    *,
    codecs: dict[str, Codec] | None = None,
    max_units: int = 16,
    repeats: int = 3,
    codec_sample_bytes: int = 2 << 20,
    in_situ_steps: int = 10,
    alloc_timeline: bool = False,
) -> ModelProfile:
    """Measure everything the planner needs (see the module docstring).

    ``alloc_timeline``: also measure what the step allocates besides saved tensors
    (:class:`~edgetrain.engine.budget.alloc.AllocTimeline`: parameter gradients, the
    measured rest and the bytes each backward step had released before its peak, from
    one warm-up and one profiled unplanned step; the decisions' transients from one
    step with every recomputable unit recomputed and one with every unit compressed),
    which planning with ``scope="all"`` needs.

    ``in_situ_steps``: about this many timed training steps per configuration (the
    unplanned model, every mask applied, two groups of the recomputable units recomputed,
    a set of regenerations; in all, pairs per plan = ``(in_situ_steps *
    configurations - 1) / (2 * (configurations - 1))``, rounded: 6 on MobileNetV2 at the
    default), run paired (:func:`paired_schedule`), behind the masks' in-step cost and
    the recompute / regen fits (:func:`_in_situ_costs`); 0 keeps the isolated per-op
    measurements.  Two recompute groups instead of one (round 13) take 49 timed steps
    instead of 37 on MobileNetV2 b32 (about +9 s of process CPU).  The steps
    leave the weights, buffers and RNG state as they were; ``.grad`` is cleared.

    The default is 10 (7 pairs per kind on BERT-small, 6 on MobileNetV2), not 5 (4 / 3
    pairs): the factor is a median of paired differences, and with 4 pairs one
    outlying step moves it.  Cost, one fresh process each, process CPU: BERT-small b8
    29.7 -> 47.2 s, MobileNetV2 b32 34.0 -> 54.1 s (1.59x); the budget and federated
    tests measured no slower.  It does not settle the factor on a loaded machine: over
    fresh profiles at 10 the BERT-small recompute factor still ranged 0.25-0.84 and
    MobileNetV2's 0.47-0.84 (at 5: BERT-small 0.27-0.78 over 11 profiles), because the
    in-step overhead itself varies between steps (one profile's 7 differences were
    bimodal: 9-74 ms and 171-250 ms).
    """
    events, captured, calls, layout, every_call = _record_forward(model, inputs, loss_fn)
    recs = [e[1] for e in events if e[0] == "save"]
    saved_by_module: dict[str, int] = {}
    for r in recs:
        owners = {""}
        for n in r.stack:  # every called module and its (possibly never called) ancestors
            parts = n.split(".")
            owners.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
        for n in owners:
            saved_by_module[n] = saved_by_module.get(n, 0) + r.nbytes
    units = select_units(model, saved_by_module, max_units)
    unit_set = set(units)

    # forward items: unit calls and glue runs, in order; a unit called several times
    # (shared weights) is one item per call, each with the tensors that call saves
    items: list[tuple[str, Any]] = []  # ("unit", (name, call)) | ("glue", dict)
    unit_step: dict[str, int] = {}  # the first call's item
    call_step: dict[tuple[str, int], int] = {}
    current: dict[str, int] = {}  # the call of each unit running now
    unit_recs: dict[tuple[str, int], list[_Rec]] = {}
    glue: list[tuple[int, dict[int, int]]] = []
    # a leaf's output at every call: (leaf, item, output storage, input storage, call)
    leaf_out: list[tuple[str, int, tuple[int, int], tuple[int, int], int]] = []
    for kind, payload in events:
        if kind == "out":
            leaf_out.append((payload[0], max(len(items) - 1, 0), *payload[1:3], payload[4]))
            continue
        if kind == "call":
            if payload in unit_set:
                c = current[payload] = current.get(payload, -1) + 1
                unit_step.setdefault(payload, len(items))
                call_step[(payload, c)] = len(items)
                unit_recs[(payload, c)] = []
                items.append(("unit", (payload, c)))
            continue
        owner = next((n for n in payload.stack if n in unit_set), None)
        if owner is not None:
            unit_recs[(owner, current[owner])].append(payload)
        else:
            if not items or items[-1][0] != "glue":
                items.append(("glue", {}))
                glue.append((len(items) - 1, items[-1][1]))
            items[-1][1][payload.key] = payload.nbytes

    profiles: list[UnitProfile] = []
    item_s = [0.0] * len(items)
    times: dict[str, tuple[float, float]] = {}
    for name, call in sorted(call_step, key=call_step.get):
        rs = unit_recs[(name, call)]
        saved = {r.key: r.nbytes for r in rs}
        args, kwargs = every_call[name][call]
        inputs_b: dict[int, int] = {}
        for a in list(args) + list(kwargs.values()):
            if isinstance(a, torch.Tensor):
                k, nb = storage_key(a)
                inputs_b[k] = nb
        if name not in times:  # every call of a shared unit is priced as its first one
            times[name] = _time_unit(model, name, *captured[name], repeats)
        fwd, last = times[name]
        item_s[call_step[(name, call)]] = fwd
        uniq: dict[int, torch.Tensor] = {}
        leaf_bytes: dict[str, int] = {}
        for r in rs:
            t = r.tensor
            if t.is_floating_point() and t.numel() >= MIN_COMPRESS_NUMEL:
                uniq.setdefault(r.tid, t)
                leaf_bytes[r.stack[-1] if r.stack else ""] = (
                    leaf_bytes.get(r.stack[-1] if r.stack else "", 0) + r.nbytes
                )
        float_keys = {storage_key(t)[0] for t in uniq.values()}
        raw_rest = sum(b for k, b in saved.items() if k not in float_keys)
        stats_keys = set()
        for r in rs:
            leaf = r.stack[-1] if r.stack else name
            if leaf == name:
                continue
            mod = model.get_submodule(leaf)
            if (
                isinstance(mod, nn.modules.batchnorm._BatchNorm)
                and r.tensor.dim() == 1
                and r.tensor.numel() == mod.num_features
            ):
                stats_keys.add(r.key)
        up = UnitProfile(
            index=len(profiles),
            name=name,
            step=call_step[(name, call)],
            calls=calls.get(name, 1),
            call=call,
            fwd_s=fwd,
            last_op_s=last,
            has_layout=name in layout,
            saved=saved,
            inputs=inputs_b,
            float_bytes=sum(saved[k] for k in float_keys),
            float_keys=float_keys,
            leaf_max_bytes=max(leaf_bytes.values(), default=0),
            stats_keys=stats_keys,
        )
        for cname, codec in (codecs or {}).items():
            cost = _codec_cost(codec, list(uniq.values()), codec_sample_bytes)
            cost.held_bytes += raw_rest
            up.codecs[cname] = cost
        profiles.append(up)
    total = sum({r.key: r.nbytes for r in recs}.values())
    regens = _regen_candidates(model, recs, leaf_out, captured, repeats)
    masks = _mask_candidates(model, recs, leaf_out, repeats)
    aliases = _alias_candidates(model, recs, leaf_out, masks, repeats)
    _auto_mask_bytes(model, recs, leaf_out, profiles, masks)
    _in_situ_costs(model, inputs, loss_fn, profiles, regens, masks, in_situ_steps)
    lrs = _leaf_recompute_candidates(model, recs, captured, calls, unit_step, repeats)
    prof = ModelProfile(profiles, glue, len(items), item_s, total, regens, masks, lrs, aliases)
    prof.input_keys = {storage_key(x)[0] for x in inputs if isinstance(x, torch.Tensor)}
    if alloc_timeline:
        prof.alloc = build_timeline(model, prof, inputs, loss_fn)
    return prof


def _leaf_recompute_candidates(
    model: nn.Module,
    recs: list[_Rec],
    captured: dict[str, tuple[tuple, dict]],
    calls: dict[str, int],
    unit_step: dict[str, int],
    repeats: int,
) -> list[LeafRecomputeProfile]:
    """Parameter-free leaves with >= 2 tensor inputs, called once, inside a unit, that
    save tensors of their own (see :class:`LeafRecomputeProfile`)."""
    out: list[LeafRecomputeProfile] = []
    for name, mod in model.named_modules():
        if (
            not name
            or name in unit_step
            or list(mod.children())
            or isinstance(mod, _NO_REGEN)
            or any(True for _ in mod.parameters(recurse=False))
            or any(True for _ in mod.buffers(recurse=False))
            or calls.get(name, 0) != 1
            or name not in captured
        ):
            continue
        args, kwargs = captured[name]
        tensors = [a for a in [*args, *kwargs.values()] if isinstance(a, torch.Tensor)]
        if len(tensors) < 2:
            continue
        owner = [u for u in unit_step if u == "" or name.startswith(u + ".")]
        if not owner:
            continue
        inputs = dict(storage_key(t) for t in tensors)
        saved = {
            r.key: r.nbytes for r in recs if r.stack and r.stack[-1] == name and r.key not in inputs
        }
        if not saved:
            continue
        unit = max(owner, key=len)
        cost = _leaf_recompute_cost(mod, args, kwargs, repeats)
        out.append(LeafRecomputeProfile(name, unit_step[unit], cost, saved, inputs, unit))
    return out


def _leaf_recompute_cost(mod: nn.Module, args: tuple, kwargs: dict, repeats: int) -> float:
    """Measured (cached) time of what the executor's recompute runs in backward: the
    forward with grad enabled on detached inputs, its saved tensors collected."""

    def detach(a: Any) -> Any:
        return a.detach().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a

    dargs = tuple(detach(a) for a in args)
    dkw = {k: detach(v) for k, v in kwargs.items()}
    fn = type(mod).forward.__get__(mod)

    def run() -> None:
        saved: list[torch.Tensor] = []
        with (
            torch.random.fork_rng(devices=[]),
            torch.enable_grad(),
            torch.autograd.graph.saved_tensors_hooks(
                lambda t: saved.append(t) or len(saved) - 1, lambda i: saved[i]
            ),
        ):
            fn(*dargs, **dkw)
        # the graph's unpack hook holds ``saved``, whose tensors hold the graph: a cycle
        # through the C++ graph gc cannot collect (see :func:`_record_forward`)
        saved.clear()

    shapes = tuple(
        (tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else repr(a)
        for a in [*args, *kwargs.values()]
    )
    return cached_cost(("leafrc", repr(mod), shapes), lambda: median_cpu_s(run, repeats))


def _mask_candidates(
    model: nn.Module,
    recs: list[_Rec],
    leaf_out: list[tuple[str, int, tuple[int, int], tuple[int, int], int]],
    repeats: int,
) -> list[MaskProfile]:
    """ReLU-family leaves whose single saved tensor nobody else saves (see module doc)."""
    from edgetrain.engine.budget.mask import decode_mask, encode_mask, fast_maskable, mask_bytes

    by_key: dict[int, list[_Rec]] = {}
    for r in recs:
        by_key.setdefault(r.key, []).append(r)
    out: list[MaskProfile] = []
    for name, step, (okey, _), (ikey, _), call in leaf_out:
        mod = model.get_submodule(name)
        rng = mask_range(mod)
        if rng is None:
            continue
        own = [r for r in recs if r.stack and r.stack[-1] == name and r.call == call]
        target = ikey if MASKABLE[type(mod)] == "input" else okey
        if len(own) != 1 or own[0].key != target:
            continue
        t = own[0].tensor
        if not t.is_floating_point() or t.numel() < MIN_COMPRESS_NUMEL:
            continue
        if any(not r.stack or r.stack[-1] != name for r in by_key[target]):
            continue  # someone else keeps the full tensor: a mask frees nothing
        fast = fast_maskable(t)
        if fast:
            cost = _mask_exec_cost(mod, t, rng, MASKABLE[type(mod)] == "output", repeats)
        else:
            cost = _median_time(lambda t=t, rng=rng: decode_mask(encode_mask(t, *rng)), repeats)
        fwd = _median_time(lambda t=t, mod=mod: mod(t), repeats)
        out.append(
            MaskProfile(
                name, step, fwd, target, own[0].nbytes, mask_bytes(t.numel()), cost, fast, call
            )
        )
    return out


def _alias_candidates(
    model: nn.Module,
    recs: list[_Rec],
    leaf_out: list[tuple[str, int, tuple[int, int], tuple[int, int], int]],
    masks: list[MaskProfile],
    repeats: int,
) -> list[AliasProfile]:
    """The mask candidates of the Hardtanh family (they save their input) whose output
    storage another op saves too, as :class:`AliasProfile` (cost: the aliased op's
    per-call cost, :func:`_alias_exec_cost`)."""
    outs = {(name, call): out for name, _, out, _, call in leaf_out}
    found: list[AliasProfile] = []
    for m in masks:
        mod = model.get_submodule(m.name)
        if MASKABLE[type(mod)] != "input" or (m.name, m.call) not in outs:
            continue
        okey, obytes = outs[(m.name, m.call)]
        if okey == m.key or obytes != m.nbytes:
            continue
        if not any(r.key == okey and (not r.stack or r.stack[-1] != m.name) for r in recs):
            continue  # nobody else saves the output: holding it instead frees nothing
        # a mask candidate's one saved tensor is its input (_mask_candidates)
        dtype = next(r.tensor.dtype for r in recs if r.key == m.key)
        cost = _alias_exec_cost(mod, dtype, mask_range(mod), repeats)
        found.append(
            AliasProfile(
                m.name, m.step, m.fwd_s, m.key, m.nbytes, 0, cost, True, m.call,
                alias_key=okey, alias_bytes=obytes, bits_bytes=m.mask_bytes,
            )
        )  # fmt: skip
    return found


def _auto_mask_bytes(
    model: nn.Module,
    recs: list[_Rec],
    leaf_out: list[tuple[str, int, tuple[int, int], tuple[int, int], int]],
    units: list[UnitProfile],
    masks: list[MaskProfile],
) -> None:
    """Set each unit's :attr:`UnitProfile.auto_mask_bytes` and ``auto_mask_keys``: the
    packed bits of its ReLU-family leaves that are not mask candidates but saved one
    float tensor (the executor masks them when the unit is compressed), and those of
    their storages that no other op of the unit saves (the unit then encodes them no
    more; another op saving one inside the unit still has it encoded)."""
    from edgetrain.engine.budget.mask import mask_bytes

    candidates = {(m.name, m.call) for m in masks}
    for name, _, _, _, call in leaf_out:
        mod = model.get_submodule(name)
        if mask_range(mod) is None or (name, call) in candidates:
            continue
        own = [r for r in recs if r.stack and r.stack[-1] == name and r.call == call]
        if len(own) != 1 or not own[0].tensor.is_floating_point():
            continue
        key = own[0].key
        for u in units:
            if key in u.saved and (u.name == "" or name.startswith(u.name + ".")):
                u.auto_mask_bytes += mask_bytes(own[0].tensor.numel())
                if not any(r.key == key and r is not own[0] and u.name in r.stack for r in recs):
                    u.auto_mask_keys.add(key)
                break


#: bounds of the in-step recompute / regen factors.  The measured difference of two step
#: medians carries the step's noise (A/A pairs differ by up to ~5 % of a step on this
#: shared CPU, docs/results/budget.md round 6), so a factor is kept within 4x either way
#: of the isolated price -- the largest mis-prediction measured before in-step costing
#: (block recomputation on BERT-small b8, 3.9x over, round 6; masks 3-4x under, round 5).
RC_SCALE_BOUNDS = (0.25, 4.0)


def regen_kind(mods: Sequence[nn.Module], inplace: bool = False) -> str:
    """The in-step cost class of a regeneration through ``mods`` (head first).

    ``"elementwise"``: a clamp in place over the leaf's held input
    (:func:`.regen.inplace_regen`), or a training-mode BatchNorm head with only clamp
    tails (:func:`.regen.affine_shape`: one fused multiply-add from the batch
    statistics, when the build's kernel matches it).  ``"forward"``: anything else --
    the leaves' forwards run again (a convolution, GELU, LayerNorm).  Their isolated
    prices err by kind, not alike: over two MobileNetV2 b32 processes
    (docs/results/budget.md, round 18; ``benchmarks/regen_kinds.py``) the isolated
    price of the BatchNorm regenerations moved 67.5 -> 41.3 ms and the convolutions'
    74.8 -> 88.5 ms while their in-step costs moved 50 -> 43 and 72 -> 61 ms, so
    measured / isolated was 0.74 / 1.04 for BatchNorm outputs and 0.96 / 0.69 for
    convolution outputs (three paired repeats within a process agree to +-0.05), and
    about 0 to 0.2 for clamps in place.  One factor shared by every regeneration
    cannot correct a kind-specific error; one per kind does.
    """
    return "elementwise" if inplace or affine_shape(mods) else "forward"


def _regen_set(regens: list[RegenProfile]) -> list[RegenProfile]:
    """A largest-first set of regenerations that can all be applied at once (none drops
    a storage another one drops or regenerates from).  A decision applies to every call
    of its leaf, so its calls' profiles are taken or left together."""
    groups: dict[str, list[RegenProfile]] = {}
    for r in regens:
        groups.setdefault(r.state_key, []).append(r)
    chosen: list[RegenProfile] = []
    used: set[int] = set()
    for rs in sorted(groups.values(), key=lambda rs: -sum(r.out_bytes for r in rs)):
        keys = {k for r in rs for k in (r.out_key, r.in_key)}
        if keys & used:
            continue
        chosen += rs
        used |= keys
    return chosen


def split_by_price(prices: Sequence[float]) -> tuple[list[int], list[int]]:
    """Indices of the costliest decisions that together hold at least half of the summed
    isolated price (``hi``, costliest first), and of the others (``lo``).

    The two groups of :func:`_in_situ_costs`: each carries about half of the kind's
    isolated price, so each one's step overhead is measured with about the same absolute
    noise, while their prices per decision differ as much as the model allows -- which
    is what separates a cost per decision from a cost proportional to the isolated
    price (:func:`fit_in_step`).  ``lo`` is empty only for fewer than two decisions.
    """
    order = sorted(range(len(prices)), key=lambda i: (-prices[i], i))
    total = sum(prices)
    hi: list[int] = []
    acc = 0.0
    for i in order:
        if hi and acc >= total / 2:
            break
        hi.append(i)
        acc += prices[i]
    if len(hi) == len(order) and len(hi) > 1:
        hi.pop()
    taken = set(hi)
    return hi, [i for i in order if i not in taken]


def fit_in_step(
    groups: Sequence[tuple[float, int, float]],
    bounds: tuple[float, float] = RC_SCALE_BOUNDS,
) -> tuple[float, float]:
    """``(a, b)`` such that a decision's in-step cost is ``a * isolated price + b``, from
    the measured step overheads of one or two groups of decisions, each given as
    ``(summed isolated price, number of decisions, measured overhead)``.

    One group (or two whose prices per decision are equal): ``b = 0``, ``a`` = overhead /
    price (the single factor used before).  Two groups: the exact solution of the two
    equations, with ``a, b >= 0`` (a negative one is set to 0 and the other fitted to the
    summed overhead).  Then the implied factor over both groups, ``(a P + b n) / P``, is
    kept within ``bounds`` (both scaled alike): the same bound the single factor had.

    Why two terms: on MobileNetV2 b32 the single recompute factor (0.58) over-priced the
    five costliest units (eq. 6 171 ms: 98 ms predicted, 64 ms measured in the step) and
    under-priced the other 24 (eq. 6 175 ms: 101 ms predicted, 128 ms measured).  Over
    ten fresh profiles the two groups fit 3.1-4.7 ms per recomputation plus 0.22-0.38
    of eq. 6 (what the per-recomputation part is, was not isolated), so many cheap
    recomputations cost more, and a few costly ones less, than one factor says.  With
    one factor, the plan recomputing two of the big units (recompute 4, regen 48) was
    predicted 40-50 ms over the chosen one (recompute 5, regen 41, mask 3) and ran 8-40
    ms under it, paired, in five of five profiles (docs/results/budget.md, round 13).
    """
    lo, hi = bounds
    groups = [g for g in groups if g[1] > 0 and g[0] > 0]
    if not groups:
        return 1.0, 0.0
    price = sum(g[0] for g in groups)
    count = sum(g[1] for g in groups)
    total = sum(g[2] for g in groups)
    a, b = total / price, 0.0
    if len(groups) == 2:
        (p1, n1, m1), (p2, n2, m2) = groups
        det = p1 * n2 - p2 * n1
        if abs(det) > 1e-9 * p1 * n2:
            a = (m1 * n2 - m2 * n1) / det
            b = (p1 * m2 - p2 * m1) / det
            if a < 0:
                a, b = 0.0, total / count
            elif b < 0:
                a, b = total / price, 0.0
    elif len(groups) > 2:
        raise ConfigError(f"fit_in_step takes one or two groups; got {len(groups)}")
    f = (a * price + b * count) / price
    if f <= 0:
        return lo, 0.0
    k = min(max(f, lo), hi) / f
    return a * k, b * k


def paired_schedule(kinds: Sequence[str], rounds: int, ref: str = "none") -> list[str]:
    """The order of the in-step measurement: every configuration step between two
    reference (unplanned) steps, the configurations in a mirrored order.

    ``ref K1 ref K2 ref K3 ref K3 ref K2 ref K1 ref ...``: ``rounds`` steps of each kind,
    ``1 + 2 * len(kinds) * rounds`` steps in all.  Round ``r`` runs the kinds forward
    when ``r`` is even and reversed when odd, so over two rounds every kind sits at the
    same mean position (the A B B A of :func:`.runner.step_order`).
    """
    if rounds < 1 or not kinds:
        raise ConfigError(f"paired_schedule needs kinds and rounds >= 1; got {kinds!r}, {rounds}")
    if ref in kinds:
        raise ConfigError(f"reference {ref!r} is also one of the kinds {list(kinds)!r}")
    order = [ref]
    for r in range(rounds):
        for k in kinds if r % 2 == 0 else list(kinds)[::-1]:
            order += [k, ref]
    return order


def paired_extra(
    order: Sequence[str], times: Sequence[float], ref: str = "none"
) -> dict[str, float]:
    """Each kind's in-step overhead: the median of its paired differences.

    A configuration step at position ``i`` is paired with the reference steps right
    before and after it: its difference is ``t[i] - (t[i-1] + t[i+1]) / 2``, so a slow
    stretch of the shared machine (load that drifts over a few steps) lands on both
    sides and cancels -- linearly drifting load exactly.  The median over a kind's
    differences is its overhead (:func:`.stats.paired_summary` summarises per-round
    ratios the same way).  The difference of two independent step medians (the
    earlier estimate) carries both medians' noise.  Measured on BERT-small b8
    (docs/results/budget.md, round 7b): paired differences scatter with sd 38 ms
    against 59 ms for single unplanned steps, and over fresh profiles the recompute
    factor's interquartile range went from 0.36-0.71 to 0.41-0.56 (its range, set by
    single-step outliers with 4 pairs, did not shrink).
    """
    if len(order) != len(times):
        raise ConfigError(f"{len(order)} step names but {len(times)} times")
    diffs: dict[str, list[float]] = {}
    for i, k in enumerate(order):
        if k == ref:
            continue
        if i == 0 or i == len(order) - 1 or order[i - 1] != ref or order[i + 1] != ref:
            raise ConfigError(f"step {i} ({k!r}) is not between two {ref!r} steps")
        diffs.setdefault(k, []).append(times[i] - 0.5 * (times[i - 1] + times[i + 1]))
    return {k: statistics.median(d) for k, d in diffs.items()}


def _time_schedule(
    model: nn.Module,
    plans: dict[str, Any],
    order: Sequence[str],
    inputs: Sequence[Any],
    loss_fn: Callable[[Any], torch.Tensor],
) -> list[float]:
    """Process CPU time of one training step per entry of ``order`` (plan names), after
    one untimed warm-up step of each plan; every step starts from the same weights and
    seed, as in :func:`.runner.measure_steps` (whose per-step setup this repeats)."""
    import copy

    from edgetrain.engine.budget.executor import PlanExecutor

    state = copy.deepcopy(model.state_dict())

    def step(name: str) -> float:
        model.load_state_dict(state)
        model.zero_grad(set_to_none=True)
        torch.manual_seed(0)
        with PlanExecutor(model, plans[name]) as ex:
            c0 = time.process_time()
            ex.step(inputs, loss_fn)
            return time.process_time() - c0 + ex.simulated_io_s

    try:
        for name in plans:
            step(name)
        return [step(name) for name in order]
    finally:
        model.load_state_dict(state)
        model.zero_grad(set_to_none=True)


def _in_situ_costs(
    model: nn.Module,
    inputs: Sequence[Any],
    loss_fn: Callable[[Any], torch.Tensor],
    units: list[UnitProfile],
    regens: list[RegenProfile],
    masks: list[MaskProfile],
    steps: int,
) -> None:
    """Re-cost masks, block recomputation and regenerations where they run: in a step.

    One paired measurement (process CPU time, one warm-up step each) of the unplanned
    step and of up to five plans: every mask applied; the recomputable units
    (:meth:`UnitProfile.recomputable`) recomputed, in two groups (:func:`split_by_price`:
    the costliest by eq. 6 holding half of its sum, and the rest); for each kind of
    regeneration (:func:`regen_kind`), a set of them that can run together
    (:func:`_regen_set`) applied.
    Every plan step runs between two unplanned
    steps, the plans in a mirrored order (:func:`paired_schedule`, about ``steps`` timed
    steps per plan and unplanned in all, as before); a plan's in-step overhead is the
    median of its paired differences (:func:`paired_extra`), not the difference of two
    independent medians, which moved the BERT-small b8 recompute factor between 0.29
    and 0.67 over fresh profiles.  The two recompute groups' overheads fit a unit's cost
    as ``a * eq. 6 + b`` (:func:`fit_in_step`; ``a, b >= 0``) -- so the order among units
    by eq. 6 is kept, but many cheap recomputations are no longer priced as a few costly
    ones of the same eq. 6 sum; each kind of regeneration's overhead is spread over that
    kind in proportion to the isolated price, the masks' by bytes.  So the ranking *within*
    those kinds stays what the isolated measurements say, and only the kinds' prices
    against each other (and compression, whose codec cost was measured about right in
    the step) are corrected.
    Cached per process by the model's class, the candidates and the
    input shapes.  The steps leave weights, buffers and RNG state as they were.

    * **Masks** (cost = share of the measured overhead by bytes; the isolated sum is a
      floor, those passes are done in any case): the isolated measurement
      (:func:`_mask_exec_cost`, masked op minus the op in a warm loop on one tensor)
      under-predicted the masks' cost in a step 3-4x: MobileNetV2 b32, the 26 masks of a
      50 % plan, predicted 36 ms, measured +109 / +140 ms (benchmarks/out/r5/diag2.log).
      The masked op's extra passes are memory-bound and compete with the rest of the
      step's memory traffic, which a warm loop on one tensor does not see.
    * **Block recomputation** (:attr:`UnitProfile.rc_scale`, :attr:`UnitProfile.rc_fixed_s`;
      the implied factor over the measured units within :data:`RC_SCALE_BOUNDS`):
      eq. 6 over-predicted it 3.9-5.6x on BERT-small b8
      (recompute's 40 % plan: 13 units predicted 360 ms, +64 ms in the step,
      benchmarks/out/r7/kinds_bert_before.log).  Timing each recomputation inside the
      step (benchmarks/out/r7/rc_instep_bert.log) split it: the recomputations
      themselves took 233 ms, about their isolated forwards (228 ms) -- not the eq. 6
      price of 409 ms, because psi = 2 doubles the attention blocks while their one
      layout copy (``transpose(1, 2).flatten(2)`` of the context, 1 MB) costs well
      under 1 ms -- and the step grew by only +99 ms, because a plan that holds less
      memory makes the rest of the step cheaper (fewer fresh pages to fault in).  Both
      parts are in the in-step difference; neither is in eq. 6.  With one factor for
      all units, MobileNetV2 b32's five costliest units (eq. 6 171 ms) were priced 98 ms
      and measured 64 ms in the step, the other 24 (eq. 6 175 ms) priced 101 ms and
      measured 128 ms (round 13); the fit gives each recomputation 3.1-4.7 ms of its
      own over ten fresh profiles, and a factor 0.22-0.38.
    * **Regenerations** (:attr:`RegenProfile.scale`, same bounds; one group: split in two
      like recomputation, the fitted per-regeneration cost moved 0.12-0.71 ms and the
      factor 0.43-0.84 over six fresh MobileNetV2 profiles, and the chosen plan with them,
      round 13): the isolated no-grad
      leaf forwards over-predicted them on MobileNetV2 b32 (149 / 207 / 232 ms predicted,
      -4 / +114 / +62 ms measured in three plans, kinds_mnv2_before.log) for the same
      memory reason.  One factor per kind (:func:`regen_kind`; round 18): the
      isolated prices err by kind (BatchNorm outputs measured 0.74 and 1.04 of their
      isolated price in two processes, convolution outputs 0.96 and 0.69), which one
      shared factor, set by a set of mostly convolution regenerations, cannot correct.
    """
    if steps < 1:
        return
    from edgetrain.engine.budget.plan import ExecutionPlan, UnitDecision

    rcs = [u for u in units if u.recomputable()]
    # a shared module is recomputed at every call or at none: group its calls
    rc_names = list(dict.fromkeys(u.name for u in rcs))
    rc_calls = {n: [u for u in units if u.name == n] for n in rc_names}
    rc_price = sum(u.rc_eq6() for us in rc_calls.values() for u in us)
    # regenerations by kind (:func:`regen_kind`), each a set that can run together
    rg_groups: dict[str, list[RegenProfile]] = {}
    for r in regens:
        rg_groups.setdefault(r.kind, []).append(r)
    rg_sets = {k: _regen_set(rs) for k, rs in sorted(rg_groups.items())}
    rg_price = {k: sum(r.fwd_s * max(r.saves, 1) for r in rs) for k, rs in rg_sets.items()}
    plans = {"none": ExecutionPlan("none", 1, 1, 1, 0.0, [])}
    if masks:
        plans["masks"] = ExecutionPlan(
            "hybrid",
            1,
            1,
            1,
            0.0,
            [UnitDecision(name=n, decision="mask") for n in dict.fromkeys(m.name for m in masks)],
        )
    # recomputation in two groups (:func:`split_by_price`): costliest half and the rest
    rc_groups: dict[str, list[UnitProfile]] = {}
    if rcs and rc_price > 0:
        hi, lo = split_by_price([sum(u.rc_eq6() for u in rc_calls[n]) for n in rc_names])
        rc_groups = {
            k: [u for i in idx for u in rc_calls[rc_names[i]]]
            for k, idx in (("recompute:hi", hi), ("recompute:lo", lo))
        }
    for k, us in rc_groups.items():
        if us:
            plans[k] = ExecutionPlan(
                "recompute", 1, 1, 1, 0.0,
                [UnitDecision(name=n, decision="recompute") for n in dict.fromkeys(u.name for u in us)],
            )  # fmt: skip
    for k, rgs in rg_sets.items():
        if rgs and rg_price[k] > 0:
            plans["regen:" + k] = ExecutionPlan(
                "recompute", 1, 1, 1, 0.0,
                [UnitDecision(name=r.name, decision="regen", chain=list(r.chain) or None)
                 for r in {r.state_key: r for r in rgs}.values()],
            )  # fmt: skip
    if len(plans) == 1:
        return
    shapes = tuple(tuple(x.shape) for x in inputs if isinstance(x, torch.Tensor))
    key = (
        "insitu",
        type(model).__name__,
        tuple((m.name, m.nbytes) for m in masks),
        tuple((u.name, u.saved_bytes) for u in rcs),
        tuple((k, r.state_key, r.out_bytes) for k, rgs in rg_sets.items() for r in rgs),
        shapes,
    )

    kinds = [k for k in plans if k != "none"]
    # about the timed steps the unpaired medians took (``steps`` per plan, unplanned too)
    rounds = max(1, round((steps * len(plans) - 1) / (2 * len(kinds))))

    def measure() -> dict[str, float]:
        rng = torch.get_rng_state()
        try:
            order = paired_schedule(kinds, rounds)
            times = _time_schedule(model, plans, order, inputs, loss_fn)
        finally:
            torch.set_rng_state(rng)
        return paired_extra(order, times)

    extra = cached_measure(key, measure)
    if "masks" in extra:
        total = max(extra["masks"], sum(m.cost_s for m in masks))
        nbytes = sum(m.nbytes for m in masks)
        for m in masks:
            m.cost_s = total * m.nbytes / nbytes
    if rc_groups:
        a, b = fit_in_step(
            [(sum(u.rc_eq6() for u in us), len(us), extra[k]) for k, us in rc_groups.items() if us]
        )
        for u in units:
            u.rc_scale, u.rc_fixed_s = a, b
    lo, hi = RC_SCALE_BOUNDS
    for k, rs in rg_groups.items():
        if "regen:" + k in extra:
            scale = min(max(extra["regen:" + k] / rg_price[k], lo), hi)
            for r in rs:
                r.scale = scale


def _mask_exec_cost(
    mod: nn.Module, t: torch.Tensor, rng: tuple[float, float], on_output: bool, repeats: int
) -> float:
    """Added time of the executor's masked op over the op itself (forward + backward).

    Measured on the captured tensor (a ReLU's saved output is a valid input: ReLU is
    idempotent, the time is the same), cached per leaf type / range / shape / dtype.
    The masked backward can be faster than the op's own (it allocates through numpy,
    which asks for transparent huge pages), so the difference is clamped at 0.
    """
    from edgetrain.engine.budget.mask import masked_call

    fn = type(mod).forward.__get__(mod)
    x = t.detach().requires_grad_()
    g = torch.ones_like(t)

    def native() -> None:
        fn(x).backward(g)
        x.grad = None

    def masked() -> None:
        masked_call(x, fn, *rng, on_output).backward(g)
        x.grad = None

    def measure() -> float:
        return max(median_cpu_s(masked, repeats) - median_cpu_s(native, repeats), 0.0)

    return cached_cost(("mask", *signature([mod], t), rng, on_output), measure)


def _alias_exec_cost(
    mod: nn.Module, dtype: torch.dtype, rng: tuple[float, float], repeats: int
) -> float:
    """Added time of the executor's aliased op (:func:`.mask.alias_call`) over the op
    itself, forward + backward, >= 0, measured on a 4,096-element tensor of ``dtype``: the two run the same kernels (``hardtanh``, and ``hardtanh_backward`` on a
    tensor of the same size), so what differs is the custom function's per-call cost.

    Why not on the captured tensor: there the difference came out 0.06-0.25 ms per
    leaf, growing with the tensor, on MobileNetV2 b32 (34 leaves, 6.1 ms in all), while
    aliasing every ReLU6 in whole steps measured 603 against 607 ms unplanned (paired,
    6 rounds; docs/results/budget.md, round 27).  Priced so, the aliases cost more than
    the in-place clamps that regenerate the same bytes in backward (0.11 ms for the
    stem's), and hybrid kept those."""
    from edgetrain.engine.budget.mask import alias_call

    fn = type(mod).forward.__get__(mod)
    x = torch.linspace(-1.0, 7.0, 4096, dtype=dtype).requires_grad_()
    g = torch.ones_like(x)

    def native() -> None:
        fn(x).backward(g)
        x.grad = None

    def aliased() -> None:
        alias_call(x, *rng).backward(g)
        x.grad = None

    def measure() -> float:
        calls = 50  # a few microseconds per call: time a batch of them

        def many(f: Callable[[], None]) -> Callable[[], None]:
            return lambda: [f() for _ in range(calls)]

        extra = median_cpu_s(many(aliased), repeats) - median_cpu_s(many(native), repeats)
        return max(extra / calls, 0.0)

    return cached_cost(("alias", type(mod).__name__, str(dtype), rng), measure)


def _regen_candidates(
    model: nn.Module,
    recs: list[_Rec],
    leaf_out: list[tuple[str, int, tuple[int, int], tuple[int, int], int]],
    captured: dict[str, tuple[tuple, dict]],
    repeats: int,
) -> list[RegenProfile]:
    """Leaves whose output is saved elsewhere while they save their own input (see module doc)."""
    by_key: dict[int, list[_Rec]] = {}
    for r in recs:
        by_key.setdefault(r.key, []).append(r)
    out: list[RegenProfile] = []
    times: dict[tuple[str, ...], float] = {}

    def saves_own(name: str, key: int) -> bool:
        return any(r.stack and r.stack[-1] == name for r in by_key.get(key, []))

    def fwd_of(*names: str, inplace: bool = False) -> float:
        """Measured time of the executor's regeneration through ``names`` (head first)."""
        if (names, inplace) not in times:
            mods = [model.get_submodule(n) for n in names]
            times[names, inplace] = regen_cost_s(
                mods, captured[names[0]][0][0], repeats, inplace=inplace
            )
        return times[names, inplace]

    def only_own(name: str, key: int) -> bool:
        """The leaf is the only saver of ``key`` (the executor regenerates it in place)."""
        return all(r.stack and r.stack[-1] == name for r in by_key.get(key, []))

    producer = {o[2][0]: o for o in leaf_out}  # output storage -> the leaf that made it
    for name, step, (okey, obytes), (ikey, ibytes), call in leaf_out:
        if okey == ikey or obytes < MIN_COMPRESS_NUMEL * 4:
            continue
        savers = by_key.get(okey, [])
        if saves_own(name, okey) or not savers:
            continue
        if any(not r.tensor.is_floating_point() for r in savers):
            continue
        if saves_own(name, ikey):
            mod = model.get_submodule(name)
            inplace = only_own(name, ikey) and inplace_regen(mod) is not None
            out.append(
                RegenProfile(
                    name, step, fwd_of(name, inplace=inplace), okey, obytes, ikey, ibytes,
                    len(savers), kind=regen_kind([mod], inplace), call=call,
                )
            )  # fmt: skip
        # chain (head -> this leaf): regenerate from the head's saved input, so this
        # leaf's input need not be held (e.g. BatchNorm -> ReLU6 with a masked ReLU6)
        head = producer.get(ikey)
        if head is None or head[0] == name:
            continue
        hname, hstep, _, (hkey, hbytes), _ = head
        if hname.rpartition(".")[0] != name.rpartition(".")[0]:
            continue  # siblings only (one block, one unit decision for both)
        if hkey in (okey, ikey) or not saves_own(hname, hkey):
            continue
        out.append(
            RegenProfile(
                name, hstep, fwd_of(hname, name), okey, obytes, hkey, hbytes,
                len(savers), chain=(hname, name),
                kind=regen_kind([model.get_submodule(hname), model.get_submodule(name)]),
                call=call,
            )
        )  # fmt: skip
    return out
