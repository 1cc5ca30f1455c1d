"""Model specifications and option checking for the zoo.

A :class:`ModelSpec` ties a name to a builder function and to what the papers
report about the model. The builder's keyword defaults *are* the documented
default options, so the catalog, the error messages and the code cannot drift
apart.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from edgetrain.errors import ModelError


@dataclass(frozen=True)
class ModelSpec:
    """What the zoo knows about one model name.

    ``paper_params`` is the parameter count a paper reports for the default
    options (None where no paper in ``/work/shared/papers`` gives one for the
    configuration we build); ``paper_source`` says where that figure is printed.
    ``notes`` records which published variant the defaults follow.
    """

    name: str
    builder: Callable[..., nn.Module]
    description: str
    family: str
    task: str
    paper_params: int | None = None
    paper_source: str | None = None
    paper_flops_forward: int | None = None
    notes: str = ""
    defaults: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.defaults:
            object.__setattr__(self, "defaults", builder_defaults(self.builder))


def builder_defaults(builder: Callable[..., nn.Module]) -> dict[str, Any]:
    """Keyword defaults of a builder: the model's documented options."""
    params = inspect.signature(builder).parameters.values()
    return {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}


def _describe(defaults: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in defaults.items()) or "(none)"


def check_options(spec: ModelSpec, options: dict[str, Any]) -> dict[str, Any]:
    """Return the full option dict for ``spec`` or raise :class:`ModelError`.

    Unknown names and values of the wrong type are rejected here with the list
    of accepted options; value ranges are checked by each builder.
    """
    merged = dict(spec.defaults)
    for key, value in options.items():
        if key not in spec.defaults:
            raise ModelError(
                f"model {spec.name!r} has no option {key!r}; accepted options "
                f"(defaults): {_describe(spec.defaults)}; every model also takes seed=None (int)"
            )
        default = spec.defaults[key]
        if not _same_kind(default, value):
            raise ModelError(
                f"option {key!r} of model {spec.name!r} must be of type "
                f"{type(default).__name__} (default {default!r}), got {value!r}"
            )
        merged[key] = float(value) if isinstance(default, float) else value
    return merged


def _same_kind(default: Any, value: Any) -> bool:
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, int):
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, type(default))


def require(condition: bool, message: str) -> None:
    """Raise :class:`ModelError` with ``message`` when ``condition`` is false."""
    if not condition:
        raise ModelError(message)


def positive(model: str, **values: int | float) -> None:
    """Every named option must be > 0."""
    for key, value in values.items():
        require(value > 0, f"option {key!r} of model {model!r} must be > 0, got {value!r}")
