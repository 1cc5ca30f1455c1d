"""The seed table of FedHybrid Table 3's comparison: medians over per-seed runs of
``benchmarks/fedhybrid_tta.py --out FILE``.

One run of fedhybrid_tta.py is one seed; this reads several of its JSON files (the same
flags, one seed each) and prints per seed and as the median over seeds: FedHybrid's
speedup over Random and over Oort (simulated time to Random's best accuracy), FedHybrid −
Oort in points (final round, mean of the last eighth of the rounds, and at equal simulated
time: the mean over the last eighth of the time both runs reached), the memory wall
(Oort-Oracle − Oort) when the oracle ran, and, for runs with ``--low-memory-classes``,
each method's test accuracy on the classes only low-memory phones hold.

    for s in 0 1 2 3 4 5 6 7 8 9; do
      python benchmarks/fedhybrid_tta.py --aggregators fedprox --no-scale --no-ablations \\
        --local-epochs 10 --batch 64 --low-memory-classes 2 --partial-work \\
        --methods random,oort,fedhybrid,oort-oracle --seed $s --out held_s$s.json
    done
    python benchmarks/fedhybrid_seeds.py held_s*.json
    python benchmarks/fedhybrid_seeds.py held_s*.json --json   # one JSON object

Runs made without ``--no-ablations`` also get the Fig. 17 table: each ablation's time to
target, seconds per round and simulated time over equal rounds over FedHybrid's, median over
the seeds. Runs with Table 4's baselines (``oort+recompute``, ``oort+swap``,
``oort+compress``) get FedHybrid's lead over the fastest of them. ``--window A-B`` (repeatable)
adds FedHybrid − Oort in points over rounds A..B, e.g. the same rounds of a longer run:

    python benchmarks/fedhybrid_seeds.py h_s*.json --window 71-80 --window 191-200

A run directory of ``edgetrain federate CONFIG --compare`` (it holds ``summary.json``,
``config.json`` and one ``metrics.jsonl`` per method) is read as one seed too, so the README's
examples themselves can be tabled over seeds:

    for s in 0 1 2; do
      edgetrain federate examples/federated-mnist.yaml --compare --methods random,oort,fedhybrid \
        --seed $s --output-root ex$s
    done
    python benchmarks/fedhybrid_seeds.py ex* --window 41-50

Such a directory also gives, per method over its configured rounds, the selected clients
killed a round (over physical memory) and the share of rounds that lasted until the deadline.
The speed-up over Random is split into Random's rounds to the target over the method's and
Random's simulated seconds a round (to the target) over the method's: shorter rounds, or
fewer of them. Directories of one config and seed are merged into one seed (a method they
share must have the same summary row), so Table 4's baselines and Fig. 17's ablations can run
later, each beside Random, which sets the target:

    edgetrain federate examples/federated-mnist.yaml --compare --seed $s --output-root t4$s \
      --methods random,heterofl,oort+recompute,oort+swap,oort+compress
    edgetrain federate examples/federated-mnist.yaml --compare --seed $s --output-root f17$s \
      --methods random,fedhybrid-noselector,fedhybrid-nooptimizer,fedhybrid-nocompress,\
    fedhybrid-nopredictor
    python benchmarks/fedhybrid_seeds.py ex* t4* f17*
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

#: Table 4's baselines: Oort + Melon / Capuchin / GACT
TABLE4 = ("oort+recompute", "oort+swap", "oort+compress")


def load_compare_dir(path: Path) -> dict:
    """One ``edgetrain federate --compare`` run directory as a fedhybrid_tta.py JSON object:
    its summary rows as the table of the config's aggregator, each method's curve of
    (simulated s, accuracy) from its ``metrics.jsonl``, and the config's seed. ``path`` may
    also be a folder holding exactly one such directory. Raises ValueError naming what is
    missing."""
    found = [path] if (path / "summary.json").is_file() else sorted(
        p.parent for p in path.glob("*/summary.json")
    )  # fmt: skip
    if len(found) != 1:
        raise ValueError(
            f"{path}: expected one 'edgetrain federate --compare' run directory (summary.json, "
            f"config.json, a metrics.jsonl per method), found {len(found)}"
        )
    run_dir = found[0]
    try:
        rows = json.loads((run_dir / "summary.json").read_text())
        cfg = json.loads((run_dir / "config.json").read_text())
        n_rounds = cfg["federated"]["rounds"]
        curves, failures = {}, {}
        for r in rows:
            if "skipped" in r:
                continue
            lines = (run_dir / r["method"].replace("+", "_") / "metrics.jsonl").read_text()
            recs = [json.loads(x) for x in lines.splitlines() if x.strip()]
            curves[r["method"]] = [
                [x["sim_time_s"], x["accuracy"]] for x in recs if x.get("accuracy") is not None
            ]
            failures[r["method"]] = round_failures(recs[:n_rounds])
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(f"{run_dir}: not a complete --compare run directory ({e})") from e
    agg = cfg.get("federated", {}).get("aggregator", "fedprox")
    run = {"seed": cfg.get("seed"), "tables": {agg: rows}, "curves": {agg: curves},
           "failures": {agg: failures}, "source": str(run_dir), "config": cfg}  # fmt: skip
    _ablations_from_rows(run, agg)
    return run


def _ablations_from_rows(run: dict, agg: str) -> None:
    """A --compare directory's Fig. 17 rows (``fedhybrid-no*``) as the ``ablations`` block
    fedhybrid_tta.py writes, with Random and FedHybrid beside them; none where it ran none."""
    rows = [r for r in run["tables"][agg] if "skipped" not in r]
    if any(r["method"].startswith("fedhybrid-no") for r in rows):
        keep = ("random", "fedhybrid")
        run["ablations"] = {
            agg: [r for r in rows if r["method"] in keep or r["method"].startswith("fedhybrid-no")]
        }


def _without_wall(row: dict) -> dict:
    """A summary row less its wall seconds, the one field a rerun may change."""
    return {k: v for k, v in row.items() if k != "wall_s"}


def merge_compare_runs(runs: list[dict]) -> list[dict]:
    """Several --compare directories of one seed and config as one run: e.g. the README
    example's ``random,oort,fedhybrid`` beside ``random,heterofl,oort+recompute,...`` run
    later. A method in two of them must have the same summary row (wall seconds aside) --
    the runs are deterministic, so a difference means another machine or another code; that
    is one ValueError naming both directories. Other runs (fedhybrid_tta.py JSON, which
    records no config) pass through unchanged, in order."""
    out: list[dict] = []
    by_key: dict[str, dict] = {}
    for run in runs:
        cfg = run.get("config")
        if cfg is None:
            out.append(run)
            continue
        key = json.dumps(cfg, sort_keys=True)
        if key not in by_key:
            by_key[key] = run
            out.append(run)
            continue
        base = by_key[key]
        (agg,) = run["tables"]
        have = {r["method"]: r for r in base["tables"][agg]}
        for r in run["tables"][agg]:
            m = r["method"]
            if m in have:
                if _without_wall(have[m]) != _without_wall(r):
                    raise ValueError(
                        f"{base['source']} and {run['source']} ran {m!r} with one config and "
                        "seed but differ (another machine or code version?); table them apart"
                    )
                continue
            base["tables"][agg].append(r)
            have[m] = r
            for block in ("curves", "failures"):
                if m in run.get(block, {}).get(agg, {}):
                    base[block][agg][m] = run[block][agg][m]
        base["source"] = f"{base['source']} + {run['source']}"
        _ablations_from_rows(base, agg)
    return out


def round_failures(recs: list[dict]) -> dict:
    """Over a method's configured rounds: the mean number of selected clients that were
    killed (over physical memory) a round, and the share of rounds that lasted until the
    deadline (fewer reports than the round aggregates: a killed client does not report)."""
    killed = [x.get("outcomes", {}).get("killed", 0) for x in recs]
    at_deadline = [
        x.get("deadline_s") is not None and math.isclose(x["round_time_s"], x["deadline_s"])
        for x in recs
    ]
    n = max(1, len(recs))
    return {"killed_per_round": sum(killed) / n, "deadline_share": sum(at_deadline) / n}


def window_points(run: dict, agg: str, method: str, ref: str, lo: int, hi: int) -> float | None:
    """``method`` − ``ref`` in points, mean accuracy over rounds ``lo``..``hi`` (1-based,
    inclusive) from the JSON's curves; None where either run stopped before round ``hi``."""
    curves = run.get("curves", {}).get(agg, {})
    a, b = curves.get(method), curves.get(ref)
    if not a or not b or min(len(a), len(b)) < hi:
        return None
    return 100 * (statistics.fmean(x for _, x in a[lo - 1 : hi])
                  - statistics.fmean(x for _, x in b[lo - 1 : hi]))  # fmt: skip


