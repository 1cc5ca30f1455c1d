"""Budget planners: FedHybrid's hybrid (Algorithm 1 with MPS, eq. 5-6) and baselines.

All planners share one interface, ``plan(profile, budget_bytes, method)``, and one
memory model (:func:`simulate`):

* time runs over forward items ``0..T-1`` (unit calls and glue), then backward in
  reverse order (item ``s`` is back-propagated at step ``2T-1-s``);
* a storage is held from its first holder's forward step to that holder's
  backward step (holders are nested intervals, so the earliest holder decides);
  a kept unit holds its saved storages, a recomputed unit holds only its inputs,
  a compressed unit holds its encoded bytes (+ small/non-float raw tensors), a
  swapped unit holds no float storage;
* transients at a unit's backward step: a recomputed unit re-materialises all its
  saved storages not otherwise held; a compressed/swapped unit decodes at most its
  largest leaf's saved bytes at a time.

Algorithm 1 (hybrid): walk the forward items; whenever memory at the step exceeds
the budget, take the live unit with the highest MPS and apply the technique with
the higher MPS (recompute vs compress); after the walk, keep evicting (over all
units) while the backward phase exceeds the budget.  MPS(d) = SM(d) x FLT(d) /
(PC(d) + RC(d)) (eq. 5): SM = bytes freed, FLT = time until the tensor is needed
in backward (forward time of later items x 3: forward + backward ~ 2x forward,
Kaplan et al. 2020 §2.1), PC + RC = encode + decode time for compress, eq. 6
for recompute, the I/O model for swap.

Finer than units, regen candidates (:class:`RegenProfile`: a cheap leaf whose
output a consumer saves while the leaf saves its own input) can be switched to
``regen`` by ``recompute`` and ``hybrid``: the consumer's copy is not held, it is
rematerialised (one leaf forward) at the consumer's backward step.

Also finer than units, mask candidates (:class:`MaskProfile`: a ReLU-family leaf
whose one saved tensor nobody else saves) can be switched to ``mask`` by ``hybrid``
(exact lossless compression to 1 bit per element; its MPS is the highest of all
because the cost is one compare + bit pack).  A mask and a regen that would both
replace the same tensor exclude each other.

Also finer than units, leaf recomputations (:class:`LeafRecomputeProfile`: a
parameter-free leaf with several inputs inside a kept unit, e.g. attention's core)
can be switched to ``recompute`` by ``recompute`` and ``hybrid``: the leaf holds its
inputs instead of what it saves and re-runs in backward (all of its saved tensors at
once at the unit's backward step).

The costs of masks, regenerations and leaf recomputations are the measured times of
the executor's own code for them (:mod:`.regen`, :func:`.mask.masked_call`), so
that a plan predicted cheap also runs cheap.

``scope="all"`` (:func:`simulate_all`) drives the peak over *every* allocation of the
step under the budget instead of the saved tensors' (gradients, workspace and the rest
measured once in the profile, :mod:`.alloc`); ``scope="saved"`` is the default.

Baselines on the same walk: ``recompute`` (only recompute, Melon-like), ``compress``
(uniform int8, then int4; GACT-like), ``swap`` (Capuchin-like, to storage under
:class:`IoContentionModel`), ``none`` (keep everything).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgetrain.engine.budget.plan import ExecutionPlan, UnitDecision
from edgetrain.engine.budget.profile import (
    AliasProfile,
    LeafRecomputeProfile,
    MaskProfile,
    ModelProfile,
    RegenProfile,
    UnitProfile,
)
from edgetrain.engine.budget.swap import IoContentionModel
from edgetrain.errors import BudgetError, ConfigError

METHODS = ("none", "recompute", "compress", "swap", "hybrid")
#: allowed next states per method: state = (decision, codec)
_LADDER: dict[str, dict[tuple[str, str | None], list[tuple[str, str | None]]]] = {
    "none": {},
    "recompute": {("keep", None): [("recompute", None)]},
    "compress": {
        ("keep", None): [("compress", "int8")],
        ("compress", "int8"): [("compress", "int4")],
    },
    "swap": {("keep", None): [("swap", None)]},
    "hybrid": {
        ("keep", None): [("recompute", None), ("compress", "mix")],
        # a recomputed block re-materialises all of its tensors at once in backward;
        # compressing it instead bounds that transient (used when it sets the peak)
        ("recompute", None): [("compress", "mix")],
    },
}
CODECS_FOR = {"compress": ("int8", "int4"), "hybrid": ("mix",)}
#: methods that may regenerate cheap leaf outputs (a form of recomputation)
REGEN_METHODS = ("recompute", "hybrid")
_REGEN_LADDER: dict[tuple[str, str | None], list[tuple[str, str | None]]] = {
    ("keep", None): [("regen", None)]
}
#: methods that may hold ReLU-family tensors as exact 1-bit masks
MASK_METHODS = ("hybrid",)
_MASK_LADDER: dict[tuple[str, str | None], list[tuple[str, str | None]]] = {
    ("keep", None): [("mask", None)]
}
_LR_LADDER: dict[tuple[str, str | None], list[tuple[str, str | None]]] = {
    ("keep", None): [("recompute", None)]
}
Fine = RegenProfile | MaskProfile | LeafRecomputeProfile

State = tuple[str, str | None]


@dataclass
class _Ctx:
    profile: ModelProfile
    io: IoContentionModel
    #: the walk's live states (None: units alone); fine choices shrink what a kept unit holds
    states: dict[str, State] | None = None
    _peers: dict[tuple[str, str], list] | None = None

    def _fine_saving(self, u: UnitProfile) -> int:
        if not self.states:
            return 0
        gone = 0
        for m in self.profile.leaf_masks:
            if m.key in u.saved and self.states.get(m.state_key, ("keep",))[0] == "mask":
                gone += m.nbytes - m.mask_bytes
        dropped = {
            r.out_key
            for r in self.profile.regens
            if self.states.get(r.state_key, ("keep",))[0] == "regen"
        }
        for x in self.profile.leaf_recomputes:
            if self.states.get(x.state_key, ("keep",))[0] == "recompute":
                dropped.update(x.saved)
        return gone + sum(b for k, b in u.saved.items() if k in dropped)

    def held(self, u: UnitProfile | Fine, s: State) -> int:
        if isinstance(u, MaskProfile):
            return u.nbytes if s[0] == "keep" else u.mask_bytes
        if isinstance(u, RegenProfile):
            return u.out_bytes if s[0] == "keep" else 0
        if isinstance(u, LeafRecomputeProfile):
            return u.saved_bytes if s[0] == "keep" else u.input_bytes
        if s[0] == "keep":
            return max(u.saved_bytes - self._fine_saving(u), 0)
        if s[0] == "recompute":
            return sum(u.inputs.values())
        if s[0] == "compress":  # the ReLU-family leaves' saves held as masks (simulate)
            cost = u.codecs[s[1]]
            held = cost.held_bytes + u.auto_mask_bytes
            if cost.per_key:
                for k, m in auto_masks(self.profile, u).items():
                    held += m.mask_bytes - cost.per_key.get(k, 0)
                held -= sum(cost.per_key.get(k, 0) for k in u.auto_mask_keys)
            return held
        return u.saved_bytes - u.float_bytes  # swap

    def cost(self, u: UnitProfile | Fine, s: State) -> float:
        if s[0] == "keep":
            return 0.0
        if isinstance(u, MaskProfile):
            return u.cost_s
        if isinstance(u, RegenProfile):
            return u.regen_cost()
        if isinstance(u, LeafRecomputeProfile):
            return u.fwd_s
        if s[0] == "recompute":
            return u.rc_compute()
        if s[0] == "compress":
            c = u.codecs[s[1]]
            return c.encode_s + c.decode_s
        return self.io.write_s(u.float_bytes) + self.io.read_s(u.float_bytes)

    def flt(self, u: UnitProfile | Fine) -> float:
        later = sum(self.profile.item_s[u.step + 1 :])
        return 3.0 * later + u.fwd_s + 1e-6

    def calls(self, u: UnitProfile | Fine) -> list[UnitProfile | Fine]:
        """Every profile that takes ``u``'s decision: the calls of a shared module or of
        a leaf inside one (one profile per call, ``call`` 0, 1, ...), else ``u`` alone
        (:func:`calls_of`, grouped once per context: the walk asks for every candidate)."""
        if self._peers is None:
            self._peers = {}
            for v in [*self.profile.units, *self.profile.regens, *self.profile.leaf_masks]:
                self._peers.setdefault(_peer_key(v), []).append(v)
        if isinstance(u, LeafRecomputeProfile):
            return [u]
        same = self._peers.get(_peer_key(u), [u])
        return same if len(same) > 1 else [u]

    def decision_cost(self, u: UnitProfile | Fine, s: State) -> float:
        """What taking state ``s`` costs over every call it applies to."""
        return sum(self.cost(v, s) for v in self.calls(u))

    def mps(self, u: UnitProfile | Fine, cur: State, nxt: State) -> float:
        """Eq. 5 for a decision: saved memory x freed lifetime over its cost, summed over
        the calls it applies to (a shared module decides for all its calls)."""
        vs = self.calls(u)
        gain = sum(max(self.held(v, cur) - self.held(v, nxt), 0) * self.flt(v) for v in vs)
        if gain <= 0:
            return -1.0
        return gain / max(self.decision_cost(u, nxt), 1e-9)


def _peer_key(u: UnitProfile | Fine) -> tuple[str, str]:
    """The decision ``u`` takes, shared by all its calls: (kind, key in the states)."""
    if isinstance(u, UnitProfile):
        return ("unit", u.name)
    return (type(u).__name__, u.state_key)


def calls_of(profile: ModelProfile, u: UnitProfile | Fine) -> list[UnitProfile | Fine]:
    """Every profile of ``profile`` that takes ``u``'s decision (:meth:`_Ctx.calls`)."""
    return _Ctx(profile, IoContentionModel()).calls(u)


