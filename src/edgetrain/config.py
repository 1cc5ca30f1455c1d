"""Run configuration: one validated schema for every job.

A config is YAML (or a dict). Every field is checked by pydantic with unknown keys
rejected, and every problem is reported in one :class:`ConfigError` that names the
field path, what was given and what would be accepted — no traceback for a typo.
Later stages add their own sections (``federated``, ``chain``, ``budget``) here.
"""

from __future__ import annotations

import difflib
import os
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from edgetrain.errors import ConfigError, EdgetrainError


def _check_run_name(v: str) -> str:
    if not v or len(v) > 128 or not all(c.isalnum() or c in "._-" for c in v):
        raise ValueError("use 1-128 letters, digits, '.', '_' or '-'")
    return v


RunName = Annotated[str, AfterValidator(_check_run_name)]
"""A run directory name: safe as one path component (no separators, no '..')."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSection(_Strict):
    name: str = "lenet"
    options: dict[str, Any] = Field(default_factory=dict)


class DataSection(_Strict):
    name: str = "watch"
    options: dict[str, Any] = Field(default_factory=dict)
    test_fraction: float = Field(0.25, gt=0.0, lt=1.0)
    split: Literal["stratified", "by-group"] = "stratified"
    #: use at most this many samples, a seeded random subset (as the federated config's)
    max_samples: int | None = Field(None, ge=10)


class TrainSection(_Strict):
    epochs: int = Field(5, ge=1, le=10_000)
    batch_size: int = Field(32, ge=1, le=65_536)
    lr: float = Field(1e-3, gt=0.0, le=10.0)
    optimizer: Literal["sgd", "sgd-momentum", "adam"] = "adam"
    momentum: float = Field(0.9, ge=0.0, lt=1.0)
    weight_decay: float = Field(0.0, ge=0.0)
    schedule: Literal["constant", "cosine"] = "constant"
    #: epochs between checkpoints in the run directory (the last epoch's always; 0: none);
    #: ``edgetrain run --resume RUN_DIR`` continues from the newest
    checkpoint_every: int = Field(1, ge=0, le=10_000)


class BudgetSection(_Strict):
    """Train every step under a memory plan (:mod:`edgetrain.engine.budget.train`)."""

    #: a fraction of the unplanned step's peak (0.5) or a size (300MB, 256MiB, bytes)
    limit: float | str | None = None
    method: Literal["hybrid", "recompute", "compress", "swap", "none"] = "hybrid"
    scope: Literal["saved", "all"] = "saved"
    #: FedHybrid's budget predictor: "linux" (this system's /proc) or a recorded trace
    predictor: str | None = None
    samples_per_epoch: int = Field(8, ge=1, le=10_000)
    measure: Literal["epoch", "every"] = "epoch"
    #: profiling effort (edgetrain.engine.budget.profile_model's repeats / in_situ_steps):
    #: fewer is faster and the op costs noisier; memory is measured either way
    profile_repeats: int = Field(3, ge=1, le=100)
    in_situ_steps: int = Field(10, ge=0, le=1_000)
    #: a model profile file shared between runs (read if it fits, else measured and written)
    profile: str | None = None

    @model_validator(mode="after")
    def _checked(self) -> BudgetSection:
        from edgetrain.engine.budget.train import BudgetSpec

        try:
            BudgetSpec(**self.model_dump())
        except EdgetrainError as exc:
            raise ValueError(str(exc)) from None
        return self


class RunConfig(_Strict):
    """A local training run (``edgetrain run`` / ``edgetrain demo``)."""

    name: RunName = "run"
    seed: int = Field(0, ge=0)
    output_root: str = "runs"
    model: ModelSection = Field(default_factory=ModelSection)
    data: DataSection = Field(default_factory=DataSection)
    train: TrainSection = Field(default_factory=TrainSection)
    budget: BudgetSection | None = None


def with_budget(
    config: RunConfig, *, limit: str | None = None, method: str | None = None
) -> RunConfig:
    """``config`` with its ``budget`` section's limit / method replaced (the section made
    if missing), validated as a config file's would be."""
    section = config.budget.model_dump() if config.budget is not None else {}
    if limit is not None:
        section["limit"] = limit
    if method is not None:
        section["method"] = method
    return parse_config({**config.model_dump(), "budget": section}, "(--budget, --budget-method)")


