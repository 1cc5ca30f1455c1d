"""``edgetrain chain``: decentralized training without a server (MDLdroid)."""

from __future__ import annotations

import typer

from edgetrain.commands._output import err_console, print_json, print_table
from edgetrain.decentralized.faults import Fault
from edgetrain.decentralized.trainer import ChainConfig, default_run_name, run_chain
from edgetrain.errors import ConfigError
from edgetrain.runs import RunDir


def register(app: typer.Typer) -> None:
    @app.command("chain")
    def chain(
        devices: int = typer.Option(6, help="Number of training devices."),
        scheduler: str = typer.Option("chain", help="chain (DQN) | ring | tree."),
        aggregation: str = typer.Option("chain", help="chain (θ-weighted) | neighbor | central."),
        model: str = typer.Option("lenet", help="Model zoo name (lenet, alexnet)."),
        data: str = typer.Option("watch", help="Shipped sensor data set."),
        setting: str = typer.Option(
            "per-person",
            help="per-person: one subject per device; individual: one person's data "
            "spread over their own devices.",
        ),
        epochs: int = typer.Option(5, help="Training epochs."),
        aggs_per_epoch: int = typer.Option(1, help="Aggregation rounds per epoch (Fig. 12-14)."),
        seed: int = typer.Option(
            0, min=0, help="Seed for data split, model, busy allocation, DQN."
        ),
        link: str = typer.Option("bluetooth", help="bluetooth | wifi_direct (pair transfers)."),
        busy: str = typer.Option("random", help="random (≤50% busy) | trace | none."),
        wire: str = typer.Option(
            "float32",
            help="Precision of the chain/neighbor messages: float32, or float64 (2x bytes "
            "per reduce transfer; chain messages then carry θ-weighted sums, divided once at "
            "the root, and the aggregate equals Central's bit for bit).",
        ),
        exploration: str = typer.Option(
            "tdge",
            help="Chain scheduler's DQN exploration: tdge (ε = 1 until an episode's reward "
            "passes T(N), then decaying from ε_new), tdge-greedy (the same, T compared with a "
            "greedy evaluation episode's reward), tdge-a2 (Algorithm 2 literally), dge, tge.",
        ),
        tie_break: str = typer.Option(
            "eq4",
            help="How the Chain scheduler breaks eq. 7's ties: eq4 (relabel devices eq. 7 "
            "cannot tell apart toward eq. 4's time + eq. 6 energy variance, same eq. 7 "
            "return) or none (the DQN's schedule as is).",
        ),
        fault: list[str] = typer.Option(
            [], help="DEVICE@LOST[:REJOIN] iteration range a device is down, e.g. 2@1:3."
        ),
        init_model: str = typer.Option(None, help="Pre-trained model.safetensors to continue."),
        executor: str = typer.Option("inprocess", help="inprocess | ray."),
        name: str = typer.Option(None, help="Run directory name (default from the options)."),
        runs_root: str = typer.Option("runs", help="Where run directories go."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    ) -> None:
        """Train one model on several devices with ChainSGD-reduce; writes a run directory."""
        if executor not in ("inprocess", "ray"):
            raise ConfigError(f"--executor {executor!r} is not one of inprocess, ray")
        cfg = ChainConfig(
            devices=devices,
            scheduler=scheduler,
            aggregation=aggregation,
            model=model,
            data=data,
            setting=setting,
            epochs=epochs,
            aggs_per_epoch=aggs_per_epoch,
            seed=seed,
            link=link,
            busy=busy,
            wire=wire,
            exploration=exploration,
            tie_break=tie_break,
            faults=[Fault.parse(f) for f in fault],
            init_model=init_model,
        )
        cfg.check()
        # checked now, made by run_chain once the data, link and --init-model have loaded
        run_dir = (
            RunDir.create(name, runs_root, defer=True)
            if name
            else RunDir.unique(default_run_name(cfg), runs_root, defer=True)
        )

        def progress(rec: dict) -> None:
            if not as_json:
                err_console.print(
                    f"epoch {rec['epoch']}: accuracy {rec['accuracy']:.2f}% "
                    f"sim time {rec['sim_time_s']:.1f}s"
                )

        result = run_chain(cfg, run_dir, progress=progress, executor=executor)
        summary = result.summary()
        if as_json:
            print_json(summary)
        else:
            print_table(
                "edgetrain chain",
                [summary],
                ["accuracy", "sim_time_s", "energy_variance", "peak_model_copies", "run_dir"],
            )
