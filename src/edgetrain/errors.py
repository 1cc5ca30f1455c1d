"""User-facing errors.

Every mistake a user can make (a bad config field, a missing data file, an
unsupported operator, a budget too small to fit) raises an :class:`EdgetrainError`
whose message names what was wrong and what would be accepted. The command line
prints the message without a traceback and exits with status 2.
"""

from __future__ import annotations


class EdgetrainError(Exception):
    """An error caused by the user's input, with a message meant to be read."""


class ConfigError(EdgetrainError):
    """A run configuration or command-line option is invalid."""


class DataError(EdgetrainError):
    """A data set is missing, malformed or in an unexpected layout."""


class ModelError(EdgetrainError):
    """A model name, option, checkpoint or adapter does not match what is expected."""


class UnsupportedOperatorError(EdgetrainError):
    """A model uses an operator or construct the graph capture cannot handle."""


class BudgetError(EdgetrainError):
    """A memory budget is too small for any feasible plan."""


class RunDirError(EdgetrainError):
    """A run directory's files (checkpoint state, metrics) are missing, damaged or belong to
    another run, so it cannot be continued as asked."""
