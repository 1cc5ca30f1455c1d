"""The ``edgetrain`` command.

Thin by design: each subcommand lives in ``edgetrain.commands.<name>`` and
exposes ``register(app)``; this module only assembles them, prints user errors
without a traceback and exits with status 2 on them, and turns Ctrl-C into one line (the
newest checkpoint, if the run wrote one) and exit status 130.
"""

from __future__ import annotations

import importlib
import sys

import typer
from rich.console import Console
from rich.markup import escape

from edgetrain import __version__
from edgetrain.errors import EdgetrainError
from edgetrain.runs import forget_checkpoint, last_checkpoint

# One line per subcommand module; each module defines ``register(app: typer.Typer)``.
COMMAND_MODULES = [
    "edgetrain.commands.plan",  # edgetrain plan (memory + latency plan on an SoC)
    "edgetrain.commands.alloc",  # edgetrain alloc (MiniMalloc CSV problems)
    "edgetrain.commands.catalog",  # models / data / devices listings
    "edgetrain.commands.demo",  # edgetrain demo
    "edgetrain.commands.pretrain",  # edgetrain pretrain (transfer source model)
    "edgetrain.commands.finetune",  # edgetrain finetune / --resume (few-shot transfer)
    "edgetrain.commands.budget",  # edgetrain budget (memory-budget training)
    "edgetrain.commands.chain",  # edgetrain chain (decentralized ChainSGD-reduce, MDLdroid)
    "edgetrain.commands.federate",  # edgetrain federate (FedHybrid federated learning)
]

app = typer.Typer(
    name="edgetrain",
    help="Train neural networks where the data lives: memory-planned, federated and "
    "decentralized on-device learning.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"edgetrain {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """edgetrain: on-device, federated and decentralized training."""


for _name in COMMAND_MODULES:
    importlib.import_module(_name).register(app)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``edgetrain`` console script."""
    forget_checkpoint()
    try:
        app(args=argv, prog_name="edgetrain")
    except EdgetrainError as exc:
        # the message is plain text: brackets in it ("[key]", "[/tmp]") are not rich markup
        Console(stderr=True, soft_wrap=True).print(
            f"[bold red]error:[/] {escape(str(exc))}", highlight=False
        )
        sys.exit(2)
    except KeyboardInterrupt:  # one that reaches past typer's own handling
        _interrupted()
    except SystemExit as exc:
        if exc.code == INTERRUPTED:  # typer turns Ctrl-C into a silent exit with status 130
            _interrupted()
        raise


# the exit status of a run stopped by Ctrl-C (128 + SIGINT, as shells report it)
INTERRUPTED = 130


def _interrupted() -> None:
    """Ctrl-C: one line naming the newest complete checkpoint, exit status 130."""
    last = last_checkpoint()
    where = f"; the last checkpoint ({last[1]}) is in {last[0]}" if last else ""
    print(f"interrupted{where}", file=sys.stderr, flush=True)
    sys.exit(INTERRUPTED)


if __name__ == "__main__":  # pragma: no cover
    main()
