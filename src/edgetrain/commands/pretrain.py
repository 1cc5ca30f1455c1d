"""``edgetrain pretrain``: train a zoo model on a source data set, save weights + card."""

from __future__ import annotations

from pathlib import Path

import typer

from edgetrain.commands._output import print_json, print_table, step_progress


def register(app: typer.Typer) -> None:
    @app.command("pretrain")
    def pretrain_cmd(
        model: str = typer.Option(None, "--model", help="Zoo model name (see `edgetrain models`)."),
        data: str = typer.Option(None, "--data", help="Source data set (see `edgetrain data`)."),
        data_opt: list[str] = typer.Option(
            None, "--data-opt", help="Data option KEY=VALUE (repeatable), e.g. digits=[0,1,2,3,4]."
        ),
        model_opt: list[str] = typer.Option(
            None, "--model-opt", help="Model option KEY=VALUE (repeatable), e.g. fc_width=256."
        ),
        groups: str = typer.Option(None, "--groups", help="Keep only these subjects, e.g. 1,2,3."),
        exclude_groups: str = typer.Option(
            None, "--exclude-groups", help="Drop these subjects (held out for fine-tuning)."
        ),
        epochs: int = typer.Option(5, "--epochs", min=1),
        batch: int = typer.Option(32, "--batch", min=1),
        lr: float = typer.Option(1e-3, "--lr", min=0.0, help="Learning rate (> 0)."),
        optimizer: str = typer.Option("adam", "--optimizer", help="sgd, sgd-momentum or adam."),
        schedule: str = typer.Option("cosine", "--schedule", help="cosine or constant."),
        test_fraction: float = typer.Option(0.2, "--test-fraction"),
        limit: int = typer.Option(
            None, "--limit", min=1, help="Train on at most this many samples (stratified)."
        ),
        seed: int = typer.Option(0, "--seed", min=0),
        output: Path = typer.Option(Path("runs"), "--output", help="Root of run directories."),
        name: str = typer.Option(
            None, "--name", help="Run directory name (refused if that run exists)."
        ),
        resume: Path = typer.Option(
            None,
            "--resume",
            help="Continue this interrupted pretrain run directory from its last checkpoint.",
        ),
        json_out: bool = typer.Option(False, "--json", help="Print one JSON object."),
    ) -> None:
        """Train MODEL on a source data set; writes model.safetensors + card.json."""
        from edgetrain.errors import ConfigError
        from edgetrain.runs import RunDir
        from edgetrain.transfer.options import parse_ids, parse_options
        from edgetrain.transfer.session import PretrainSettings, pretrain, resume_pretrain
        from edgetrain.transfer.source import DataRef

        if resume is not None:
            if model is not None or data is not None or name is not None:
                raise ConfigError(
                    "--resume continues a run with its saved settings; do not combine it with "
                    "--model, --data or --name"
                )
            with step_progress(disable=json_out) as progress:
                task = progress.add_task(f"pretrain, resuming {resume}", total=None, status="")
                result = resume_pretrain(
                    resume, on_step=lambda d, t: progress.update(task, completed=d, total=t)
                )
            _report(result, json_out)
            return
        if model is None or data is None:
            raise ConfigError("pretrain needs --model and --data (or --resume RUN_DIR)")
        if lr <= 0:
            raise ConfigError(f"--lr {lr}: the learning rate must be > 0")
        if optimizer not in ("sgd", "sgd-momentum", "adam"):  # before the run directory exists
            raise ConfigError(
                f"--optimizer {optimizer!r}: unknown optimizer; accepted: sgd, sgd-momentum, adam"
            )
        if name is not None:
            # a named run that exists is refused, as `chain --name` does (without --name the
            # default name gets -2, -3...); checked before the data set is loaded
            RunDir.create(name, output, defer=True)
        ref = DataRef(
            data,
            parse_options(data_opt, "--data-opt"),
            parse_ids(groups, "--groups"),
            parse_ids(exclude_groups, "--exclude-groups"),
        )
        settings = PretrainSettings(
            epochs=epochs,
            batch_size=batch,
            lr=lr,
            optimizer=optimizer,
            schedule=_schedule(schedule),
            test_fraction=test_fraction,
            limit=limit,
        )
        with step_progress(disable=json_out) as progress:
            task = progress.add_task(f"pretrain {model} on {ref.describe()}", total=None, status="")
            result = pretrain(
                model,
                ref,
                model_options=parse_options(model_opt, "--model-opt"),
                settings=settings,
                seed=seed,
                output_root=output,
                name=name,
                on_step=lambda d, t: progress.update(task, completed=d, total=t),
                on_epoch=lambda m: progress.update(
                    task, status=f"epoch {m.epoch}: test acc {m.test_accuracy:.3f}"
                ),
            )
        _report(result, json_out)


def _report(result, json_out: bool) -> None:
    out = result.to_json()
    if json_out:
        print_json(out)
        return
    print_table(
        f"pretrained {out['model']}",
        [
            {"field": k, "value": out[k]}
            for k in ("accuracy", "trained_param_bytes", "step_time_ms", "epochs", "wall_s")
        ],
        ["field", "value"],
    )
    typer.echo(
        f"accuracy {out['accuracy']:.4f} on {result.card.data.describe()}, "
        f"{out['trained_param_bytes']:,} trained parameter bytes, "
        f"batch-1 step {out['step_time_ms']:.2f} ms on this CPU; run directory: {out['run_dir']}"
    )


def _schedule(value: str) -> str:
    from edgetrain.errors import ConfigError

    if value not in ("cosine", "constant"):
        raise ConfigError(f"--schedule must be cosine or constant, got {value!r}")
    return value
