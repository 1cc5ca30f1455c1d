"""Where on its learning curve a gain at equal rounds was read: OTHER − BASE by window of
rounds beside BASE's accuracy there, and the rounds each run takes to reach fractions of
BASE's best.

A gain "at equal rounds" (the issue's "final accuracy >= Oort's + 5 points", read over the
last rounds) depends on where the window falls. A method that learns faster stands above while
both rise and level once the slower one catches up; its final figure then says how far along
its curve each model was when the run stopped. This prints, for pairs of runs of one fleet
and seed (BASE, OTHER):

* per window of rounds (``--size`` rounds each, from round 1; a last, shorter window is left
  out), the median over pairs of
  OTHER − BASE in points (mean test accuracy over the window), on how many pairs it is above
  zero, the two-sided sign test, and BASE's median accuracy over the window: where on its
  curve the gain was read;
* per window, who trained in each run (from ``aggregated`` and ``aggregated_labels``): the
  effective classes of a round's aggregated samples (1 / Σ p²), the samples an aggregated
  client holds, and the share of a round's aggregated clients aggregated the round before;
* per level (``--levels``, fractions of BASE's best accuracy, the ``--smooth``-round moving
  mean; with ``--absolute`` the levels are accuracies themselves, to set two models side by
  side), the rounds each run takes to first reach it and BASE's rounds over OTHER's (above 1:
  OTHER is there sooner; a run that never reaches a level counts as slower than one that
  does), the same in simulated seconds (``sim_time_s``), and OTHER − BASE in points (moving
  means) in the round BASE first reaches the level: the gain read at BASE's equal accuracy
  rather than at equal rounds. That round catches BASE on a high point of its round-to-round
  swings, so this gain leans against OTHER by about a swing of the moving mean; it is for
  setting runs side by side on the same reading, not an unbiased level.

    python benchmarks/fedhybrid_curves.py --size 10 \\
        --pair ex0/federated-mnist-compare/oort ex0/federated-mnist-compare/fedhybrid \\
        --pair ex1/federated-mnist-compare/oort ex1/federated-mnist-compare/fedhybrid
    python benchmarks/fedhybrid_curves.py ... --rounds 100 --levels 0.5,0.75,0.9,1 --json
    python benchmarks/fedhybrid_curves.py ... --absolute --levels 0.3,0.4,0.5,0.6

In ``--json`` a ratio where only OTHER reaches a level (infinite) is ``null``, as where
neither does; the ``rounds`` pair of each level says which run got there.

Runs are method run directories as for ``benchmarks/fedhybrid_walled.py`` (``config.json``
in them or in the ``--compare`` directory above); the two runs of a pair must share the
fleet, data, partition, memory settings, model and seed. The runs are compared over their
first ``--rounds`` rounds (default: the shorter run of the pair); a run shorter than that is
an error, not a shorter window.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

from edgetrain.engine.budget.stats import sign_test_p

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fedhybrid_walled import pair_config, read_metrics  # noqa: E402  (a sibling script)

DEFAULT_LEVELS = (0.5, 0.75, 0.9, 1.0)
#: per window and run, who trained (:func:`cohorts`)
COHORT_KEYS = ("classes", "samples", "repeat")


def accuracy_curve(recs: list[dict], run: Path, rounds: int) -> tuple[list[float], list[float]]:
    """Test accuracy and simulated time of rounds 1..rounds (every round must be evaluated)."""
    by_round = {int(r["round"]): r for r in recs}
    missing = [t for t in range(1, rounds + 1) if by_round.get(t, {}).get("accuracy") is None]
    if missing:
        shown = ", ".join(map(str, missing[:5])) + (" ..." if len(missing) > 5 else "")
        raise ValueError(
            f"{run}: rounds {shown} have no test accuracy in metrics.jsonl; compare over "
            f"fewer --rounds or runs evaluated every round (federated.eval_every: 1)"
        )
    acc = [float(by_round[t]["accuracy"]) for t in range(1, rounds + 1)]
    sim = [float(by_round[t]["sim_time_s"]) for t in range(1, rounds + 1)]
    return acc, sim


def cohorts(recs: list[dict], rounds: int) -> list[dict | None]:
    """Per round 1..rounds, who trained: the effective classes of the aggregated samples (1 /
    Σ p² over ``aggregated_labels``), the mean samples an aggregated client holds, and the
    share of the aggregated clients aggregated the round before (None in round 1). None for
    a round whose record has no ``aggregated`` / ``aggregated_labels`` (runs before round 30)
    or aggregated nobody."""
    by_round = {int(r["round"]): r for r in recs}
    out: list[dict | None] = []
    prev: set[int] | None = None
    for t in range(1, rounds + 1):
        r = by_round[t]
        agg, labels = r.get("aggregated"), r.get("aggregated_labels")
        if not agg or not labels or sum(labels) <= 0:
            out.append(None)
            prev = None if agg is None else {int(c) for c in agg}
            continue
        total = float(sum(labels))
        now = {int(c) for c in agg}
        out.append({
            "classes": 1.0 / sum((x / total) ** 2 for x in labels),
            "samples": total / len(now),
            "repeat": None if prev is None else len(now & prev) / len(now),
        })  # fmt: skip
        prev = now
    return out


def window_mean(cells: list[dict | None], key: str) -> float | None:
    """Mean of ``key`` over a window's rounds that have it; None if none has."""
    vals = [c[key] for c in cells if c is not None and c[key] is not None]
    return statistics.fmean(vals) if vals else None