def auto_masks(profile: ModelProfile, u: UnitProfile) -> dict[int, MaskProfile]:
    """The mask candidates inside unit ``u`` (storage key -> mask): what the executor
    masks whenever ``u`` is compressed, whether or not the plan masks them
    (``PlanExecutor.__enter__``: a lossy codec must not hold what a ReLU-family
    backward reads only through a predicate).  Cached on the profile."""
    cache = profile.__dict__.get("_auto_masks")
    if cache is None:
        cache = {}
        for m in profile.masks:
            for v in profile.units:
                if m.key in v.saved and (v.name == "" or m.name.startswith(v.name + ".")):
                    cache.setdefault(v.index, {})[m.key] = m
        profile.__dict__["_auto_masks"] = cache
    return cache.get(u.index, {})


def fine_owners(profile: ModelProfile) -> dict[str, str]:
    """Per fine decision (mask, regeneration, leaf recomputation; by state key), the unit
    it lies in: a recomputed unit voids its fine choices.  Cached on the profile."""
    cache = profile.__dict__.get("_fine_owners")
    if cache is None:
        cache = {}
        for f in [*profile.leaf_masks, *profile.regens, *profile.leaf_recomputes]:
            for u in profile.units:
                if u.name == "" or f.name == u.name or f.name.startswith(u.name + "."):
                    cache[f.state_key] = u.name
        profile.__dict__["_fine_owners"] = cache
    return cache


def chain_owners(profile: ModelProfile) -> dict[str, str]:
    """Per regeneration through several leaves (state key), the unit it lies in.  Inside
    a compressed or swapped unit such a chain regenerates nothing: its head's input is
    saved encoded (or on storage), so nothing holds the raw tensor it would regenerate
    from (``PlanExecutor._wrap_regen``: the head's entry is dead by the tail), and the
    tail's output is encoded as it would be without the chain.  Cached on the
    profile."""
    cache = profile.__dict__.get("_chain_owners")
    if cache is None:
        owners = fine_owners(profile)
        cache = {
            r.state_key: owners[r.state_key]
            for r in profile.regens
            if len(r.chain) > 1 and r.state_key in owners
        }
        profile.__dict__["_chain_owners"] = cache
    return cache


_NOT_KEPT = ("compress", "swap")


