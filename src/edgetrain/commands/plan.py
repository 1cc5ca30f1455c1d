"""``edgetrain plan``: memory and latency plan of one training step on an SoC target."""

from __future__ import annotations

from pathlib import Path

import typer

from edgetrain.commands._output import check_output_file, console, print_json, print_table


def _mb(n: int) -> str:
    return f"{n / 1e6:.3f} MB"


def register(app: typer.Typer) -> None:
    @app.command("plan")
    def plan_cmd(
        model: str = typer.Option(
            "cct2", "--model", help="Zoo model name (see `edgetrain models`)."
        ),
        strategy: str = typer.Option("full", "--strategy", help="full | lp | ft-k | lora-k"),
        batch: int = typer.Option(1, "--batch", help="Batch size of the step."),
        target: str = typer.Option(
            "pulp", "--target", help="SoC target (see `edgetrain devices`)."
        ),
        optimizer: str = typer.Option("sgd", "--optimizer", help="sgd | sgd-momentum | adam"),
        placement: str = typer.Option(
            "spill",
            "--placement",
            help="spill: L2 while it fits, rest to L3; l3-primary: all tensors in L3 (TrainDeeploy).",
        ),
        time_limit: float = typer.Option(
            1.0, "--time-limit", min=0.0, help="Allocator search seconds."
        ),
        seed: int = typer.Option(0, "--seed", min=0),
        plot: Path | None = typer.Option(
            None, "--plot", help="Write the memory timeline PNG here."
        ),
        json_out: bool = typer.Option(False, "--json", help="Print one JSON object."),
    ) -> None:
        """Capture the training step, allocate it statically, place it on L1/L2/L3, estimate latency."""
        from edgetrain.memory import plan_training, plot_timeline

        check_output_file(plot, "--plot")
        plan = plan_training(
            model,
            strategy,
            batch,
            target,
            optimizer,
            seed=seed,
            time_limit_s=time_limit,
            placement=placement,
        )
        if plot is not None:
            plot_timeline(plan, str(plot))
        data = plan.to_json()
        if json_out:
            print_json(data)
            return
        rows = [
            {
                "quantity": "parameters / trainable",
                "value": f"{data['params']:,} / {data['trainable_params']:,}",
            },
            {"quantity": "trainable bytes", "value": _mb(data["trainable_bytes"])},
            {
                "quantity": "FLOPs forward / train",
                "value": f"{data['flops_forward'] / 1e6:.1f} M / {data['flops_train'] / 1e6:.1f} M",
            },
            {
                "quantity": "lower bound / arena",
                "value": f"{_mb(data['lower_bound_bytes'])} / {_mb(data['arena_bytes'])}"
                + (" (optimal)" if data["arena_optimal"] else ""),
            },
            {
                "quantity": "dynamic peak (no weights/input)",
                "value": _mb(data["dynamic_peak_bytes"]),
            },
        ]
        for name, tier in data["tiers"].items():
            rows.append(
                {
                    "quantity": f"{name} peak / capacity",
                    "value": f"{_mb(tier['peak_bytes'])} / {_mb(tier['capacity_bytes'])}",
                }
            )
        rows += [
            {
                "quantity": "L3<->L2 / L2<->L1 per step",
                "value": f"{_mb(data['transfers']['l3_l2_bytes'])} / {_mb(data['transfers']['l2_l1_bytes'])}",
            },
            {
                "quantity": "latency cores / accelerated (estimate)",
                "value": f"{data['latency_ms']['cores']:.2f} ms / {data['latency_ms']['accelerated']:.2f} ms",
            },
            {"quantity": "FLOP/cycle (accelerated)", "value": f"{data['flop_per_cycle']:.2f}"},
        ]
        print_table(
            f"{model} {data['strategy']} batch {batch} on {data['target']} "
            f"({optimizer}, {placement})",
            rows,
            ["quantity", "value"],
        )
        if plot is not None:
            console.print(f"timeline written to {plot}", highlight=False)