def moving_mean(xs: list[float], width: int) -> list[float]:
    """Mean of the last ``width`` values at each index (fewer at the start)."""
    out, acc = [], 0.0
    for i, x in enumerate(xs):
        acc += x
        if i >= width:
            acc -= xs[i - width]
        out.append(acc / min(i + 1, width))
    return out


def first_reach(curve: list[float], target: float) -> int | None:
    """The 1-based round at which ``curve`` first reaches ``target``; None if never."""
    return next((i + 1 for i, v in enumerate(curve) if v >= target - 1e-12), None)


def reach_ratio(b: int | float | None, o: int | float | None) -> float | None:
    """BASE's rounds (or seconds) to a level over OTHER's; inf where only OTHER reaches it,
    0 where only BASE does, None where neither."""
    if b is None and o is None:
        return None
    if o is None:
        return 0.0
    if b is None:
        return float("inf")
    return b / o


def compare_pair(
    base: Path, other: Path, size: int, levels: tuple[float, ...], smooth: int,
    rounds: int | None = None, absolute: bool = False,
) -> dict:  # fmt: skip
    """One pair's window gains and rounds to each level (of BASE's best, or ``absolute``)."""
    cb = pair_config(base, other)
    rec_b, rec_o = read_metrics(base), read_metrics(other)
    n = rounds if rounds is not None else min(len(rec_b), len(rec_o))
    for run, recs in ((base, rec_b), (other, rec_o)):
        if len(recs) < n:
            raise ValueError(f"{run}: {len(recs)} rounds in metrics.jsonl, fewer than {n}")
    if n < size:
        raise ValueError(f"{base}: {n} rounds to compare, fewer than one window (--size {size})")
    acc_b, sim_b = accuracy_curve(rec_b, base, n)
    acc_o, sim_o = accuracy_curve(rec_o, other, n)
    coh_b, coh_o = cohorts(rec_b, n), cohorts(rec_o, n)
    windows = []
    for lo in range(1, n - size + 2, size):
        hi = lo + size - 1
        mb = statistics.fmean(acc_b[lo - 1 : hi])
        mo = statistics.fmean(acc_o[lo - 1 : hi])
        win = {"window": f"{lo}-{hi}", "base": mb, "other": mo, "gain": 100 * (mo - mb)}
        for key in COHORT_KEYS:
            win[key] = [window_mean(c[lo - 1 : hi], key) for c in (coh_b, coh_o)]
        windows.append(win)
    sb, so = moving_mean(acc_b, smooth), moving_mean(acc_o, smooth)
    best = max(sb)
    reach = []
    for f in levels:
        target = f if absolute else f * best
        rb, ro = first_reach(sb, target), first_reach(so, target)
        tb = None if rb is None else sim_b[rb - 1]
        to = None if ro is None else sim_o[ro - 1]
        reach.append({
            "level": f, "accuracy": target, "rounds": [rb, ro], "sim_time_s": [tb, to],
            "rounds_ratio": reach_ratio(rb, ro), "time_ratio": reach_ratio(tb, to),
            "gain_at_base": None if rb is None else 100 * (so[rb - 1] - sb[rb - 1]),
        })  # fmt: skip
    return {"base": str(base), "other": str(other), "seed": cb.get("seed"), "rounds": n,
            "base_best": best, "windows": windows, "reach": reach}  # fmt: skip


def signed(vals: list[float | None], pivot: float, word: str) -> dict:
    """Median of the known ``vals``, how many lie above and below ``pivot`` (keys
    ``above_WORD`` / ``below_WORD``) and the two-sided sign test's p."""
    known = [v for v in vals if v is not None]
    above, below = sum(v > pivot for v in known), sum(v < pivot for v in known)
    return {"median": statistics.median(known) if known else None, f"above_{word}": above,
            f"below_{word}": below, "sign_p": sign_test_p(above, below)}  # fmt: skip


def summary(rows: list[dict]) -> dict:
    """Medians over the pairs, per window (of the windows every pair has) and per level."""
    n_win = min(len(r["windows"]) for r in rows)
    windows = []
    for i in range(n_win):
        wins = [r["windows"][i] for r in rows]
        g = signed([w["gain"] for w in wins], 0.0, "zero")
        windows.append({
            "window": wins[0]["window"], "gain": g.pop("median"), **g,
            "base": statistics.median(w["base"] for w in wins),
            "other": statistics.median(w["other"] for w in wins),
        })  # fmt: skip
        for key in COHORT_KEYS:
            windows[-1][key] = [signed([w[key][side] for w in wins], 0.0, "zero")["median"]
                                for side in (0, 1)]  # fmt: skip
    levels = []
    for i, lv in enumerate(rows[0]["reach"]):
        reach = [r["reach"][i] for r in rows]
        out = {"level": lv["level"]}
        for key in ("rounds_ratio", "time_ratio"):
            out[key] = signed([x[key] for x in reach], 1.0, "one")
        out["gain_at_base"] = signed([x["gain_at_base"] for x in reach], 0.0, "zero")
        out["base_reached"] = sum(x["rounds"][0] is not None for x in reach)
        out["other_reached"] = sum(x["rounds"][1] is not None for x in reach)
        levels.append(out)
    return {"pairs": len(rows), "windows": windows, "levels": levels}


