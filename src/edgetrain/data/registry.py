"""The shipped data sets by name: ``names()``, ``load(name, **options)``, ``catalog()``."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import lru_cache

from edgetrain.data.dataset import Dataset
from edgetrain.data.shipped.basicmotions import load_basicmotions
from edgetrain.data.shipped.bbc import load_bbc
from edgetrain.data.shipped.images import load_digits, load_mnist5k
from edgetrain.data.shipped.watch import load_watch
from edgetrain.errors import DataError

LOADERS: dict[str, Callable[..., Dataset]] = {
    "watch": load_watch,
    "basicmotions": load_basicmotions,
    "mnist5k": load_mnist5k,
    "digits": load_digits,
    "bbc": load_bbc,
}


def names() -> list[str]:
    """Names accepted by :func:`load`."""
    return list(LOADERS)


def options(name: str) -> dict[str, object]:
    """The options of one loader with their defaults."""
    loader = _loader(name)
    return {p.name: p.default for p in inspect.signature(loader).parameters.values()}


def _loader(name: str) -> Callable[..., Dataset]:
    if name not in LOADERS:
        raise DataError(f"unknown data set {name!r}; accepted: {', '.join(LOADERS)}")
    return LOADERS[name]


def load(name: str, **opts: object) -> Dataset:
    """Load a shipped data set; an unknown name or option raises DataError listing the valid ones."""
    loader = _loader(name)
    accepted = options(name)
    unknown = sorted(set(opts) - set(accepted))
    if unknown:
        listing = ", ".join(f"{k}={v!r}" for k, v in accepted.items()) or "none"
        raise DataError(
            f"data set {name!r} has no option {', '.join(unknown)}; accepted: {listing}"
        )
    return loader(**opts)


@lru_cache(maxsize=1)
def _catalog() -> tuple[dict, ...]:
    rows = []
    for name in LOADERS:
        ds = load(name)
        rows.append(
            {
                "name": name,
                "samples": len(ds),
                "shape": list(ds.input_shape),
                "classes": ds.num_classes,
                "class_names": list(ds.classes),
                "source": ds.source,
                "subjects": None if ds.groups is None else int(ds.groups.unique().numel()),
                "kind": ds.meta.get("kind", "sensor"),
            }
        )
    return tuple(rows)


def catalog() -> list[dict]:
    """One row per shipped set with its default options (loads each once per process)."""
    return [dict(r, shape=list(r["shape"]), class_names=list(r["class_names"])) for r in _catalog()]