def simulate(
    profile: ModelProfile, states: dict[str, State], *, live_sources: bool = False
) -> np.ndarray:
    """Predicted saved-tensor bytes at every step (forward then backward) under ``states``.

    ``live_sources`` (:func:`simulate_all`): a regenerated leaf's input is also held while
    its output is held by something other than a saved-tensor slot -- a recomputed
    unit's or leaf's kept inputs.  The executor's regeneration source refers to that
    input for as long as the output lives, so the process holds it then, though autograd
    saves neither (the saved-tensor accountant does not count it, so ``scope="saved"``
    leaves it out).  Measured: MobileNetV2 b32 at half the all-allocation peak, a plan
    regenerating and masking ``conv_stem.2`` with ``features.0`` recomputed ran 2.6 MB
    over its prediction and its budget; the mask freed nothing (round 14).
    """
    # one call per state the planner and its search try (tens of thousands per plan), so
    # the loops below test set membership and fill arrays in bulk; the memory model is
    # the one described above, step for step
    t = profile.n_steps
    get = states.get
    first: dict[int, int] = {}
    size: dict[int, int] = {}
    regen = [r for r in profile.regens if get(r.state_key, _KEEP1)[0] == "regen"]
    if regen:  # a chain inside a compressed / swapped unit regenerates nothing
        owners = chain_owners(profile)
        regen = [
            r
            for r in regen
            if r.state_key not in owners or get(owners[r.state_key], _KEEP1)[0] not in _NOT_KEPT
        ]
    dropped = {r.out_key: r.out_bytes for r in regen}
    masked = {
        m.key: m
        for m in profile.leaf_masks
        if get(m.state_key, _KEEP1)[0] == "mask" and m.key not in dropped
    }
    # leaves recomputed inside a unit that is not itself recomputed
    lr_on = [
        x
        for x in profile.leaf_recomputes
        if get(x.state_key, _KEEP1)[0] == "recompute" and get(x.unit, _KEEP1)[0] != "recompute"
    ]
    lr_drop = {k for x in lr_on for k in x.saved}
    gone = dropped.keys() | lr_drop  # saved tensors no holder keeps

    def hold(keys: dict[int, int], step: int, skip: Any = ()) -> None:
        for k, b in keys.items():
            if k in skip:
                continue
            f = first.get(k)
            if f is None or step < f:
                first[k] = step
            size[k] = b

    extra = np.zeros(2 * t + 1, dtype=np.int64)
    regen_at: list[tuple[int, int]] = []  # (forward step of a holder, regenerated bytes)
    for step, keys in profile.glue:
        hold(keys, step, gone)
        if dropped:
            regen_at += [(step, dropped[k]) for k in keys.keys() & dropped.keys()]
    unmask: list[tuple[int, int]] = []  # (forward step of a unit, largest unmasked tensor)
    for u in profile.units:
        d, codec = get(u.name, _KEEP)
        saved = u.saved
        mine: dict[int, int] = {}
        if d in ("keep", "compress", "swap"):
            if dropped:
                regen_at += [(u.step, dropped[k]) for k in saved.keys() & dropped.keys()]
            if masked:
                mine = {k: masked[k].mask_bytes for k in saved.keys() & masked.keys()}
                aliased = [masked[k] for k in mine if type(masked[k]) is AliasProfile]
                if aliased and d == "keep":  # the leaf holds its output (saved anyway)
                    hold({m.alias_key: m.alias_bytes for m in aliased}, u.step)
                elif aliased:  # inside a compressed / swapped unit: the 1-bit mask
                    mine.update((m.key, m.bits_bytes) for m in aliased)
            if d == "compress":  # the executor masks a compressed unit's ReLU-family leaves
                # (also where the storage is regenerated: the leaf then holds its bits, and
                # the regeneration serves no save)
                auto = auto_masks(profile, u)
                if auto:
                    auto = {k: m for k, m in auto.items() if k not in mine}
                    mine.update((k, m.mask_bytes) for k, m in auto.items())
            if mine:  # a recomputed unit runs without masks (nothing of it is held)
                # the packed bits are numpy's memory, apart from the storage (``~k``):
                # a regeneration's source may still hold that storage whole
                hold({~k: b for k, b in mine.items()}, u.step)
                slow = [
                    m.nbytes for k in mine if not (m := masked[k] if k in masked else auto[k]).fast
                ]
                if slow:  # the hook fallback expands one mask at a time in backward
                    unmask.append((u.step, max(slow)))
        if d == "keep":
            hold(saved, u.step, gone | mine.keys() if mine else gone)
        elif d == "recompute":  # its inputs, and its BatchNorms' batch statistics
            hold({**u.inputs, **{k: saved[k] for k in u.stats_keys}}, u.step)
        else:  # compress / swap: small and non-float storages stay raw
            hold(saved, u.step, gone | u.float_keys | mine.keys())
            if d == "compress":
                cost = u.codecs[codec]
                enc = cost.held_bytes - (u.saved_bytes - u.float_bytes)
                out = gone | mine.keys()
                if u.auto_mask_keys:  # saved only by a leaf the executor masks
                    out = out | u.auto_mask_keys
                if cost.per_key:  # regenerated / masked tensors are not encoded
                    if out:
                        enc = sum(b for k, b in cost.per_key.items() if k not in out)
                else:  # a cost without per-storage sizes (a synthetic one): scale
                    lost = sum(b for k, b in saved.items() if k in out and k in u.float_keys)
                    if lost and u.float_bytes:
                        enc = int(enc * max(u.float_bytes - lost, 0) / u.float_bytes)
                enc += u.auto_mask_bytes
                extra[u.step] += enc
                extra[2 * t - u.step] -= enc
    holders: dict[int, int] = {}  # regenerated storage -> its latest held consumer's step
    if regen:
        for step, keys in profile.glue:
            for k in keys.keys() & dropped.keys():
                holders[k] = max(holders.get(k, step), step)
        for u in profile.units:
            if get(u.name, _KEEP)[0] != "recompute":
                for k in u.saved.keys() & dropped.keys():
                    holders[k] = max(holders.get(k, u.step), u.step)
    encoded = _encoded_sources(profile, states, regen, gone, masked) if regen else ()
    for x in lr_on:  # a recomputed leaf holds its inputs from forward to its backward
        hold(x.inputs, x.step)
    for r in regen:  # a placeholder in a held consumer keeps the leaf's input alive
        if r.state_key in encoded:
            continue  # ... unless a compressed unit saved it encoded (below)
        if r.out_key in holders or (live_sources and r.out_key in first):
            hold({r.in_key: r.in_bytes}, r.step)
    delta = extra
    if first:
        steps = np.fromiter(first.values(), dtype=np.int64, count=len(first))
        sizes = np.fromiter((size[k] for k in first), dtype=np.int64, count=len(first))
        np.add.at(delta, steps, sizes)
        np.subtract.at(delta, 2 * t - steps, sizes)
    mem = np.cumsum(delta)[: 2 * t]
    # rematerialised at the holder's backward step, each only while the backward node
    # that saved it runs (a node saves at most two of them: the two largest per holder)
    by_step: dict[int, list[int]] = {}
    for step, b in regen_at:
        by_step.setdefault(step, []).append(b)
    for step, bs in by_step.items():
        mem[2 * t - 1 - step] += sum(sorted(bs)[-2:])
    for step, b in unmask:  # one mask expanded at a time in the unit's backward
        mem[2 * t - 1 - step] += b
    for r in regen:  # an encoded source's decoding, from the first regeneration (the
        # latest consumer's backward) to the leaf's own backward, which takes it over
        c = holders.get(r.out_key) if r.state_key in encoded else None
        if c is not None and c > r.step:
            mem[2 * t - 1 - c : 2 * t - 1 - r.step] += r.in_bytes
    for x in lr_on:  # all of a recomputed leaf's saved tensors at once, in its backward
        mem[2 * t - 1 - x.step] += x.saved_bytes
    for u in profile.units:
        d = get(u.name, _KEEP)[0]
        if d == "recompute":
            b = 2 * t - 1 - u.step
            mem[b] += sum(v for k, v in u.saved.items() if not (k in first and first[k] <= u.step))
        elif d in ("compress", "swap"):
            mem[2 * t - 1 - u.step] += u.leaf_max_bytes
    return mem


_KEEP: State = ("keep", None)
_KEEP1 = ("keep",)


