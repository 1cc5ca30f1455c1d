"""``edgetrain budget``: plan and run one training step under a memory budget, measured."""

from __future__ import annotations

from pathlib import Path

import typer

from edgetrain.commands._output import check_output_file, err_console, print_json, print_table


def zoo_task(name: str, batch: int, seed: int):
    """Model, input batch and loss for a zoo model (classification: CE; reconstruction: MSE)."""
    import torch
    from torch import nn

    from edgetrain import models
    from edgetrain.errors import ConfigError

    if batch < 1:
        raise ConfigError(f"--batch {batch}; expected >= 1")
    model = models.build(name, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    x = models.example_input(model, batch=batch, generator=gen)
    if models.spec(name).task == "reconstruction":

        def loss_fn(out):
            return nn.functional.mse_loss(out, x)
    else:
        y = torch.randint(0, model.num_classes, (batch,), generator=gen)

        def loss_fn(out):
            return nn.functional.cross_entropy(out, y)

    return model, (x,), loss_fn


def register(app: typer.Typer) -> None:
    @app.command("budget")
    def budget_cmd(
        model: str = typer.Option("mobilenetv2", "--model", help="Zoo model name."),
        batch: int = typer.Option(32, "--batch", help="Batch size."),
        budget: str = typer.Option(
            "0.5",
            "--budget",
            help="Fraction of the unplanned peak of the --scope (0.5) or a size (300MB, 256MiB).",
        ),
        scope: str = typer.Option(
            "saved",
            "--scope",
            help="saved: the budget bounds autograd's saved tensors; all: every allocation "
            "of the step (saved tensors, parameter gradients, workspace).",
        ),
        method: str = typer.Option(
            "hybrid", "--method", help="hybrid | recompute | compress | swap | none"
        ),
        repeats: int = typer.Option(3, "--repeats", help="Timed steps per plan (medians)."),
        seed: int = typer.Option(0, "--seed", min=0, help="Seed for weights, batch and dropout."),
        plan_out: Path | None = typer.Option(
            None, "--plan-out", help="Write the ExecutionPlan JSON here."
        ),
        profile_path: Path | None = typer.Option(
            None,
            "--profile",
            help="Model profile file (JSON): read it when it was measured for this model, "
            "batch, seed and machine; otherwise profile and write it there (one file serves "
            "every --method, --scope and --budget).",
        ),
        json_out: bool = typer.Option(False, "--json", help="Print one JSON object."),
        autotune: bool = typer.Option(
            False,
            "--autotune",
            help="Time every feasible candidate plan and keep the fastest (not the predicted).",
        ),
    ) -> None:
        """Train one step of a zoo model under a memory budget; measured peak, time and error."""
        from edgetrain.engine.budget import run_budget
        from edgetrain.engine.budget.planner import METHODS, SCOPES
        from edgetrain.errors import ConfigError

        if method not in METHODS:
            raise ConfigError(f"--method {method!r}; expected one of {', '.join(METHODS)}")
        if scope not in SCOPES:
            raise ConfigError(f"--scope {scope!r}; expected one of {', '.join(SCOPES)}")
        if repeats < 1:
            raise ConfigError(f"--repeats {repeats}; expected >= 1")
        from edgetrain.engine.budget.runner import check_budget_form

        check_budget_form(budget)
        check_output_file(plan_out, "--plan-out")
        check_output_file(profile_path, "--profile")
        net, inputs, loss_fn = zoo_task(model, batch, seed)
        prof, reused, profile_s = None, False, None
        if profile_path is not None:
            import time

            from edgetrain.engine.budget.profile_io import reusable_profile

            if not json_out:
                verb = "reading" if profile_path.exists() else "profiling for"
                err_console.print(f"{verb} {profile_path} ({model}, batch {batch}) ...")
            t0 = time.perf_counter()
            prof, reused = reusable_profile(
                profile_path, net, inputs, loss_fn, name=model, seed=seed
            )
            profile_s = time.perf_counter() - t0
        if not json_out:
            what = "running" if prof is not None else "profiling and running"
            err_console.print(f"{what} {method} on {model} (batch {batch}) ...")
        rep = run_budget(
            net, inputs, loss_fn, budget, method, repeats=repeats, seed=seed, autotune=autotune,
            scope=scope, profile=prof,
        )  # fmt: skip
        if plan_out is not None:
            rep.plan.save(plan_out)
        row = {
            "model": model,
            "batch": batch,
            "method": method,
            "budget_bytes": rep.budget_bytes,
            "unplanned_peak_bytes": rep.unplanned_peak_bytes,
            "measured_peak_bytes": rep.measured_peak_bytes,
            "predicted_peak_bytes": rep.predicted_peak_bytes,
            "step_time_ratio": rep.step_time_ratio,
            "decisions": rep.decisions,
            "max_abs_grad_error": rep.max_abs_grad_error,
            "loss_abs_error": rep.loss_abs_error,
            "step_s": rep.step_s,
            "none_step_s": rep.none_step_s,
            "predicted_overhead_s": rep.predicted_overhead_s,
            "peak_rss_bytes": rep.peak_rss_bytes,
            "units": len(rep.plan.units),
            "budget_scope": rep.budget_scope,
            "predicted_alloc_peak_bytes": rep.predicted_alloc_peak_bytes,
            "measured_alloc_peak_bytes": rep.measured_alloc_peak_bytes,
            "unplanned_alloc_peak_bytes": rep.unplanned_alloc_peak_bytes,
            # the check of the scope: measured (saved or all-allocation) peak <= budget
            "within_budget": rep.within_budget,
            # minor page faults per timed step, median per plan (0: no step paid the
            # kernel's fresh pages; the runner keeps freed memory in the process)
            "page_faults": rep.extra.get("page_faults"),
        }
        if profile_path is not None:
            # reused: read from the file (no op was timed again); profile_s: reading or
            # measuring and writing it
            row["profile"] = {"path": str(profile_path), "reused": reused, "profile_s": profile_s}
        if autotune:
            row["autotune"] = rep.extra["autotune"]
        if json_out:
            print_json(row)
            return
        shown = dict(row)
        shown["decisions"] = ", ".join(f"{k}={v}" for k, v in rep.decisions.items())
        if autotune:
            info = rep.extra["autotune"]
            shown["autotune"] = (
                f"candidate {info['chosen']} of {len(info['medians'])}, medians "
                + ", ".join("-" if m is None else f"{m:.4f}s" for m in info["medians"])
                + f", tuning {info['tune_s']:.2f}s"
            )
        print_table(
            f"{model} under a {rep.budget_bytes:,}-byte budget ({method})",
            [{"field": k, "value": v} for k, v in shown.items()],
            ["field", "value"],
        )
