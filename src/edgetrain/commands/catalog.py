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
        phones = [r for r in rows if r.get("kind") == "phone"]
        socs = [r for r in rows if r.get("kind") == "soc"]
        if phones:
            print_table("phones", phones, [k for k in phones[0] if k not in ("kind", "sources")])
        if socs:
            print_table("SoC targets", socs, [k for k in socs[0] if k not in ("kind", "sources")])