def _encoded_sources(
    profile: ModelProfile,
    states: dict[str, State],
    regen: list[RegenProfile],
    gone: set[int],
    masked: dict[int, MaskProfile],
) -> set[str]:
    """The regenerations (state keys) whose source a compressed unit saves encoded: a
    single leaf whose unit is compressed and encodes the leaf's input (a float storage
    of the unit, neither regenerated, recomputed nor masked).  The executor regenerates
    them from the decoded encoding and holds no raw copy of the input
    (``PlanExecutor._wrap_regen``); the decoding is handed on to the leaf's own backward.
    Round 28: BERT-small's FFN at saved 0.3 compressed both the GELU's input and its
    output (fc2's input, 15-17 ms per layer) where regenerating the output from the
    decoded input costs the GELU alone (2.2 ms)."""
    owners = fine_owners(profile)
    by_name = profile.__dict__.get("_units_by_name")
    if by_name is None:
        by_name = profile.__dict__["_units_by_name"] = {}
        for u in profile.units:
            by_name.setdefault(u.name, []).append(u)
    out: set[str] = set()
    for r in regen:
        o = owners.get(r.state_key)
        if r.chain or o is None or states.get(o, _KEEP1)[0] != "compress":
            continue
        k = r.in_key
        if k in gone or k in masked:
            continue
        for u in by_name.get(o, ()):
            if k in u.float_keys and k not in u.auto_mask_keys and k not in auto_masks(profile, u):
                out.add(r.state_key)
    return out


SCOPES = ("saved", "all")


def check_scope(scope: str) -> str:
    if scope not in SCOPES:
        raise ConfigError(
            f"budget scope {scope!r}; expected 'saved' (autograd's saved tensors) or 'all' "
            "(every allocation of the step: saved tensors, gradients, workspace)"
        )
    return scope


def simulate_all(profile: ModelProfile, states: dict[str, State]) -> np.ndarray:
    """Predicted bytes of *every* allocation of the step at every step under ``states``
    (``scope="all"``; the model is :mod:`edgetrain.engine.budget.alloc`'s): the saved
    tensors (:func:`simulate`), the parameter gradients, the measured rest of the
    unplanned step, the RNG state a recomputed unit keeps, the forward transient of
    every recomputed / compressed / swapped unit (its largest leaf's saved bytes,
    materialised before it is dropped or encoded), what the decisions' transients
    measured beyond that (``alloc.fix``) and, at a compressed / swapped unit's backward
    step, the bytes its released tensors took off the measured rest
    (``alloc.released``, at most the unit's float bytes).

    Round 10 added a blanket 1.5 x the unit's largest leaf there instead, fitted to
    the shortfall on MobileNetV2 b8; the shortfall was ``released`` (measured, per unit
    and step: 9,438,336 B at features.2.conv.1, 2.0 leaves; 786,624 B at
    features.2.conv.2, 0.17 leaves)."""
    if profile.alloc is None:
        raise ConfigError(
            "budget scope 'all' needs the step's allocations profiled; profile with "
            "profile_model(..., alloc_timeline=True)"
        )
    mem = simulate(profile, states, live_sources=True)
    mem = mem + np.asarray(profile.alloc.grads, dtype=np.int64)
    mem = mem + np.asarray(profile.alloc.residual, dtype=np.int64)
    t = profile.n_steps
    get = states.get
    fix = profile.alloc.fix
    released = profile.alloc.released
    # additions collected, then applied at once: over a step range (a difference array)
    # and at single steps (step -> bytes)
    span = np.zeros(2 * t + 1, dtype=np.int64)
    point: dict[int, int] = {}

    def at(i: int, b: int) -> None:
        point[i] = point.get(i, 0) + b

    inputs = profile.input_keys
    for u in profile.units:
        d, codec = get(u.name, _KEEP)
        if d == "keep":
            continue
        back = 2 * t - 1 - u.step
        if d == "recompute":  # the executor keeps the CPU RNG state for the re-run
            span[u.step] += _rng_state_bytes()
            span[2 * t - u.step] -= _rng_state_bytes()
        if d in ("recompute", "compress", "swap"):
            kind = d if d != "compress" else f"compress:{codec}"
            f, b = fix.get(kind, {}).get(u.entry, (0, 0))
            at(u.step, u.leaf_max_bytes + f)
            at(back, b)
            if d != "recompute" and released:  # its raw tensors are gone from its backward
                at(back, min(released[back], u.float_bytes))
            if d in ("compress", "swap") and inputs:
                # an encoded / swapped save of the step's input frees nothing: the caller
                # holds the batch (round 19: a compressed stem predicted 22 kB under the
                # measured peak of a small CNN, over its budget)
                kept = sum(u.saved[k] for k in u.saved.keys() & inputs)
                span[u.step] += kept
                span[2 * t - u.step] -= kept
    recomputed = {u.step for u in profile.units if get(u.name, _KEEP1)[0] == "recompute"}
    mask_fix = fix.get("mask", {})  # a mask's measured excess (alloc._mask_fix)
    for m in profile.masks if mask_fix else ():
        if get(m.state_key, _KEEP1)[0] != "mask" or m.step in recomputed:
            continue  # a recomputed unit runs without masks (simulate)
        f, b = mask_fix.get(m.entry, (0, 0))
        at(m.step, f)
        at(2 * t - 1 - m.step, b)
    # regenerations: per step, the largest single one's measured excess (alloc._regen_fix)
    # or, with two or more on, all of a step's at once (alloc._regen_step_fix) if larger;
    # with two or more on, at least one regenerated output more in the backward step:
    # three regenerations of one MobileNetV2 block together (its expansion's and its
    # depthwise convolution's BatchNorm -> ReLU6, and that BatchNorm alone) held one
    # more 576-channel output there (271,104 B of 294,912), though any two did not and
    # the measured sets did not contain the three (round 16)
    regen_fix, step_fix = fix.get("regen", {}), fix.get("regen-step", {})
    on: dict[int, list[tuple[int, int, int]]] = {}
    owners = chain_owners(profile) if regen_fix else {}
    for r in profile.regens if regen_fix else ():
        if r.state_key in owners and get(owners[r.state_key], _KEEP1)[0] in _NOT_KEPT:
            continue  # regenerates nothing there (simulate)
        if get(r.state_key, _KEEP1)[0] == "regen" and r.step not in recomputed:
            f, b = regen_fix.get(r.entry, (0, 0))
            on.setdefault(r.step, []).append((f, b, r.out_bytes))
    for k, fs in on.items():
        f, b = max(x[0] for x in fs), max(x[1] for x in fs)
        if len(fs) > 1:
            cf, cb = step_fix.get(str(k), (0, 0))
            f, b = max(f, cf), max(b, cb, max(x[2] for x in fs))
        at(k, f)
        at(2 * t - 1 - k, b)
    for x in profile.leaf_recomputes:  # a recomputed leaf keeps the RNG state too
        if get(x.state_key, _KEEP1)[0] == "recompute" and get(x.unit, _KEEP1)[0] != "recompute":
            span[x.step] += _rng_state_bytes()
            span[2 * t - x.step] -= _rng_state_bytes()
    mem += np.cumsum(span)[: 2 * t]
    if point:
        idx = np.fromiter(point.keys(), dtype=np.int64, count=len(point))
        np.add.at(mem, idx, np.fromiter(point.values(), dtype=np.int64, count=len(point)))
    return mem


@functools.cache
def _rng_state_bytes() -> int:
    """Bytes of the CPU RNG state a recomputed unit holds from its forward to its
    backward (``PlanExecutor`` keeps ``torch.get_rng_state()`` to replay dropout; so
    does a recomputed leaf such as attention's core): measured on BERT-small b4 as a
    constant 10,112 B over two recomputed units, and on BERT-small b8 as 10,112 B over
    two recomputed attention cores."""
    import torch

    return int(torch.get_rng_state().numel())


