"""A reader for the sktime / UEA-UCR ``.ts`` time-series format.

Layout (what we accept): ``#`` comment lines; ``@`` header tags (``@problemName``,
``@timeStamps``, ``@missing``, ``@univariate``, ``@dimensions``, ``@equalLength``,
``@seriesLength``, ``@classLabel true <names...>``), then ``@data`` and one line per
case: dimensions separated by ``:``, values by ``,``, the class label last.
``?`` marks a missing value (read as NaN). Time-stamped and unequal-length series
are rejected with a clear message rather than padded silently.

Written here instead of importing sktime, which is heavy and not needed to read
a text file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgetrain.data._io import read_text
from edgetrain.errors import DataError

TS_LAYOUT = (
    "a .ts file: '@' header lines (@dimensions, @classLabel true <labels...>), '@data', "
    "then one case per line 'v,v,...:v,v,...:label' (dimensions split by ':')"
)


@dataclass
class TsData:
    """Parsed ``.ts`` contents: N x C x T values and the label string of each case."""

    problem_name: str
    x: np.ndarray
    labels: list[str]
    class_labels: list[str]


def read_ts(path: str | Path) -> TsData:
    """Parse one ``.ts`` file with class labels (see module docstring for the layout)."""
    path = Path(path)
    text = read_text(path, TS_LAYOUT)
    header: dict[str, str] = {}
    class_labels: list[str] = []
    cases: list[np.ndarray] = []
    labels: list[str] = []
    in_data = False
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if not in_data:
            if not line.startswith("@"):
                raise DataError(f"{path}, line {lineno}: data before '@data'; expected {TS_LAYOUT}")
            tag, _, value = line[1:].partition(" ")
            tag = tag.lower()
            if tag == "data":
                in_data = True
            elif tag == "classlabel":
                parts = value.split()
                if not parts or parts[0].lower() != "true" or len(parts) < 2:
                    raise DataError(
                        f"{path}, line {lineno}: '@classLabel' must be 'true' followed by "
                        f"the label names; expected {TS_LAYOUT}"
                    )
                class_labels = parts[1:]
            else:
                header[tag] = value.strip()
            continue
        if header.get("timestamps", "false").lower() == "true":
            raise DataError(f"{path}: time-stamped .ts data is not supported; expected {TS_LAYOUT}")
        *dims, label = line.split(":")
        if not dims:
            raise DataError(f"{path}, line {lineno}: no ':' before the label; expected {TS_LAYOUT}")
        try:
            series = [
                np.array(
                    [np.nan if v.strip() == "?" else float(v) for v in d.split(",")],
                    dtype=np.float64,
                )
                for d in dims
            ]
        except ValueError as exc:
            raise DataError(f"{path}, line {lineno}: {exc}; expected {TS_LAYOUT}") from exc
        lengths = {len(s) for s in series}
        if len(lengths) != 1 or (cases and cases[0].shape != (len(series), len(series[0]))):
            raise DataError(
                f"{path}, line {lineno}: dimensions or lengths differ from the first case; "
                f"only equal-length series are supported; expected {TS_LAYOUT}"
            )
        cases.append(np.stack(series))
        labels.append(label.strip())
    if not in_data or not cases:
        raise DataError(f"{path}: no '@data' section with cases; expected {TS_LAYOUT}")
    if not class_labels:
        raise DataError(f"{path}: no '@classLabel true ...' header; expected {TS_LAYOUT}")
    dims_decl = header.get("dimensions")
    if dims_decl is not None and dims_decl.isdigit() and int(dims_decl) != cases[0].shape[0]:
        raise DataError(
            f"{path}: header says @dimensions {dims_decl} but cases have {cases[0].shape[0]}"
        )
    unknown = sorted(set(labels) - set(class_labels))
    if unknown:
        raise DataError(f"{path}: labels {unknown} are not declared in @classLabel {class_labels}")
    return TsData(header.get("problemname", path.stem), np.stack(cases), labels, class_labels)
