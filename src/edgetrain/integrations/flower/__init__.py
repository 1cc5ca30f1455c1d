"""Flower interoperability (FedHybrid §4.1 workflow on Flower's Message API).

* :mod:`~edgetrain.integrations.flower.keys` — the record keys both sides agree on
* :mod:`~edgetrain.integrations.flower.strategy` — :class:`EdgetrainStrategy`, a
  ``flwr.serverapp.strategy.Strategy``: check-in query, edgetrain selector, per-node plan
  in the train ``ConfigRecord``, edgetrain aggregator, selector feedback
* :mod:`~edgetrain.integrations.flower.client` — a ``ClientApp`` whose nodes answer the
  check-in and train for real under the plan they receive
* :mod:`~edgetrain.integrations.flower.simulation` — an edgetrain config on Flower's
  simulation runtime from Python (``run_simulation``)
* :mod:`~edgetrain.integrations.flower.app` — the Flower App's run config -> edgetrain
  config, ``ServerApp`` main and per-node environment (``flwr run examples/flower/app``)

Needs the ``flower`` extra (``flwr[simulation]``); importing this package without it
raises :class:`edgetrain.errors.ConfigError` naming the missing dependency.
"""

from edgetrain.errors import ConfigError

try:
    import flwr  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without flwr
    raise ConfigError(
        "edgetrain.integrations.flower needs Flower; install the extra: "
        "pip install 'edgetrain[flower]' (flwr[simulation])"
    ) from exc

from edgetrain.integrations.flower.app import app_config, app_environment, run_server_app
from edgetrain.integrations.flower.client import make_client_app, train_on_client
from edgetrain.integrations.flower.simulation import (
    SimulationResult,
    build_apps,
    run_rounds,
    simulate,
)
from edgetrain.integrations.flower.strategy import EdgetrainStrategy, RoundLog

__all__ = [
    "EdgetrainStrategy",
    "RoundLog",
    "SimulationResult",
    "app_config",
    "app_environment",
    "build_apps",
    "make_client_app",
    "run_rounds",
    "run_server_app",
    "simulate",
    "train_on_client",
]