def _simulator(scope: str):
    return simulate if check_scope(scope) == "saved" else simulate_all


@dataclass
class _Result:
    states: dict[str, State]
    mps_at: dict[str, float]
    peak: int
    best_peak: int
    unplanned: int
    ctx: _Ctx
    history: list[tuple[int, dict[str, State], dict[str, float]]]  # (peak, states, mps) per state


def _greedy(
    profile: ModelProfile,
    budget_bytes: int,
    method: str,
    io: IoContentionModel,
    use_regen: bool = True,
    fine_first: bool = False,
    scope: str = "saved",
) -> _Result:
    """One Algorithm-1 walk.  ``fine_first``: walk with the fine candidates (masks,
    regenerations) alone first, then again with units as well.  ``scope``: the peak
    driven under the budget is the saved tensors' (:func:`simulate`) or every
    allocation's (:func:`simulate_all`)."""
    sim = _simulator(scope)
    if method not in METHODS:
        raise ConfigError(f"unknown budget method {method!r}; expected one of {', '.join(METHODS)}")
    if budget_bytes <= 0:
        raise ConfigError(f"budget {budget_bytes} bytes; expected a positive number of bytes")
    for c in CODECS_FOR.get(method, ()):
        missing = [u.name for u in profile.units if c not in u.codecs]
        if missing:
            raise ConfigError(
                f"method {method!r} needs codec {c!r} profiled; missing for {missing[:3]}. "
                f"Profile with profile_model(..., codecs=codecs_for({method!r})) "
                "(edgetrain.engine.budget.codecs_for)"
            )
    ctx = _Ctx(profile, io)
    ladder = _LADDER[method]
    states: dict[str, State] = {u.name: ("keep", None) for u in profile.units}
    ctx.states = states
    regens = list(profile.regens) if use_regen and method in REGEN_METHODS else []
    masks = list(profile.masks) if method in MASK_METHODS else []
    if masks and scope == "saved":  # aliases: saved-tensor scope only (alias_scope)
        masks += profile.aliases
    lrs = list(profile.leaf_recomputes) if use_regen and method in REGEN_METHODS else []
    if masks:  # regenerating from a maskable tensor would hold it whole: use the chain
        mkeys = {m.key for m in masks}
        regens = [r for r in regens if r.chain or r.in_key not in mkeys]
    for r in [*regens, *masks, *lrs]:
        states[r.state_key] = ("keep", None)
    # a mask and regenerations replacing the same stored tensor exclude each other, and
    # so do a mask and a regeneration from the masked tensor (which would hold it whole)
    rivals = _rivals([*regens, *masks, *lrs])
    mps_at: dict[str, float] = {}
    unplanned = int(sim(profile, states).max(initial=0))
    best_peak = unplanned
    history: list[tuple[int, dict[str, State], dict[str, float]]] = [(unplanned, dict(states), {})]
    # a shared module's calls take one decision: its first call stands for all of them
    evictable: list[UnitProfile | Fine] = [u for u in profile.units if u.call == 0]
    evictable += [f for f in masks + regens + lrs if getattr(f, "call", 0) == 0]
    fine: list[Fine] = [*masks, *regens, *lrs]
    # the unit each fine candidate lives in (a recomputed unit voids its fine choices)
    owner = fine_owners(profile)

    chains = chain_owners(profile)

    def key(u: UnitProfile | Fine) -> str:
        return u.name if isinstance(u, UnitProfile) else u.state_key

    def options(u: UnitProfile | Fine) -> list[State]:
        if isinstance(u, UnitProfile):
            return ladder.get(states[u.name], [])
        if any(states[r][0] != "keep" for r in rivals[u.state_key]):
            return []
        if states.get(owner.get(u.state_key, ""), ("keep",))[0] == "recompute":
            return []
        if u.state_key in chains and states.get(chains[u.state_key], _KEEP1)[0] in _NOT_KEPT:
            return []  # regenerates nothing there (chain_owners)
        if isinstance(u, LeafRecomputeProfile):
            lad = _LR_LADDER
        else:
            lad = _MASK_LADDER if isinstance(u, MaskProfile) else _REGEN_LADDER
        return lad.get(states[u.state_key], [])

    def evict(limit_step: int | None, peak: int, pool: list[UnitProfile | Fine]) -> bool:
        """One reclamation step (Algorithm 1, lines 20-27).

        Forward walk: rank live units by MPS (eq. 5) with SM = bytes freed.  Backward
        phase: SM = the drop of the predicted peak (a transient can set the peak);
        if no single change lowers it, fall back to bytes freed.
        """
        best = None
        fallback = None
        for u in pool:
            if limit_step is not None and u.step > limit_step:
                continue
            for nxt in options(u):
                cur = states[key(u)]
                if limit_step is None:
                    states[key(u)] = nxt
                    drop = peak - int(sim(profile, states).max(initial=0))
                    states[key(u)] = cur
                    if drop > 0:
                        score = drop * ctx.flt(u) / max(ctx.decision_cost(u, nxt), 1e-9)
                        if best is None or score > best[0]:
                            best = (score, u, nxt)
                score = ctx.mps(u, cur, nxt)
                if score > 0 and (fallback is None or score > fallback[0]):
                    fallback = (score, u, nxt)
        best = best if limit_step is None and best is not None else fallback
        if best is None:
            return False
        states[key(best[1])] = best[2]
        mps_at[key(best[1])] = best[0]
        if (
            best[2][0] == "recompute"
        ):  # the unit re-runs all its leaves: fine choices inside are void
            inside = best[1].name + "."
            for f in fine:
                if f.name.startswith(inside) or best[1].name == "":
                    states[f.state_key] = ("keep", None)
                    mps_at.pop(f.state_key, None)
        history.append((int(sim(profile, states).max(initial=0)), dict(states), dict(mps_at)))
        return True

    mem = sim(profile, states)
    pools = [fine, evictable] if fine_first and fine else [evictable]
    for pool in pools:
        for step in range(profile.n_steps):  # Algorithm 1: forward walk, alloc() at each item
            while mem[step] > budget_bytes and evict(step, int(mem.max(initial=0)), pool):
                mem = sim(profile, states)
                best_peak = min(best_peak, int(mem.max(initial=0)))
        while mem.max(initial=0) > budget_bytes and evict(None, int(mem.max(initial=0)), pool):
            mem = sim(profile, states)
            best_peak = min(best_peak, int(mem.max(initial=0)))
    return _Result(states, mps_at, int(mem.max(initial=0)), best_peak, unplanned, ctx, history)


def _rivals(fine: list[Fine]) -> dict[str, list[str]]:
    """Per fine decision, the others it excludes (:func:`_clash`) -- over all its calls."""
    out: dict[str, list[str]] = {}
    for f in fine:
        got = out.setdefault(f.state_key, [])
        for g in fine:
            if (
                g is not f
                and g.state_key != f.state_key
                and g.state_key not in got
                and _clash(f, g)
            ):
                got.append(g.state_key)
    return out


