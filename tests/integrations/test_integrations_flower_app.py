"""The Flower App: ``flwr run examples/flower/app`` end to end, and its run config.

Needs the ``flower`` extra (flwr[simulation], Python >= 3.11) and its ``flwr`` command;
skipped without them. The end-to-end test runs the command users run (README): ``flwr
run`` with Flower's default ``local`` connection starts a managed local SuperLink in
simulation mode, which runs the App's ServerApp and 4 simulated SuperNodes. It uses a
private ``FLWR_HOME`` and free ports, starts that SuperLink itself first (same command,
longer start-up allowance; ``flwr run`` reuses it) and stops it and its children when
done (found by that ``FLWR_HOME`` in the command line). 2 rounds, MobileNetV2 x0.25 on 200 MNIST
samples; the rest of the file checks the run-config mapping in-process (fast).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

flwr = pytest.importorskip(
    "flwr", reason="flwr not installed: pip install 'edgetrain[flower]' (needs Python >= 3.11)"
)

import numpy as np  # noqa: E402
import tomli  # noqa: E402  (a flwr dependency; tomllib needs Python 3.11)
import torch  # noqa: E402
from flwr.app import Context, RecordDict  # noqa: E402
from flwr.cli.config_utils import load_and_validate  # noqa: E402
from flwr.common.config import flatten_dict, parse_config_args  # noqa: E402

from edgetrain.engine.trainer import evaluate  # noqa: E402
from edgetrain.errors import ConfigError  # noqa: E402
from edgetrain.federated.selectors import CheckIn, FedHybridSelector  # noqa: E402
from edgetrain.federated.server import _seed  # noqa: E402
from edgetrain.integrations.flower.app import app_config, app_environment  # noqa: E402

APP = Path(__file__).resolve().parents[2] / "examples" / "flower" / "app"
FLWR = Path(sys.executable).with_name("flwr")

# 4 SuperNodes, 2 per round; eq. 1's MemStat picks a client below M_G in round 1 on this
# fleet (eq. 4 picks two that fit), so a plan ships and is executed on a node
RUN_CONFIG = (
    "fleet.clients=4 federated.rounds=2 federated.clients_per_round=2 "
    "federated.memstat='eq1' federated.local_steps=2 federated.batch_size=8 "
    "data.max_samples=200 memory.plan_batch=4 evaluate-clients=1"
)
FEDERATION_CONFIG = "num-supernodes=4 client-resources-num-cpus=2 init-args-num-cpus=2"


def _defaults() -> dict:
    """The App's run config as Flower builds it: pyproject defaults, flattened."""
    with open(APP / "pyproject.toml", "rb") as f:
        return flatten_dict(tomli.load(f)["tool"]["flwr"]["app"]["config"])


def _run_config(out_dir: Path | None = None) -> dict:
    cfg = {**_defaults(), **parse_config_args([RUN_CONFIG])}
    if out_dir is not None:
        cfg["output-dir"] = str(out_dir)
    return cfg


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop_local_superlink(flwr_home: Path) -> None:
    """Stop the SuperLink ``flwr run`` started under ``flwr_home`` and its process groups
    (SuperExec, simulation, Ray workers), by pid; nothing else."""
    procs: dict[int, tuple[int, int, str]] = {}  # pid -> (ppid, pgid, cmdline)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        procs[int(entry.name)] = (int(fields[1]), int(fields[2]), cmd)
    marker = str(flwr_home / "local-superlink")
    family = {
        pid for pid, (_, _, cmd) in procs.items() if "flower-superlink" in cmd and marker in cmd
    }
    grew = True
    while grew:
        kids = {pid for pid, (ppid, _, _) in procs.items() if ppid in family} - family
        family |= kids
        grew = bool(kids)
    groups = {procs[p][1] for p in family} - {os.getpgid(0)}
    family |= {pid for pid, (_, pgid, _) in procs.items() if pgid in groups}
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not any(_alive(p) for p in family):
            break
        for pgid in groups:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, sig)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(_alive(p) for p in family):
            time.sleep(0.2)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] not in "ZX"
    except (OSError, IndexError):
        return False


