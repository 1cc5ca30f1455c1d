"""``edgetrain finetune``: adapt a pretrained model to a few shots of a target task.

Loads ``--from`` (a pretrain run directory or its model.safetensors), applies the
strategy (full, lp, ft-k, lora-k), trains by the few-shot protocol with a checkpoint
every epoch, and stores what a device would: the adapter or the changed weights.
``--resume RUN_DIR`` continues an interrupted run to the same end metrics.
"""

from __future__ import annotations

from pathlib import Path

import typer

from edgetrain.commands._output import print_json, print_table, step_progress


def register(app: typer.Typer) -> None:
    @app.command("finetune")
    def finetune_cmd(
        source: str = typer.Option(
            None, "--from", help="Pretrain run directory or its model.safetensors."
        ),
        strategy: str = typer.Option("lora-2", "--strategy", help="full, lp, ft-K or lora-K."),
        data: str = typer.Option(None, "--data", help="Target data set (see `edgetrain data`)."),
        data_opt: list[str] = typer.Option(
            None, "--data-opt", help="Data option KEY=VALUE (repeatable), e.g. digits=[5,6,7,8,9]."
        ),
        groups: str = typer.Option(None, "--groups", help="Keep only these subjects, e.g. 9."),
        exclude_groups: str = typer.Option(None, "--exclude-groups", help="Drop these subjects."),
        shots: int = typer.Option(50, "--shots", min=1, help="Training samples per class."),
        epochs: int = typer.Option(100, "--epochs", min=1),
        batch: int = typer.Option(8, "--batch", min=1),
        lr: float = typer.Option(0.01, "--lr"),
        final_lr: float = typer.Option(0.0005, "--final-lr", help="End of the cosine schedule."),
        schedule: str = typer.Option("cosine", "--schedule", help="cosine or constant."),
        optimizer: str = typer.Option("sgd", "--optimizer", help="sgd, sgd-momentum or adam."),
        average_last: int = typer.Option(
            5, "--average-last", min=1, help="Accuracy = mean over the last N epochs."
        ),
        eval_every: int = typer.Option(
            0, "--eval-every", min=0, help="Also evaluate every N epochs."
        ),
        test_size: int = typer.Option(
            None, "--test-size", min=1, help="Cap the test set (stratified subsample)."
        ),
        rank: int = typer.Option(4, "--rank", min=1, help="LoRA rank."),
        alpha: float = typer.Option(8.0, "--alpha", help="LoRA alpha."),
        head: str = typer.Option(
            "auto", "--head", help="auto (new head if the classes differ), new or keep."
        ),
        target: str = typer.Option(
            None, "--target", help="SoC target for the plan's latency estimate (default: pulp)."
        ),
        plan: bool = typer.Option(
            True, "--plan/--no-plan", help="Estimate target latency with the memory planner."
        ),
        cache_prefix: bool = typer.Option(
            True,
            "--cache-prefix/--no-cache-prefix",
            help="Compute the frozen prefix once per sample and train only the rest (exact).",
        ),
        checkpoint_every: int = typer.Option(
            1, "--checkpoint-every", min=1, help="Epochs between checkpoints (last always kept)."
        ),
        seed: int = typer.Option(0, "--seed", min=0),
        output: Path = typer.Option(Path("runs"), "--output", help="Root of run directories."),
        name: str = typer.Option(
            None, "--name", help="Run directory name (refused if that run exists)."
        ),
        resume: Path = typer.Option(
            None, "--resume", help="Continue this interrupted fine-tune run directory."
        ),
        json_out: bool = typer.Option(False, "--json", help="Print one JSON object."),
    ) -> None:
        """Fine-tune a pretrained model on SHOTS samples per class of a target data set."""
        from edgetrain.errors import ConfigError
        from edgetrain.transfer.options import parse_ids, parse_options
        from edgetrain.transfer.protocol import Protocol
        from edgetrain.transfer.session import FinetuneConfig, read_config, run_finetune
        from edgetrain.transfer.source import DataRef

        if resume is not None:
            if source is not None or data is not None:
                raise ConfigError(
                    "--resume continues a run with its saved settings; do not combine it with "
                    "--from or --data"
                )
            config = read_config(resume)
        else:
            if source is None or data is None:
                raise ConfigError(
                    "finetune needs --from RUN_DIR_OR_FILE and --data NAME (or --resume)"
                )
            if name is not None:
                from edgetrain.runs import RunDir

                # a named run that exists is refused, as `chain --name` and `pretrain --name`
                # do (without --name the default name gets -2, -3...); before any loading
                RunDir.create(name, output, defer=True)
            config = FinetuneConfig(
                source=str(Path(source).resolve()),
                strategy=strategy,
                data=DataRef(
                    data,
                    parse_options(data_opt, "--data-opt"),
                    parse_ids(groups, "--groups"),
                    parse_ids(exclude_groups, "--exclude-groups"),
                ),
                shots=shots,
                protocol=Protocol(
                    epochs=epochs,
                    batch_size=batch,
                    lr=lr,
                    final_lr=final_lr,
                    schedule=schedule,
                    optimizer=optimizer,
                    average_last=average_last,
                    eval_every=eval_every,
                ),
                seed=seed,
                test_size=test_size,
                rank=rank,
                alpha=alpha,
                head=head,
                target=target,
                plan=plan,
                cache_prefix=cache_prefix,
                checkpoint_every=checkpoint_every,
            )
        with step_progress(disable=json_out) as progress:
            task = progress.add_task(
                f"{config.strategy} on {config.data.describe()}", total=None, status=""
            )

            def on_epoch(m: dict) -> None:
                acc = m.get("test_accuracy")
                status = f"epoch {m['epoch']}: loss {m['train_loss']:.3f}"
                if acc is not None:
                    status += f", test acc {acc:.3f}"
                progress.update(task, status=status)

            result = run_finetune(
                config,
                output_root=output,
                name=name,
                resume_dir=resume,
                on_epoch=on_epoch,
                on_step=lambda d, t: progress.update(task, completed=d, total=t),
            )
        out = result.to_json()
        if json_out:
            print_json(out)
            return
        latency = out["target_latency_ms"] or {}
        fields = {
            "strategy": out["strategy"],
            "accuracy": out["accuracy"],
            "no-adaptation accuracy": out["no_adaptation_accuracy"],
            "trained params": out["trained_params"],
            "trained param bytes": out["trained_param_bytes"],
            "training FLOPs / sample": out["flops_train_counted"],
            "CPU step, batch 1 (ms)": out["step_time_ms"],
            "target step, cores (ms, simulated)": latency.get("cores"),
            "target step, accelerated (ms, simulated)": latency.get("accelerated"),
            "stored artifact bytes": out["artifact_bytes"],
            "frozen-prefix cache": _cache_text(out.get("prefix_cache")),
            "training time (s)": round(out["train_s"], 2),
        }
        print_table(
            f"fine-tuned ({config.shots}-shot, {config.protocol.epochs} epochs, seed {config.seed})",
            [{"field": k, "value": v} for k, v in fields.items()],
            ["field", "value"],
        )
        line = (
            f"{out['strategy']}: accuracy {out['accuracy']:.4f} "
            f"(mean of the last {config.protocol.average_last} epochs), "
            f"{out['trained_param_bytes']:,} trained parameter bytes, "
            f"batch-1 step {out['step_time_ms']:.2f} ms on this CPU"
        )
        if latency:
            line += (
                f", plan's target estimate {latency.get('cores', float('nan')):.2f} ms (cores) / "
                f"{latency.get('accelerated', float('nan')):.2f} ms (accelerated, simulated)"
            )
        elif out["plan_note"]:
            line += f" (no target estimate: {out['plan_note']})"
        typer.echo(line)
        typer.echo(f"run directory: {out['run_dir']} (device artifact: {out['artifact']})")


def _cache_text(plan: dict | None) -> str:
    if not plan:
        return "-"
    if not plan.get("used"):
        return f"not used: {plan.get('reason')}"
    return (
        f"used: {plan.get('prefix_ops')} ops cached once "
        f"({plan.get('cached_bytes', 0) / 1e6:.1f} MB), {plan.get('suffix_ops')} ops per step"
    )
