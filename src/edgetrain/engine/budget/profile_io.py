"""Save and load a :class:`~.profile.ModelProfile` (JSON, versioned, fingerprinted).

Profiling is most of what ``edgetrain budget`` and a budgeted run spend before their first
planned step (40-120 s of process CPU on MobileNetV2 b32 / BERT-small b8): every op time,
codec cost and in-step factor is measured.  A saved profile lets the next run on the same
model, batch and machine plan at another budget or with another method at once, and a
resumed training run (``edgetrain run --resume``, which reads its run directory's
``profile.json``) plan from the measurements of the run it continues.

The file is one JSON object::

    {"format": "edgetrain-model-profile", "version": 2,
     "fingerprint": {...what the profile was measured for...},
     "profile": {...every ModelProfile field...}}

Only numbers, strings, lists and objects: no pickle.  Storage keys (the integers that
identify tensors' storages inside the profile) are kept as they were measured; they only
relate a profile's own entries to one another.  Integer-keyed maps are written with
string keys and read back as ints; sets as sorted lists; tuples as lists.

The *fingerprint* names what the measurements depend on (:func:`fingerprint`: the model
and its options, the batch's shapes and dtypes, the seed, the codecs and whether the
all-allocation timeline was measured, torch's version and intra-op threads, the CPU).
:func:`load_profile` refuses a profile made for anything else with one error naming every
field that differs -- op times of another CPU or another batch would make plans that do
not hold -- and never rewrites the file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import platform
import types
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from edgetrain.compress import make_codec
from edgetrain.engine.budget.profile import (
    ModelProfile,
    profile_model,
)
from edgetrain.errors import ConfigError

PROFILE_FORMAT = "edgetrain-model-profile"
#: 2 (round 25): codec costs per storage (``CodecCost.per_key``) and the compressed units'
#: extra mask bits (``UnitProfile.auto_mask_bytes``); a version-1 file lacks both, and
#: plans made from it under-predict what a compressed unit holds, so it is refused (a
#: run's own file is measured again, :func:`reusable_profile`'s ``on_mismatch``).
#: 3 (round 27): the alias candidates (``ModelProfile.aliases``); a version-2 file has
#: none, so hybrid plans made from it would miss the free savings: refused the same way
PROFILE_VERSION = 3


def every_codec() -> dict[str, Any]:
    """Every method's codecs (``planner.CODECS_FOR``), made: a profile measured with them
    serves every ``--method``."""
    from edgetrain.engine.budget.planner import CODECS_FOR

    return {c: make_codec(c) for c in sorted({c for cs in CODECS_FOR.values() for c in cs})}


def _encode(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _encode(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return sorted(_encode(v) for v in value)
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if isinstance(value, float) and (value != value or value in (math.inf, -math.inf)):
        return None if value != value else str(value)  # JSON has no NaN / Infinity
    return value


def _decode(tp: Any, value: Any, where: str) -> Any:
    """``value`` read from JSON, converted to the annotated type ``tp``."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        rest = [a for a in args if a is not type(None)]
        return _decode(rest[0], value, where)
    if tp is Any:
        return value
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _decode_dataclass(tp, value, where)
    if origin is dict:
        if not isinstance(value, dict):
            raise TypeError(f"{where}: expected an object, got {type(value).__name__}")
        kt, vt = args
        return {_decode(kt, k, where): _decode(vt, v, f"{where}[{k}]") for k, v in value.items()}
    if origin in (list, set, tuple):
        if not isinstance(value, list):
            raise TypeError(f"{where}: expected a list, got {type(value).__name__}")
        if origin is tuple:
            if len(args) == 2 and args[1] is Ellipsis:
                return tuple(_decode(args[0], v, where) for v in value)
            if len(args) != len(value):
                raise TypeError(f"{where}: expected {len(args)} items, got {len(value)}")
            return tuple(_decode(a, v, where) for a, v in zip(args, value, strict=True))
        items = [_decode(args[0], v, f"{where}[{i}]") for i, v in enumerate(value)]
        return set(items) if origin is set else items
    if tp is int:
        if isinstance(value, str):
            return int(value)  # an integer key written as a JSON string
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if value is None:
            return math.nan
        if value in ("inf", "-inf"):
            return float(value)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp is bool:
        if not isinstance(value, bool):
            raise TypeError(f"{where}: expected true or false, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise TypeError(f"{where}: expected a string, got {value!r}")
        return value
    raise TypeError(f"{where}: cannot read a value of type {tp!r}")


def _decode_dataclass(cls: type, value: Any, where: str) -> Any:
    if not isinstance(value, dict):
        raise TypeError(f"{where}: expected an object, got {type(value).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(value) - names)
    if unknown:
        raise TypeError(f"{where}: unknown field(s) {', '.join(unknown)}")
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in value:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise TypeError(f"{where}: missing field {f.name!r}")
            continue
        kwargs[f.name] = _decode(hints[f.name], value[f.name], f"{where}.{f.name}")
    return cls(**kwargs)


def profile_to_json(profile: ModelProfile, fingerprint: dict[str, Any]) -> dict[str, Any]:
    return {
        "format": PROFILE_FORMAT,
        "version": PROFILE_VERSION,
        "fingerprint": fingerprint,
        "profile": _encode(profile),
    }


def profile_from_json(d: Any, where: str = "profile") -> tuple[ModelProfile, dict[str, Any]]:
    """(profile, fingerprint) from :func:`profile_to_json`'s object; ConfigError otherwise."""
    if not isinstance(d, dict) or d.get("format") != PROFILE_FORMAT:
        raise ConfigError(
            f"{where} is not an edgetrain model profile (expected a JSON object with "
            f'"format": "{PROFILE_FORMAT}")'
        )
    if d.get("version") != PROFILE_VERSION:
        raise ConfigError(
            f"{where}: model profile version {d.get('version')!r}; this edgetrain reads "
            f"version {PROFILE_VERSION} (profile again to replace it)"
        )
    fp = d.get("fingerprint")
    if not isinstance(fp, dict):
        raise ConfigError(f"{where}: the model profile has no fingerprint object")
    try:
        prof = _decode_dataclass(ModelProfile, d.get("profile"), "profile")
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: malformed model profile: {exc}") from exc
    return prof, fp


def fingerprint(
    model: nn.Module,
    inputs: Sequence[Any],
    *,
    name: str | dict[str, Any],
    seed: int,
    codecs: Sequence[str] = (),
    alloc_timeline: bool = False,
) -> dict[str, Any]:
    """What a profile's measurements depend on: the model (``name``: a zoo name, or a name
    with its options, and a digest of the module tree and parameter shapes, so an edited
    model under the same name is caught), the batch's shapes and dtypes, the seed (the
    weights and batch, hence the activations the codecs were timed on), the codecs,
    whether the all-allocation timeline was measured, torch's version and intra-op
    threads, and the CPU."""
    h = hashlib.sha256(repr(model).encode())
    for n, p in model.named_parameters():
        h.update(f"{n}:{tuple(p.shape)}:{p.dtype}".encode())
    batch = [
        {"shape": list(x.shape), "dtype": str(x.dtype).removeprefix("torch.")}
        if isinstance(x, torch.Tensor)
        else {"type": type(x).__name__}
        for x in inputs
    ]
    return {
        "model": name,
        "structure": h.hexdigest()[:16],
        "inputs": batch,
        "seed": int(seed),
        "codecs": sorted(codecs),
        "alloc_timeline": bool(alloc_timeline),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpu": _cpu_name(),
    }


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def save_profile(path: str | Path, profile: ModelProfile, fp: dict[str, Any]) -> None:
    """Write atomically (a temporary file renamed over ``path``): a crash mid-write leaves
    the previous file, not half a profile."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(profile_to_json(profile, fp), allow_nan=False))
    os.replace(tmp, path)


def fingerprint_diff(found: dict[str, Any], expected: dict[str, Any]) -> list[str]:
    """The fields of ``found`` (a file's fingerprint) that do not serve ``expected``.

    Every field must be equal, except that a profile measured with more codecs serves a
    run that needs fewer (the planner reads only its method's codecs, ``CODECS_FOR``), and
    one measured with the all-allocation timeline serves a ``saved``-scope run."""
    diff = []
    for k in sorted(set(found) | set(expected)):
        have, want = found.get(k), expected.get(k)
        if k == "codecs" and isinstance(have, list) and isinstance(want, list):
            ok = set(want) <= set(have)
        elif k == "alloc_timeline":
            ok = have == want or (have is True and want is False)
        else:
            ok = have == want
        if not ok:
            diff.append(k)
    return diff


def load_profile(
    path: str | Path, expected: dict[str, Any] | None = None, *, option: str = "--profile"
) -> ModelProfile:
    """Read a saved profile; with ``expected``, refuse one whose fingerprint does not serve
    it (:func:`fingerprint_diff`).  ``option``: what the error tells the user to change."""
    try:
        d = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read model profile {path}: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"model profile {path} is not valid JSON ({exc}); remove it to profile again"
        ) from exc
    prof, fp = profile_from_json(d, where=f"model profile {path}")
    if expected is not None:
        diff = fingerprint_diff(fp, expected)
        if diff:
            parts = "; ".join(
                f"{k}: file {fp.get(k)!r}, this run {expected.get(k)!r}" for k in diff
            )
            raise ConfigError(
                f"model profile {path} was measured for another setting ({parts}); give "
                f"another {option} path or remove the file to profile again"
            )
    return prof


def reusable_profile(
    path: str | Path | None,
    model: nn.Module,
    inputs: Sequence[Any],
    loss_fn: Callable[[Any], torch.Tensor],
    *,
    name: str | dict[str, Any],
    seed: int,
    codecs: dict[str, Any] | None = None,
    alloc_timeline: bool = True,
    option: str = "--profile",
    on_mismatch: Callable[[ConfigError], None] | None = None,
    **profile_kwargs: Any,
) -> tuple[ModelProfile, bool]:
    """(profile, reused): the profile saved at ``path`` when it serves this model, batch,
    seed and machine (:func:`fingerprint_diff`); otherwise a new one, written there when
    no file is (``path`` None: a new one, not written).  By default a new profile is made
    for reuse: every method's codecs and the all-allocation timeline, so one file serves
    every ``--method`` and ``--scope`` (a few more timed steps than one method's profile);
    ``codecs`` / ``alloc_timeline`` measure less.  A file that does not serve this run is
    a :class:`ConfigError` (naming ``option``), or with ``on_mismatch`` that error is
    passed to it and a new profile is made, the file left as it is.  ``profile_kwargs`` go
    to :func:`~.profile.profile_model` (``repeats``, ``in_situ_steps``)."""
    codecs = every_codec() if codecs is None else codecs
    fp = fingerprint(
        model, inputs, name=name, seed=seed, codecs=list(codecs), alloc_timeline=alloc_timeline
    )
    if path is not None and Path(path).exists():
        try:
            return load_profile(path, fp, option=option), True
        except ConfigError as exc:
            if on_mismatch is None:
                raise
            on_mismatch(exc)
    torch.manual_seed(seed)
    prof = profile_model(
        model, inputs, loss_fn, codecs=codecs, alloc_timeline=alloc_timeline, **profile_kwargs
    )
    if path is not None and not Path(path).exists():
        save_profile(path, prof, fp)
    return prof, False