DEMO_CONFIG: dict[str, Any] = {
    "name": "demo",
    "seed": 0,
    "model": {"name": "lenet"},
    # Hold out whole subjects: the test accuracy is for people the model never saw.
    "data": {"name": "watch", "test_fraction": 0.25, "split": "by-group"},
    "train": {"epochs": 6, "batch_size": 32, "lr": 2e-3, "optimizer": "adam"},
}


def _section_at(schema: Any, parts: list[str]) -> type[BaseModel] | None:
    """The pydantic model that holds the field at ``parts`` under ``schema`` (None when
    the path leaves the models: a free-form mapping, a list index into one, ...)."""

    def models_in(tp: Any) -> list[type[BaseModel]]:
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            return [tp]
        origin = typing.get_origin(tp)
        if origin is Annotated:
            return models_in(typing.get_args(tp)[0])
        if origin in (typing.Union, types.UnionType, list, tuple):
            return [m for a in typing.get_args(tp) for m in models_in(a)]
        return []

    model = schema if isinstance(schema, type) and issubclass(schema, BaseModel) else None
    for part in parts:
        if model is None:
            return None
        if part.isdigit():  # an index into a list of sections
            continue
        field = model.model_fields.get(part)
        found = models_in(field.annotation) if field is not None else []
        model = found[0] if len(found) == 1 else None
    return model


def _unknown_field_hint(schema: Any, parts: list[str]) -> str:
    """``'; did you mean X? accepted: a, b, c'`` for an unknown key at ``parts``."""
    section = _section_at(schema, parts[:-1]) if schema is not None else None
    if section is None:
        return ""
    names = sorted(f.alias or n for n, f in section.model_fields.items())
    close = difflib.get_close_matches(parts[-1], names, n=1, cutoff=0.8)
    guess = f"did you mean {close[0]!r}? " if close else ""
    return f"; {guess}accepted: {', '.join(names)}"


def format_validation_error(
    exc: ValidationError, source: str, schema: type[BaseModel] | None = None
) -> str:
    """One readable line per problem: ``field.path: message (got X)``; an unknown key
    also gets the closest accepted name and the list of names its section accepts
    (``schema`` is the model validated against, to look them up)."""
    lines = []
    for err in exc.errors():
        parts = [str(p) for p in err["loc"]]
        msg = err["msg"].removeprefix("Value error, ")
        if len(parts) >= 2 and parts[-1] == "[key]":  # a mapping's key, not its value
            msg = f"key {parts[-2]!r}: {msg}"
            parts = parts[:-2]
        loc = ".".join(parts) or "(root)"
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        elif err["type"] == "literal_error":
            msg = f"must be one of {err.get('ctx', {}).get('expected', '')}"
        got = err.get("input")
        got_s = "" if isinstance(got, dict) or err["type"] == "missing" else f" (got {got!r})"
        hint = _unknown_field_hint(schema, parts) if err["type"] == "extra_forbidden" else ""
        lines.append(f"  {loc}: {msg}{got_s}{hint}")
    return f"invalid config {source}:\n" + "\n".join(lines)


def parse_config(data: Any, source: str = "<dict>", schema: type[BaseModel] = RunConfig):
    """Validate a mapping against ``schema``; raise one ConfigError listing every problem."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"invalid config {source}: the top level must be a mapping of sections "
            f"(model, data, train, ...), got {type(data).__name__}"
        )
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source, schema)) from None


def load_config(path: str | os.PathLike, schema: type[BaseModel] = RunConfig):
    """Read a YAML config file and validate it."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"config file {path} is a directory (expected a YAML file)")
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist (expected a YAML file)")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        context = getattr(exc, "context", None)
        what = f"{problem} ({context})" if context else problem
        raise ConfigError(
            f"config file {path} is not valid YAML{where}: {what}; expected YAML mappings "
            "of sections (see examples/*.yaml)"
        ) from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} is not text (expected a YAML file)") from None
    return parse_config(data, str(path), schema)
