"""ClientApp: every Flower node is one edgetrain client of the run's fleet.

The node's ``partition-id`` is its edgetrain client id: its data partition (Dirichlet
split of the shipped MNIST-5k), its phone profile and its predicted memory budget. The
handlers are edgetrain's (:mod:`edgetrain.integrations.flower.client`):

* ``query`` -- the check-in (samples, budget M_i, step time, device class);
* ``train`` -- load the global model, execute the plan shipped in the config (recompute /
  compress / swap per unit, ``edgetrain.engine.budget.executing``) or train unplanned,
  reply with the new arrays, the loss statistics the selectors use and the simulated
  round time and energy; a node whose demand exceeds its physical memory fails (killed);
* ``evaluate`` -- the global model's loss and accuracy on the node's partition.
"""

from pathlib import Path

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from edgetrain.integrations.flower.app import app_environment
from edgetrain.integrations.flower.client import (
    answer_evaluate,
    answer_query,
    answer_train,
    node_client_id,
)

APP_DIR = Path(__file__).resolve().parent.parent  # holds the base edgetrain YAML

app = ClientApp()


@app.query()
def query(msg: Message, context: Context) -> Message:
    return answer_query(app_environment(context, APP_DIR), node_client_id(context), msg)


@app.train()
def train(msg: Message, context: Context) -> Message:
    return answer_train(app_environment(context, APP_DIR), node_client_id(context), msg)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    return answer_evaluate(app_environment(context, APP_DIR), node_client_id(context), msg)
