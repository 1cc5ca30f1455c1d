"""Run an :class:`ExecutionPlan` for real in PyTorch and measure its memory.

Each planned unit's ``forward`` is wrapped (an instance attribute, removed on exit):

* ``keep`` — runs as is; its saved tensors go through the accountant's hooks.
* ``compress`` — runs under ``saved_tensors_hooks`` that encode float tensors with
  the plan's codec at pack time and decode at unpack time (the encoded ``bytes``
  are what is held).
* ``swap`` — same hooks, writing tensors to files (:mod:`.swap`).  The file lands
  in this server's page cache (RAM-speed), not on a phone's flash, so every swap
  write/read also adds the :class:`~.swap.IoContentionModel` time of a phone's
  UFS under background I/O to ``simulated_io_s``; the runner adds it to the
  measured step time (the executor's I/O is synchronous: nothing overlaps it).
* ``recompute`` — selective activation checkpointing with the mechanism of
  ``torch.utils.checkpoint(use_reentrant=False)``: during forward every saved
  tensor of the unit becomes a placeholder; the first unpack in backward re-runs
  the unit on its (held) inputs under the saved RNG state and hands each
  placeholder its recomputed tensor.  We implement it here rather than call
  ``torch.utils.checkpoint`` because the accountant must see the recomputed
  tensors (torch keeps them in private frames) and BatchNorm running statistics
  must not be updated twice (we restore the unit's buffers after recomputation),
  which makes recompute training bit-identical to unplanned training.  A training-mode
  BatchNorm inside the unit keeps its batch statistics (mean, inverse std: 2 x C
  floats) from the unit's forward, and its recomputation is one fused multiply-add
  from them (:func:`.regen.batchnorm_call`, probed bit-exact against the kernel) --
  no second reduction over the batch, about 57 % of BatchNorm's forward time and
  22 % of a MobileNetV2 b32 block's -- with autograd's own kernel backward.
* ``regen`` (a leaf) — runs as is, but its output is registered: any later pack
  of that storage (same version) by a kept / compressed / swapped consumer stores
  a placeholder holding the leaf's *input* (which the leaf saves anyway) and the
  view geometry; in backward the leaf re-runs on that input (no grad, buffers
  restored) and the consumer gets the identical view.  One regeneration is shared
  by all consumers while any of them still holds it.  A Hardtanh / ReLU6 leaf
  regenerates *in place*, clamping its held input (no new tensor, one pass over warm
  memory instead of a read plus a write to fresh pages), when nothing but the leaf
  itself saved or holds that input's storage (every pack and every held input of the
  step is counted per storage): its own backward reads the input only through
  ``lo < x < hi``, which clamping into ``[lo, hi]`` keeps, so its gradient is
  bit-identical (autograd checks no saved version under saved-tensor hooks).  A
  tensor that user code kept from forward and that is such an input is clamped in
  backward.  A chained regen (``chain =
  [head, ..., tail]``, e.g. BatchNorm -> ReLU6) re-runs every leaf of the chain
  from the head's input (the head saves it anyway), so the tail's input need not
  be held either.  Where a compressed unit saved the (single) leaf's input encoded,
  the placeholder refers to that encoding instead: the regeneration runs on its
  decoding, no raw copy of the input is held, and the decoding is handed to the
  leaf's own backward, which comes after the consumer's (one decode, not two).
* ``mask`` (a ReLU / ReLU6 / Hardtanh leaf) — the leaf runs as one autograd
  function that saves only the packed bits of "the gradient passes" and computes
  the gradient from them (:func:`.mask.masked_call`; no hook context, no float
  stand-in in backward): bit-identical gradients.  Inputs it cannot take
  (non-contiguous, other dtypes) fall back to hooks that hold the bits and hand the
  op's own backward a stand-in with the same predicate.  Skipped inside recomputed
  units (nothing of theirs is held).
"""

from __future__ import annotations

import math
import shutil
import tempfile
import weakref
from collections.abc import Callable, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

import torch
from torch import nn