def _clash(f: Fine, g: Fine) -> bool:
    def drops(x: Fine) -> set[int]:
        if isinstance(x, LeafRecomputeProfile):
            return set(x.saved)
        return {x.out_key if isinstance(x, RegenProfile) else x.key}

    def needs(x: Fine) -> set[int]:  # storages x holds whole when chosen
        if isinstance(x, LeafRecomputeProfile):
            return set(x.inputs)
        if isinstance(x, AliasProfile):
            return {x.alias_key}
        return {x.in_key} if isinstance(x, RegenProfile) else set()

    if drops(f) & drops(g):
        return True
    # b rebuilds from what a drops: b would hold it whole
    return bool(needs(f) & drops(g) or needs(g) & drops(f))


def plan(
    profile: ModelProfile,
    budget_bytes: int,
    method: str = "hybrid",
    *,
    io: IoContentionModel | None = None,
    scope: str = "saved",
    refine: bool | None = None,
) -> ExecutionPlan:
    """Plan under ``budget_bytes``; BudgetError if no plan fits.

    ``scope="saved"`` (default): the budget bounds autograd's saved tensors.
    ``scope="all"``: it bounds every allocation of the step (:func:`simulate_all`;
    the profile needs ``alloc_timeline=True``), and the plan records
    ``meta["scope"] = "all"``.

    The feasible walk with the lowest predicted overhead wins, except that walks
    predicted within :data:`PLAN_TIE_TOL` of it are a tie, broken towards fewer
    lossy (compressed) units, then fewer recomputations (see :func:`plan_candidates` for all of them, and
    :mod:`edgetrain.engine.budget.autotune` to pick by measurement).  For ``hybrid``
    the candidates include the local-search refinement of the lowest-predicted walk
    (:mod:`.refine`) under ``scope="all"``, or wherever ``refine=True``; ``refine=False``:
    the greedy walks alone.
    """
    return plan_candidates(profile, budget_bytes, method, io=io, scope=scope, refine=refine)[0]


def plan_candidates(
    profile: ModelProfile,
    budget_bytes: int,
    method: str = "hybrid",
    *,
    io: IoContentionModel | None = None,
    scope: str = "saved",
    refine: bool | None = None,
) -> list[ExecutionPlan]:
    """Every feasible greedy walk's plan under ``budget_bytes``, one per distinct set of
    decisions: first the one :func:`plan` returns, then the others by predicted overhead.

    Choice of the first (:func:`_choose`): the lowest predicted overhead, where plans
    predicted within :data:`PLAN_TIE_TOL` of it tie and the tie goes to the plan with
    the fewest lossy (compressed) units, then the fewest recomputations (regenerated
    leaves + recomputed blocks and leaves), then the lower prediction.  For ``hybrid`` the choice is also capped at the prediction
    of the plan ``recompute`` would choose (its walks are among hybrid's), so hybrid is
    never predicted slower than recompute, and that plan is kept unless another is
    predicted more than :data:`HYBRID_MARGIN` cheaper (masks and compression must win
    clearly: their in-step prices are the noisier ones).  Measuring these few plans and keeping the
    fastest (autotune) is the alternative to trusting the prediction.  BudgetError if
    none fits.

    ``refine`` (``hybrid`` only): up to two more candidates, walk ``"refined"``: the
    lowest-predicted walk's states after :func:`.refine.refine` (drop and exchange moves
    under the same memory model and costs; never predicted above its start), and walk
    ``"refined-exact"``: the lowest-predicted walk without compression, refined with
    moves that add none (so that the tie rule below has a lossless refined plan to
    prefer).  They enter the same choice, so a refined plan within the tolerance of a
    plan with fewer lossy / recomputation decisions still loses to that plan.  Default
    (None): on, under either scope (``refine=False``: the greedy walks only, whose plans a
    fixture pins byte for byte, tests/engine/budget/test_budget_scope.py).
    Measured under ``scope="saved"`` (``budget_overhead.py --refined-entry``: the refined
    and the greedy plan interleaved in the same rounds, one fresh process per budget):
    round 13, below the greedy plan or level in 11 of 12 runs, above it once (MobileNetV2
    b32 at 0.5, 1.032 [1.002, 1.040]), so it stayed opt-in there; round 18 (per-kind
    regeneration factors, recomputed BatchNorm from its statistics), MobileNetV2 b32 at
    0.25 below the greedy plan, 0.973 [0.965, 0.982], and below ckpt-all, 0.967, and at
    0.5 the greedy plan itself.  It costs planning time, 3.7-15x per plan on MobileNetV2
    b32 and BERT-small b8 (seconds, against a profile of tens of seconds); FedHybrid's
    plan service, which plans for thousands of clients, keeps ``refine=False``.
    """
    check_scope(scope)
    refine = True if refine is None else refine
    found = sorted(
        _candidates(profile, budget_bytes, method, io, scope, refine=refine), key=lambda f: f[0]
    )
    uniq: list[tuple[float, ExecutionPlan, str]] = []
    seen: set[tuple] = set()
    for over, p, walk in found:
        key = _decisions(p)
        if key not in seen:
            seen.add(key)
            uniq.append((over, p, walk))
    cap = math.inf
    rc_choice = None
    if method == "hybrid":  # what recompute's own plan() would choose, from the same walks
        rc = [(o, p) for o, p, w in found if w == "recompute"]
        if rc:
            rc_choice = _choose(rc, math.inf)
            cap = rc_choice[0]
    best = min(o for o, _, _ in uniq)
    if rc_choice is not None and rc_choice[0] <= best * (1.0 + HYBRID_MARGIN):
        first = next(p for _, p, _ in uniq if _decisions(p) == _decisions(rc_choice[1]))
    else:
        first = _choose([(o, p) for o, p, _ in uniq], cap)[1]
    return [first] + [p for _, p, _ in uniq if p is not first]


def _decisions(p: ExecutionPlan) -> tuple:
    return tuple((u.name, u.decision, u.codec, tuple(u.chain or ())) for u in p.units)


#: ``hybrid`` keeps the plan ``recompute`` would choose unless another of its plans is
#: predicted more than this fraction cheaper: the masks' and compression's in-step
#: prices are noisier than the regenerations' and recomputations' (one paired
#: measurement of all masks at once, shared by bytes).  Measured (round 15, MobileNetV2
#: b32 at half the all-allocation peak, docs/results/budget.md): hybrid's plan of 26
#: regenerations and 22 masks, predicted 52.5 ms against recompute's 57.9 ms (10 %
#: lower), ran +76.7 ms against +48.6 ms; timed apart in a fresh profile its
#: regenerations ran as predicted (47.3 ms, +45 to +51 ms) and its masks at 1.4x
#: theirs (26.2 ms, +35 to +41 ms).  Where hybrid's plan was predicted 32 % below
#: recompute's (0.3 of the same peak) it ran 0.944 of it.
HYBRID_MARGIN = 0.20


#: predicted overheads within this fraction of the lowest are a tie (:func:`_choose`).
#: Measured: the predicted overhead of the same walk's plan (recompute 4-5 blocks +
#: 46-49 regenerations, MobileNetV2 b32 at 50%) was 274, 300, 304, 321 and 324 ms in
#: five profiles of one session on this shared CPU, i.e. +-9% around its mean, and
#: hybrid's two best walks at that budget were predicted 2-17% apart; which of them
#: won flipped between processes.
PLAN_TIE_TOL = 0.10