def _start_local_superlink(home: Path, env: dict[str, str]) -> subprocess.Popen:
    """Start the SuperLink ``flwr run`` would start for the ``local`` connection (the
    command of flwr/cli/local_superlink.py) and wait until it answers. ``flwr run`` then
    reuses it. Started here because flwr gives its own start 15 s, which a first start
    in a fresh venv (bytecode compilation) on 2 busy cores can exceed."""
    port = env["FLWR_LOCAL_SUPERLINK_HTTP_API_PORT"]
    runtime = home / "local-superlink"
    runtime.mkdir(parents=True, exist_ok=True)
    cmd = [
        str(FLWR.with_name("flower-superlink")),
        "--insecure",
        "--simulation",
        "--isolation",
        "subprocess",
        "--host",
        "127.0.0.1",
        "--port",
        port,
        "--log-file",
        str(runtime / "superlink.log"),
        "--database",
        str(runtime / "state.db"),
    ]
    proc = subprocess.Popen(
        cmd, env=env, cwd=home, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.5)
    _stop_local_superlink(home)
    proc.wait(timeout=30)
    log = (runtime / "superlink.log").read_text() if (runtime / "superlink.log").exists() else ""
    pytest.fail(f"flower-superlink did not answer on port {port} within 180 s:\n{log[-3000:]}")


@pytest.fixture(scope="module")
def app_run(tmp_path_factory):
    if not FLWR.exists():
        pytest.skip(f"no flwr command next to {sys.executable}")
    home = tmp_path_factory.mktemp("flwr-home")
    out = home / "out"
    env = {
        **os.environ,
        "FLWR_HOME": str(home),
        "FLWR_TELEMETRY_ENABLED": "0",
        "FLWR_DISABLE_UPDATE_CHECK": "1",
        "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(_free_port()),
        "FLWR_LOCAL_CONTROL_API_PORT": str(_free_port()),
        "OMP_NUM_THREADS": "1",
        "PATH": f"{FLWR.parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    cmd = [
        str(FLWR),
        "run",
        str(APP),
        "--stream",
        "--federation-config",
        FEDERATION_CONFIG,
        "--run-config",
        f"{RUN_CONFIG} output-dir='{out}'",
    ]
    start = time.monotonic()
    link = None
    try:
        link = _start_local_superlink(home, env)
        proc = subprocess.run(cmd, env=env, cwd=home, capture_output=True, text=True, timeout=300)
    finally:
        _stop_local_superlink(home)
        if link is not None:
            link.wait(timeout=30)  # reap it
    log = proc.stdout[-4000:] + proc.stderr[-4000:]
    assert proc.returncode == 0, log
    assert "Starting local SuperLink" not in proc.stdout  # flwr run reused ours
    assert (out / "metrics.json").is_file(), f"the ServerApp wrote no metrics.json:\n{log}"
    metrics = json.loads((out / "metrics.json").read_text())
    return {
        "metrics": metrics,
        "out": out,
        "stdout": proc.stdout,
        "wall_s": time.monotonic() - start,
    }


@pytest.fixture(scope="module")
def env():
    cfg, _ = app_config(_run_config(), APP)
    from edgetrain.integrations.flower.simulation import environment_for

    return environment_for(cfg.model_dump_json())


def test_flwr_run_completes_the_rounds_with_plans(app_run, env):
    m = app_run["metrics"]
    assert m["method"] == "fedhybrid"
    assert m["config"]["fleet"]["clients"] == 4 and m["config"]["federated"]["rounds"] == 2
    rounds = m["rounds"]
    assert [r["round"] for r in rounds] == [1, 2]
    below = {c for c in range(4) if env.budgets[c] < env.m_g}
    for r in rounds:
        assert sorted(r["aggregated"] + r["failed"] + r["late"] + r["stragglers"]) == r["selected"]
        assert 1 <= len(r["aggregated"]) <= 2
        assert r["round_time_s"] > 0 and math.isfinite(r["train_loss"])
        assert {int(c) for c in r["plans"]} == below & set(r["selected"])
        feasible = {int(c) for c, p in r["plans"].items() if p["feasible"]}
        assert set(r["planned"]) == feasible & set(r["aggregated"])
    assert any(r["planned"] for r in rounds), "no node trained under a shipped plan"
    assert m["sim_time_s"] == pytest.approx(sum(r["round_time_s"] for r in rounds))
    # the nodes' federated evaluation (@app.evaluate) ran after each round
    assert set(m["federated_eval"]) == {"1", "2"}
    assert all(0.0 <= e["eval-acc"] <= 1.0 for e in m["federated_eval"].values())
    assert "edgetrain fedhybrid: 2 rounds" in app_run["stdout"]


