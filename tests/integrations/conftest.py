"""Flower's tests run offline: no telemetry, no update check (set before flwr is imported)."""

import os

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")
