"""Shared last step of the continuous-stream loaders: recordings -> windowed Dataset."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from edgetrain.data._io import files_in, fill_nan, read_table
from edgetrain.data._labels import encode_present
from edgetrain.data.dataset import Dataset
from edgetrain.data.windows import window_step, windows_by_label
from edgetrain.errors import DataError


@dataclass
class Recording:
    """One continuous session: T x C signal, T raw label ids, its subject."""

    signal: np.ndarray
    labels: np.ndarray
    subject: int
    path: Path


def subject_from_name(path: Path, pattern: str, fallback: int) -> int:
    """Subject id parsed from a file name (e.g. 'subject101.dat' -> 101), else ``fallback``."""
    m = re.search(pattern, path.name)
    return int(m.group(1)) if m else fallback


def dat_recordings(
    path_or_dir: str | Path,
    *,
    n_cols: int,
    layout: str,
    label_column: int,
    label_desc: str,
    channels: list[int],
    subject_pattern: str,
) -> list[Recording]:
    """Read every whitespace-separated ``*.dat`` table (PAMAP2, OPPORTUNITY) into recordings.

    The label column must hold integers (a NaN or fraction is a DataError naming the file);
    missing sensor readings are filled per channel; the subject comes from the file name.
    """
    recordings = []
    for i, f in enumerate(files_in(path_or_dir, "*.dat", layout)):
        table = read_table(f, n_cols, layout)
        raw = table[:, label_column]
        if np.isnan(raw).any() or (raw != np.round(raw)).any():
            raise DataError(f"{f}: {label_desc} must hold integers; expected {layout}")
        recordings.append(
            Recording(
                fill_nan(table[:, channels]),
                raw.astype(np.int64),
                subject_from_name(f, subject_pattern, i + 1),
                f,
            )
        )
    return recordings


def windowed_dataset(
    name: str,
    recordings: list[Recording],
    label_names: dict[int, str],
    window: int,
    overlap: float,
    skip: frozenset[int],
    meta: dict,
) -> Dataset:
    """Cut every recording into constant-label windows and assemble one Dataset."""
    step = window_step(window, overlap)
    xs, ys, gs = [], [], []
    for rec in recordings:
        x, y = windows_by_label(rec.signal, rec.labels, window, step, skip)
        xs.append(x)
        ys.append(y)
        gs.append(np.full(len(y), rec.subject, dtype=np.int64))
    y_raw = np.concatenate(ys) if ys else np.zeros(0, np.int64)
    if y_raw.size == 0:
        files = ", ".join(str(r.path) for r in recordings)
        raise DataError(
            f"{files}: no labelled segment is at least window={window} samples long; "
            "use a smaller window or check the label column"
        )
    y, classes, ids = encode_present(y_raw, label_names)
    return Dataset(
        name=name,
        x=torch.from_numpy(np.concatenate(xs)),
        y=torch.from_numpy(y),
        classes=classes,
        groups=torch.from_numpy(np.concatenate(gs)),
        source=", ".join(sorted({str(r.path) for r in recordings})),
        meta={"kind": "sensor", "window": window, "step": step, "label_ids": ids, **meta},
    )