def test_flwr_run_selects_like_the_in_process_server(app_run, env):
    # the strategy built its CheckIn from the nodes' check-in replies (partition-id ->
    # client id); edgetrain's own server on the same config and seed picks the same
    # (the selector FederatedServer builds: seed _seed(seed, 7); its plan precompute is
    # skipped here, it costs minutes on 2 shared cores)
    f = env.config.federated
    sel = FedHybridSelector(seed=_seed(env.config.seed, 7), epsilon=f.epsilon, memstat=f.memstat)
    n_pick = max(f.clients_per_round, int(f.overcommit * f.clients_per_round + 1e-9))
    checkin = CheckIn(env.n_samples, env.budgets, env.step_time_s(), env.est_duration_s(), env.m_g)
    assert sel.select(1, checkin, n_pick) == app_run["metrics"]["rounds"][0]["selected"]


def test_flwr_run_writes_the_final_global_model(app_run, env):
    from safetensors.torch import load_file

    model = env.build_model()
    model.load_state_dict(load_file(str(app_run["out"] / "model.safetensors")))
    _, acc = evaluate(model, env.test.x, env.test.y)
    assert acc == pytest.approx(app_run["metrics"]["accuracy"]["2"], abs=1e-9)


def test_the_app_pyproject_is_a_valid_flower_app():
    config, _ = load_and_validate(APP / "pyproject.toml", check_module=False)
    comps = config["tool"]["flwr"]["app"]["components"]
    assert comps == {
        "serverapp": "edgetrain_app.server_app:app",
        "clientapp": "edgetrain_app.client_app:app",
    }
    # no [tool.flwr.federations]: flwr >= 1.26 would migrate it by rewriting this file
    assert "federations" not in config["tool"]["flwr"]
    cfg, opts = app_config(_defaults(), APP)
    assert cfg.fleet.clients == 10 and cfg.federated.method == "fedhybrid"
    assert cfg.data.reshape is None  # from the base YAML (TOML has no null)
    assert opts.evaluate_clients == 2


def test_run_config_overrides_the_base_yaml():
    cfg, opts = app_config(_run_config("/tmp/x"), APP)
    assert (cfg.fleet.clients, cfg.federated.rounds, cfg.federated.memstat) == (4, 2, "eq1")
    assert cfg.data.max_samples == 200 and cfg.model.options["width_mult"] == 0.25
    assert cfg.clock.flops_per_sample == 6.0e8  # kept from the YAML
    assert opts.output_dir == "/tmp/x" and opts.evaluate_clients == 1
    # '-' reads as '_' in edgetrain paths
    hyphen = {k: v for k, v in _defaults().items() if k != "federated.clients_per_round"}
    cfg2, _ = app_config({**hyphen, "federated.clients-per-round": 3}, APP)
    assert cfg2.federated.clients_per_round == 3
    with pytest.raises(ConfigError, match="same field"):
        app_config({**_defaults(), "federated.clients-per-round": 3}, APP)


def test_run_config_mistakes_name_the_field():
    with pytest.raises(ConfigError, match="federated.round"):
        app_config({**_defaults(), "federated.round": 2}, APP)
    with pytest.raises(ConfigError, match="federated.method"):
        app_config({**_defaults(), "federated.method": "fedsgd"}, APP)
    with pytest.raises(ConfigError, match="edgetrain-config"):
        app_config({k: v for k, v in _defaults().items() if k != "edgetrain-config"}, APP)
    with pytest.raises(ConfigError, match="does not exist"):
        app_config({**_defaults(), "edgetrain-config": "nope.yaml"}, APP)
    with pytest.raises(ConfigError, match="evaluate-clients"):
        app_config({**_defaults(), "evaluate-clients": -1}, APP)


def test_a_node_of_a_federation_of_the_wrong_size_refuses():
    def ctx(n: int) -> Context:
        return Context(
            run_id=1,
            node_id=1,
            node_config={"partition-id": 0, "num-partitions": n},
            state=RecordDict(),
            run_config=_run_config(),
        )

    with pytest.raises(ConfigError, match="num-supernodes=4"):
        app_environment(ctx(3), APP)
    env = app_environment(ctx(4), APP)
    assert len(env.parts) == 4 and np.all(env.n_samples > 0)
    assert torch.is_tensor(env.train.x)
