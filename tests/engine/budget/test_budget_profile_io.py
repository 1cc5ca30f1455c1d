"""A saved model profile reads back field for field and plans byte for byte as the one it
was made from; a corrupt, foreign or mismatched file is refused with one clear error and
is never rewritten."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

from edgetrain import models
from edgetrain.engine.budget import plan, profile_model
from edgetrain.engine.budget.planner import METHODS
from edgetrain.engine.budget.profile_io import (
    PROFILE_FORMAT,
    PROFILE_VERSION,
    every_codec,
    fingerprint,
    fingerprint_diff,
    load_profile,
    profile_from_json,
    profile_to_json,
    save_profile,
)
from edgetrain.errors import BudgetError, ConfigError


def _task():
    torch.manual_seed(0)
    model = models.build(
        "albert-small", vocab_size=64, max_len=16, embedding_dim=16, hidden=32, num_layers=2,
        heads=2, intermediate=64, seed=0,
    )  # fmt: skip
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 64, (4, 16), generator=g)
    y = torch.randint(0, model.num_classes, (4,), generator=g)
    return model, (x,), lambda out: nn.functional.cross_entropy(out, y)


@pytest.fixture(scope="module")
def measured():
    # one profile with every candidate kind and the all-allocation timeline
    model, inputs, loss_fn = _task()
    codecs = every_codec()  # every method's
    prof = profile_model(
        model, inputs, loss_fn, codecs=codecs, alloc_timeline=True,
        repeats=1, in_situ_steps=2,
    )  # fmt: skip
    fp = fingerprint(
        model, inputs, name="albert-small", seed=0, codecs=list(codecs), alloc_timeline=True
    )
    return prof, fp, inputs, model


def test_round_trip_is_field_for_field(measured, tmp_path):
    prof, fp, *_ = measured
    path = tmp_path / "p.json"
    save_profile(path, prof, fp)
    back = load_profile(path, fp)
    assert back == prof  # dataclass equality: every field, sets, tuples and int keys
    assert back.alloc is not None and back.alloc == prof.alloc
    assert any(u.calls == 2 and u.call == 1 for u in back.units)  # the shared layer's calls
    assert all(isinstance(k, int) for u in back.units for k in u.saved)
    assert back.input_keys == prof.input_keys and isinstance(back.input_keys, set)
    text = path.read_text()
    assert "NaN" not in text and "Infinity" not in text  # strict JSON
    assert json.loads(text)["format"] == PROFILE_FORMAT


@pytest.mark.parametrize("scope", ["saved", "all"])
def test_a_loaded_profile_plans_identically(measured, tmp_path, scope):
    prof, fp, *_ = measured
    save_profile(tmp_path / "p.json", prof, fp)
    back = load_profile(tmp_path / "p.json")
    full = prof.total_saved_bytes if scope == "saved" else prof.alloc.measured_peak
    planned = 0
    for method in [m for m in METHODS if m != "none"]:
        for frac in (0.9, 0.6):
            try:
                a = plan(prof, int(frac * full), method, scope=scope)
            except BudgetError as exc:  # infeasible: the loaded profile must say the same
                with pytest.raises(BudgetError, match=str(exc).split("(")[0][:40]):
                    plan(back, int(frac * full), method, scope=scope)
                continue
            b = plan(back, int(frac * full), method, scope=scope)
            assert json.dumps(a.to_json(), sort_keys=True) == json.dumps(
                b.to_json(), sort_keys=True
            )
            planned += sum(u.decision != "keep" for u in a.units) > 0
    assert planned >= 4  # most methods evict something at these budgets


def test_nan_and_infinity_survive(measured):
    prof, fp, *_ = measured
    d = profile_to_json(prof, fp)
    d["profile"]["units"][0]["rc_fixed_s"] = None  # NaN on the wire
    d["profile"]["units"][0]["fwd_s"] = "inf"
    back, _ = profile_from_json(json.loads(json.dumps(d)))
    assert math.isnan(back.units[0].rc_fixed_s) and back.units[0].fwd_s == math.inf


def test_a_mismatched_fingerprint_names_every_field_and_keeps_the_file(measured, tmp_path):
    prof, fp, inputs, model = measured
    path = tmp_path / "p.json"
    save_profile(path, prof, fp)
    before = path.read_bytes()
    other = fingerprint(
        model, (inputs[0][:2],), name="albert-small", seed=3, codecs=fp["codecs"],
        alloc_timeline=True,
    )  # fmt: skip
    with pytest.raises(ConfigError) as exc:
        load_profile(path, other)
    msg = str(exc.value)
    assert "measured for another setting" in msg
    assert "inputs: file [{'shape': [4, 16]" in msg and "seed: file 0, this run 3" in msg
    assert "--profile" in msg
    assert path.read_bytes() == before


@pytest.mark.parametrize(
    "text, match",
    [
        ("{not json", "is not valid JSON"),
        ("[1, 2]", "is not an edgetrain model profile"),
        (json.dumps({"format": PROFILE_FORMAT, "version": 99}), "version 99"),
        (json.dumps({"format": PROFILE_FORMAT, "version": PROFILE_VERSION, "fingerprint": {}}),
         "malformed model profile"),
        (json.dumps({"format": PROFILE_FORMAT, "version": 1, "fingerprint": {}}),
         "version 1; this edgetrain reads version 3"),
        (json.dumps({"format": PROFILE_FORMAT, "version": 2, "fingerprint": {}}),
         "version 2; this edgetrain reads version 3"),
    ],
)  # fmt: skip
def test_a_corrupt_file_is_one_clear_error(tmp_path, text, match):
    path = tmp_path / "p.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match):
        load_profile(path)
    assert path.read_text() == text


def test_a_tampered_field_is_named(measured):
    prof, fp, *_ = measured
    d = json.loads(json.dumps(profile_to_json(prof, fp)))
    d["profile"]["units"][0]["saved"] = [1, 2]
    with pytest.raises(ConfigError, match=r"profile\.units\[0\]\.saved: expected an object"):
        profile_from_json(d)
    d = json.loads(json.dumps(profile_to_json(prof, fp)))
    d["profile"]["units"][0]["bogus"] = 1
    with pytest.raises(ConfigError, match=r"unknown field\(s\) bogus"):
        profile_from_json(d)


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read model profile"):
        load_profile(tmp_path / "absent.json")


def test_an_edited_model_under_the_same_name_is_refused(measured, tmp_path):
    prof, fp, inputs, _ = measured
    save_profile(tmp_path / "p.json", prof, fp)
    wider = models.build(
        "albert-small", vocab_size=64, max_len=16, embedding_dim=16, hidden=48, num_layers=2,
        heads=2, intermediate=64, seed=0,
    )  # fmt: skip
    other = fingerprint(wider, inputs, name="albert-small", seed=0, codecs=fp["codecs"],
                        alloc_timeline=True)  # fmt: skip
    with pytest.raises(ConfigError, match="structure: file"):
        load_profile(tmp_path / "p.json", other)


def test_reusable_profile_writes_once_then_reads(tmp_path, monkeypatch):
    from edgetrain.engine.budget import profile_io

    model, inputs, loss_fn = _task()
    path = tmp_path / "p.json"
    calls = []
    real = profile_io.profile_model

    def counted(*a, **k):
        calls.append(sorted(k["codecs"]))
        return real(*a, **{**k, "repeats": 1, "in_situ_steps": 2})

    monkeypatch.setattr(profile_io, "profile_model", counted)
    first, reused = profile_io.reusable_profile(path, model, inputs, loss_fn, name="t", seed=0)
    assert not reused and path.exists() and first.alloc is not None
    assert calls == [["int4", "int8", "mix"]]  # every method's codecs: one file serves all
    second, reused = profile_io.reusable_profile(path, model, inputs, loss_fn, name="t", seed=0)
    assert reused and second == first and len(calls) == 1
    with pytest.raises(ConfigError, match="seed: file 0, this run 1"):
        profile_io.reusable_profile(path, model, inputs, loss_fn, name="t", seed=1)


def test_a_profile_with_more_codecs_or_the_timeline_serves_a_run_that_needs_less():
    model, inputs, _ = _task()
    fp = {"name": "albert", "seed": 0}

    def f(codecs, alloc):
        return fingerprint(model, inputs, **fp, codecs=codecs, alloc_timeline=alloc)

    every = f(list(every_codec()), True)
    assert fingerprint_diff(every, f(["mix"], False)) == []
    assert fingerprint_diff(every, f([], True)) == []
    assert fingerprint_diff(f(["mix"], False), f(["int8", "int4"], False)) == ["codecs"]
    assert fingerprint_diff(f(["mix"], False), f(["mix"], True)) == ["alloc_timeline"]
    other = fingerprint(model, inputs, name="albert", seed=1, codecs=["mix"])
    assert fingerprint_diff(every, other) == ["seed"]
