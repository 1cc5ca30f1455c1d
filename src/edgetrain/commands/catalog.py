"""``edgetrain models|data|devices``: list what exists, with key figures."""

from __future__ import annotations

import typer

from edgetrain.commands._output import print_json, print_table

JSON_OPT = typer.Option(False, "--json", help="Print one JSON list instead of a table.")


def register(app: typer.Typer) -> None:
    @app.command("models")
    def models_cmd(json_out: bool = JSON_OPT) -> None:
        """List the model zoo: parameters, input shape, forward FLOPs, the paper's figure."""
        from edgetrain.models import catalog

        rows = catalog()
        if json_out:
            print_json(rows)
            return
        print_table(
            "edgetrain model zoo (default options)",
            rows,
            [
                "name",
                "family",
                "params",
                "paper_params",
                "input_shape",
                "num_classes",
                "flops_forward",
            ],
        )

    @app.command("data")
    def data_cmd(json_out: bool = JSON_OPT) -> None:
        """List the shipped data sets: samples, shape, classes, subjects, source."""
        from edgetrain.data import catalog

        rows = catalog()
        if json_out:
            print_json(rows)
            return
        print_table(
            "edgetrain data sets (shipped, offline)",
            rows,
            ["name", "kind", "samples", "shape", "classes", "subjects", "source"],
        )

    @app.command("devices")
    def devices_cmd(json_out: bool = JSON_OPT) -> None:
        """List device profiles (phones from the papers) and SoC targets with memory tiers."""
        from edgetrain.devices import catalog

        rows = catalog()
        if json_out:
            print_json(rows)
            return
        phones = [_human(r) for r in rows if r.get("kind") == "phone"]
        socs = [_human(r) for r in rows if r.get("kind") == "soc"]
        if phones:
            print_table(
                "phones (compute: sustained training rate, see sources in --json)",
                phones,
                ["name", "catalogue", "soc", "memory", "compute", "battery_mah"],
            )
        if socs:
            print_table(
                "SoC targets",
                socs,
                ["name", "memory", "compute", "cores", "fpus", "freq", "gemm_array", "tiers"],
            )


def _human(row: dict) -> dict:
    """Readable units for the table (the JSON keeps exact integers)."""
    out = dict(row)
    mem = row.get("memory_bytes")
    if isinstance(mem, (int, float)):
        out["memory"] = f"{mem / 2**30:.0f} GiB" if mem >= 2**30 else f"{mem / 2**20:.1f} MiB"
    flops = row.get("compute_flops")
    if isinstance(flops, (int, float)):
        out["compute"] = f"{flops / 1e9:.1f} GFLOP/s"
    freq = row.get("freq_hz")
    if isinstance(freq, (int, float)):
        out["freq"] = f"{freq / 1e6:.0f} MHz"
    tiers = row.get("tiers")
    if isinstance(tiers, list):
        out["tiers"] = ", ".join(
            f"{t.get('name')} {t.get('size')}" if isinstance(t, dict) else str(t) for t in tiers
        )
    return out
