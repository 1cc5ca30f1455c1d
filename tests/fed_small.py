"""A small federated set-up shared by the federated tests: 12 clients, MobileNetV2 x0.1 plans.

Small enough for CI (500 samples, 2 local steps, a 16-px plan model) yet with the memory mix
that puts some clients under a plan."""

from __future__ import annotations

import json

from edgetrain.config import parse_config
from edgetrain.federated import FederatedConfig

SMALL_FLEET = {
    "seed": 3,
    "data": {"max_samples": 500},
    "fleet": {"clients": 12},
    "federated": {"rounds": 4, "clients_per_round": 4, "local_steps": 2, "batch_size": 8},
    "memory": {
        "plan_batch": 2,
        "bucket": 0.1,
        "plan_model": {
            "name": "mobilenetv2",
            "options": {"width_mult": 0.1, "in_channels": 1, "input_size": 16},
        },
    },
    "clock": {"flops_per_sample": 3.0e8, "model_bytes": 1.4e7},
}


def small_fleet_config(**sections: dict) -> FederatedConfig:
    """:data:`SMALL_FLEET` with each keyword's dict merged into that section."""
    d = json.loads(json.dumps(SMALL_FLEET))
    for k, v in sections.items():
        d.setdefault(k, {}).update(v)
    return parse_config(d, schema=FederatedConfig)


def tiny_plan_service(batch: int):
    """A server plan service over MobileNetV2 x0.1 at 16 px, profiled once at ``batch``."""
    import torch

    from edgetrain import models
    from edgetrain.federated.plans import PlanService

    torch.manual_seed(0)
    m = models.build("mobilenetv2", seed=0, width_mult=0.1, in_channels=1, input_size=16)
    gen = torch.Generator().manual_seed(0)
    x = models.example_input(m, batch, gen)
    y = torch.randint(0, 10, (batch,), generator=gen)
    return PlanService(m, x, y, "mobilenetv2", bucket=0.1, repeats=1)


def tiny_compare(tmp_path, methods, root="runs", **federated):
    """``edgetrain federate --compare --methods METHODS`` on an 8-phone fleet, 2 rounds (or
    the ``federated`` section's overrides): its --json summary by method and its run
    directory."""
    import yaml
    from typer.testing import CliRunner

    from edgetrain.cli import app

    cfg = json.loads(json.dumps(SMALL_FLEET))
    cfg.update(name="ex", seed=2, data={"max_samples": 400}, fleet={"clients": 8})
    cfg["federated"].update(rounds=2, clients_per_round=3, local_steps=1, aggregator="fedprox")
    cfg["federated"].update(federated)
    cfg["memory"]["bucket"] = 0.2
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    argv = ["federate", str(path), "--output-root", str(tmp_path / root), "--json",
            "--compare", "--methods", methods]  # fmt: skip
    r = CliRunner().invoke(app, argv)
    assert r.exit_code == 0, r.output
    summary = {x["method"]: x for x in json.loads(r.stdout)}
    return summary, next((tmp_path / root).glob("ex-compare*"))
