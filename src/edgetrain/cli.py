"""The ``edgetrain`` command.

Thin by design: each subcommand lives in ``edgetrain.commands.<name>`` and
exposes ``register(app)``; this module only assembles them, prints user errors
without a traceback and exits with status 2 on them, and turns Ctrl-C into one line (the
newest checkpoint, if the run wrote one) and exit status 130.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys


def _interrupted_while_loading(signum, frame) -> None:  # pragma: no cover (exits)
    # Ctrl-C while torch and the commands load (a few seconds): nothing is written yet
    sys.stderr.write("interrupted\n")
    sys.stderr.flush()
    os._exit(130)


try:
    _SIGINT = signal.signal(signal.SIGINT, _interrupted_while_loading)
except ValueError:  # imported outside the main thread: the handler is left alone
    _SIGINT = _interrupted_while_loading

import typer  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.markup import escape  # noqa: E402

from edgetrain import __version__  # noqa: E402
from edgetrain.errors import EdgetrainError  # noqa: E402
from edgetrain.runs import forget_checkpoint, last_checkpoint  # noqa: E402

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
if _SIGINT is not _interrupted_while_loading:  # loaded: Ctrl-C is handled in main()
    signal.signal(signal.SIGINT, signal.SIG_DFL if _SIGINT is None else _SIGINT)


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