def _recomputations(p: ExecutionPlan) -> int:
    return sum(1 for u in p.units if u.decision in ("regen", "recompute"))


def _lossy(p: ExecutionPlan) -> int:
    """Decisions that change the gradients (compression; the others are exact)."""
    return sum(1 for u in p.units if u.decision == "compress")


def _choose(cands: list[tuple[float, ExecutionPlan]], cap: float) -> tuple[float, ExecutionPlan]:
    """The lowest prediction, or a plan predicted within :data:`PLAN_TIE_TOL` of it
    (and not above ``cap``) with fewer lossy decisions, then fewer recomputations.

    Why fewer lossy decisions first: a compressed unit changes the gradients (within
    the codec's bound), the other decisions are exact, and a prediction difference
    inside the tolerance cannot say the lossy plan is faster.  Measured: MobileNetV2
    b32 at 30% (end of round 5, benchmarks/out/r5lead), hybrid's plan compressed 7
    blocks (gradient error 3.9e-2) at a prediction of 639 ms against the exact
    recompute plan's 646 ms, and ran 1.357 of the unplanned step against 1.310.

    Why fewer recomputations: a prediction difference inside the tolerance is noise of
    the profile, so it cannot rank the plans; between near-equal plans this picks the
    same kind of plan in every process (a stable choice), and the kind that did better
    when measured -- MobileNetV2 b32 at 50% (benchmarks/out/r5/diag2.log, rotated
    interleaved steps, 2 rounds): the plan with 21 recomputations ran 1.125 of the
    unplanned step, the plan with 52 ran 1.208, although their predictions had been
    233 and 324 ms.
    """
    best = min(o for o, _ in cands)
    limit = min(best * (1.0 + PLAN_TIE_TOL), max(cap, best))
    ties = [(o, p) for o, p in cands if o <= limit]
    return min(ties, key=lambda f: (_lossy(f[1]), _recomputations(f[1]), f[0]))


def _candidates(
    profile: ModelProfile,
    budget_bytes: int,
    method: str,
    io: IoContentionModel | None,
    scope: str = "saved",
    refine: bool = False,
) -> list[tuple[float, ExecutionPlan, str]]:
    """(predicted overhead, plan, walk's ladder) of every walk that fits; BudgetError
    if none does.  ``refine`` (``hybrid``): plus the refinements of the lowest-predicted
    walk (walk ``"refined"``) and of the lowest-predicted walk without compression
    (``"refined-exact"``), each when it lowered the prediction."""
    io = io or IoContentionModel()
    # Algorithm 1 is greedy and its path depends on the candidates: with regen
    # candidates (fine units) and without them (units only), keep the feasible plan
    # with the lower predicted overhead (sum of eq. 5 denominators).
    walks = _walks(profile, method)
    found: list[tuple[float, int, dict[str, State], dict[str, float], _Result, str]] = []
    mins = []
    for walk_method, use_regen, fine_first in walks:
        r = _greedy(profile, budget_bytes, walk_method, io, use_regen, fine_first, scope)
        states, mps_at, peak = r.states, r.mps_at, r.peak
        if peak > budget_bytes:
            # The walk's choices depend on the budget; the budget-1 walk (which defines the
            # minimum feasible budget) visits a state under every budget >= that minimum.
            full = _greedy(profile, 1, walk_method, io, use_regen, fine_first, scope)
            mins.append(full.best_peak)
            fit = [h for h in full.history if h[0] <= budget_bytes]
            if not fit:
                continue
            peak, states, mps_at = fit[0]
        over = _overhead(profile, states, r.ctx)
        found.append((over, peak, states, mps_at, r, walk_method))
    if not found:  # below every budget-1 walk's reach: the walks under lower budgets may fit
        lowest, went = _descend(profile, method, io, scope, min(mins))
        mins.append(lowest)
        for res, walk_method in went:
            fit = [h for h in res.history if h[0] <= budget_bytes]
            if fit:
                peak, states, mps_at = fit[0]
                over = _overhead(profile, states, res.ctx)
                found.append((over, peak, states, mps_at, res, walk_method))
    if refine and method == "hybrid" and found:
        exact = [f for f in found if all(s[0] != "compress" for s in f[2].values())]
        starts = [(min(found, key=lambda f: f[0]), False)]
        if exact:
            starts.append((min(exact, key=lambda f: f[0]), True))
        for start, lossless in starts:
            better = _refined(profile, budget_bytes, start, scope, lossless)
            if better is not None:
                found.append(better)
    if not found:
        if scope == "all":
            raise BudgetError(
                f"all-allocation budget {budget_bytes:,} bytes is below what method "
                f"{method!r} can reach; the minimum feasible all-allocation budget is "
                f"{min(mins):,} bytes (unplanned all-allocation peak {r.unplanned:,} bytes, "
                f"of which parameter gradients {max(profile.alloc.grads, default=0):,})"
            )
        raise BudgetError(
            f"memory budget {budget_bytes:,} bytes is below what method {method!r} can "
            f"reach; the minimum feasible budget is {min(mins):,} bytes "
            f"(unplanned saved-activation peak {r.unplanned:,} bytes)"
        )
    return [
        (over, _build(profile, budget_bytes, method, peak, states, mps_at, r, scope), walk)
        for over, peak, states, mps_at, r, walk in found
    ]


#: simulator calls one refinement may make (:func:`.refine.refine`).  Measured on
#: MobileNetV2 b32 under scope "all" (one profile): a local optimum took 1,540 calls at
#: 75% of the unplanned peak, 11,271 at 50%, 21,139 at 30% (14 s) and 81,113 at 25%
#: (305 s on the shared 2-core CPU); the cap bounds plan()'s time, a capped search
#: returns the best plan found so far.
REFINE_MAX_SIMS = 30_000


def _refined(
    profile: ModelProfile,
    budget_bytes: int,
    start: tuple[float, int, dict[str, State], dict[str, float], _Result, str],
    scope: str,
    exact: bool = False,
) -> tuple[float, int, dict[str, State], dict[str, float], _Result, str] | None:
    """The refinement (:func:`.refine.refine`) of one feasible walk's states as one more
    entry of :func:`_candidates` (walk ``"refined"``, or ``"refined-exact"`` when its
    moves add no compression); None when no move lowered the prediction.  MPS values
    are kept for the decisions the start had in the same state."""
    from edgetrain.engine.budget.refine import refine

    over, _, states, mps_at, r, _ = start
    sim = _simulator(scope)
    got, stats = refine(
        profile,
        budget_bytes,
        states,
        r.ctx,
        sim,
        "hybrid",
        max_sims=REFINE_MAX_SIMS,
        exact=exact,
        bounded=sim is simulate,
    )
    if stats["after"] >= over:
        return None
    mps = {k: v for k, v in mps_at.items() if got.get(k) == states.get(k)}
    peak = int(sim(profile, got).max(initial=0))
    walk = "refined-exact" if exact else "refined"
    return (_overhead(profile, got, r.ctx), peak, got, mps, r, walk)


