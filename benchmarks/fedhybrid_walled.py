"""Where the memory wall's data goes: one run's per-class test accuracy against another's,
split by how much of each class the walled phones hold.

A phone is *walled* when its physical memory cannot hold M_G (the model's unplanned training
memory): without a plan it is killed whenever it is selected. FedHybrid §1's premise is that
dropping such phones leaves "the unique data on them underrepresented in the global model".
For each class this takes the share of its training samples that sit on walled phones (from the
run's own fleet and partition, rebuilt from its ``config.json``), and the mean per-class test
accuracy (``class_accuracy`` in ``metrics.jsonl``) over a window of rounds in both runs. The
classes are cut into the walled-heavy half (the highest shares, ties by class id) and the rest.
It prints, per pair and as the median over pairs, OTHER − BASE in points: overall, on the
walled-heavy half, on the other half, and the correlation over classes of the share with the
gain; and the walled-heavy classes' share of the training samples each run aggregated up to the
window's end (``aggregated_labels``), which says how far OTHER shifted the data it learnt from.

    python benchmarks/fedhybrid_walled.py --window 41-50 \\
        --pair ex0/federated-mnist-compare/oort o7_0/federated-mnist-7 \\
        --pair ex1/federated-mnist-compare/oort o7_1/federated-mnist-7
    python benchmarks/fedhybrid_walled.py ... --json        # one JSON object
    python benchmarks/fedhybrid_walled.py ... --versus other.json   # against another set

Below the medians it prints a two-sided sign test per column (ties excluded): is the gain's
sign consistent over the pairs? ``--versus FILE`` (an earlier ``--json`` output, e.g. the same
pairs on another model) adds that set's medians and a two-sided Mann-Whitney rank-sum p per
column: do the two sets of pairs differ, or is the difference within the seeds' spread?

Each run is a method's run directory: its ``metrics.jsonl``, and ``config.json`` in it (a
single ``edgetrain federate`` run) or in the ``--compare`` directory above it. The two runs of
a pair must share the fleet, data, partition, memory settings and seed (so the same phones are
walled and hold the same samples); other settings, such as ``clients_per_round`` or the
method, may differ: that is what a pair compares.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

from edgetrain.engine.budget.stats import sign_test_p

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fedhybrid_seeds import parse_window  # noqa: E402  (a sibling script, not a package)

#: the config sections that fix which phones are walled and which samples they hold
SHARED = ("seed", "data", "fleet", "partition", "memory", "model")


def run_config(run: Path) -> dict:
    """The ``config.json`` of a method's run directory (its own, or its --compare parent's)."""
    for p in (run / "config.json", run.parent / "config.json"):
        if p.is_file():
            return json.loads(p.read_text())
    raise ValueError(
        f"{run}: no config.json in it or in the folder above; give a method's run directory "
        "of 'edgetrain federate' (e.g. RUN-compare/oort or RUN)"
    )


def read_metrics(run: Path) -> list[dict]:
    path = run / "metrics.jsonl"
    try:
        return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{run}: no readable metrics.jsonl ({e})") from e


def label_exposure(recs: list[dict], hi: int, k: int) -> np.ndarray:
    """Per class, the training samples aggregated over rounds 1..hi (``aggregated_labels``)."""
    counts = np.zeros(k)
    for r in recs:
        if r["round"] <= hi and r.get("aggregated_labels"):
            counts += np.asarray(r["aggregated_labels"], dtype=float)
    return counts


def window_class_accuracy(
    recs: list[dict], run: Path, lo: int, hi: int
) -> tuple[np.ndarray, float]:
    """Mean per-class and overall test accuracy over rounds ``lo..hi`` of ``run``."""
    recs = [r for r in recs if lo <= r["round"] <= hi and r.get("accuracy") is not None]
    if len({r["round"] for r in recs}) != hi - lo + 1:
        raise ValueError(f"{run}: rounds {lo}-{hi} are not all evaluated in metrics.jsonl")
    if any("class_accuracy" not in r for r in recs):
        raise ValueError(f"{run}: metrics.jsonl has no class_accuracy (run before round 30)")
    per_class = np.mean([r["class_accuracy"] for r in recs], axis=0)
    return per_class, float(np.mean([r["accuracy"] for r in recs]))


def walled_share(cfg: dict) -> tuple[np.ndarray, int, float]:
    """Per class, the share of its training samples on walled phones; the number of walled
    phones; their share of all training samples. Rebuilds the run's environment (data,
    fleet, partition; no training)."""
    from edgetrain.config import parse_config
    from edgetrain.federated import FederatedConfig
    from edgetrain.federated.environment import build_environment

    env = build_environment(parse_config(cfg, schema=FederatedConfig))
    y = env.train.y.numpy()
    k = int(y.max()) + 1
    walled = env.hard_limits < env.m_g
    on_walled = np.zeros(k)
    for cid in np.flatnonzero(walled):
        on_walled += np.bincount(y[env.parts[cid]], minlength=k)
    total = np.bincount(y, minlength=k)
    return on_walled / np.maximum(total, 1), int(walled.sum()), float(on_walled.sum() / len(y))


def pair_config(base: Path, other: Path) -> dict:
    """BASE's config, once both runs are found to share :data:`SHARED` (one fleet, data,
    partition and seed: the same phones walled, holding the same samples)."""
    cb, co = run_config(base), run_config(other)
    differ = [k for k in SHARED if cb.get(k) != co.get(k)]
    if differ:
        raise ValueError(
            f"{base} and {other} differ in {', '.join(differ)}: a pair must share "
            f"{', '.join(SHARED)} (the same phones walled, holding the same samples)"
        )
    return cb


def compare_pair(base: Path, other: Path, lo: int, hi: int) -> dict:
    """OTHER − BASE per class over rounds lo..hi, split by the walled phones' share."""
    cb = pair_config(base, other)
    share, n_walled, sample_share = walled_share(cb)
    rec_b, rec_o = read_metrics(base), read_metrics(other)
    acc_b, all_b = window_class_accuracy(rec_b, base, lo, hi)
    acc_o, all_o = window_class_accuracy(rec_o, other, lo, hi)
    if not len(acc_b) == len(acc_o) == len(share):
        raise ValueError(f"{base}, {other}: class counts differ ({len(acc_b)}, {len(acc_o)})")
    gain = 100 * (acc_o - acc_b)
    order = sorted(range(len(share)), key=lambda c: (-share[c], c))
    heavy = np.zeros(len(share), dtype=bool)
    heavy[order[: (len(share) + 1) // 2]] = True
    exp_b, exp_o = (label_exposure(r, hi, len(share)) for r in (rec_b, rec_o))
    corr = float(np.corrcoef(share, gain)[0, 1]) if share.std() and gain.std() else None
    return {
        "base": str(base), "other": str(other), "seed": cb.get("seed"),
        "walled_phones": n_walled, "walled_sample_share": sample_share,
        "class_share": share.tolist(), "class_gain": gain.tolist(),
        "heavy_classes": [int(c) for c in np.flatnonzero(heavy)],
        "heavy_share": float(share[heavy].mean()), "other_share": float(share[~heavy].mean()),
        "gain": 100 * (all_o - all_b),
        "gain_heavy": float(gain[heavy].mean()), "gain_other": float(gain[~heavy].mean()),
        "corr": corr,
        # the walled-heavy classes' share of the training samples each run aggregated, 1..hi
        "heavy_exposure": [float(e[heavy].sum() / max(e.sum(), 1)) for e in (exp_b, exp_o)],
    }  # fmt: skip


GAINS = ("gain", "gain_heavy", "gain_other")


def summary(rows: list[dict]) -> dict:
    """Median over pairs of each gain, on how many pairs it is above and below zero, and the
    two-sided sign test's p."""
    out = {}
    for key in GAINS:
        vals = [r[key] for r in rows]
        above, below = sum(v > 0 for v in vals), sum(v < 0 for v in vals)
        out[key] = {"median": statistics.median(vals), "above_zero": above,
                    "below_zero": below, "sign_p": sign_test_p(above, below)}  # fmt: skip
    return out


def versus(rows: list[dict], other: dict) -> dict:
    """Each gain of this set of pairs against another set's (``--json`` output): that set's
    median and the two-sided Mann-Whitney rank-sum p."""
    from scipy.stats import mannwhitneyu

    out = {}
    for key in GAINS:
        a, b = [r[key] for r in rows], [r[key] for r in other["rows"]]
        p = float(mannwhitneyu(a, b, alternative="two-sided").pvalue)
        out[key] = {"median": statistics.median(b), "pairs": len(b), "rank_sum_p": p}
    return out


def read_versus(path: str) -> dict:
    """An earlier ``--json`` output, checked for what :func:`versus` reads."""
    try:
        data = json.loads(Path(path).read_text())
        if not data["rows"]:
            raise ValueError("no rows")
        for r in data["rows"]:
            if not all(isinstance(r[k], int | float) for k in GAINS):
                raise ValueError(f"a row's gains are not numbers: {[r[k] for k in GAINS]}")
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(
            f"--versus {path}: not an output of this script's --json with at least one pair "
            f"({type(e).__name__}: {e})"
        ) from None
    return data


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pair", nargs=2, action="append", metavar=("BASE", "OTHER"), required=True)
    ap.add_argument(
        "--window", type=parse_window, default=None, help="rounds A-B (default: the last eighth)"
    )
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--versus", metavar="FILE", help="an earlier --json output to test against")
    args = ap.parse_args(argv)
    rows = []
    try:
        against = read_versus(args.versus) if args.versus else None
        for base, other in args.pair:
            base, other = Path(base), Path(other)
            if args.window:
                lo, hi = args.window
            else:
                n = run_config(base)["federated"]["rounds"]
                lo, hi = n - max(1, n // 8) + 1, n
            rows.append(compare_pair(base, other, lo, hi) | {"window": f"{lo}-{hi}"})
    except (ValueError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    result = {"rows": rows, "median": summary(rows)}
    if against is not None:
        result["versus"] = {"file": args.versus} | versus(rows, against)
    if args.json:
        print(json.dumps(result))
        return 0
    print("OTHER - BASE, points, mean test accuracy over the window; classes split by the share")
    print("of their training samples on walled phones (physical memory below M_G)")
    print(f"{'seed':>5} {'window':>7} {'walled':>7} {'overall':>8} {'heavy half':>11}"
          f" {'other half':>11} {'shares (heavy/other)':>21} {'corr':>6} {'heavy exposure':>15}")  # fmt: skip
    for r in rows:
        corr = "" if r["corr"] is None else f"{r['corr']:+.2f}"
        print(f"{r['seed']!s:>5} {r['window']:>7} {r['walled_phones']:>7} {r['gain']:+8.1f}"
              f" {r['gain_heavy']:+11.1f} {r['gain_other']:+11.1f}"
              f" {r['heavy_share']:10.2f} / {r['other_share']:.2f} {corr:>6}"
              f" {r['heavy_exposure'][0]:7.2f} -> {r['heavy_exposure'][1]:.2f}")  # fmt: skip
    m, n = result["median"], len(rows)
    print(f"{'median':>5} {'':>7} {'':>7} {m['gain']['median']:+8.1f}"
          f" {m['gain_heavy']['median']:+11.1f} {m['gain_other']['median']:+11.1f}")  # fmt: skip
    print(
        f"{'> 0 on':>5} {'':>7} {'':>7} {m['gain']['above_zero']:>5} of {n}"
        f" {m['gain_heavy']['above_zero']:>8} of {n} {m['gain_other']['above_zero']:>8} of {n}"
    )
    print(f"{'sign p':>5} {'':>7} {'':>7} {m['gain']['sign_p']:8.3f}"
          f" {m['gain_heavy']['sign_p']:11.3f} {m['gain_other']['sign_p']:11.3f}")  # fmt: skip
    if against is not None:
        v = result["versus"]
        print(
            f"against {args.versus} ({v['gain']['pairs']} pairs): its medians, then the "
            "two-sided rank-sum p"
        )
        print(f"{'median':>5} {'':>7} {'':>7} {v['gain']['median']:+8.1f}"
              f" {v['gain_heavy']['median']:+11.1f} {v['gain_other']['median']:+11.1f}")  # fmt: skip
        print(f"{'p':>5} {'':>7} {'':>7} {v['gain']['rank_sum_p']:8.3f}"
              f" {v['gain_heavy']['rank_sum_p']:11.3f} {v['gain_other']['rank_sum_p']:11.3f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
