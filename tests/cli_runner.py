"""Run ``edgetrain ARGS`` in-process for the command-line tests: exit status and stderr."""

from __future__ import annotations

from edgetrain.cli import main


def run_cli(args: list[str], capsys) -> tuple[int, str]:
    """Exit status (0 when the command returns) and stderr of ``edgetrain ARGS``."""
    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = exc.code or 0
    return code, capsys.readouterr().err


def run_cli_flat(args: list[str], capsys) -> tuple[int, str]:
    """:func:`run_cli` with stderr's whitespace runs folded to one space (a message wrapped
    by the console reads as one line)."""
    code, err = run_cli(args, capsys)
    return code, " ".join(err.split())