from edgetrain.compress import make_codec
from edgetrain.compress.base import Codec
from edgetrain.engine.budget.accountant import MemoryAccountant, model_state_tensors, storage_key
from edgetrain.engine.budget.mask import (
    PackedMask,
    alias_call,
    decode_mask,
    encode_mask,
    fast_maskable,
    masked_call,
)
from edgetrain.engine.budget.plan import ExecutionPlan, UnitDecision
from edgetrain.engine.budget.profile import MASKABLE, MIN_COMPRESS_NUMEL, mask_range
from edgetrain.engine.budget.regen import (
    batchnorm_call,
    batchnorm_from_stats_ok,
    batchnorm_stats,
    inplace_regen,
    regenerate,
)
from edgetrain.engine.budget.swap import IoContentionModel, swap_in, swap_out
from edgetrain.errors import ConfigError


class _Encoded:
    __slots__ = ("data", "codec", "decoded", "__weakref__")

    def __init__(self, data: bytes, codec: Codec) -> None:
        self.data, self.codec = data, codec
        #: decoded early by a regeneration from this encoding (:meth:`PlanExecutor.
        #: _unpack_regen`), handed to the saving op's own unpack instead of decoding twice
        self.decoded: torch.Tensor | None = None


class _SegState:
    """What a recomputed unit keeps between forward and backward: its inputs + RNG, and
    its BatchNorms' batch statistics in call order (``None`` for a call that ran as is)."""

    __slots__ = ("args", "kwargs", "rng", "placeholders", "done", "bn_stats", "bn_next",
                 "__weakref__")  # fmt: skip

    def __init__(self, args: tuple, kwargs: dict, rng: torch.Tensor) -> None:
        self.args, self.kwargs, self.rng = args, kwargs, rng
        self.placeholders: list[weakref.ref] = []
        self.done = False
        self.bn_stats: list[tuple[torch.Tensor, torch.Tensor] | None] = []
        self.bn_next = 0


class _Placeholder:
    __slots__ = ("state", "index", "value", "__weakref__")

    def __init__(self, state: _SegState, index: int) -> None:
        self.state, self.index, self.value = state, index, None


class _RegenSource:
    """A regenerable leaf output: the leaves' forwards (head first), the head's input,
    the output's version."""

    __slots__ = ("mods", "fns", "arg", "version", "cache", "inplace", "arg_key", "uses",
                 "stats", "enc", "shape", "__weakref__")  # fmt: skip

    def __init__(
        self,
        mods: tuple[nn.Module, ...],
        fns: tuple[Callable, ...],
        arg: torch.Tensor | None,
        version: int,
    ) -> None:
        self.mods, self.fns, self.arg, self.version = mods, fns, arg, version
        #: the input's encoding when a compressed unit saved it encoded (``arg`` is then
        #: None: the source holds no raw copy) and the input's shape to decode it to
        self.enc: _Encoded | None = None
        self.shape: torch.Size | None = None
        self.cache: weakref.ref | None = None
        #: the leaf's forward in place, when allowed (:func:`.regen.inplace_regen`)
        self.inplace: Callable | None = None
        #: the input's storage and the uses of it counted when this source was made
        #: (the leaf's own save and this source); more uses by backward: not in place
        self.arg_key = 0
        self.uses = -1
        #: a BatchNorm head's batch statistics from forward (:func:`.regen.regenerate`)
        self.stats: tuple[torch.Tensor, torch.Tensor] | None = None


class _Masked:
    """What autograd stores for a masked ReLU-family tensor."""

    __slots__ = ("mask", "__weakref__")

    def __init__(self, mask: PackedMask) -> None:
        self.mask = mask


class _RegenRef:
    """What a consumer's autograd node stores instead of the leaf output."""

    __slots__ = ("src", "size", "stride", "offset", "__weakref__")

    def __init__(self, src: _RegenSource, t: torch.Tensor) -> None:
        self.src, self.size, self.stride, self.offset = (
            src,
            t.size(),
            t.stride(),
            t.storage_offset(),
        )


def _inside(name: str, units: Sequence[str]) -> bool:
    """``name`` is one of ``units`` or a submodule of one (``""``: the whole model)."""
    return any(u == "" or name == u or name.startswith(u + ".") for u in units)


def _same_layout(a: torch.Tensor, b: torch.Tensor) -> bool:
    """``a`` can stand for ``b``'s storage: the views of ``b`` are views of ``a`` too."""
    return (
        a.size() == b.size()
        and a.stride() == b.stride()
        and a.storage_offset() == b.storage_offset() == 0
        and a.dtype == b.dtype
        and a.untyped_storage().nbytes() == b.untyped_storage().nbytes()
    )


