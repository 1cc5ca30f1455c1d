"""``edgetrain demo`` and ``edgetrain run CONFIG.yaml``: local training into a run directory."""

from __future__ import annotations

from pathlib import Path

import typer

from edgetrain.commands._output import print_json, step_progress


def _train(config, json_out: bool, name: str | None, resume: Path | None = None) -> None:
    from edgetrain.engine.local import run_local

    with step_progress(disable=json_out) as progress:
        task = progress.add_task(
            f"{config.model.name} on {config.data.name}", total=None, status=""
        )

        def on_step(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        def on_epoch(m) -> None:
            progress.update(
                task,
                status=f"epoch {m.epoch}: loss {m.train_loss:.3f}, test acc {m.test_accuracy:.3f}",
            )

        result = run_local(
            config, on_epoch=on_epoch, on_step=on_step, run_name=name, resume_dir=resume
        )
    if json_out:
        print_json(result.to_json())
        return
    chance = 1.0 / max(int(result.model_options.get("num_classes", 1)), 1)
    split = "held-out subjects" if config.data.split == "by-group" else "held-out windows"
    after = result.extra.get("resumed_after_epoch")
    resumed = f" (resumed after epoch {after})" if after is not None else ""
    typer.echo(
        f"test accuracy on {split}: {result.test_accuracy:.4f} (chance {chance:.3f}) "
        f"after {len(result.history)} epochs{resumed}, {result.wall_seconds:.1f} s"
    )
    b = result.extra.get("budget")
    if b is not None:
        fits = "within" if b["within_budget"] else "OVER"
        typer.echo(
            f"memory budget ({b['method']}, {b['scope']} scope): measured peak "
            f"{b['measured_peak_bytes'] / 1e6:.2f} MB {fits} the budget of "
            f"{b['budget_bytes'] / 1e6:.2f} MB (unplanned {b['unplanned_peak_bytes'] / 1e6:.2f} "
            f"MB); {b['plans']} plan(s), last: "
            + ", ".join(f"{k} {v}" for k, v in b["decisions"].items() if v)
        )
    typer.echo(f"run directory: {result.run_dir}")


def register(app: typer.Typer) -> None:
    @app.command("demo")
    def demo_cmd(
        json_out: bool = typer.Option(False, "--json", help="Print one JSON object."),
        epochs: int = typer.Option(None, "--epochs", min=1, help="Override the demo's epochs."),
        output: Path = typer.Option(Path("runs"), "--output", help="Root of run directories."),
    ) -> None:
        """Train LeNet on the shipped smartwatch data, in-process, and report test accuracy."""
        from edgetrain.config import DEMO_CONFIG, parse_config

        cfg = dict(DEMO_CONFIG, output_root=str(output))
        if epochs is not None:
            cfg["train"] = dict(cfg["train"], epochs=epochs)
        _train(parse_config(cfg, "<demo>"), json_out, None)

    @app.command("run")
    def run_cmd(
        config: Path = typer.Argument(
            None, help="Run config (YAML); see examples/. Not with --resume."
        ),
        name: str = typer.Option(None, "--name", help="Run directory name (default: config name)."),
        json_out: bool = typer.Option(False, "--json", help="Print one JSON object."),
        budget: str = typer.Option(
            None,
            "--budget",
            help="Train every step under a memory plan: a fraction of the unplanned peak "
            "(0.5) or a size (300MB); sets budget.limit of the config.",
        ),
        method: str = typer.Option(
            None,
            "--budget-method",
            help="hybrid | recompute | compress | swap | none; sets budget.method.",
        ),
        resume: Path = typer.Option(
            None,
            "--resume",
            help="Continue this run directory from its newest checkpoint, with the run's own "
            "config (--budget / --budget-method may change its budget).",
        ),
    ) -> None:
        """Train one model locally from a YAML config into runs/<name>/."""
        from edgetrain.config import load_config, with_budget
        from edgetrain.engine.local import read_run_config
        from edgetrain.errors import ConfigError

        if resume is not None:
            if config is not None or name is not None:
                raise ConfigError(
                    "--resume continues a run with its own config in its own directory; do "
                    "not combine it with a CONFIG file or --name"
                )
            cfg = read_run_config(resume)
        elif config is None:
            raise ConfigError("run needs a CONFIG file (see examples/) or --resume RUN_DIR")
        else:
            cfg = load_config(config)
        if budget is not None or method is not None:
            cfg = with_budget(cfg, limit=budget, method=method)
        _train(cfg, json_out, name, resume)
