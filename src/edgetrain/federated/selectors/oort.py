"""Oort's training selector as FedScale implements it (``thirdparty/oort/oort.py``).

Per arm (client): ``reward`` = statistical utility ``sqrt(mean loss^2) x |samples|``
(initially the sample count, "prioritize w/ some rewards (i.e., size)"), ``duration``
(initially the check-in estimate), ``time_stamp`` (round last seen), ``count``.

Each round: the pacer updates the preferred-duration percentile ``round_threshold``
(every ``pacer_step`` rounds: +``pacer_delta`` when the exploited utility went flat,
-``pacer_delta`` when it changed sharply); the preferred duration T is that percentile of
all durations; an explored arm scores ``(min(reward, clip) - min) / range +
sqrt(0.1 ln t / time_stamp)``, multiplied by ``(T / duration) ^ round_penalty`` when
slower than T. Exploration decays (``exploration *= decay``, floored at ``min``); the
exploited share is drawn, with probability proportional to score, from the arms above
``cut_off_util`` x the k-th score (at least 10x k of them); the explored share is drawn
from the ``sample_window`` x k unexplored arms of highest (duration-penalised) reward.

Defaults are FedScale's ``config_parser`` values (exploration_factor 0.9, decay 0.98,
min 0.3, round_threshold 30, pacer_delta 5, pacer_step 20, round_penalty 2.0,
cut_off_util 0.05, clip_bound 0.98, sample_window 5.0); ``federated.oort`` sets them.
``exploit_draw="top"`` takes the highest scores instead of drawing by score, a diagnostic
that exploits as FedHybrid's selector does (not FedScale's).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from edgetrain.errors import ConfigError
from edgetrain.federated.selectors.base import CheckIn, Feedback, Selector


def get_norm(values: list[float], clip_bound: float = 0.95, thres: float = 1e-4):
    """FedScale's ``get_norm``: (max, min x 0.999, range, mean, clip value)."""
    a = sorted(values)
    clip = a[min(int(len(a) * clip_bound), len(a) - 1)]
    mx, mn = a[-1], a[0] * 0.999
    return float(mx), float(mn), float(max(mx - mn, thres)), float(sum(a) / len(a)), float(clip)


