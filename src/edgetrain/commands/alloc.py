"""``edgetrain alloc FILE.csv``: static allocation of a MiniMalloc CSV problem."""

from __future__ import annotations

from pathlib import Path

import typer

from edgetrain.commands._output import check_output_file, console, print_json


def register(app: typer.Typer) -> None:
    @app.command("alloc")
    def alloc_cmd(
        problem: Path = typer.Argument(
            ..., help="MiniMalloc CSV: id,lower,upper,size (upper exclusive)."
        ),
        out: Path | None = typer.Option(
            None, "--out", help="Write id,lower,upper,size,offset here."
        ),
        time_limit: float = typer.Option(
            10.0, "--time-limit", min=0.0, help="Seconds for the exact search."
        ),
        alignment: int = typer.Option(1, "--alignment", help="Offsets are multiples of this."),
        json_out: bool = typer.Option(False, "--json", help="Print one JSON object."),
    ) -> None:
        """Pack buffers into one arena (greedy by size, then MiniMalloc-style search)."""
        from edgetrain.errors import ConfigError
        from edgetrain.memory import allocate, read_minimalloc_csv, write_minimalloc_csv

        if problem.is_dir():
            raise ConfigError(f"{problem} is a directory; expected a MiniMalloc CSV file")
        check_output_file(out, "--out")
        buffers = read_minimalloc_csv(problem)
        result = allocate(buffers, time_limit_s=time_limit, alignment=alignment)
        if out is not None:
            write_minimalloc_csv(out, buffers, result.offsets)
        summary = {
            "file": str(problem),
            "buffers": len(buffers),
            "arena_bytes": result.arena_bytes,
            "lower_bound_bytes": result.lower_bound_bytes,
            "ratio": result.ratio,
            "optimal": result.optimal,
            "method": result.method,
            "seconds": result.seconds,
            "out": str(out) if out is not None else None,
        }
        if json_out:
            print_json(summary)
            return
        status = "optimal" if result.optimal else "not proven optimal"
        console.print(
            f"{len(buffers)} buffers: arena {result.arena_bytes:,} B, lower bound "
            f"{result.lower_bound_bytes:,} B (x{result.ratio:.4f}, {status}, {result.method}) "
            f"in {result.seconds:.3f} s" + (f"; offsets written to {out}" if out else ""),
            highlight=False,
        )