def _overhead(profile: ModelProfile, states: dict[str, State], ctx: _Ctx) -> float:
    """Predicted overhead of ``states``: the sum of the decisions' costs (eq. 5
    denominators)."""
    over = sum(ctx.cost(u, states.get(u.name, ("keep", None))) for u in profile.units)
    over += sum(
        g.regen_cost() for g in profile.regens if states.get(g.state_key, ("keep",))[0] == "regen"
    )
    over += sum(
        m.cost_s for m in profile.leaf_masks if states.get(m.state_key, ("keep",))[0] == "mask"
    )
    over += sum(
        x.fwd_s
        for x in profile.leaf_recomputes
        if states.get(x.state_key, ("keep",))[0] == "recompute"
    )
    return over


def _build(
    profile: ModelProfile,
    budget_bytes: int,
    method: str,
    peak: int,
    states: dict[str, State],
    mps_at: dict[str, float],
    r: _Result,
    scope: str = "saved",
) -> ExecutionPlan:
    """The ExecutionPlan of one walk's chosen states."""
    ctx = r.ctx
    units = []
    for u in profile.units:
        if u.call:  # a shared module: one decision for all its calls, summed
            continue
        s = states[u.name]
        vs = ctx.calls(u)
        units.append(
            UnitDecision(
                name=u.name,
                decision=s[0],
                codec=s[1],
                saved_bytes=sum(v.saved_bytes for v in vs),
                held_bytes=sum(ctx.held(v, s) for v in vs),
                cost_s=ctx.decision_cost(u, s),
                mps=mps_at.get(u.name),
            )
        )
    for g in profile.regens:
        if g.call == 0 and states.get(g.state_key, ("keep", None))[0] == "regen":
            vs = ctx.calls(g)
            units.append(
                UnitDecision(
                    name=g.name,
                    decision="regen",
                    saved_bytes=sum(v.out_bytes for v in vs),
                    held_bytes=0,
                    cost_s=sum(v.regen_cost() for v in vs),
                    mps=mps_at.get(g.state_key),
                    chain=list(g.chain) or None,
                )
            )
    for m in profile.leaf_masks:
        if m.call == 0 and states.get(m.state_key, ("keep", None))[0] == "mask":
            vs = ctx.calls(m)
            units.append(
                UnitDecision(
                    name=m.name,
                    decision="alias" if type(m) is AliasProfile else "mask",
                    saved_bytes=sum(v.nbytes for v in vs),
                    held_bytes=sum(v.mask_bytes for v in vs),
                    cost_s=sum(v.cost_s for v in vs),
                    mps=mps_at.get(m.state_key),
                )
            )
    for x in profile.leaf_recomputes:
        if states.get(x.state_key, ("keep", None))[0] == "recompute":
            units.append(
                UnitDecision(
                    name=x.name,
                    decision="recompute",
                    saved_bytes=x.saved_bytes,
                    held_bytes=x.input_bytes,
                    cost_s=x.fwd_s,
                    mps=mps_at.get(x.state_key),
                )
            )
    meta: dict = {"io_model": vars(ctx.io), "n_steps": profile.n_steps}
    if scope == "all":  # saved-scope plans keep their JSON unchanged
        meta["scope"] = "all"
        meta["predicted_saved_peak_bytes"] = int(simulate(profile, states).max(initial=0))
    return ExecutionPlan(
        method=method,
        budget_bytes=int(budget_bytes),
        unplanned_peak_bytes=r.unplanned,
        predicted_peak_bytes=peak,
        predicted_overhead_s=float(sum(x.cost_s for x in units)),
        units=units,
        meta=meta,
    )


def minimum_budget(
    profile: ModelProfile,
    method: str,
    io: IoContentionModel | None = None,
    *,
    scope: str = "saved",
) -> int:
    """Smallest predicted peak the method's greedy reaches (what BudgetError reports);
    under ``scope="all"`` the smallest predicted all-allocation peak.  :func:`plan` fits
    every budget from it up, and (unless :data:`DESCENT_MAX` cut the descent short) refuses
    the budget one byte below it."""
    io = io or IoContentionModel()
    lo = min(
        _greedy(profile, 1, m, io, r, f, scope).best_peak for m, r, f in _walks(profile, method)
    )
    return _descend(profile, method, io, scope, lo)[0]


#: descent steps :func:`_descend` takes below the budget-1 walks' lowest peak, at most.
#: Found (round 50): the planner test's small CNN, profiled beside other jobs, gave profiles
#: on which the hybrid walk under (budget-1 minimum - 1) ends 772 bytes lower (one is kept in
#: tests/engine/budget/fixtures/descent_profile.json, where one step suffices).  Without
#: the descent BudgetError stated the higher figure and plan() fitted the budget below it.
DESCENT_MAX = 8


def _descend(
    profile: ModelProfile, method: str, io: IoContentionModel, scope: str, lo: int
) -> tuple[int, list[tuple[_Result, str]]]:
    """Algorithm 1's forward walk evicts at each step until that step fits the budget, so
    its path depends on the budget: a walk under ``lo - 1``, ``lo`` being the budget-1
    walks' lowest peak, can end lower than any budget-1 walk reached.  Walk under the lowest
    peak so far less one until no walk gets below it: (that lowest peak, the walks that got
    below the previous one, each with its ladder).  Every budget from the returned peak up
    has a state in those walks' histories or the budget-1 walks'."""
    walks = _walks(profile, method)
    went: list[tuple[_Result, str]] = []
    for _ in range(DESCENT_MAX):
        if lo <= 1:
            break
        runs = [(_greedy(profile, lo - 1, m, io, r, f, scope), m) for m, r, f in walks]
        lower = [(res, m) for res, m in runs if res.best_peak < lo]
        if not lower:
            break
        went += lower
        lo = min(res.best_peak for res, _ in lower)
    return lo, went


def _walks(profile: ModelProfile, method: str) -> list[tuple[str, bool, bool]]:
    """Greedy walks whose best plan ``method`` returns: (ladder, with regen candidates,
    fine candidates first).

    Hybrid's state space contains recompute's, so every walk the ``recompute`` method
    runs (including its fine-first walk) is one of hybrid's candidates too: the greedy
    may miss them when compress options come first, and with them hybrid's predicted
    overhead is never above recompute's at the same budget (FedHybrid's hybrid
    generalises recompute-only).  The
    fine-first walk exhausts masks and regenerations (cheap, exact) before any unit
    is evicted: eq. 5 ranks a unit by the bytes it holds *now*, so the plain walk can
    recompute a block whose tensors masks and regenerations would have shed for less.
    """
    fine = (method in REGEN_METHODS and (profile.regens or profile.leaf_recomputes)) or (
        method in MASK_METHODS and profile.masks
    )
    walks = [(method, True, False), (method, False, False), (method, True, True)]
    walks = walks if fine else walks[:1]
    if method == "hybrid":  # every walk recompute runs: hybrid's plan space is a superset
        walks += [w for w in _walks(profile, "recompute") if w not in walks]
    return walks
