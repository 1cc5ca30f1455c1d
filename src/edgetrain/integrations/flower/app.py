"""The Flower App side (``flwr run examples/flower/app``): run config -> edgetrain run.

A Flower App carries its settings as a flat *run config* (``[tool.flwr.app.config]`` in
the app's ``pyproject.toml``, overridable per run with ``flwr run --run-config "k=v ..."``;
Flower flattens TOML tables into dotted keys). :func:`app_config` maps it onto a
:class:`~edgetrain.federated.config.FederatedConfig`, so the App and ``edgetrain
federate`` read one schema and validate it the same way:

* ``edgetrain-config`` -- an ``edgetrain federate`` YAML, relative to the app directory: the
  base (model, data, fleet memory mix, partition, clock). YAML can say what TOML cannot
  (``reshape: null``, a memory mix keyed by GB);
* every other key is a dotted path into ``FederatedConfig`` that overrides the base field
  (``seed``, ``fleet.clients``, ``federated.rounds``, ``federated.method``,
  ``model.options.width_mult``, ``memory.m_g`` ...); ``-`` in a key reads as ``_``;
* app keys (:data:`APP_KEYS`): ``output-dir`` (where the ServerApp writes ``metrics.json``
  and ``model.safetensors``; relative to the ServerApp process's working directory),
  ``evaluate-clients`` (nodes that evaluate the global model after each round, 0: none),
  ``node-timeout-s`` (how long the server waits for ``fleet.clients`` nodes).

Every Flower node is one edgetrain client: its ``partition-id`` is the client id and its
``num-partitions`` must equal ``fleet.clients`` (both set by the simulation runtime from
``num-supernodes``; a deployed SuperNode gets them with ``--node-config``).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from flwr.app import Context
from flwr.serverapp import Grid

from edgetrain.config import parse_config
from edgetrain.errors import ConfigError
from edgetrain.federated.config import FederatedConfig
from edgetrain.federated.environment import Environment
from edgetrain.integrations.flower.simulation import (
    SimulationResult,
    environment_for,
    make_strategy,
    run_rounds,
)

BASE_KEY = "edgetrain-config"
APP_KEYS = (BASE_KEY, "output-dir", "evaluate-clients", "node-timeout-s")
METRICS_FILE = "metrics.json"
MODEL_FILE = "model.safetensors"


@dataclass(frozen=True)
class AppOptions:
    """The App's own run-config keys (not part of the edgetrain config)."""

    output_dir: str = "runs/flower-app"
    evaluate_clients: int = 0
    node_timeout_s: float = 600.0


def app_config(
    run_config: dict[str, Any], app_dir: str | Path
) -> tuple[FederatedConfig, AppOptions]:
    """The edgetrain config and App options a Flower run config describes."""
    return _app_config(tuple(sorted(run_config.items())), str(Path(app_dir).resolve()))


@functools.cache
def _app_config(
    items: tuple[tuple[str, Any], ...], app_dir: str
) -> tuple[FederatedConfig, AppOptions]:
    run_config = dict(items)
    base_name = run_config.get(BASE_KEY)
    if not isinstance(base_name, str) or not base_name:
        raise ConfigError(
            f"the run config has no '{BASE_KEY}'; expected the path of an edgetrain "
            "federate YAML relative to the Flower App directory"
        )
    base_path = Path(app_dir) / base_name
    if not base_path.is_file():
        raise ConfigError(
            f"{BASE_KEY} = {base_name!r}: {base_path} does not exist; expected an "
            "edgetrain federate YAML inside the Flower App directory"
        )
    try:
        data = yaml.safe_load(base_path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{base_path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{base_path} must hold a mapping (an edgetrain federate config)")
    seen: dict[str, str] = {}
    for key, value in run_config.items():
        if key in APP_KEYS:
            continue
        path = key.replace("-", "_")
        if path in seen:
            raise ConfigError(
                f"run config keys {seen[path]!r} and {key!r} set the same field; keep one"
            )
        seen[path] = key
        _set_path(data, path.split("."), value, key)
    cfg = parse_config(data, f"{base_path} + Flower run config", FederatedConfig)
    try:
        opts = AppOptions(
            output_dir=str(run_config.get("output-dir", AppOptions.output_dir)),
            evaluate_clients=int(run_config.get("evaluate-clients", 0)),
            node_timeout_s=float(run_config.get("node-timeout-s", AppOptions.node_timeout_s)),
        )
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"run config: evaluate-clients must be an int and node-timeout-s a number ({exc})"
        ) from None
    if opts.evaluate_clients < 0 or not opts.node_timeout_s > 0:
        raise ConfigError(
            f"run config: evaluate-clients={opts.evaluate_clients} (expected >= 0), "
            f"node-timeout-s={opts.node_timeout_s} (expected > 0)"
        )
    return cfg, opts


def _set_path(data: dict[str, Any], parts: list[str], value: Any, key: str) -> None:
    node = data
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(
                f"run config key {key!r}: {part!r} is {child!r} in the base config, not a "
                "section; override the field itself"
            )
        node = child
    node[parts[-1]] = value


def app_environment(context: Context, app_dir: str | Path) -> Environment:
    """The environment a node of this run serves (built once per process).

    Checks that the federation has one node per fleet client: a node's
    ``num-partitions`` must equal ``fleet.clients``.
    """
    cfg, _ = app_config(dict(context.run_config), app_dir)
    n = context.node_config.get("num-partitions")
    if n is not None and int(n) != cfg.fleet.clients:
        raise ConfigError(
            f"the federation has {n} nodes (num-partitions) but fleet.clients is "
            f"{cfg.fleet.clients}; run with --run-config 'fleet.clients={n}' or "
            f"--federation-config 'num-supernodes={cfg.fleet.clients}'"
        )
    return environment_for(cfg.model_dump_json())


def run_server_app(grid: Grid, context: Context, app_dir: str | Path) -> SimulationResult:
    """The App's ``ServerApp`` main: build edgetrain's strategy from the run config, run
    its rounds on ``grid`` and write ``metrics.json`` + ``model.safetensors``."""
    cfg, opts = app_config(dict(context.run_config), app_dir)
    env = environment_for(cfg.model_dump_json())
    method = cfg.federated.method
    strategy = make_strategy(
        cfg,
        env,
        method,
        evaluate_clients=opts.evaluate_clients,
        node_timeout_s=opts.node_timeout_s,
    )
    result = run_rounds(grid, cfg, env, strategy, SimulationResult(method, strategy.history))
    write_outputs(result, cfg, Path(opts.output_dir), run_id=int(context.run_id))
    return result


def write_outputs(
    result: SimulationResult, cfg: FederatedConfig, out_dir: Path, *, run_id: int
) -> Path:
    """Write ``metrics.json`` (per-round record + the resolved config) and the final
    global model (``model.safetensors``) under ``out_dir``; returns the metrics path."""
    from safetensors.torch import save_file

    out_dir = out_dir.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    record = {
        "flwr_run_id": run_id,
        "config": cfg.model_dump(mode="json"),
        **result.to_json(),
        "accuracy": {str(r): a for r, a in sorted(result.accuracy.items())},
    }
    path = out_dir / METRICS_FILE
    path.write_text(json.dumps(record, indent=2, sort_keys=True))
    if result.final_state is not None:
        state = {k: v.detach().contiguous() for k, v in result.final_state.items()}
        save_file(state, str(out_dir / MODEL_FILE))
    return path
