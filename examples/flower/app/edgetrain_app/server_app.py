"""ServerApp: edgetrain's selector, server-side plans and aggregator as a Flower strategy.

``main`` reads the run config (``[tool.flwr.app.config]`` + ``--run-config``) into an
edgetrain federate config, builds :class:`edgetrain.integrations.flower.EdgetrainStrategy`
for its method (check-in query -> selector -> one execution plan per node below M_G in
the train ConfigRecord -> edgetrain aggregator), runs its rounds with a central test-set
evaluation after each, and writes ``metrics.json`` + ``model.safetensors`` to
``output-dir``.
"""

from pathlib import Path

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from edgetrain.integrations.flower.app import run_server_app

APP_DIR = Path(__file__).resolve().parent.parent  # holds the base edgetrain YAML

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    result = run_server_app(grid, context, APP_DIR)
    last = result.rounds[-1].round if result.rounds else 0
    print(
        f"edgetrain {result.method}: {len(result.rounds)} rounds, test accuracy "
        f"{result.accuracy.get(last, float('nan')):.3f}, simulated time {result.sim_time_s:.1f} s"
    )