def last_mean_points(run: dict, agg: str, method: str, ref: str) -> float | None:
    """``method`` − ``ref`` in points, mean accuracy over the last eighth of the rounds both
    ran (the rule of fedhybrid_tta.py's oracle block), from the JSON's curves."""
    curves = run.get("curves", {}).get(agg, {})
    a, b = curves.get(method), curves.get(ref)
    if not a or not b:
        return None
    common = min(len(a), len(b))
    return window_points(run, agg, method, ref, common - max(1, common // 8) + 1, common)


def equal_time_points(run: dict, agg: str, method: str, ref: str) -> dict | None:
    """``method`` − ``ref`` in points at equal simulated time, the x-axis of FedHybrid's
    Fig. 15 (the goal table's "final accuracy" compares equal rounds instead).

    T is the simulated time both runs reached (the shorter run's last round); each run's
    accuracy is its mean over the rounds that end in the last eighth of that time,
    [7T/8, T] (the rule of ``last_mean_points`` applied to time), or, for a run with no
    round ending there, the accuracy it holds at T (its last round before it). Returns
    the points, T and each run's rounds by T; None where either curve is missing."""
    curves = run.get("curves", {}).get(agg, {})
    a, b = curves.get(method), curves.get(ref)
    if not a or not b:
        return None
    t_end = min(a[-1][0], b[-1][0])
    lo = t_end * 7 / 8

    def held(curve: list[list[float]]) -> tuple[float, int]:
        done = [acc for t, acc in curve if t <= t_end]
        inside = [acc for t, acc in curve if lo <= t <= t_end]
        if inside:
            return statistics.fmean(inside), len(done)
        return (done[-1] if done else 0.0), len(done)

    (am, nm), (ar, nr) = held(a), held(b)
    return {"points": 100 * (am - ar), "time_s": t_end, "rounds": nm, "ref_rounds": nr}


def parse_window(text: str) -> tuple[int, int]:
    """``"71-80"`` -> (71, 80); anything else is one clear error."""
    lo, sep, hi = text.partition("-")
    if not (sep and lo.isdigit() and hi.isdigit() and 1 <= int(lo) <= int(hi)):
        raise argparse.ArgumentTypeError(
            f"--window {text!r}: expected FIRST-LAST rounds, 1-based, e.g. 71-80"
        )
    return int(lo), int(hi)


def seed_row(
    run: dict,
    agg: str = "fedprox",
    method: str = "fedhybrid",
    windows: tuple[tuple[int, int], ...] = (),
) -> dict:
    """One seed's figures from one fedhybrid_tta.py JSON object (None where not run).

    ``method`` is the method compared with Random and Oort (FedHybrid by default; e.g.
    ``fedhybrid-oortselector``). The ``fedhybrid_*`` keys keep their names for it."""
    rows = {r["method"]: r for r in run["tables"][agg] if "skipped" not in r}
    fh, oo = rows.get(method), rows.get("oort")

    def speed(m: str) -> float | None:
        r = rows.get(m)
        return None if r is None else r.get("speedup_vs_random")

    out: dict = {
        "seed": run.get("seed"),
        "target": run["tables"][agg][0].get("target_accuracy"),
        "method": method,
        "fedhybrid_vs_random": speed(method),
        "oort_vs_random": speed("oort"),
    }
    spr = {m: r["sim_time_s"] / r["rounds"] for m, r in rows.items()
           if r.get("sim_time_s") is not None and r.get("rounds")}  # fmt: skip
    if spr:
        out["round_s"] = spr  # simulated seconds a round, per method
    decompose_speedup(out, run, agg, method, rows)
    if fh and oo:
        tf, to = fh["time_to_target_s"], oo["time_to_target_s"]
        out["fedhybrid_vs_oort"] = (to / tf) if (tf and to) else None
        out["oort_time_s"] = to
        out["final_points"] = 100 * (fh["final_accuracy"] - oo["final_accuracy"])
    orc = run.get("oracle", {}).get(agg)
    if orc is not None:
        out["last_points"] = orc["last_mean"]["fedhybrid_vs_oort_points"]
        out["wall_final_points"] = orc["final"]["wall_points"]
        out["wall_last_points"] = orc["last_mean"]["wall_points"]
        out["vs_oracle_last_points"] = orc["last_mean"]["fedhybrid_vs_oracle_points"]
    if method != "fedhybrid" or orc is None:
        out["last_points"] = last_mean_points(run, agg, method, "oort")
        out["vs_oracle_last_points"] = last_mean_points(run, agg, method, "oort-oracle")
    orow = rows.get("oort-oracle")
    if orc is None and orow and oo:  # the memory wall from a --compare directory's rows
        out["wall_final_points"] = 100 * (orow["final_accuracy"] - oo["final_accuracy"])
        out["wall_last_points"] = last_mean_points(run, agg, "oort-oracle", "oort")
    eq = equal_time_points(run, agg, method, "oort")
    if eq is not None:
        out["equal_time_points"] = eq["points"]
        out["equal_time"] = eq
    base = [rows[m] for m in TABLE4 if m in rows]
    if fh and base:
        # the fastest baseline's time to target over FedHybrid's; None where none of them
        # reached it (``table4_missed``: counted as ahead where FedHybrid did) or FedHybrid
        # did not (counted as behind); both stay out of the median
        times = [r["time_to_target_s"] for r in base if r.get("time_to_target_s")]
        tf = fh["time_to_target_s"]
        out["table4_vs_fastest"] = (min(times) / tf) if (times and tf) else None
        out["table4_missed"] = not times
    for lo, hi in windows:
        out.setdefault("window_points", {})[f"{lo}-{hi}"] = window_points(
            run, agg, method, "oort", lo, hi
        )
    if run.get("failures", {}).get(agg):
        out["failures"] = run["failures"][agg]
    held = run.get("held", {}).get(agg)
    if held is not None:
        out["held_classes"] = held["classes"]
        out["held_last"] = {m: v["last_held"] for m, v in held.items() if isinstance(v, dict)}
        out["other_last"] = {m: v["last_other"] for m, v in held.items() if isinstance(v, dict)}
    return out


def decompose_speedup(out: dict, run: dict, agg: str, method: str, rows: dict) -> None:
    """``method``'s speed-up over Random as (Random's rounds to the target ÷ the method's) ×
    (Random's simulated s a round up to the target ÷ the method's): whether a method is
    faster because its rounds are shorter or because it needs fewer of them. Rounds are
    counted along the curves (one point per evaluated round). Adds ``rounds_to_target`` per
    method that reached it, and ``rounds_ratio`` / ``round_length_ratio`` (their product is
    the speed-up) where both Random and the method did."""
    target = out.get("target")
    curves = run.get("curves", {}).get(agg, {})
    if target is None or not curves:
        return
    n = {}
    for m in ("random", "oort", method):
        c = curves.get(m)
        hit = next((i + 1 for i, (_, a) in enumerate(c or []) if a >= target - 1e-12), None)
        if hit is not None:
            n[m] = hit
    out["rounds_to_target"] = n
    tr = rows.get("random", {}).get("time_to_target_s")
    tm = rows.get(method, {}).get("time_to_target_s")
    if tr and tm and n.get("random") and n.get(method):
        out["rounds_ratio"] = n["random"] / n[method]
        out["round_length_ratio"] = (tr / n["random"]) / (tm / n[method])


def median(values: list[float | None]) -> float | None:
    xs = [v for v in values if v is not None]
    return statistics.median(xs) if xs else None


def table(
    runs: list[dict],
    agg: str = "fedprox",
    method: str = "fedhybrid",
    windows: tuple[tuple[int, int], ...] = (),
) -> dict:
    """Per-seed rows and the median of every figure over the seeds."""
    rows = [seed_row(r, agg, method, windows) for r in runs]
    keys = ("fedhybrid_vs_random", "oort_vs_random", "fedhybrid_vs_oort", "final_points",
            "last_points", "wall_final_points", "wall_last_points", "vs_oracle_last_points",
            "table4_vs_fastest", "equal_time_points", "rounds_ratio",
            "round_length_ratio")  # fmt: skip
    med: dict = {k: median([r.get(k) for r in rows]) for k in keys}
    med["fedhybrid_5x_random"] = sum(1 for r in rows if (r.get("fedhybrid_vs_random") or 0) >= 5.0)
    # Oort never reached Random's best: no finite ratio (left out of the median, counted
    # here, and as >= 2x where FedHybrid did reach it)
    missed = [r.get("oort_time_s", 0.0) is None for r in rows]
    med["oort_missed"] = sum(missed)
    med["fedhybrid_2x_oort"] = sum(
        1
        for r, miss in zip(rows, missed, strict=True)
        if (r.get("fedhybrid_vs_oort") or 0) >= 2.0 or (miss and r.get("fedhybrid_vs_random"))
    )
    med["final_5_points"] = sum(1 for r in rows if (r.get("final_points") or -1e9) >= 5.0 - 1e-9)
    med["last_5_points"] = sum(1 for r in rows if (r.get("last_points") or -1e9) >= 5.0 - 1e-9)
    med["equal_time_5_points"] = sum(
        1 for r in rows if (r.get("equal_time_points") or -1e9) >= 5.0 - 1e-9
    )
    t4 = [r for r in rows if "table4_missed" in r]
    if t4:
        med["table4_seeds"] = len(t4)
        med["table4_ahead"] = sum(
            1
            for r in t4
            if (r["table4_vs_fastest"] or 0) > 1.0
            or (r["table4_missed"] and r.get("fedhybrid_vs_random"))
        )
    for lo, hi in windows:
        key = f"{lo}-{hi}"
        vals = [r["window_points"][key] for r in rows]
        med.setdefault("window_points", {})[key] = median(vals)
        med.setdefault("window_5_points", {})[key] = sum(
            1 for v in vals if v is not None and v >= 5.0 - 1e-9
        )
        med.setdefault("window_seeds", {})[key] = sum(1 for v in vals if v is not None)
    failed = sorted({m for r in rows for m in r.get("failures", {})})
    if failed:
        med["failures"] = {
            m: {k: median([r.get("failures", {}).get(m, {}).get(k) for r in rows])
                for k in ("killed_per_round", "deadline_share")}
            for m in failed
        }  # fmt: skip
    timed = sorted({m for r in rows for m in r.get("round_s", {})})
    if timed:
        med["round_s"] = {m: median([r.get("round_s", {}).get(m) for r in rows]) for m in timed}
    methods = sorted({m for r in rows for m in r.get("held_last", {})})
    if methods:
        med["held_last"] = {m: median([r["held_last"].get(m) for r in rows]) for m in methods}
        med["other_last"] = {m: median([r["other_last"].get(m) for r in rows]) for m in methods}
    return {"seeds": len(rows), "rows": rows, "median": med}


def ablation_table(runs: list[dict], agg: str = "fedprox") -> dict:
    """Fig. 17 over seeds: for each ablation in the files' ``ablations`` block, its simulated
    time to Random's best accuracy over its reference's (FedHybrid's; FedHybrid without the
    selector's for the ``-noselector-*`` checks), its simulated seconds per round over the
    reference's, and its simulated time over equal rounds (each curve's time at the last round
    both ran, from the JSON's curves) over the reference's, per seed and as the median. A
    variant that never reaches the target is counted as slower and left out of the time
    median, as Oort is in ``table``."""
    per: dict[str, list[dict]] = {}
    for run in runs:
        rows = {r["method"]: r for r in run.get("ablations", {}).get(agg, [])}
        curves = run.get("curves", {}).get(agg, {})
        for name, r in rows.items():
            if name in ("random", "fedhybrid"):
                continue
            ref = rows.get("fedhybrid-noselector" if "-noselector-" in name else "fedhybrid")
            if ref is None:
                continue
            t, tr = r.get("time_to_target_s"), ref.get("time_to_target_s")
            spr = (r["sim_time_s"] / r["rounds"]) / (ref["sim_time_s"] / ref["rounds"])
            ca, cr = curves.get(name), curves.get(ref["method"])
            n = min(len(ca), len(cr)) if (ca and cr) else 0
            per.setdefault(name, []).append({
                "seed": run.get("seed"),
                "time_ratio": (t / tr) if (t and tr) else None,
                "missed": not t,
                "round_ratio": spr,
                "equal_rounds_ratio": (ca[n - 1][0] / cr[n - 1][0]) if n else None,
            })  # fmt: skip
    out = {}
    for name, rows in per.items():
        slower = sum(1 for r in rows if r["missed"] or (r["time_ratio"] or 0) > 1.0)
        out[name] = {
            "rows": rows,
            "time_ratio": median([r["time_ratio"] for r in rows]),
            "round_ratio": median([r["round_ratio"] for r in rows]),
            "equal_rounds_ratio": median([r["equal_rounds_ratio"] for r in rows]),
            "equal_rounds_slower": sum(1 for r in rows if (r["equal_rounds_ratio"] or 0) > 1.0),
            "slower": slower,
            "slower_5pct": sum(1 for r in rows if r["missed"] or (r["time_ratio"] or 0) > 1.05),
            "missed": sum(1 for r in rows if r["missed"]),
            "seeds": len(rows),
        }
    return out


def _f(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "files", nargs="+",
        help="JSON files written by fedhybrid_tta.py --out, or edgetrain federate --compare "
        "run directories",
    )  # fmt: skip
    ap.add_argument("--aggregator", default="fedprox")
    ap.add_argument(
        "--method", default="fedhybrid",
        help="the method compared with Random and Oort (default fedhybrid; the files must "
        "have run it)",
    )  # fmt: skip
    ap.add_argument(
        "--window", action="append", type=parse_window, default=[], metavar="FIRST-LAST",
        help="also FedHybrid - Oort in points over rounds FIRST..LAST (1-based; repeatable)",
    )  # fmt: skip
    ap.add_argument("--json", action="store_true", help="print one JSON object only")
    args = ap.parse_args(argv)
    runs = []
    for f in args.files:
        try:
            run = load_compare_dir(Path(f)) if Path(f).is_dir() else json.loads(Path(f).read_text())
        except (OSError, json.JSONDecodeError) as e:
            print(f"error: {f}: not a readable fedhybrid_tta.py JSON file ({e})", file=sys.stderr)
            return 2
        except ValueError as e:  # a directory that is not one complete --compare run
            print(f"error: {e}", file=sys.stderr)
            return 2
        if args.aggregator not in run.get("tables", {}):
            print(
                f"error: {f} has no {args.aggregator!r} table; it has "
                f"{sorted(run.get('tables', {}))} (pass --aggregator)",
                file=sys.stderr,
            )
            return 2
        run.setdefault("seed", _seed_of(f))
        run.setdefault("source", f)
        runs.append(run)
    try:
        runs = merge_compare_runs(runs)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for run in runs:
        ran = {r.get("method") for r in run["tables"][args.aggregator]}
        if args.method not in ran:
            print(
                f"error: {run['source']} did not run {args.method!r}; it ran "
                f"{sorted(m for m in ran if m)}",
                file=sys.stderr,
            )
            return 2
    windows = tuple(args.window)
    out = table(runs, args.aggregator, args.method, windows)
    abl = ablation_table(runs, args.aggregator)
    if abl:
        out["ablations"] = abl
    if args.json:
        print(json.dumps(out))
        return 0
    if args.method != "fedhybrid":
        print(f"FH = {args.method}")
    print(f"{'seed':<6}{'FH/Rnd':>8}{'FH/Oort':>8}{'final pts':>10}{'last pts':>9}"
          f"{'wall fin':>9}{'wall last':>10}")  # fmt: skip
    for r in out["rows"]:
        print(f"{_f(r['seed'], 'd') if isinstance(r['seed'], int) else str(r['seed']):<6}"
              f"{_f(r.get('fedhybrid_vs_random'), '.2f'):>8}{_f(r.get('fedhybrid_vs_oort'), '.2f'):>8}"
              f"{_f(r.get('final_points'), '+.1f'):>10}{_f(r.get('last_points'), '+.1f'):>9}"
              f"{_f(r.get('wall_final_points'), '+.1f'):>9}{_f(r.get('wall_last_points'), '+.1f'):>10}")  # fmt: skip
    m = out["median"]
    n = out["seeds"]
    print(f"{'median':<6}{_f(m['fedhybrid_vs_random'], '.2f'):>8}{_f(m['fedhybrid_vs_oort'], '.2f'):>8}"
          f"{_f(m['final_points'], '+.1f'):>10}{_f(m['last_points'], '+.1f'):>9}"
          f"{_f(m['wall_final_points'], '+.1f'):>9}{_f(m['wall_last_points'], '+.1f'):>10}")  # fmt: skip
    print(f"{args.method} >= 5x Random on {m['fedhybrid_5x_random']} of {n} seeds, >= 2x Oort on "
          f"{m['fedhybrid_2x_oort']} (Oort never reached the target on {m['oort_missed']}; "
          f"the median leaves those out); final >= Oort + 5 points on {m['final_5_points']}, "
          f"last-eighth mean on {m['last_5_points']}")  # fmt: skip
    if "table4_seeds" in m:
        print(f"Table 4: the fastest of Oort + Melon / Capuchin / GACT over {args.method} "
              f"(time to target): {_f(m['table4_vs_fastest'], '.2f')}x in the median, ahead on "
              f"{m['table4_ahead']} of {m['table4_seeds']} (per seed: "
              + " / ".join("-" if r.get("table4_vs_fastest") is None else f"{r['table4_vs_fastest']:.2f}"
                           for r in out["rows"] if "table4_missed" in r) + ")")  # fmt: skip
    if m["equal_time_points"] is not None:
        print(f"at equal simulated time (Fig. 15's axis; the last eighth of the time both ran): "
              f"{args.method} - Oort {_f(m['equal_time_points'], '+.1f')} points in the median "
              f"(>= +5 on {m['equal_time_5_points']} of {n}; per seed: "
              + " / ".join(_f(r.get("equal_time_points"), "+.1f") for r in out["rows"])
              + "; rounds by then, per seed: "
              + " / ".join(f"{r['equal_time']['rounds']}:{r['equal_time']['ref_rounds']}"
                           for r in out["rows"] if "equal_time" in r) + ")")  # fmt: skip
    for lo, hi in windows:
        key = f"{lo}-{hi}"
        print(f"rounds {key}: {args.method} - Oort {_f(m['window_points'][key], '+.1f')} points in "
              f"the median of {m['window_seeds'][key]} seeds (>= +5 on {m['window_5_points'][key]}; "
              "per seed: " + " / ".join(_f(r["window_points"][key], "+.1f") for r in out["rows"])
              + ")")  # fmt: skip
    if m["rounds_ratio"] is not None:
        print(f"{args.method}'s speed-up over Random = Random's rounds to the target over "
              f"{args.method}'s x Random's s a round over {args.method}'s (to the target): "
              f"{_f(m['rounds_ratio'], '.2f')} x {_f(m['round_length_ratio'], '.2f')} in the median "
              "(per seed: " + " / ".join(
                  f"{r['rounds_ratio']:.2f} x {r['round_length_ratio']:.2f}"
                  for r in out["rows"] if "rounds_ratio" in r) + ")")  # fmt: skip
    if "round_s" in m:
        print("simulated s a round, median over seeds: "
              + " / ".join(f"{k} {_f(v, '.1f')}" for k, v in m["round_s"].items()))  # fmt: skip
    if "failures" in m:
        print("over the configured rounds, median over seeds: clients killed a round / share of "
              "rounds that lasted until the deadline: "
              + " / ".join(f"{k} {v['killed_per_round']:.1f}, {100 * v['deadline_share']:.0f} %"
                           for k, v in m["failures"].items()))  # fmt: skip
    if "held_last" in m:
        print("test accuracy on the classes only low-memory phones hold / on the others "
              "(mean of the last eighth of the rounds, median over seeds)")  # fmt: skip
        for meth, v in m["held_last"].items():
            print(f"  {meth:<18}{_f(100 * v if v is not None else None, '.1f'):>6}%"
                  f"{_f(100 * m['other_last'][meth] if m['other_last'][meth] is not None else None, '.1f'):>7}%")  # fmt: skip
    if abl:
        print("Fig. 17 ablations: time to target / simulated s per round / simulated time over "
              "equal rounds, each over the reference's (FedHybrid's; without the selector's for "
              "-noselector-*), median over seeds; slower: on how many seeds to the target "
              "(> 1.00x, > 1.05x; never reaching it counts), and over equal rounds")  # fmt: skip
        for name, a in abl.items():
            print(f"  {name:<36}{_f(a['time_ratio'], '.2f'):>6}x{_f(a['round_ratio'], '.2f'):>6}x"
                  f"{_f(a['equal_rounds_ratio'], '.2f'):>6}x"
                  f"  slower on {a['slower']} / {a['slower_5pct']} of {a['seeds']}"
                  + (f" ({a['missed']} never reached it)" if a["missed"] else "")
                  + f"; over equal rounds on {a['equal_rounds_slower']}")  # fmt: skip
    return 0


def _seed_of(path: str) -> int | str:
    """The seed in a file name like held_s3.json (the JSON does not record it)."""
    stem = Path(path).stem
    tail = stem.rsplit("_s", 1)[-1]
    return int(tail) if tail.isdigit() else stem


if __name__ == "__main__":
    sys.exit(main())