def _geometry(t: torch.Tensor) -> tuple:
    """What identifies ``t`` as a whole, contiguous tensor over its storage (or not)."""
    return (
        t.numel(),
        t.dtype,
        t.is_contiguous() and t.storage_offset() == 0,
        t.untyped_storage().nbytes(),
        t._version,
    )


def _detach_like(a: Any) -> Any:
    if isinstance(a, torch.Tensor):
        return a.detach().requires_grad_(a.requires_grad)
    return a


class PlanExecutor:
    """Context manager installing ``plan`` on ``model``; ``step()`` runs one training step."""

    def __init__(
        self,
        model: nn.Module,
        plan: ExecutionPlan,
        *,
        accountant: MemoryAccountant | None = None,
        codecs: dict[str, Codec] | None = None,
        swap_dir: str | None = None,
        io: IoContentionModel | None = None,
        account: bool = True,
    ) -> None:
        self.model = model
        self.plan = plan
        #: count every saved tensor (``acc.peak`` is the measured peak).  ``False``:
        #: kept tensors go through no Python hook at all (plain PyTorch saving; with a
        #: regen decision, one hook that only checks for regenerable storages), so the
        #: accountant sees only what the plan's own hooks hold and ``acc.peak`` is not
        #: the step's peak -- for training once a plan has been measured.
        self.account = account
        self._has_regen = False
        if io is None:
            saved = plan.meta.get("io_model") if isinstance(plan.meta, dict) else None
            io = IoContentionModel(**saved) if saved else IoContentionModel()
        self.io = io
        #: simulated phone-storage seconds of this executor's swap I/O (see module doc)
        self.simulated_io_s = 0.0
        self.acc = accountant or MemoryAccountant(exclude=model_state_tensors(model))
        self._codecs = dict(codecs or {})
        self._swap_dir = swap_dir
        self._own_swap_dir = False
        self._installed: list[nn.Module] = []
        # one encoding per saved tensor object: id -> (weakref to tensor, weakref to holder)
        self._encoded: dict[int, tuple[weakref.ref, weakref.ref]] = {}
        #: while a regenerable leaf's forward runs: storage pointer -> (geometry, encoding)
        #: of each float tensor a compressed unit encoded meanwhile (:meth:`_wrap_regen`)
        self._enc_watch: dict[int, tuple[tuple, _Encoded]] | None = None
        # storage pointer of a live regenerable output -> (weakref to it, its source)
        self._regen: dict[int, tuple[weakref.ref, _RegenSource]] = {}
        # chain head module id -> (weakref to its last input, storage of its output,
        # version, BatchNorm statistics or None)
        self._heads: dict[int, tuple[weakref.ref, int, int, Any]] = {}
        #: storage pointer -> saves / held inputs of it this step, counted only when a
        #: leaf may regenerate in place (:class:`_RegenSource`)
        self._uses: dict[int, int] = {}
        self._count_uses = False
        #: the recomputed units running now, innermost last: (state, replaying)
        self._segments: list[tuple[_SegState, bool]] = []

    # -- installation ---------------------------------------------------------
    def __enter__(self) -> PlanExecutor:
        names = dict(self.model.named_modules())
        recomputed = [u.name for u in self.plan.units if u.decision == "recompute"]

        def in_recomputed(n: str) -> bool:
            return _inside(n, recomputed)

        # a BatchNorm's statistics are read from its autograd node in forward: only where
        # they are held as they are (not recomputed placeholders, encoded or on storage)
        not_kept = [u.name for u in self.plan.units if u.decision in ("compress", "swap")]

        def stats_readable(n: str) -> bool:
            return not in_recomputed(n) and not _inside(n, not_kept)

        # A lossy codec must not hold what a ReLU-family backward reads only through a
        # predicate (``lo < x < hi``, ``y > 0``): a value within the error bound of a
        # threshold decodes to its other side (ReLU6: x in (0, eb] -> 0) and its whole
        # gradient is lost or passed, an error not bounded by eb (MobileNetV2 b32 at
        # 0.25: 7% of one ReLU6's elements, max |grad error| 0.56 instead of 0.02).
        # So every maskable leaf of a compressed unit holds the exact 1-bit mask (1/32
        # of float32, below the codec's size) unless the plan already masks it.
        masked = {u.name for u in self.plan.units if u.decision == "mask"}
        auto: dict[str, UnitDecision] = {}
        # an alias inside a compressed / swapped unit: the unit's encoding or storage
        # would hold the output it saves (a lossy codec breaks the predicate), so the
        # leaf gets the exact 1-bit mask there instead (the planner models it so)
        for u in self.plan.units:
            if u.decision == "alias" and _inside(u.name, not_kept):
                auto[u.name] = UnitDecision(u.name, "mask")
        for u in self.plan.units:
            if u.decision == "compress" and u.name in names:
                for n, leaf in names[u.name].named_modules(prefix=u.name):
                    if n not in masked and mask_range(leaf) is not None:
                        auto[n] = UnitDecision(n, "mask")
        # units first, then masks, regen last: wrappers compose on one module; a
        # decision listed twice (as a shared module's calls can be) is installed once
        once = {
            (u.name, u.decision, tuple(u.chain or ())): u
            for u in [*self.plan.units, *auto.values()]
        }
        order = sorted(
            once.values(),
            key=lambda u: {"regen": 2, "mask": 1, "alias": 1}.get(u.decision, 0),
        )
        for u in order:
            if u.decision == "keep":
                continue
            for n in [u.name, *(u.chain or [])]:
                if n not in names:
                    raise ConfigError(
                        f"plan unit {n!r} is not a module of this model; "
                        f"the plan was made for a different model"
                    )
            mod = names[u.name]
            if u.decision == "alias":
                if in_recomputed(u.name) or u.name in auto:
                    continue  # nothing of it is held / masked instead (above)
                rng = mask_range(mod)
                if rng is None or MASKABLE[type(mod)] != "input" or not math.isfinite(rng[1]):
                    raise ConfigError(
                        f"plan aliases {u.name!r} ({type(mod).__name__}); only Hardtanh-"
                        "family leaves (ReLU6, Hardtanh) can save their output instead"
                    )
                self._install(mod, self._wrap_alias(mod, *rng))
                continue
            if u.decision in ("regen", "mask"):
                if u.decision == "mask":
                    if in_recomputed(u.name):
                        continue
                    if mask_range(mod) is None:
                        raise ConfigError(
                            f"plan masks {u.name!r} ({type(mod).__name__}); only "
                            f"{', '.join(t.__name__ for t in MASKABLE)} leaves can be masked"
                        )
                    self._install(mod, self._wrap_mask(mod))
                elif u.chain and len(u.chain) > 1:
                    heads = [names[n] for n in u.chain[:-1]]
                    affine = stats_readable(u.chain[0])
                    for h in heads[:1]:
                        self._install(h, self._wrap_head(h, affine))
                    self._install(mod, self._wrap_regen(mod, [names[n] for n in u.chain]))
                else:
                    fn = None if in_recomputed(u.name) else inplace_regen(mod)
                    self._count_uses = self._count_uses or fn is not None
                    self._install(
                        mod, self._wrap_regen(mod, inplace=fn, affine=stats_readable(u.name))
                    )
                self._has_regen = self._has_regen or u.decision == "regen"
                continue
            if u.decision == "swap" and self._swap_dir is None:
                self._swap_dir = tempfile.mkdtemp(prefix="edgetrain-swap-")
                self._own_swap_dir = True
            mod.forward = self._wrap(mod, u.decision, u.codec)
            self._installed.append(mod)
            if u.decision == "recompute":
                for n, sub in mod.named_modules(prefix=u.name):
                    if n != u.name and isinstance(sub, nn.modules.batchnorm._BatchNorm):
                        self._install(sub, self._wrap_batchnorm(sub))
        return self

    def _install(self, mod: nn.Module, fwd: Callable) -> None:
        wrapped = "forward" in vars(mod)
        mod.forward = fwd
        if not wrapped:
            self._installed.append(mod)

    def __exit__(self, *exc: object) -> None:
        self._encoded.clear()
        self._regen.clear()
        self._heads.clear()
        self._uses.clear()
        for mod in self._installed:
            del mod.forward
        self._installed.clear()
        if self._own_swap_dir and self._swap_dir:
            shutil.rmtree(self._swap_dir, ignore_errors=True)

    def _codec(self, name: str | None) -> Codec:
        name = name or "mix"
        if name not in self._codecs:
            self._codecs[name] = make_codec(name)
        return self._codecs[name]

    def _wrap(self, mod: nn.Module, decision: str, codec_name: str | None) -> Callable:
        orig = type(mod).forward.__get__(mod)
        if decision == "recompute":
            return lambda *a, **k: self._recompute_forward(mod, orig, a, k)
        if decision == "compress":
            codec = self._codec(codec_name)
            hooks = (lambda t: self._pack_compress(t, codec), self._unpack_encoded)
        else:
            hooks = (self._pack_swap, self._unpack_encoded)

        def run(*a, **k):
            with torch.autograd.graph.saved_tensors_hooks(*hooks):
                return orig(*a, **k)

        return run

    def _wrap_batchnorm(self, mod: nn.Module) -> Callable:
        """A BatchNorm inside a recomputed unit: in the unit's forward it runs the kernel
        and its batch statistics are kept with the unit (2 x C floats); in the unit's
        recomputation its output is one fused multiply-add from them
        (:func:`.regen.batchnorm_call`) -- no second reduction over the batch, no running
        statistics to move -- bit for bit the forward's values, with autograd's own
        backward for the kernel.  Outside a unit's forward, or for a call the stand-in
        cannot reproduce, the module runs as it is, in both passes alike."""
        inner = vars(mod).get("forward", type(mod).forward.__get__(mod))

        def run(x, *a, **k):
            if not self._segments or a or k or not torch.is_grad_enabled():
                return inner(x, *a, **k)
            state, replaying = self._segments[-1]
            if replaying:
                i = state.bn_next
                stats = state.bn_stats[i] if i < len(state.bn_stats) else None
                state.bn_next += 1
                return inner(x) if stats is None else batchnorm_call(mod, x, stats)[0]
            if not batchnorm_from_stats_ok(mod, x):
                state.bn_stats.append(None)
                return inner(x)
            out, stats = batchnorm_call(mod, x, None)
            state.bn_stats.append(stats)
            for t in stats:
                self.acc.hold_tensor(t, state)
            return out

        return run

    # -- regen ------------------------------------------------------------------
    def _wrap_head(self, mod: nn.Module, affine: bool = True) -> Callable:
        """Remember the chain head's input and output storage (weakly) for the tail, and a
        BatchNorm head's batch statistics (``affine``)."""
        inner = vars(mod).get("forward", type(mod).forward.__get__(mod))

        def run(x, *a, **k):
            out = inner(x, *a, **k)
            if isinstance(x, torch.Tensor) and isinstance(out, torch.Tensor) and not a and not k:
                stats = batchnorm_stats(mod, out) if affine else None
                self._heads[id(mod)] = (weakref.ref(x), storage_key(out)[0], out._version, stats)
            return out

        return run

    def _wrap_alias(self, mod: nn.Module, lo: float, hi: float) -> Callable:
        """The leaf's forward as :func:`.mask.alias_call` (it saves its output, through
        the active hooks, so the accountant counts the shared storage once)."""
        inner = vars(mod).get("forward", type(mod).forward.__get__(mod))

        def run(x, *a, **k):
            if (
                a
                or k
                or not torch.is_grad_enabled()
                or not isinstance(x, torch.Tensor)
                or not x.requires_grad
                or not x.is_floating_point()
            ):
                return inner(x, *a, **k)
            return alias_call(x, lo, hi)

        return run

    def _wrap_mask(self, mod: nn.Module) -> Callable:
        inner = vars(mod).get("forward", type(mod).forward.__get__(mod))
        lo, hi = mask_range(mod)
        saves_input = MASKABLE[type(mod)] == "input"

        def run(x, *a, **k):
            if not torch.is_grad_enabled() or not isinstance(x, torch.Tensor):
                return inner(x, *a, **k)
            if not a and not k and x.requires_grad and fast_maskable(x):
                # one autograd node that saves the packed bits itself: no hook context,
                # no float stand-in in backward (the common case)
                return masked_call(x, inner, lo, hi, not saves_input, self.acc.mark_outside)
            xkey = storage_key(x)[0]

            def pack(t: torch.Tensor) -> object:
                self._use(t)
                is_input = storage_key(t)[0] == xkey and t.shape == x.shape
                if (
                    is_input != saves_input
                    or t.dtype != x.dtype
                    or not t.is_floating_point()
                    or self.acc.is_excluded(t)
                ):
                    return self.acc.pack_keep(t)  # not the tensor a mask stands for
                h = _Masked(encode_mask(t, lo, hi))
                self.acc.hold_bytes(h.mask.nbytes, h)
                return h

            def unpack(h: object) -> torch.Tensor:
                if isinstance(h, _Masked):
                    out = decode_mask(h.mask)
                    self.acc.hold_tensor(out, out)
                    return out
                return self.acc.unpack_keep(h)

            with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
                return inner(x, *a, **k)

        return run

    def _wrap_regen(
        self,
        mod: nn.Module,
        chain: list[nn.Module] | None = None,
        inplace: Callable | None = None,
        affine: bool = False,
    ) -> Callable:
        orig = type(mod).forward.__get__(mod)
        inner = vars(mod).get("forward", orig)  # a unit wrapper already installed
        chain = chain or [mod]
        fns = tuple(type(m).forward.__get__(m) for m in chain)
        head = chain[0]

        def run(x, *a, **k):
            count = inplace is not None and isinstance(x, torch.Tensor)
            before = self._uses.get(storage_key(x)[0], 0) if count else -1
            outer, self._enc_watch = self._enc_watch, {}
            try:
                out = inner(x, *a, **k)
            finally:
                watch, self._enc_watch = self._enc_watch, outer
                if outer is not None:
                    outer.update(watch)
            if (
                not a
                and not k
                and isinstance(x, torch.Tensor)
                and isinstance(out, torch.Tensor)
                and torch.is_grad_enabled()
            ):
                arg = x
                stats = batchnorm_stats(mod, out) if affine else None
                enc = watch.get(storage_key(x)[0]) if head is mod else None
                if enc is not None and enc[0] == _geometry(x) and enc[0][2]:
                    # a compressed unit saved the input encoded: regenerate from its
                    # decoding, holding no raw copy (the encoding is held anyway)
                    src = _RegenSource(tuple(chain), fns, None, out._version)
                    src.stats, src.enc, src.shape = stats, enc[1], x.shape
                    key = storage_key(out)[0]
                    self._regen[key] = (weakref.ref(out), src)
                    weakref.finalize(out, self._forget_regen, key, src)
                    return out
                if head is not mod:  # chained: regenerate from the head's input
                    # taken, not read: the entry holds the head's batch statistics, which
                    # would otherwise outlive the BatchNorm's own backward to the end of
                    # the step (2 x C floats per chain; round 24: 4,608 B per chain of
                    # MobileNetV2 b2's 576-channel expansions, unmodelled, put a plan at
                    # its all-allocation minimum 239 B over its budget)
                    seen = self._heads.pop(id(head), None)
                    arg = seen[0]() if seen is not None else None
                    if (
                        arg is None
                        or seen[1] != storage_key(x)[0]
                        or seen[2] != x._version
                        or len(chain) != 2  # longer chains: intermediate inputs unverified
                    ):
                        return out
                    stats = seen[3]
                src = _RegenSource(tuple(chain), fns, arg, out._version)
                src.stats = stats
                akey = storage_key(arg)[0]
                if self._count_uses:  # this source holds the input too
                    self._uses[akey] = self._uses.get(akey, 0) + 1
                if before == 0 and _same_layout(arg, out):  # nothing saved it before
                    src.inplace, src.arg_key, src.uses = inplace, akey, self._uses[akey]
                key = storage_key(out)[0]
                self._regen[key] = (weakref.ref(out), src)
                weakref.finalize(out, self._forget_regen, key, src)
            return out

        return run

    def _forget_regen(self, key: int, src: _RegenSource) -> None:
        hit = self._regen.get(key)
        if hit is not None and hit[1] is src:
            del self._regen[key]

    def _pack_regen(self, t: torch.Tensor) -> _RegenRef | None:
        hit = self._regen.get(storage_key(t)[0]) if self._regen else None
        if hit is None:
            return None
        out, src = hit[0](), hit[1]
        if out is None or t._version != src.version or t.dtype != out.dtype:
            return None
        ref = _RegenRef(src, t)
        if src.arg is not None:  # the placeholder keeps the leaf's input alive
            self.acc.hold_tensor(src.arg, ref)
        return ref

    def _unpack_regen(self, ref: _RegenRef) -> torch.Tensor:
        src = ref.src
        base = src.cache() if src.cache is not None else None
        if base is None:
            if src.enc is not None:
                # decoded once, for this and for the saving op's own unpack after it
                arg = src.enc.decoded
                if arg is None:
                    arg = src.enc.codec.decode(src.enc.data)
                    self.acc.hold_tensor(arg, arg)
                    src.enc.decoded = arg
                base = regenerate(src.mods, src.fns, arg.view(src.shape), src.stats)
            elif src.inplace is not None and self._uses.get(src.arg_key) == src.uses:
                base = src.inplace(src.arg)  # the leaf's own saved input, clamped
            else:
                base = regenerate(src.mods, src.fns, src.arg, src.stats)
            src.cache = weakref.ref(base)
            self.acc.hold_tensor(base, base)
        out = base.as_strided(ref.size, ref.stride, ref.offset)
        self.acc.hold_tensor(out, out)
        return out

    def _use(self, t: torch.Tensor) -> None:
        """Count a save (or held input) of ``t``'s storage (see :class:`_RegenSource`)."""
        if self._count_uses:
            k = storage_key(t)[0]
            self._uses[k] = self._uses.get(k, 0) + 1

    def _pack_default(self, t: torch.Tensor) -> object:
        self._use(t)
        ref = self._pack_regen(t)
        return ref if ref is not None else self.acc.pack_keep(t)

    def _unpack_default(self, h: object) -> torch.Tensor:
        if isinstance(h, _RegenRef):
            return self._unpack_regen(h)
        return self.acc.unpack_keep(h)

    def _pack_fast(self, t: torch.Tensor) -> object:
        """Unaccounted keep path: the tensor itself unless it is a regenerable output."""
        self._use(t)
        if self._regen:
            ref = self._pack_regen(t)
            if ref is not None:
                return ref
        return t

    def _unpack_fast(self, h: object) -> torch.Tensor:
        return self._unpack_regen(h) if type(h) is _RegenRef else h

    # -- compress / swap hooks ------------------------------------------------
    def _small_or_exact(self, t: torch.Tensor) -> bool:
        return (
            not t.is_floating_point() or t.numel() < MIN_COMPRESS_NUMEL or self.acc.is_excluded(t)
        )

    def _cached(self, t: torch.Tensor) -> object | None:
        """The holder of ``t`` if this very tensor was already packed (saved twice)."""
        hit = self._encoded.get(id(t))
        if hit is not None and hit[0]() is t:
            return hit[1]()
        return None

    def _remember(self, t: torch.Tensor, h: object) -> object:
        self._encoded[id(t)] = (weakref.ref(t), weakref.ref(h))
        return h

    def _pack_compress(self, t: torch.Tensor, codec: Codec) -> object:
        self._use(t)
        ref = self._pack_regen(t)
        if ref is not None:
            return ref
        if self._small_or_exact(t):
            return self.acc.pack_keep(t)
        h = self._cached(t)
        if h is None:
            h = _Encoded(codec.encode(t), codec)
            self.acc.hold_bytes(len(h.data), h)
            self._remember(t, h)
        if self._enc_watch is not None:
            self._enc_watch[storage_key(t)[0]] = (_geometry(t), h)
        return h

    def _pack_swap(self, t: torch.Tensor) -> object:
        self._use(t)
        ref = self._pack_regen(t)
        if ref is not None:
            return ref
        if self._small_or_exact(t):
            return self.acc.pack_keep(t)
        h = self._cached(t)
        if h is not None:
            return h
        self.simulated_io_s += self.io.write_s(t.numel() * t.element_size())
        return self._remember(t, swap_out(t, self._swap_dir))

    def _unpack_encoded(self, h: object) -> torch.Tensor:
        if isinstance(h, _RegenRef):
            return self._unpack_regen(h)
        if isinstance(h, _Encoded):
            if h.decoded is not None:  # a regeneration decoded it first (already held)
                out, h.decoded = h.decoded, None
                return out
            out = h.codec.decode(h.data)
        elif hasattr(h, "path"):
            out = swap_in(h)
            self.simulated_io_s += self.io.read_s(out.numel() * out.element_size())
        else:
            return self.acc.unpack_keep(h)
        self.acc.hold_tensor(out, out)  # decoded copy lives until autograd drops it
        return out

    # -- recompute ------------------------------------------------------------
    @contextmanager
    def _segment(self, state: _SegState, replaying: bool):
        """While a recomputed unit's forward (or its recomputation) runs: what its
        BatchNorms see (:meth:`_wrap_batchnorm`)."""
        self._segments.append((state, replaying))
        try:
            yield
        finally:
            self._segments.pop()

    def _recompute_forward(self, mod: nn.Module, orig: Callable, args: tuple, kwargs: dict):
        state = _SegState(args, kwargs, torch.get_rng_state())
        for a in list(args) + list(kwargs.values()):
            if isinstance(a, torch.Tensor):
                self.acc.hold_tensor(a, state)
                self._use(a)  # re-run from in backward: never clamped in place

        def pack(t: torch.Tensor) -> _Placeholder:
            ph = _Placeholder(state, len(state.placeholders))
            state.placeholders.append(weakref.ref(ph))
            return ph

        def unpack(ph: _Placeholder) -> torch.Tensor:
            if not ph.state.done:
                self._recompute(mod, orig, ph.state)
            return ph.value

        with self._segment(state, False), torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            return orig(*args, **kwargs)

    def _recompute(self, mod: nn.Module, orig: Callable, state: _SegState) -> None:
        saved: list[torch.Tensor] = []
        buffers = {n: b.detach().clone() for n, b in mod.named_buffers()}
        args = tuple(_detach_like(a) for a in state.args)
        kwargs = {k: _detach_like(v) for k, v in state.kwargs.items()}
        # Keep the recomputed tensors detached (as torch.utils.checkpoint does): a saved
        # tensor that still carried the recomputation's grad_fn would close a cycle
        # tensor -> autograd node -> this hook's closure -> ``saved`` -> tensor through
        # C++ autograd nodes, which Python's gc cannot collect; that leaked every
        # recomputed unit's activations on every step (~0.5 GB per MobileNetV2 b32 step
        # at a 30% budget).  Backward needs only their values.
        state.bn_next = 0
        with self._segment(state, True), torch.random.fork_rng(devices=[]):
            torch.set_rng_state(state.rng)
            with (
                torch.enable_grad(),
                torch.autograd.graph.saved_tensors_hooks(
                    lambda t: saved.append(t.detach()) or len(saved) - 1, lambda i: saved[i]
                ),
            ):
                orig(*args, **kwargs)
        for n, b in mod.named_buffers():
            b.data.copy_(buffers[n])
        if len(saved) != len(state.placeholders):
            raise RuntimeError(
                f"recomputation saved {len(saved)} tensors, forward saved "
                f"{len(state.placeholders)}: unit {type(mod).__name__} is not deterministic"
            )
        for ref, t in zip(state.placeholders, saved, strict=True):
            ph = ref()
            if ph is not None:
                ph.value = t
                if not self.acc.is_excluded(t):
                    self.acc.hold_tensor(t, ph)
        state.done = True
        state.args = state.kwargs = None
        state.bn_stats = []

    # -- one step --------------------------------------------------------------
    def step(
        self,
        inputs: Sequence[Any],
        loss_fn: Callable[[Any], torch.Tensor],
    ) -> torch.Tensor:
        """Forward + loss + backward (gradients accumulate in ``.grad``); returns the loss."""
        self._uses.clear()
        with ExitStack() as stack:
            if self.account:
                stack.enter_context(self.acc.track())
                stack.enter_context(
                    torch.autograd.graph.saved_tensors_hooks(
                        self._pack_default, self._unpack_default
                    )
                )
            elif self._has_regen:
                stack.enter_context(
                    torch.autograd.graph.saved_tensors_hooks(self._pack_fast, self._unpack_fast)
                )
            out = self.model(*inputs)
            loss = loss_fn(out)
            del out
            loss.backward()
        return loss.detach()


@contextmanager
def executing(model: nn.Module, plan: ExecutionPlan, **kw: Any):
    """``with executing(model, plan) as ex: ex.step(...)``."""
    ex = PlanExecutor(model, plan, **kw)
    with ex:
        yield ex
