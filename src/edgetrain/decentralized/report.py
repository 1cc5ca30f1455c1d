"""report.html for a decentralized run: plots as base64 PNGs, one self-contained file.

Analogues of MDLdroid's figures from one run's metrics: Fig. 3 (accuracy per
epoch), Fig. 8 (the DQN's episode returns while learning), Fig. 10 (simulated
time per epoch and energy variance), Fig. 11 (peak model copies and energy per
device). Times and energies are simulated and labelled so.
"""

from __future__ import annotations

import base64
import html
import io
import json
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _figures(epochs: Sequence[dict]) -> list[tuple[str, str]]:
    ep = [e["epoch"] for e in epochs]
    out = []
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.plot(ep, [e["accuracy"] for e in epochs], marker="o")
    ax.set_xlabel("epoch")
    ax.set_ylabel("test accuracy (%)")
    out.append(("Fig. 3 analogue: accuracy per epoch (real training)", _png(fig)))
    returns = [r for e in epochs for r in e.get("dqn", {}).get("returns", [])]
    if returns:
        fig, ax = plt.subplots(figsize=(5, 3))
        ax.plot(range(1, len(returns) + 1), returns, lw=0.8)
        ax.set_xlabel("DQN episode (all learning slots)")
        ax.set_ylabel("episode return")
        out.append(("Fig. 8 analogue: Chain-scheduler learning (episode returns)", _png(fig)))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3))
    a1.bar(ep, [e["epoch_sim_time_s"] for e in epochs])
    a1.set_xlabel("epoch")
    a1.set_ylabel("simulated time (s)")
    a2.plot(ep, [e["energy_variance"] for e in epochs], marker="o")
    a2.set_xlabel("epoch")
    a2.set_ylabel("aggregation energy variance (J², eq. 6)")
    out.append(("Fig. 10 analogue: simulated latency and energy balance", _png(fig)))
    last = epochs[-1]
    dev = list(range(len(last["peak_model_copies"])))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3))
    a1.bar(dev, last["peak_model_copies"])
    a1.set_xlabel("device")
    a1.set_ylabel("peak model copies held")
    a2.bar(dev, last["battery_mah"])
    a2.set_xlabel("device")
    a2.set_ylabel("simulated battery used (mAh)")
    out.append(("Fig. 11 analogue: memory (model copies) and battery per device", _png(fig)))
    return out


def write_report(run_path: str | Path, config: dict, epochs: Sequence[dict]) -> Path:
    """Write ``run_path/report.html`` and return its path."""
    run_path = Path(run_path)
    figs = _figures(epochs)
    last = epochs[-1]
    rows = "".join(
        f"<tr><td>{e['epoch']}</td><td>{e['accuracy']:.2f}</td><td>{e['sim_time_s']:.1f}</td>"
        f"<td>{e['energy_variance']:.4g}</td><td>{max(e['peak_model_copies'])}</td>"
        f"<td>{html.escape(json.dumps(e['schedule']))}</td></tr>"
        for e in epochs
    )
    imgs = "".join(
        f"<h2>{html.escape(t)}</h2><img src='data:image/png;base64,{b}'/>" for t, b in figs
    )
    doc = f"""<!doctype html><html><head><meta charset="utf-8"><title>edgetrain chain run</title>
<style>body{{font-family:sans-serif;max-width:1000px;margin:auto}}td,th{{padding:2px 8px}}</style>
</head><body><h1>Decentralized run (MDLdroid ChainSGD-reduce)</h1>
<p>Final accuracy {last["accuracy"]:.2f}% (real training). Time and energy are
<b>simulated</b> from the device profiles (cost model: edgetrain.decentralized.costs).</p>
<pre>{html.escape(json.dumps(config, indent=1, default=str))}</pre>
<table border="1"><tr><th>epoch</th><th>accuracy %</th><th>sim time s</th>
<th>energy var J²</th><th>peak copies</th><th>schedule (sender, receiver)</th></tr>{rows}</table>
{imgs}</body></html>"""
    out = run_path / "report.html"
    out.write_text(doc)
    return out
