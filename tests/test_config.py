import pytest

from edgetrain.config import DEMO_CONFIG, RunConfig, load_config, parse_config
from edgetrain.errors import ConfigError


def test_demo_config_is_valid():
    cfg = parse_config(DEMO_CONFIG)
    assert cfg.model.name == "lenet" and cfg.data.name == "watch"
    assert cfg.train.epochs >= 1


def test_defaults_fill_missing_sections():
    cfg = parse_config({})
    assert cfg == RunConfig()


def test_every_bad_field_is_named_in_one_error():
    bad = {
        "seed": -1,
        "train": {"epochs": 0, "optimizer": "lion", "lrr": 0.1},
        "data": {"test_fraction": 1.5},
        "colour": "red",
    }
    with pytest.raises(ConfigError) as exc:
        parse_config(bad, "bad.yaml")
    msg = str(exc.value)
    for needle in [
        "bad.yaml",
        "seed",
        "train.epochs",
        "train.optimizer",
        "'sgd'",
        "train.lrr: unknown field",
        "data.test_fraction",
        "colour: unknown field",
    ]:
        assert needle in msg, (needle, msg)


def test_an_unknown_field_names_what_its_section_accepts():
    bad = {"train": {"lrr": 0.1}, "colour": "red"}
    with pytest.raises(ConfigError) as exc:
        parse_config(bad, "bad.yaml")
    lines = str(exc.value).splitlines()
    lrr = next(line for line in lines if "train.lrr" in line)
    # the closest accepted name first, then every name the section accepts
    assert "did you mean 'lr'?" in lrr
    assert "accepted: batch_size, checkpoint_every, epochs, lr," in lrr
    colour = next(line for line in lines if line.strip().startswith("colour"))
    # nothing close to 'colour': no guess, just the list of sections
    assert "did you mean" not in colour
    assert colour.endswith("accepted: budget, data, model, name, output_root, seed, train")


def test_an_unknown_field_in_a_nested_federated_section_is_located():
    from edgetrain.federated.config import FederatedConfig

    bad = {"federated": {"oort": {"roundpenalty": 2.0}, "clientsperround": 5}}
    with pytest.raises(ConfigError) as exc:
        parse_config(bad, "fed.yaml", FederatedConfig)
    msg = str(exc.value)
    assert (
        "federated.oort.roundpenalty: unknown field (got 2.0); did you mean 'round_penalty'?" in msg
    )
    assert (
        "federated.clientsperround: unknown field (got 5); did you mean 'clients_per_round'?" in msg
    )
    oort_line = next(line for line in msg.splitlines() if "federated.oort." in line)
    assert "clients_per_round" not in oort_line  # the oort section's names, not its parent's


def test_top_level_must_be_mapping():
    with pytest.raises(ConfigError, match="must be a mapping"):
        parse_config([1, 2], "list.yaml")


def test_yaml_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("model: {name: lenet\ntrain: [")
    with pytest.raises(ConfigError, match="not valid YAML at line"):
        load_config(broken)
    good = tmp_path / "good.yaml"
    good.write_text("name: x1\nseed: 3\ntrain:\n  epochs: 2\n  optimizer: sgd\n")
    cfg = load_config(good)
    assert cfg.seed == 3 and cfg.train.optimizer == "sgd" and cfg.train.epochs == 2


def test_bad_run_name():
    with pytest.raises(ConfigError, match="name"):
        parse_config({"name": "../escape"})


def test_a_cohort_larger_than_the_fleet_is_refused():
    from edgetrain.federated.config import FederatedConfig

    bad = {"fleet": {"clients": 4}, "federated": {"clients_per_round": 5}}
    with pytest.raises(ConfigError) as exc:
        parse_config(bad, "fed.yaml", FederatedConfig)
    msg = str(exc.value)
    assert "fed.yaml" in msg and "clients_per_round (5)" in msg and "fleet.clients (4)" in msg
    ok = parse_config({"fleet": {"clients": 5}, "federated": {"clients_per_round": 5}},
                      "fed.yaml", FederatedConfig)  # fmt: skip
    assert ok.federated.clients_per_round == ok.fleet.clients == 5


def test_every_shipped_local_run_config_validates():
    from pathlib import Path

    from edgetrain.config import load_config

    root = Path(__file__).resolve().parents[1] / "examples"
    configs = {p.name: load_config(p) for p in sorted(root.glob("local-*.yaml"))}
    assert {"local-watch.yaml", "local-budget.yaml"} <= set(configs)
    b = configs["local-budget.yaml"].budget
    assert (b.limit, b.method, b.scope) == (0.5, "hybrid", "saved")
