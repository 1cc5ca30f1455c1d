"""Bridges from edgetrain to other federated-learning frameworks.

Each integration lives in its own subpackage and imports its framework lazily from
there, so ``import edgetrain`` never needs the optional dependency:

* :mod:`edgetrain.integrations.flower` — a Flower (``flwr``) Message-API strategy that
  selects nodes with edgetrain's selectors and ships each node its execution plan.
"""
