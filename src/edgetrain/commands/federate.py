"""``edgetrain federate CONFIG.yaml``: a federated run (or ``--compare`` of all methods)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from edgetrain.commands._output import err_console, step_progress
from edgetrain.config import load_config
from edgetrain.errors import ConfigError, RunDirError
from edgetrain.federated.api import compare
from edgetrain.federated.config import FederatedConfig
from edgetrain.federated.environment import build_environment
from edgetrain.federated.methods import COMPARE_METHODS, METHODS
from edgetrain.federated.report import write_report
from edgetrain.federated.server import FederatedServer, held_class_accuracy, summarize
from edgetrain.runs import RunDir, _jsonable


def register(app: typer.Typer) -> None:
    @app.command("federate")
    def federate(
        config: Path = typer.Argument(..., help="YAML config (see examples/federated-*.yaml)."),
        selector: Optional[str] = typer.Option(  # noqa: UP045 (typer needs Optional)
            None, "--selector", "--method", help=f"Method: {', '.join(METHODS)}."
        ),
        aggregator: Optional[str] = typer.Option(  # noqa: UP045
            None, "--aggregator", help="fedavg, fedprox or fedyogi."
        ),
        executor: Optional[str] = typer.Option(  # noqa: UP045
            None, "--executor", help="inprocess (default) or ray."
        ),
        rounds: Optional[int] = typer.Option(None, "--rounds", min=1),  # noqa: UP045
        do_compare: bool = typer.Option(
            False, "--compare", help="Run every method on the identical fleet, partition, seed."
        ),
        methods: Optional[str] = typer.Option(  # noqa: UP045
            None,
            "--methods",
            help="With --compare: comma-separated methods instead of the seven of Tables 3-4 "
            "(random sets the target, so it is always run), e.g. random,oort,fedhybrid,oort-oracle.",
        ),
        seed: Optional[int] = typer.Option(  # noqa: UP045
            None,
            "--seed",
            min=0,
            help="Instead of the config's seed (fleet, partition, selection, weights); the run "
            "directory's config.json records it.",
        ),
        resume: bool = typer.Option(False, "--resume", help="Continue the run directory."),
        output_root: Optional[Path] = typer.Option(None, "--output-root"),  # noqa: UP045
        as_json: bool = typer.Option(False, "--json", help="Print JSON only."),
    ) -> None:
        """Federated learning on a simulated memory-limited fleet (FedHybrid)."""
        cfg = load_config(config, schema=FederatedConfig)
        if seed is not None:  # typer checked it (>= 0), as the config's field is checked
            cfg = cfg.model_copy(update={"seed": seed})
        if executor not in (None, "inprocess", "ray"):
            raise ConfigError(f"--executor {executor!r}; accepted: inprocess, ray")
        if selector is not None and selector not in METHODS:
            raise ConfigError(f"--selector {selector!r}; accepted: {', '.join(METHODS)}")
        if aggregator is not None and aggregator not in ("fedavg", "fedprox", "fedyogi"):
            raise ConfigError(f"--aggregator {aggregator!r}; accepted: fedavg, fedprox, fedyogi")
        root = output_root or Path(cfg.output_root)
        console = Console(quiet=as_json)
        if do_compare and resume:
            raise ConfigError("--resume continues a single-method run; drop --compare")
        compared = _compare_methods(methods, do_compare)
        if resume:
            _check_resumable(root / cfg.name, cfg)
        # model, data and fleet are built (and checked) before a run directory is made
        env = build_environment(cfg)
        if do_compare:
            rd = RunDir.unique(f"{cfg.name}-compare", root)
            with _progress(as_json) as view:
                rows, recs = compare(
                    cfg, compared, aggregator=aggregator, rounds=rounds, root=rd.path, env=env,
                    progress=view,
                )  # fmt: skip
            rd.write_config(cfg.model_dump())
            rd.write_json("summary.json", rows)
            write_report(
                rd.path / "report.html", f"{cfg.name}: method comparison", recs, rows,
                held_classes=env.low_memory_classes,
            )  # fmt: skip
            out = [
                {k: r.get(k) for k in ("method", "final_accuracy", "time_to_target_s",
                                       "speedup_vs_random", "rounds", "wall_s", "skipped")
                 if k in r}
                for r in rows
            ]  # fmt: skip
            if env.low_memory_classes:  # what each method learnt of the held classes
                for o in out:
                    if "skipped" not in o:
                        o["held_class_accuracy"] = held_class_accuracy(
                            recs[o["method"]], env.low_memory_classes
                        )
            if as_json:
                typer.echo(json.dumps(out))
                return
            table = Table(title=f"{cfg.name}: time to Random's best accuracy (simulated)")
            for c in ("method", "final acc", "time to target (s)", "speedup", "rounds", "wall s"):
                table.add_column(c)
            for r in out:
                if "skipped" in r:
                    table.add_row(r["method"], "skipped", r["skipped"][:40], "", "", "")
                    continue
                tta, sp = r["time_to_target_s"], r["speedup_vs_random"]
                table.add_row(
                    r["method"], f"{r['final_accuracy']:.4f}",
                    "-" if tta is None else f"{tta:.1f}", "-" if sp is None else f"{sp:.2f}x",
                    str(r["rounds"]), f"{r['wall_s']:.1f}",
                )  # fmt: skip
            console.print(table)
            if env.low_memory_classes:
                cells = ", ".join(
                    f"{r['method']} {r['held_class_accuracy']:.4f}"
                    for r in out
                    if r.get("held_class_accuracy") is not None
                )
                console.print(
                    f"classes {list(env.low_memory_classes)} (only on phones below M_G): "
                    f"final-round accuracy {cells}"
                )
            console.print(f"run directory: {rd.path}")
            return
        method = selector or cfg.federated.method
        if resume:
            rd = RunDir.create(cfg.name, root, exist_ok=True)
        else:
            rd = RunDir.unique(cfg.name, root)
        # the server loads memory.plans and the run's plans.json (and checks them); the config
        # is written once it is built, so a rejected file leaves an empty directory (reused by
        # the next run) or, on --resume, the run directory as it was
        with _progress(as_json) as view:
            server = FederatedServer(
                env, method, aggregator, run_dir=rd, executor=executor, progress=view
            )
            rd.write_config(cfg.model_dump())
            if resume:
                server.resume()
            recs = server.run(rounds or cfg.federated.rounds)
        s = summarize(recs, None)
        write_report(
            rd.path / "report.html", f"{cfg.name}: {method}", {method: recs},
            held_classes=env.low_memory_classes,
        )  # fmt: skip
        result = {"method": method, "aggregator": server.aggregator_name, **s,
                  "run_dir": str(rd.path)}  # fmt: skip
        if env.low_memory_classes:
            result["held_class_accuracy"] = held_class_accuracy(recs, env.low_memory_classes)
        if as_json:
            typer.echo(json.dumps(result))
            return
        table = Table(title=f"{cfg.name}: {method} + {server.aggregator_name}")
        for c in ("round", "sim time (s)", "accuracy", "loss", "aggregated"):
            table.add_column(c)
        for r in recs[-10:]:
            acc = "-" if r["accuracy"] is None else f"{r['accuracy']:.4f}"
            loss = "-" if r["loss"] is None else f"{r['loss']:.4f}"
            table.add_row(
                str(r["round"]), f"{r['sim_time_s']:.1f}", acc, loss, str(r["n_aggregated"])
            )
        console.print(table)
        if result.get("held_class_accuracy") is not None:
            console.print(
                f"classes {list(env.low_memory_classes)} (only on phones below M_G): final-round "
                f"accuracy {result['held_class_accuracy']:.4f}"
            )
        console.print(f"run directory: {rd.path}")


def _compare_methods(methods: str | None, do_compare: bool) -> tuple[str, ...]:
    """The methods ``--compare`` runs: ``--methods`` (checked, random first) or the seven of
    Tables 3-4."""
    if methods is None:
        return COMPARE_METHODS
    if not do_compare:
        raise ConfigError("--methods chooses what --compare runs; add --compare, or use --selector")
    names = [m.strip() for m in methods.split(",") if m.strip()]
    bad = [m for m in names if m not in METHODS]
    if bad or not names:
        raise ConfigError(
            f"--methods {methods!r}: unknown {', '.join(map(repr, bad)) or 'empty list'}; "
            f"accepted: {', '.join(METHODS)}"
        )
    return tuple(dict.fromkeys(["random", *names]))  # random sets the target; no repeats


# config fields a resumed run may change: how many rounds in all, where runs go, how the
# clients are executed (the same results in-process or on Ray)
RESUMABLE_CHANGES = (
    "federated.rounds",
    "output_root",
    "federated.executor",
    "federated.ray_actors",
)


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def _check_resumable(path: Path, cfg: FederatedConfig) -> None:
    """``--resume``: the run directory exists and was started with this config (apart from
    RESUMABLE_CHANGES); checked before anything in it is written."""
    if not path.is_dir():
        raise ConfigError(
            f"--resume: no run directory {path} (the config's name under the output root); "
            "check --output-root and the config's name, or run without --resume to start"
        )
    saved_path = path / RunDir.CONFIG
    if not saved_path.exists():
        return  # nothing to compare with; the checkpoint's own checks still apply
    try:
        saved = json.loads(saved_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RunDirError(
            f"{saved_path} is not valid JSON ({exc}); the run directory is damaged"
        ) from None
    now = json.loads(json.dumps(_jsonable(cfg.model_dump())))
    a, b = _flat(saved), _flat(now)
    diff = [
        k for k in sorted(set(a) | set(b))
        if a.get(k, "<absent>") != b.get(k, "<absent>") and k not in RESUMABLE_CHANGES
    ]  # fmt: skip
    if diff:
        shown = "; ".join(
            f"{k}: run {a.get(k, '<absent>')!r}, now {b.get(k, '<absent>')!r}" for k in diff[:5]
        )
        more = f" (and {len(diff) - 5} more)" if len(diff) > 5 else ""
        raise ConfigError(
            f"--resume: the config differs from the one {path} was started with ({shown}{more});"
            f" resume with the run's config (its {RunDir.CONFIG}) -- only "
            f"{', '.join(RESUMABLE_CHANGES)} may change"
        )


class _ProgressView:
    """Shows a federated run's events (:class:`FederatedServer`'s ``progress``) on stderr:
    bars on a terminal (one per plan strategy while its budget buckets are planned, which
    takes minutes for a fresh plan set, one per method while its rounds run), or one line
    per finished strategy and per round when stderr is a file or pipe (``bar`` None)."""

    def __init__(self, bar: Any | None) -> None:
        self.bar = bar
        self.tasks: dict[tuple[str, str], Any] = {}

    def _task(self, key: tuple[str, str], description: str) -> Any:
        if key not in self.tasks:
            self.tasks[key] = self.bar.add_task(description, total=None, status="")
        return self.tasks[key]

    def __call__(self, ev: dict[str, Any]) -> None:
        if ev["event"] == "plans":
            if self.bar is None:
                if ev["done"] == ev["total"]:
                    _line(f"{ev['strategy']} plans: {ev['total']} budget buckets")
                return
            t = self._task(("plans", ev["strategy"]), f"{ev['strategy']} plans")
            self.bar.update(t, completed=ev["done"], total=ev["total"], status="budget buckets")
        elif ev["event"] == "round":
            acc = "-" if ev["accuracy"] is None else f"{ev['accuracy']:.4f}"
            status = f"accuracy {acc}, {ev['sim_time_s']:.0f} s simulated"
            if ev["rounds"] is None:  # --compare's extension to Random's simulated time
                status += " (past the rounds: below Random's best)"
            total = ev["rounds"] if ev["rounds"] is not None else ev["round"]
            if self.bar is None:
                _line(f"{ev['method']} round {ev['round']}/{total}: {status}")
                return
            t = self._task(("rounds", ev["method"]), f"{ev['method']} rounds")
            self.bar.update(t, completed=ev["round"], total=total, status=status)


def _line(text: str) -> None:
    """One progress line, never wrapped (a log keeps one line per event)."""
    err_console.print(text, soft_wrap=True, highlight=False)


@contextlib.contextmanager
def _progress(as_json: bool):
    """The run's progress view: none with ``--json``, bars on a terminal, lines otherwise."""
    if as_json:
        yield None
        return
    if not err_console.is_terminal:
        yield _ProgressView(None)
        return
    with step_progress(unit="") as bar:
        yield _ProgressView(bar)
