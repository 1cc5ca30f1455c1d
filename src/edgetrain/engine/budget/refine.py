"""Local search over a finished plan's states (the greedy walk is not an optimiser).

Algorithm 1 (:mod:`.planner`) adds decisions one at a time and never takes one back, so
a finished plan may keep an expensive decision that the decisions added after it made
unnecessary, or that a cheaper combination could replace.  :func:`refine` starts from
a feasible plan's states and, with the planner's own memory model (``simulate`` /
``simulate_all``) and cost terms (``_Ctx.cost``), applies

* *drop* moves: revert a decision to keep (most expensive first) while the plan still
  fits the budget;
* *exchange* moves: revert one decision (to keep, or to the unit's other non-keep
  state), then restore feasibility by adding, one at a time, the decision with the
  most excess bytes removed per second of cost (excess: the predicted bytes above the
  budget, summed over the steps that exceed it), then drop what became unnecessary;
  the result is accepted when its predicted overhead is lower.

It stops at a local optimum (no move lowers the prediction) or after ``max_moves``
accepted moves.  The exclusions of the walk hold for every state it visits: a mask and
a regeneration that replace the same tensor (or regenerate from it) are never both on
(:func:`.planner._clash`), and a recomputed unit's fine candidates are keep.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from edgetrain.engine.budget.profile import (
    AliasProfile,
    LeafRecomputeProfile,
    MaskProfile,
    ModelProfile,
    UnitProfile,
)

State = tuple[str, str | None]
KEEP: State = ("keep", None)


class _Space:
    """The decision space of one method on one profile (the walk's candidates)."""

    def __init__(
        self, profile: ModelProfile, method: str, ctx, exact: bool = False, aliases: bool = True
    ) -> None:
        from edgetrain.engine.budget.planner import (
            _LADDER,
            MASK_METHODS,
            REGEN_METHODS,
            _rivals,
            chain_owners,
            fine_owners,
        )

        self.profile = profile
        self.ctx = ctx
        ladder = _LADDER[method]
        unit_states: set[State] = set()
        for nxts in ladder.values():
            unit_states.update(nxts)
        if exact:  # lossless decisions only: no unit is newly compressed
            unit_states = {s for s in unit_states if s[0] != "compress"} | {KEEP}
        self.unit_states = sorted(unit_states, key=lambda s: (s[0], s[1] or ""))
        # a shared module's calls take one decision, keyed by its first call
        self.units = [u for u in profile.units if u.call == 0 and self.unit_states]
        regens = list(profile.regens) if method in REGEN_METHODS else []
        masks = list(profile.masks) if method in MASK_METHODS else []
        if masks and aliases:  # as the walk: saved-tensor scope only
            masks += profile.aliases
        lrs = list(profile.leaf_recomputes) if method in REGEN_METHODS else []
        if masks:  # as the walk: regenerating from a maskable tensor would hold it whole
            mkeys = {m.key for m in masks}
            regens = [r for r in regens if r.chain or r.in_key not in mkeys]
        self.fine = [*masks, *regens, *lrs]
        self.rivals: dict[str, list[str]] = _rivals(self.fine)
        owners = fine_owners(profile)
        self.owner: dict[str, str] = {
            f.state_key: owners[f.state_key] for f in self.fine if f.state_key in owners
        }
        self.chains = chain_owners(profile)
        self.inside: dict[str, list[str]] = {}
        for k, o in self.owner.items():
            self.inside.setdefault(o, []).append(k)
        self.by_key: dict[str, UnitProfile | object] = {u.name: u for u in self.units}
        # a decision over several calls is keyed by its first call's profile
        self.by_key.update({f.state_key: f for f in self.fine if getattr(f, "call", 0) == 0})

    def on_state(self, key: str) -> list[State]:
        """Non-keep states of one decision."""
        item = self.by_key[key]
        if isinstance(item, UnitProfile):
            return [s for s in self.unit_states if s != KEEP]
        if isinstance(item, MaskProfile):
            return [("mask", None)]
        if isinstance(item, LeafRecomputeProfile):
            return [("recompute", None)]
        return [("regen", None)]

    def allowed(self, states: dict[str, State], key: str, s: State) -> bool:
        """May ``key`` take state ``s`` next to the others' states?"""
        if s == KEEP or key not in self.rivals:
            return True
        if any(states.get(r, KEEP)[0] != "keep" for r in self.rivals[key]):
            return False
        owner = states.get(self.owner.get(key, ""), KEEP)[0]
        if key in self.chains and owner in ("compress", "swap"):
            return False  # a chain there regenerates nothing (planner.chain_owners)
        return owner != "recompute"

    def apply(self, states: dict[str, State], key: str, s: State) -> dict[str, State]:
        """A copy of ``states`` with ``key`` set to ``s`` (a recomputed unit voids its
        fine choices, as in the walk)."""
        new = dict(states)
        new[key] = s
        if s[0] == "recompute" and key in self.inside:
            for f in self.inside[key]:
                new[f] = KEEP
        return new

    def cost(self, key: str, s: State) -> float:
        return self.ctx.decision_cost(self.by_key[key], s)

    def removal_bounds(self) -> dict[str, tuple[int, int]]:
        """Per decision, ``(bytes, first step)``: no change of it (to any state, with
        what :meth:`apply` voids) removes more than ``bytes`` from
        :func:`.planner.simulate`'s count at any one step, nor anything before ``first
        step`` or from its mirror step on.  An upper bound by construction: every term
        of the memory model the decision enters (a tensor once per holder that may count
        it, inputs, encodings, masks, backward spikes, the sources and spikes of the
        regenerations its tensors feed), with no credit for what it adds; the first
        step is its earliest call's, or the earliest regeneration whose source a unit's
        tensors keep alive.  ``tests/engine/budget/test_budget_refine_bound.py`` checks
        both against the simulator on random states of the zoo's profiles."""
        p = self.profile
        holders: dict[int, int] = {}
        for _, keys in p.glue:
            for k in keys:
                holders[k] = holders.get(k, 0) + 1
        for u in p.units:
            for k in u.saved:
                holders[k] = holders.get(k, 0) + 1

        def tensor(k: int, b: int) -> int:  # first hold, encodings, masks, spikes
            return 3 * b * (holders.get(k, 0) + 1)

        regen_of: dict[int, tuple[int, int]] = {}  # out key -> (bytes, earliest step)
        for r in p.regens:
            b, lo = regen_of.get(r.out_key, (0, r.step))
            regen_of[r.out_key] = (b + r.in_bytes + r.out_bytes, min(lo, r.step))
        mask_of: dict[int, int] = {}
        for m in p.leaf_masks:  # an alias holds bits in a compressed unit
            mask_of[m.key] = mask_of.get(m.key, 0) + m.mask_bytes + m.nbytes
            if isinstance(m, AliasProfile):
                mask_of[m.key] += m.bits_bytes
        calls: dict[str, list] = {}  # every profile that takes a decision
        for u in p.units:
            calls.setdefault(u.name, []).append(u)
        for f in (*p.regens, *p.leaf_masks, *p.leaf_recomputes):
            calls.setdefault(f.state_key, []).append(f)
        out: dict[str, tuple[int, int]] = {}
        for key in self.by_key:
            total, lo = 0, min(c.step for c in calls[key])
            for c in calls[key]:
                if isinstance(c, UnitProfile):
                    codec = max((v.held_bytes for v in c.codecs.values()), default=0)
                    for k, b in c.saved.items():
                        rb, rlo = regen_of.get(k, (0, lo))
                        total += tensor(k, b) + rb + mask_of.get(k, 0)
                        lo = min(lo, rlo)
                    total += sum(c.inputs.values()) + c.leaf_max_bytes + codec
                elif isinstance(c, MaskProfile):
                    total += tensor(c.key, c.nbytes) + c.mask_bytes
                    if isinstance(c, AliasProfile):  # bits, or its early hold of the output
                        total += c.bits_bytes + tensor(c.alias_key, c.alias_bytes)
                elif isinstance(c, LeafRecomputeProfile):
                    total += sum(tensor(k, b) for k, b in c.saved.items())
                    total += sum(c.inputs.values())
                else:  # a regeneration
                    total += tensor(c.out_key, c.out_bytes) + mask_of.get(c.out_key, 0)
                    total += c.in_bytes
            out[key] = (total, lo)
        for unit, inside in self.inside.items():  # recomputing a unit voids its fine ones
            if unit in out:
                b, lo = out[unit]
                for f in inside:
                    fb, flo = out.get(f, (0, lo))
                    b, lo = b + fb, min(lo, flo)
                out[unit] = (b, lo)
        return out


def overhead(profile: ModelProfile, states: dict[str, State], ctx) -> float:
    """Predicted overhead of ``states``: the sum of the decisions' costs, summed in the
    same order as the planner's (:func:`.planner._overhead`)."""
    from edgetrain.engine.budget.planner import _overhead

    return _overhead(profile, states, ctx)


def refine(
    profile: ModelProfile,
    budget_bytes: int,
    states: dict[str, State],
    ctx,
    sim: Callable[[ModelProfile, dict[str, State]], np.ndarray],
    method: str = "hybrid",
    *,
    max_moves: int = 200,
    max_sims: int | None = None,
    exact: bool = False,
    rel_tol: float = 1e-9,
    bounded: bool = False,
    aliases: bool | None = None,
) -> tuple[dict[str, State], dict]:
    """Locally optimal states reachable from the feasible ``states`` by drop and
    exchange moves (module doc); returns (states, stats).  The result fits the budget
    (``sim(...).max() <= budget_bytes``) and its predicted overhead is never above the
    start's.  ``stats``: ``before`` / ``after`` overhead (s), accepted ``drops`` and
    ``exchanges``, ``sims`` (simulator calls), ``capped`` (stopped by ``max_moves``
    accepted moves or ``max_sims`` simulator calls before a local optimum: the best
    states found so far are returned; the cap counts calls, not time, so the result is
    the same on every machine).  ``exact``: moves add no compression (a compressed
    unit of the start may still be reverted).

    ``bounded`` (for :func:`.planner.simulate`, ``scope="saved"``): the repair step
    simulates its candidates in order of a lower bound on their score (added cost over
    an upper bound of the excess removed, :meth:`_Space.removal_bounds`) and stops once
    the bound passes the best score found; it picks the candidate the full loop picks
    (the lowest score, the first of equal ones) with fewer simulator calls (MobileNetV2
    at 0.35 width, batch 32: see ``docs/results/budget.md``, round 22), so an uncapped
    search returns the same states and a capped one goes further in the same calls.
    ``aliases``: whether alias decisions are in the space (default: for
    :func:`.planner.simulate`, the saved-tensor scope, as in the walk)."""
    if aliases is None:  # aliases are planned under scope "saved" only (the walk's rule)
        from edgetrain.engine.budget.planner import simulate

        aliases = sim is simulate
    space = _Space(profile, method, ctx, exact, aliases=aliases)
    bounds = space.removal_bounds()
    removal = bounds if bounded else None
    n_sims = [0]
    # the simulators read a state only through ``states.get(key, keep)``, so states with
    # the same non-keep decisions simulate alike; the search revisits many (MobileNetV2
    # at 0.5: 12.8 k distinct among 29.2 k calls), each memoised read-only. The cap still
    # counts every call, so the search and its result are as without the memo
    memo: dict[frozenset, np.ndarray] = {}

    def peak_of(st: dict[str, State]) -> np.ndarray:
        if max_sims is not None and n_sims[0] >= max_sims:
            raise _Capped
        n_sims[0] += 1
        key = frozenset(kv for kv in st.items() if kv[1] != KEEP)
        mem = memo.get(key)
        if mem is None:
            mem = memo[key] = sim(profile, st)
            mem.flags.writeable = False
        return mem

    def excess(mem: np.ndarray) -> int:
        return int(np.maximum(mem - budget_bytes, 0).sum())

    def cost_of(st: dict[str, State]) -> float:
        return overhead(profile, st, ctx)

    cur = {k: v for k, v in states.items()}
    for k in space.by_key:
        cur.setdefault(k, KEEP)
    if peak_of(cur).max(initial=0) > budget_bytes:
        raise ValueError("refine needs a plan that fits the budget")
    before = cost_of(cur)
    stats = {"before": before, "drops": 0, "exchanges": 0}

    def decided(st: dict[str, State]) -> list[str]:
        ks = [k for k in space.by_key if st.get(k, KEEP) != KEEP]
        return sorted(ks, key=lambda k: -space.cost(k, st[k]))

    def drop_pass(st: dict[str, State]) -> tuple[dict[str, State], int]:
        """Revert decisions to keep, most expensive first, while the plan fits."""
        n = 0
        changed = True
        while changed:
            changed = False
            for k in decided(st):
                trial = dict(st)
                trial[k] = KEEP
                if peak_of(trial).max(initial=0) <= budget_bytes:
                    st, n, changed = trial, n + 1, True
                    break
        return st, n

    def repair(st: dict[str, State], tabu: str, bound: float) -> dict[str, State] | None:
        """Add the decisions with the most excess removed per second until it fits;
        None when nothing helps or the cost reaches ``bound``."""
        mem = peak_of(st)
        while mem.max(initial=0) > budget_bytes:
            ex = excess(mem)
            viol = np.nonzero(mem > budget_bytes)[0]
            lo, hi = int(viol.min()), int(viol.max())
            t2 = 2 * profile.n_steps
            here = cost_of(st)  # the same for every trial of this step
            best = None
            over = np.maximum(mem - budget_bytes, 0) if removal is not None else None
            pending = []  # bounded: (score's lower bound, loop order, trial, dc)
            for k in space.by_key:
                if k == tabu:
                    continue
                # a decision changes memory from its first step to that step's mirror:
                # its own (earliest) call's, or an earlier regeneration's whose source
                # a unit's tensors keep alive
                first = bounds[k][1]
                if first > hi or t2 - 1 - first < lo:
                    continue
                cur_s = st.get(k, KEEP)
                for s in space.on_state(k):
                    if s == cur_s or not space.allowed(st, k, s):
                        continue
                    trial = space.apply(st, k, s)
                    if over is not None:
                        rb, lo_k = removal[k]
                        ub = int(np.minimum(over[lo_k : t2 - lo_k], rb).sum())
                        if ub <= 0:  # it cannot remove any excess: gain <= 0
                            continue
                        dc = cost_of(trial) - here
                        lb = dc / ub if dc > 0 else -np.inf
                        pending.append((lb, len(pending), trial, dc))
                        continue
                    m2 = peak_of(trial)
                    gain = ex - excess(m2)
                    if gain <= 0:
                        continue
                    dc = cost_of(trial) - here
                    score = dc / gain
                    if best is None or score < best[0]:
                        best = (score, trial, m2)
            if pending:  # the same choice as the loop above: min (score, loop order)
                pending.sort(key=lambda x: (x[0], x[1]))
                pick = None
                for lb, i, trial, dc in pending:
                    if pick is not None and (lb, i) > (pick[0], pick[1]):
                        break
                    m2 = peak_of(trial)
                    gain = ex - excess(m2)
                    if gain <= 0:
                        continue
                    score = dc / gain
                    if pick is None or (score, i) < (pick[0], pick[1]):
                        pick = (score, i, trial, m2)
                if pick is not None:
                    best = (pick[0], pick[2], pick[3])
            if best is None:
                return None
            st, mem = best[1], best[2]
            if cost_of(st) >= bound:
                return None
        return st

    capped = False
    try:
        cur, n = drop_pass(cur)
        stats["drops"] += n
    except _Capped:
        capped = True
    cur_cost = cost_of(cur)
    moves = 0
    improved = not capped
    while improved and moves < max_moves:
        improved = False
        for k in decided(cur):
            alts = [KEEP] + [s for s in space.on_state(k) if s != cur[k]]
            for alt in alts:
                if not space.allowed(cur, k, alt):
                    continue
                trial = space.apply(cur, k, alt)
                try:
                    got = repair(trial, k, cur_cost * (1 - rel_tol))
                    if got is None:
                        continue
                    got, _ = drop_pass(got)
                except _Capped:
                    capped = True
                    break
                c = cost_of(got)
                if c < cur_cost * (1 - rel_tol):
                    cur, cur_cost = got, c
                    stats["exchanges"] += 1
                    moves += 1
                    improved = True
                    break
            if improved or capped:
                break
    stats.update(after=cur_cost, sims=n_sims[0], capped=capped or moves >= max_moves)
    return cur, stats


class _Capped(Exception):
    """The simulator-call cap of :func:`refine` was reached."""
