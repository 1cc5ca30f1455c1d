"""``report.html``: time-to-accuracy curves (simulated clock), per-round table, summary.

The x axis is the *simulated* clock (labelled as such; DESIGN.md "two clocks"); accuracy
and loss are real. Plots are matplotlib SVG embedded in one self-contained HTML file.
"""

from __future__ import annotations

import html
import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def _svg(curves: Mapping[str, Sequence[dict[str, Any]]], key: str, ylabel: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, recs in curves.items():
        pts = [(r["sim_time_s"] / 3600.0, r[key]) for r in recs if r.get(key) is not None]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=name, marker=".", ms=3)
    ax.set_xlabel("simulated time (hours, simulated clock)")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    buf = io.StringIO()
    fig.tight_layout()
    fig.savefig(buf, format="svg")
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg") :]


def _table(rows: Sequence[Mapping[str, Any]], cols: Sequence[str]) -> str:
    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.4g}"
        return html.escape(str(v)) if v is not None else "-"

    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join(
        "<tr>" + "".join(f"<td>{fmt(r.get(c))}</td>" for c in cols) + "</tr>" for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def write_report(
    path: str | Path,
    title: str,
    curves: Mapping[str, Sequence[dict[str, Any]]],
    summary: Sequence[Mapping[str, Any]] | None = None,
    held_classes: Sequence[int] = (),
) -> Path:
    """Write the HTML report for one run (one curve) or a comparison (one per method).

    ``held_classes``: the classes only the low-memory phones hold
    (``partition.low_memory_classes``), marked in the per-class accuracy table."""
    path = Path(path)
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
        "<style>body{font-family:sans-serif;max-width:1000px;margin:auto}"
        "table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;"
        "padding:2px 6px}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        "<p>Time is the <b>simulated</b> clock (device profiles, plans, memory pressure); "
        "accuracy and loss are computed for real on the held-out test set.</p>",
    ]
    if summary:
        cols = [c for c in ("method", "final_accuracy", "best_accuracy", "target_accuracy",
                            "time_to_target_s", "speedup_vs_random", "rounds", "wall_s")
                if any(c in r for r in summary)]  # fmt: skip
        parts += ["<h2>Summary</h2>", _table(summary, cols)]
    parts += ["<h2>Time to accuracy</h2>", _svg(curves, "accuracy", "test accuracy")]
    parts += ["<h2>Test loss</h2>", _svg(curves, "loss", "test loss")]
    parts += _class_table(curves, held_classes)
    for name, recs in curves.items():
        rows = [
            {
                "round": r["round"],
                "sim_time_s": r["sim_time_s"],
                "accuracy": r["accuracy"],
                "loss": r["loss"],
                "aggregated": r["n_aggregated"],
                "outcomes": ", ".join(f"{k}:{v}" for k, v in r["outcomes"].items() if v),
                "energy_j": r["energy_j"],
            }
            for r in recs
        ]
        parts += [f"<h3>{html.escape(name)}: rounds</h3>",
                  _table(rows, ["round", "sim_time_s", "accuracy", "loss", "aggregated",
                                "outcomes", "energy_j"])]  # fmt: skip
    parts.append("</body></html>")
    path.write_text("\n".join(parts))
    return path


def _class_table(curves: Mapping[str, Sequence[dict[str, Any]]], held: Sequence[int]) -> list[str]:
    """The final round's test accuracy per class and method (nothing if no record has it)."""
    finals = {}
    for name, recs in curves.items():
        ca = next((r["class_accuracy"] for r in reversed(recs) if r.get("class_accuracy")), None)
        if ca:
            finals[name] = ca
    if not finals:
        return []
    n = max(len(v) for v in finals.values())
    cols = ["method"] + [f"{c}*" if c in held else str(c) for c in range(n)]
    rows = [{"method": m, **{cols[c + 1]: v[c] for c in range(len(v))}} for m, v in finals.items()]
    note = (
        "<p>* held only by the phones whose physical memory cannot hold M_G "
        "(partition.low_memory_classes)</p>"
        if held
        else ""
    )
    return ["<h2>Test accuracy per class, final round</h2>", _table(rows, cols), note]
