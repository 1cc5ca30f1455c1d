"""UniMiB-SHAR (Micucci et al. 2017), MATLAB ``.mat`` files.

Layout (``UniMiB-SHAR/data/``): ``<task>_data.mat`` holds variable ``<task>_data``,
N x 453 = 151 samples of x, then y, then z acceleration (m/s^2, 50 Hz, 3 s windows
centred on a peak); ``<task>_labels.mat`` holds ``<task>_labels``, N x 3 = (activity
1..K, subject 1..30, trial); ``<task>_names.mat`` holds ``<task>_names``, a cell
array whose first row (or column, if stored K x 2) names the activities (optional). ``task`` is 'acc' (17
classes: 9 daily activities + 8 falls), 'adl' (9) or 'fall' (8). MATLAB v7.3
(HDF5) files are not readable with scipy and are rejected with that message.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from edgetrain.data._labels import encode_present
from edgetrain.data.dataset import Dataset
from edgetrain.errors import DataError

SAMPLE_RATE_HZ = 50.0  # Micucci et al. 2017, Sec. 3: accelerometer sampled at 50 Hz
WINDOW = 151  # samples per axis in <task>_data (3 s around the peak)
TASKS = ("acc", "adl", "fall")
LAYOUT = (
    "UniMiB-SHAR 'data/<task>_data.mat' (variable <task>_data: N x 453 = x, y, z of 151 "
    "samples each) and 'data/<task>_labels.mat' (variable <task>_labels: N x 3 = "
    "activity, subject, trial), task in acc|adl|fall"
)


def _var(path: Path, name: str) -> np.ndarray | None:
    if not path.is_file():
        raise DataError(f"{path} does not exist; expected {LAYOUT}")
    import scipy.io  # lazy: only UniMiB needs it, and it costs ~0.5 s to import

    try:
        content = scipy.io.loadmat(str(path))
    except NotImplementedError as exc:  # MATLAB v7.3 / HDF5
        raise DataError(f"{path} is a MATLAB v7.3 (HDF5) file; expected {LAYOUT}") from exc
    except (ValueError, OSError, TypeError) as exc:
        raise DataError(f"{path} is not a readable .mat file ({exc}); expected {LAYOUT}") from exc
    if name not in content:
        keys = sorted(k for k in content if not k.startswith("__"))
        raise DataError(f"{path} has no variable {name!r} (found {keys}); expected {LAYOUT}")
    return np.asarray(content[name])


def _names(path: Path, task: str) -> list[str] | None:
    if not path.is_file():
        return None
    cells = _var(path, f"{task}_names")
    # names run along the longer axis (2 x K or K x 2 cell array); take the first entry of the other
    if cells.ndim == 2:
        first_row = cells[0] if cells.shape[0] <= cells.shape[1] else cells[:, 0]
    else:
        first_row = cells.ravel()
    names = []
    for c in np.asarray(first_row, dtype=object).ravel():
        v = c
        while isinstance(v, np.ndarray) and v.size == 1 and v.dtype == object:
            v = v.ravel()[0]
        names.append(str(v.ravel()[0]) if isinstance(v, np.ndarray) and v.size else str(v))
    return names


def load_unimib(path_or_dir: str | Path, task: str = "acc") -> Dataset:
    """N x 3 x 151 windows; labels from ``<task>_labels``; groups = subject (1..30)."""
    if task not in TASKS:
        raise DataError(f"task must be one of {list(TASKS)}, got {task!r}")
    root = Path(path_or_dir)
    if root.is_file():
        root = root.parent
    if (root / "data").is_dir() and not (root / f"{task}_data.mat").exists():
        root = root / "data"
    if not root.is_dir():
        raise DataError(f"{root} does not exist; expected {LAYOUT}")
    data_path = root / f"{task}_data.mat"
    label_path = root / f"{task}_labels.mat"
    data = _var(data_path, f"{task}_data")
    labels = _var(label_path, f"{task}_labels")
    if data.ndim != 2 or data.shape[1] != 3 * WINDOW:
        raise DataError(f"{data_path}: {task}_data has shape {data.shape}; expected {LAYOUT}")
    if labels.ndim != 2 or labels.shape[0] != data.shape[0] or labels.shape[1] < 2:
        raise DataError(
            f"{label_path}: {task}_labels has shape {labels.shape} for {data.shape[0]} windows; "
            f"expected {LAYOUT}"
        )
    raw = labels[:, 0].astype(np.int64)
    names = _names(root / f"{task}_names.mat", task)
    table = {i + 1: n for i, n in enumerate(names)} if names else {}
    y, classes, ids = encode_present(raw, table)
    x = data.astype(np.float32).reshape(-1, 3, WINDOW)
    return Dataset(
        name="unimib",
        x=torch.from_numpy(np.ascontiguousarray(x)),
        y=torch.from_numpy(y),
        classes=classes,
        groups=torch.from_numpy(labels[:, 1].astype(np.int64)),
        source=str(data_path),
        meta={
            "kind": "sensor",
            "sample_rate_hz": SAMPLE_RATE_HZ,
            "window": WINDOW,
            "channels": ["x", "y", "z"],
            "task": task,
            "label_ids": ids,
        },
    )