def finite(x: object) -> object:
    """``x`` with every infinite float replaced by None (strict JSON has no Infinity)."""
    if isinstance(x, float) and math.isinf(x):
        return None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [finite(v) for v in x]
    return x


def parse_levels(text: str) -> tuple[float, ...]:
    """``"0.5,0.9,1"`` -> (0.5, 0.9, 1.0); each in (0, 1]."""
    try:
        vals = tuple(float(x) for x in text.split(","))
    except ValueError:
        vals = ()
    if not vals or not all(0 < v <= 1 for v in vals):
        raise argparse.ArgumentTypeError(
            f"--levels {text!r}: expected comma-separated fractions of BASE's best accuracy in "
            "(0, 1], e.g. 0.5,0.75,0.9,1"
        )
    return vals


def _fmt_ratio(v: float | None) -> str:
    if v is None:
        return "-"
    return "inf" if v == float("inf") else f"{v:.2f}x"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pair", nargs=2, action="append", metavar=("BASE", "OTHER"), required=True)
    ap.add_argument("--size", type=int, default=10, help="rounds per window (default 10)")
    ap.add_argument("--rounds", type=int, default=None, help="compare rounds 1..N")
    ap.add_argument("--levels", type=parse_levels, default=DEFAULT_LEVELS)
    ap.add_argument("--smooth", type=int, default=5, help="moving-mean rounds for the levels")
    ap.add_argument(
        "--absolute",
        action="store_true",
        help="--levels are accuracies, not fractions of BASE's best",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    for flag, v in (("--size", args.size), ("--smooth", args.smooth), ("--rounds", args.rounds)):
        if v is not None and v < 1:
            ap.error(f"{flag} {v}: expected a whole number of rounds >= 1")
    try:
        rows = [
            compare_pair(
                Path(b), Path(o), args.size, args.levels, args.smooth, args.rounds, args.absolute
            )
            for b, o in args.pair
        ]
    except (ValueError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    result = {"rows": rows, "median": summary(rows)}
    if args.json:
        print(json.dumps(finite(result), allow_nan=False))
        return 0
    m = result["median"]
    print(f"OTHER - BASE by window, points (median over {m['pairs']} pairs)")
    print(
        f"{'rounds':>9} {'BASE acc':>9} {'OTHER acc':>10} {'gain':>7} {'> 0 on':>9} {'sign p':>7}"
    )
    for w in m["windows"]:
        print(f"{w['window']:>9} {100 * w['base']:9.1f} {100 * w['other']:10.1f} "
              f"{w['gain']:+7.1f} {w['above_zero']:>4} of {m['pairs']:<2} {w['sign_p']:7.3f}")  # fmt: skip
    if any(v is not None for w in m["windows"] for v in w["classes"]):
        print("who trained, BASE / OTHER (median over pairs of the window's mean): effective")
        print("classes of a round's aggregated samples, samples per aggregated client, share")
        print("of a round's aggregated clients aggregated the round before")
        print(f"{'rounds':>9} {'classes':>13} {'samples':>13} {'repeat':>13}")
        for w in m["windows"]:
            cells = []
            for key, fmt in (("classes", ".2f"), ("samples", ".0f"), ("repeat", ".2f")):
                b, o = ("-" if v is None else f"{v:{fmt}}" for v in w[key])
                cells.append(f"{b} / {o}")
            print(f"{w['window']:>9} " + " ".join(f"{c:>13}" for c in cells))
    what = "an accuracy" if args.absolute else "a fraction of BASE's best"
    print(f"rounds (and simulated s) to {what} ({args.smooth}-round moving mean): BASE over "
          "OTHER, median; OTHER - BASE in points in the round BASE gets there")  # fmt: skip
    print(f"{'level':>6} {'rounds':>8} {'> 1 on':>7} {'sign p':>7} {'sim s':>8} {'> 1 on':>7}"
          f" {'BASE / OTHER reached':>21} {'gain then':>10} {'> 0 on':>7}")  # fmt: skip
    for lv in m["levels"]:
        r, t, g = lv["rounds_ratio"], lv["time_ratio"], lv["gain_at_base"]
        gain = "-" if g["median"] is None else f"{g['median']:+.1f}"
        print(f"{lv['level']:6.2f} {_fmt_ratio(r['median']):>8} {r['above_one']:>7} "
              f"{r['sign_p']:7.3f} {_fmt_ratio(t['median']):>8} {t['above_one']:>7} "
              f"{lv['base_reached']:>10} / {lv['other_reached']:<9} {gain:>10} "
              f"{g['above_zero']:>7}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