class OortSelector(Selector):
    name = "oort"

    def __init__(
        self,
        seed: int = 0,
        exploration: float = 0.9,
        decay: float = 0.98,
        exploration_min: float = 0.3,
        round_threshold: float = 30.0,
        pacer_delta: float = 5.0,
        pacer_step: int = 20,
        round_penalty: float = 2.0,
        cut_off_util: float = 0.05,
        clip_bound: float = 0.98,
        sample_window: float = 5.0,
        exploit_draw: str = "proportional",
    ) -> None:
        super().__init__(seed)
        self.exploration = exploration
        self.decay = decay
        self.exploration_min = exploration_min
        self.round_threshold = round_threshold
        self.pacer_delta = pacer_delta
        self.pacer_step = pacer_step
        self.round_penalty = round_penalty
        self.cut_off = cut_off_util
        self.clip_bound = clip_bound
        self.sample_window = sample_window
        if exploit_draw not in ("proportional", "top"):
            raise ConfigError(f"exploit_draw {exploit_draw!r}; accepted: proportional, top")
        self.exploit_draw = exploit_draw
        self.arms: dict[int, dict[str, float]] = {}
        self.unexplored: set[int] = set()
        self.exploit_hist: list[float] = []
        self.explore_hist: list[float] = []
        self.exploit_clients: list[int] = []
        self.explore_clients: list[int] = []
        self.successful: set[int] = set()
        self.prefer_duration = math.inf

    # -- arms ------------------------------------------------------------------------------
    def _register(self, checkin: CheckIn) -> None:
        for i in range(len(checkin)):
            if i not in self.arms:
                self.arms[i] = {
                    "reward": float(checkin.n_samples[i]),
                    "duration": float(checkin.est_duration_s[i]),
                    "time_stamp": 0.0,
                    "count": 0.0,
                }
                self.unexplored.add(i)

    def update(self, round_idx: int, feedback: Sequence[Feedback]) -> None:
        ok = [
            math.sqrt(f.loss_sq_mean) * f.n_samples
            for f in feedback
            if f.success and f.cid in self.arms
        ]
        avg = sum(ok) / len(ok) if ok else None
        for f in feedback:
            arm = self.arms.get(f.cid)
            if arm is None:
                continue
            if f.success or (f.straggler and avg is not None):
                # a straggler gets the round's mean reward (FedScale round_completion_handler)
                arm["reward"] = math.sqrt(f.loss_sq_mean) * f.n_samples if f.success else avg
                arm["duration"] = f.duration_s
                arm["time_stamp"] = float(round_idx)
                arm["count"] += 1
                self.unexplored.discard(f.cid)
                self.successful.add(f.cid)
            else:  # FedScale's update_duration: the server still learns how slow it was
                arm["duration"] = f.duration_s if math.isfinite(f.duration_s) else 1e12

    def _mean_util(self, clients: list[int]) -> float:
        cnt, util = 1e-4, 0.0
        for c in clients:
            if c in self.successful:
                cnt += 1
                util += self.arms[c]["reward"]
        return util / cnt

    def _pacer(self, t: int) -> None:
        self.explore_hist.append(self._mean_util(self.explore_clients))
        self.exploit_hist.append(self._mean_util(self.exploit_clients))
        self.successful = set()
        s = self.pacer_step
        if t >= 2 * s and t % s == 0:
            last = sum(self.exploit_hist[-2 * s : -s])
            cur = sum(self.exploit_hist[-s:])
            if abs(cur - last) <= last * 0.1:
                self.round_threshold = min(100.0, self.round_threshold + self.pacer_delta)
            elif abs(cur - last) >= last * 5:
                self.round_threshold = max(
                    self.pacer_delta, self.round_threshold - self.pacer_delta
                )

    def scores(self, t: int, feasible: list[int]) -> dict[int, float]:
        """Exploitation scores of explored arms at round ``t`` (FedScale getTopK)."""
        if self.round_threshold < 100.0:
            durs = sorted(a["duration"] for a in self.arms.values())
            self.prefer_duration = durs[
                min(int(len(durs) * self.round_threshold / 100.0), len(durs) - 1)
            ]
        else:
            self.prefer_duration = math.inf
        rewards = [self.arms[c]["reward"] for c in feasible if self.arms[c]["reward"] > 0]
        if not rewards:
            return {}
        _, mn, rng, _, clip = get_norm(rewards, self.clip_bound)
        out: dict[int, float] = {}
        for c in feasible:
            a = self.arms[c]
            if a["count"] > 0:
                sc = (min(a["reward"], clip) - mn) / rng + math.sqrt(
                    0.1 * math.log(t) / a["time_stamp"]
                )
                if a["duration"] > self.prefer_duration:
                    sc *= (self.prefer_duration / max(1e-4, a["duration"])) ** self.round_penalty
                out[c] = abs(sc)
        return out

    def select(self, round_idx: int, checkin: CheckIn, k: int) -> list[int]:
        self._register(checkin)
        t = round_idx
        self._pacer(t)
        feasible = [int(i) for i in checkin.candidates()]  # FedScale's getFeasibleClients
        scores = self.scores(t, feasible)
        self.exploration = max(self.exploration * self.decay, self.exploration_min)
        explore_len = int(k * self.exploration)
        exploit_len = min(k - explore_len, len(scores))
        picked_exploit: list[int] = []
        if exploit_len > 0:
            ranked = sorted(scores, key=lambda c: (-scores[c], c))
            cut = scores[ranked[min(exploit_len, len(ranked) - 1)]] * self.cut_off
            temp: list[int] = []
            for c in ranked:
                if scores[c] < cut and len(temp) > 10.0 * exploit_len:
                    break
                temp.append(c)
            if self.exploit_draw == "top":  # the variant: the highest scores, in order
                picked_exploit = [int(c) for c in temp[:exploit_len]]
            else:
                total = max(1e-4, sum(scores[c] for c in temp))
                p = np.array([scores[c] / total for c in temp])
                p = p / p.sum()
                picked_exploit = [
                    int(c) for c in self.rng.choice(temp, exploit_len, p=p, replace=False)
                ]
        self.exploit_clients = picked_exploit
        unexplored = sorted(c for c in self.unexplored if checkin.is_eligible(c))
        picked_explore: list[int] = []
        # FedScale explores min(unexplored, k - exploited) clients; none when exploitation
        # fills the cohort (k x exploration < 1 once exploration decays: with 3 clients per
        # round and the floor 0.3, from round ~50 on), which left an empty pool here
        if unexplored and k - len(picked_exploit) > 0:
            init = {}
            for c in unexplored:
                r = self.arms[c]["reward"]
                d = self.arms[c]["duration"]
                if d > self.prefer_duration:
                    r *= (self.prefer_duration / max(1e-4, d)) ** self.round_penalty
                init[c] = r
            n_explore = min(len(unexplored), k - len(picked_exploit))
            pool = sorted(init, key=lambda c: (-init[c], c))[
                : min(int(self.sample_window * n_explore), len(init))
            ]
            total = max(1e-4, sum(init[c] for c in pool))
            p = np.array([init[c] / total for c in pool])
            p = p / p.sum() if p.sum() > 0 else np.full(len(pool), 1.0 / len(pool))
            n_explore = min(n_explore, int(np.count_nonzero(p)))
            picked_explore = [int(c) for c in self.rng.choice(pool, n_explore, p=p, replace=False)]
        self.explore_clients = picked_explore
        picked = picked_explore + picked_exploit
        if len(picked) < k:  # FedScale can under-fill; we top up from the best remaining scores
            rest = sorted(
                (c for c in scores if c not in set(picked)), key=lambda c: (-scores[c], c)
            )
            picked += rest[: k - len(picked)]
        return sorted(picked)

    def state_dict(self) -> dict[str, Any]:
        d = super().state_dict()
        d.update(
            exploration=self.exploration,
            round_threshold=self.round_threshold,
            arms={str(c): a for c, a in self.arms.items()},
            unexplored=sorted(self.unexplored),
            exploit_hist=self.exploit_hist,
            explore_hist=self.explore_hist,
            exploit_clients=self.exploit_clients,
            explore_clients=self.explore_clients,
            successful=sorted(self.successful),
        )
        return d

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.exploration = state["exploration"]
        self.round_threshold = state["round_threshold"]
        self.arms = {int(c): dict(a) for c, a in state["arms"].items()}
        self.unexplored = set(state["unexplored"])
        self.exploit_hist = list(state["exploit_hist"])
        self.explore_hist = list(state["explore_hist"])
        self.exploit_clients = list(state["exploit_clients"])
        self.explore_clients = list(state["explore_clients"])
        self.successful = set(state["successful"])
