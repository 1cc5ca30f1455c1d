import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from edgetrain.errors import ConfigError, ModelError, RunDirError
from edgetrain.runs import (
    RunDir,
    load_into,
    load_state,
    read_metadata,
    save_state,
    seed_everything,
)


def test_seed_everything_is_reproducible():
    g1 = seed_everything(7)
    a = (torch.rand(3), np.random.rand(), torch.rand(2, generator=g1))
    g2 = seed_everything(7)
    b = (torch.rand(3), np.random.rand(), torch.rand(2, generator=g2))
    assert torch.equal(a[0], b[0]) and a[1] == b[1] and torch.equal(a[2], b[2])
    with pytest.raises(ConfigError):
        seed_everything(-1)


def test_run_dir_files(tmp_path):
    run = RunDir.create("r1", tmp_path)
    run.write_config({"seed": 1, "nested": {"x": float("nan")}})
    run.log_metrics({"epoch": 1, "acc": 0.5, "t": torch.tensor(2.0)})
    run.log_metrics({"epoch": 2, "acc": float("inf")})
    cfg = json.loads((run.path / "config.json").read_text())
    assert cfg == {"seed": 1, "nested": {"x": None}}
    rows = list(run.metrics())
    assert rows == [{"epoch": 1, "acc": 0.5, "t": 2.0}, {"epoch": 2, "acc": None}]
    with pytest.raises(ConfigError, match="already exists"):
        RunDir.create("r1", tmp_path)
    assert RunDir.unique("r1", tmp_path).path.name == "r1-2"
    with pytest.raises(ConfigError, match="not accepted"):
        RunDir.create("../x", tmp_path)


def test_safetensors_round_trip_and_corruption(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    path = save_state(tmp_path / "m.safetensors", model.state_dict(), {"model": "mlp"})
    other = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    load_into(other, load_state(path))
    for a, b in zip(model.parameters(), other.parameters(), strict=True):
        assert torch.equal(a, b)
    corrupt = tmp_path / "bad.safetensors"
    corrupt.write_bytes(path.read_bytes()[:20])
    with pytest.raises(ModelError, match="not a readable safetensors"):
        load_state(corrupt)
    with pytest.raises(ModelError, match="does not exist"):
        load_state(tmp_path / "nope.safetensors")


def test_load_into_lists_every_mismatch_and_loads_nothing():
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    state = {"0.weight": torch.zeros(5, 3), "0.bias": torch.zeros(4), "9.weight": torch.zeros(1)}
    with pytest.raises(ModelError) as exc:
        load_into(model, state)
    msg = str(exc.value)
    assert "1.weight" in msg and "1.bias" in msg  # missing
    assert "9.weight" in msg  # unexpected
    assert "0.weight: file (5, 3) vs model (4, 3)" in msg
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k])  # never a partial load


@settings(max_examples=25, deadline=None)
@given(st.dictionaries(st.text("abcdef._", min_size=1, max_size=8), st.integers(1, 5), max_size=5))
def test_state_round_trip_property(tmp_path_factory, shapes):
    path = tmp_path_factory.mktemp("st") / "x.safetensors"
    state = {k: torch.randn(n, 2) for k, n in shapes.items()}
    save_state(path, state)
    loaded = load_state(path)
    assert set(loaded) == set(state)
    for k in state:
        assert torch.equal(loaded[k], state[k])


def test_read_metrics_names_a_damaged_line_and_drops_only_a_torn_tail(tmp_path):
    run = RunDir.create("m", tmp_path)
    run.log_metrics({"round": 1})
    run.log_metrics({"round": 2})
    path = run.path / RunDir.METRICS
    intact = path.read_text()
    path.write_text(intact + '{"round": 3, "acc')  # a crash mid-append: no newline
    assert run.read_metrics(torn_tail=True) == [{"round": 1}, {"round": 2}]
    with pytest.raises(RunDirError, match=r"metrics.jsonl line 3 is not valid JSON"):
        run.read_metrics()
    path.write_text('{"round": 1}\nnot json\n{"round": 2}\n')
    with pytest.raises(RunDirError, match="line 2 is not valid JSON"):
        run.read_metrics(torn_tail=True)  # a damaged line inside the file is never skipped
    path.write_text('{"round": 1}\n[1, 2]\n')
    with pytest.raises(RunDirError, match="line 2 is a JSON list, not an object"):
        list(run.metrics())


def test_run_dir_under_a_file_and_a_directory_given_as_model_file(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(ConfigError, match="cannot create run directory .*f/r"):
        RunDir.create("r", tmp_path / "f")
    with pytest.raises(ConfigError, match="cannot create run directory"):
        RunDir.unique("r", tmp_path / "f")
    run = RunDir.create("r", tmp_path)
    run.save_model({"w": torch.zeros(2)})
    with pytest.raises(ModelError, match=r"is a directory; expected a .safetensors file such as"):
        load_state(run.path)
    assert read_metadata(save_state(tmp_path / "m.safetensors", {}, {"round": "3"})) == {
        "round": "3"
    }


def test_a_file_where_the_run_directory_would_go(tmp_path):
    (tmp_path / "r").write_text("keep me")
    with pytest.raises(ConfigError, match="exists and is not a directory"):
        RunDir.create("r", tmp_path)
    with pytest.raises(ConfigError, match="exists and is not a directory"):
        RunDir.create("r", tmp_path, exist_ok=True)
    assert RunDir.unique("r", tmp_path).path.name == "r-2"  # the name is taken, not an error
    assert (tmp_path / "r").read_text() == "keep me"


def test_a_deferred_run_directory_is_checked_now_and_made_at_the_first_write(tmp_path):
    run = RunDir.create("r", tmp_path / "root", defer=True)
    assert run.pending and not (tmp_path / "root").exists()
    run.write_config({"a": 1})
    assert not run.pending and json.loads((run.path / "config.json").read_text()) == {"a": 1}
    # the checks of create() run at once: a taken name, a file under the root
    with pytest.raises(ConfigError, match="already exists and is not empty"):
        RunDir.create("r", tmp_path / "root", defer=True)
    (tmp_path / "f").write_text("x")
    with pytest.raises(ConfigError, match=r"cannot create run directory .*f/root/s"):
        RunDir.create("s", tmp_path / "f" / "root", defer=True)
    assert RunDir.unique("r", tmp_path / "root", defer=True).path.name == "r-2"
    assert not (tmp_path / "root" / "r-2").exists()
    # taken between the check and the first write: refused then, nothing overwritten
    late = RunDir.create("t", tmp_path / "root", defer=True)
    (tmp_path / "root" / "t").mkdir()
    (tmp_path / "root" / "t" / "metrics.jsonl").write_text("other run\n")
    with pytest.raises(ConfigError, match="already exists and is not empty"):
        late.log_metrics({"round": 1})
    assert (tmp_path / "root" / "t" / "metrics.jsonl").read_text() == "other run\n"
