"""FedHybrid's memory-aware client selector (FedHybrid §4.2, eq. 1-4, MAB-UCB).

* ``Stat(i) = sqrt(mean_k Loss(k)^2)`` over the client's training samples (eq. 2);
* ``CompStat(i) = 1 / sum_o t_o`` (eq. 3): one over the device's per-step operator time;
* ``Util(i) = Stat x MemStat x CompStat`` (eq. 4).

The paper prints MemStat twice, with opposite indicators:

* eq. 1: ``(M_i / M_G) ^ 1(M_G > M_i)`` -- a memory-poor client scores ``M_i/M_G < 1``, a
  memory-rich one 1 (and §4.2's prose under eq. 1 describes this form);
* eq. 4: ``(M_i / M_G) ^ 1(M_i > M_G)`` -- a memory-poor client keeps factor 1, a
  memory-rich one scores ``M_i/M_G > 1``.

The selector is specified as "We first calculate the utilities of all devices based on
Equation 4", so ``memstat="eq4"`` (the default) uses eq. 4 as printed; ``memstat="eq1"``
keeps eq. 1's form (the behaviour before round 4). Both rank memory-rich clients above
memory-poor ones; they differ in *where* the ranking bites: eq. 1 separates the clients
below M_G (a 1.5 GB phone scores half of a 3 GB one), eq. 4 treats every client whose plan
must rescue it alike and separates the clients above M_G.

Selection (MAB-UCB, Chen et al. 2013): each client is an arm. Explored arms score
``Util / max Util + sqrt(c ln t / n_i)`` (n_i = times it reported; c = 1.5, CUCB's 3/2,
Chen et al. 2013 Algorithm 1, since round 40; ``ucb_c=0.1`` is the temporal-uncertainty
constant FedScale's Oort uses, the default through round 39). The ``epsilon = 0.9`` share of the
``k`` slots (FedHybrid §5.2 hyper-parameters) is exploited from the highest scores; the
rest explores clients not selected before, drawn with probability proportional to their
check-in system utility ``MemStat x CompStat`` ("prioritize those with rich system
resources"). Without enough unexplored clients the remaining slots are exploited.

Diagnostic variants (not the paper's; each defaults to the printed form): ``stat`` scales Stat
by the sample count, ``explore`` draws the unexplored by sample count, and ``util`` drops one or
both of eq. 4's system factors from the exploited ranking (round 36).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from edgetrain.errors import ConfigError
from edgetrain.federated.selectors.base import CheckIn, Feedback, Selector

MEMSTAT_FORMS = ("eq4", "eq1")
# Stat: "eq2" as printed (per-sample RMS loss); "samples" scales it by the client's sample
# count, Oort's statistical utility |B_i| sqrt(1/|B_i| sum Loss^2) (Lai et al., OSDI 2021
# §4.2) -- a diagnostic variant, not the paper's
STAT_FORMS = ("eq2", "samples")
# Who is explored: "system" as printed ("prioritize those with rich system resources": drawn
# in proportion to the check-in MemStat x CompStat); "samples" draws in proportion to the
# client's sample count, the initial reward FedScale's Oort explores by (getTopK's
# ``init_reward``) -- a variant, not the paper's (round 31)
EXPLORE_FORMS = ("system", "samples")
# What is exploited: "eq4" as printed (Stat x MemStat x CompStat); "stat" ranks by Stat
# alone, leaving out eq. 4's system factors; "no-compstat" (Stat x MemStat) and "no-memstat"
# (Stat x CompStat) leave out one of them -- diagnostic variants, not the paper's (round 36:
# the last part of the gap to Oort's utility that round 34 left unsplit)
UTIL_FORMS = ("eq4", "stat", "no-compstat", "no-memstat")


def mem_stat(m_i: np.ndarray | float, m_g: float, form: str = "eq4") -> np.ndarray:
    """MemStat: eq. 4's ``(M_i/M_G)^1(M_i > M_G)`` or eq. 1's ``(M_i/M_G)^1(M_G > M_i)``."""
    m = np.asarray(m_i, dtype=float)
    if form == "eq4":
        return np.where(m > m_g, m / m_g, 1.0)
    if form == "eq1":
        return np.where(m_g > m, m / m_g, 1.0)
    raise ConfigError(f"memstat form {form!r}; accepted: {', '.join(MEMSTAT_FORMS)}")


def comp_stat(step_time_s: np.ndarray | float) -> np.ndarray:
    """Eq. 3: ``1 / sum_o t_o`` with the per-step operator time sum."""
    return 1.0 / np.asarray(step_time_s, dtype=float)


def stat_util(loss_sq_mean: np.ndarray | float) -> np.ndarray:
    """Eq. 2: ``sqrt(1/|B| sum Loss^2)`` from the mean squared loss."""
    return np.sqrt(np.asarray(loss_sq_mean, dtype=float))


def utility(loss_sq_mean, m_i, m_g: float, step_time_s, form: str = "eq4") -> np.ndarray:
    """Eq. 4: Stat x MemStat x CompStat (MemStat in ``form``, see :func:`mem_stat`)."""
    return stat_util(loss_sq_mean) * mem_stat(m_i, m_g, form) * comp_stat(step_time_s)


class FedHybridSelector(Selector):
    name = "fedhybrid"

    def __init__(
        self,
        seed: int = 0,
        epsilon: float = 0.9,
        ucb_c: float = 1.5,
        memstat: str = "eq4",
        stat: str = "eq2",
        explore: str = "system",
        util: str = "eq4",
    ) -> None:
        super().__init__(seed)
        mem_stat(1.0, 1.0, memstat)  # validates the form
        if stat not in STAT_FORMS:
            raise ConfigError(f"fedhybrid stat form {stat!r}; accepted: {', '.join(STAT_FORMS)}")
        if explore not in EXPLORE_FORMS:
            raise ConfigError(
                f"fedhybrid explore form {explore!r}; accepted: {', '.join(EXPLORE_FORMS)}"
            )
        if util not in UTIL_FORMS:
            raise ConfigError(f"fedhybrid util form {util!r}; accepted: {', '.join(UTIL_FORMS)}")
        self.memstat = memstat
        self.util = util
        self.stat = stat
        self.explore = explore
        self.n: dict[int, int] = {}  # partition size per explored client (stat="samples")
        self.epsilon = epsilon
        self.ucb_c = ucb_c
        self.loss_sq: dict[int, float] = {}  # last reported mean loss^2 per explored client
        self.count: dict[int, int] = {}
        self.selected_before: set[int] = set()

    def update(self, round_idx: int, feedback: Sequence[Feedback]) -> None:
        ok = [f.loss_sq_mean for f in feedback if f.success and math.isfinite(f.loss_sq_mean)]
        avg = float(np.mean(ok)) if ok else math.nan
        for f in feedback:
            if f.success and math.isfinite(f.loss_sq_mean):
                value = f.loss_sq_mean
            elif f.straggler and math.isfinite(avg):  # FedScale: the round's mean utility
                value = avg
            else:
                continue
            self.loss_sq[f.cid] = value
            self.count[f.cid] = self.count.get(f.cid, 0) + 1
            self.n[f.cid] = int(f.n_samples)

    def scores(self, round_idx: int, checkin: CheckIn) -> dict[int, float]:
        """UCB scores of the explored clients."""
        ids = np.array([i for i in sorted(self.loss_sq) if checkin.is_eligible(i)], dtype=int)
        if not ids.size:
            return {}
        u = stat_util(np.array([self.loss_sq[i] for i in ids]))  # eq. 2
        if self.util in ("eq4", "no-compstat"):
            u = u * mem_stat(checkin.memory_budget[ids], checkin.m_g, self.memstat)
        if self.util in ("eq4", "no-memstat"):
            u = u * comp_stat(checkin.step_time_s[ids])
        if self.stat == "samples":
            u = u * np.array([self.n.get(int(i), 1) for i in ids], dtype=float)
        top = float(u.max()) if u.size and u.max() > 0 else 1.0
        t = max(round_idx, 2)
        bonus = np.sqrt(self.ucb_c * math.log(t) / np.array([self.count[i] for i in ids]))
        return {int(i): float(s) for i, s in zip(ids, u / top + bonus, strict=True)}

    def select(self, round_idx: int, checkin: CheckIn, k: int) -> list[int]:
        n = len(checkin)
        k = min(k, len(checkin.candidates()))
        scores = self.scores(round_idx, checkin)
        n_exploit = min(int(round(self.epsilon * k)), len(scores))
        ranked = sorted(scores, key=lambda c: (-scores[c], c))
        picked = ranked[:n_exploit]
        chosen = set(picked)
        unexplored = np.array(
            [
                i
                for i in range(n)
                if i not in self.selected_before and i not in chosen and checkin.is_eligible(i)
            ],
            dtype=int,
        )
        n_explore = min(k - len(picked), len(unexplored))
        if n_explore > 0:
            p = self._explore_weights(checkin, unexplored)
            draw = self.rng.choice(unexplored, size=n_explore, replace=False, p=p)
            picked += [int(c) for c in draw]
            chosen.update(int(c) for c in draw)
        if len(picked) < k:  # every client explored: exploit further down the ranking
            picked += [c for c in ranked if c not in chosen][: k - len(picked)]
            chosen = set(picked)
        if len(picked) < k:  # nothing reported yet from the rest: the system utility decides
            rest = np.array(
                [i for i in range(n) if i not in chosen and checkin.is_eligible(i)], dtype=int
            )
            sys_util = mem_stat(checkin.memory_budget[rest], checkin.m_g, self.memstat) * comp_stat(
                checkin.step_time_s[rest]
            )
            p = sys_util / sys_util.sum()
            picked += [int(c) for c in self.rng.choice(rest, k - len(picked), replace=False, p=p)]
        self.selected_before.update(picked)
        return sorted(picked)

    def _explore_weights(self, checkin: CheckIn, ids: np.ndarray) -> np.ndarray:
        """Draw probabilities over the unexplored ``ids`` (see ``EXPLORE_FORMS``)."""
        if self.explore == "samples":
            w = np.maximum(checkin.n_samples[ids].astype(float), 1.0)
        else:
            w = mem_stat(checkin.memory_budget[ids], checkin.m_g, self.memstat) * comp_stat(
                checkin.step_time_s[ids]
            )
        return w / w.sum()

    def state_dict(self) -> dict[str, Any]:
        d = super().state_dict()
        d.update(
            loss_sq={str(c): v for c, v in self.loss_sq.items()},
            count={str(c): v for c, v in self.count.items()},
            selected_before=sorted(self.selected_before),
            n={str(c): v for c, v in self.n.items()},
        )
        return d

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.loss_sq = {int(c): float(v) for c, v in state["loss_sq"].items()}
        self.count = {int(c): int(v) for c, v in state["count"].items()}
        self.selected_before = set(state["selected_before"])
        self.n = {int(c): int(v) for c, v in state.get("n", {}).items()}  # absent before round 30
