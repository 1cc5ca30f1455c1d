"""Malformed config files through the command line: one error naming the file, the line or
the field and what is accepted; no traceback; exit status 2."""

from __future__ import annotations

import pytest

from cli_runner import run_cli


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "name: x\nfederated: {rounds: 3\n",
            "is not valid YAML at line 3, column 1: expected ',' or '}', but got '<stream end>'",
        ),
        ("name: x\n\tseed: 1\n", "found character '\\t' that cannot start any token"),
    ],
)
def test_invalid_yaml_is_one_line(tmp_path, capsys, text, expected):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    code, err = run_cli(["federate", str(path)], capsys)
    assert code == 2 and expected in err and str(path) in err
    assert len(err.strip().splitlines()) == 1  # before: the YAML error's own 3-line report
    assert "Traceback" not in err


def test_config_that_is_a_directory_or_not_text(tmp_path, capsys):
    code, err = run_cli(["federate", str(tmp_path)], capsys)
    assert code == 2 and f"config file {tmp_path} is a directory" in err
    binary = tmp_path / "c.yaml"
    binary.write_bytes(b"\xff\xfe\x00bad")
    code, err = run_cli(["run", str(binary)], capsys)
    assert code == 2 and "is not text" in err and "Traceback" not in err


def test_bad_mapping_key_is_named_and_brackets_are_printed(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text("fleet:\n  memory_mix: {4.0: 0.5, x: 0.5}\n")
    code, err = run_cli(["federate", str(path)], capsys)
    assert code == 2
    # the key is named, and text in brackets is not swallowed as console markup
    assert "fleet.memory_mix: key 'x': Input should be a valid number" in err


def test_validator_messages_lose_pydantics_prefix(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text("federated: {method: fastest}\n")
    code, err = run_cli(["federate", str(path)], capsys)
    assert code == 2 and "federated.method: must be one of random, oort, fedhybrid" in err
    assert "Value error" not in err


def test_error_text_with_brackets_is_printed_as_is(capsys):
    from edgetrain.cli import app
    from edgetrain.errors import ConfigError

    @app.command("raise-brackets", hidden=True)
    def _raise() -> None:
        raise ConfigError("bad value [key] in [/tmp/x] and [bold]")

    try:
        code, err = run_cli(["raise-brackets"], capsys)
    finally:
        app.registered_commands.pop()
    assert code == 2 and "bad value [key] in [/tmp/x] and [bold]" in err
