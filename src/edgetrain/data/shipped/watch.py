"""Smartwatch shoulder-exercise recognition, from seglearn's ``watch_dataset.npy``.

140 recordings of 6 IMU channels (accelerometer ax, ay, az and gyroscope wx, wy,
wz) at 50 Hz, 7 physiotherapy exercises, 10 subjects (Burns et al., seglearn's
bundled data set). Recordings are cut into fixed windows; the default of 128
samples is 2.56 s at 50 Hz, the window length of UCI HAR. Windows never straddle
two recordings, and each window keeps its subject id in ``groups``.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch

from edgetrain.data._io import package_dir, require_file
from edgetrain.data.dataset import Dataset
from edgetrain.data.windows import window_starts, window_step
from edgetrain.errors import DataError

SAMPLE_RATE_HZ = 50.0  # seglearn watch data set documentation
WATCH_LAYOUT = (
    "seglearn/data/watch_dataset.npy: a dict with X (list of T x 6 arrays), y, y_labels, "
    "subject, X_labels"
)


@lru_cache(maxsize=1)
def _read() -> tuple[str, tuple[np.ndarray, ...], np.ndarray, np.ndarray, list[str], list[str]]:
    path = require_file(package_dir("seglearn") / "data" / "watch_dataset.npy", WATCH_LAYOUT)
    try:
        raw = np.load(path, allow_pickle=True).item()  # trusted-package-data
        recs = tuple(np.asarray(r, dtype=np.float64) for r in raw["X"])
        y = np.asarray(raw["y"], dtype=np.int64)
        subject = np.asarray(raw["subject"], dtype=np.int64)
        names = [str(s) for s in raw["y_labels"]]
        channels = [str(s) for s in raw["X_labels"]]
    except (KeyError, ValueError, AttributeError, TypeError, OSError) as exc:
        raise DataError(f"{path} is malformed ({exc}); expected {WATCH_LAYOUT}") from exc
    if not (len(recs) == len(y) == len(subject)) or any(r.ndim != 2 for r in recs):
        raise DataError(f"{path}: X, y and subject disagree; expected {WATCH_LAYOUT}")
    return str(path), recs, y, subject, names, channels


def load_watch(window: int = 128, overlap: float = 0.0) -> Dataset:
    """Windows N x 6 x ``window`` (float32); ``overlap`` 0.5 gives 50 % overlapping windows."""
    step = window_step(window, overlap)
    source, recs, y_rec, subj_rec, names, channels = _read()
    xs, ys, gs = [], [], []
    for r, lab, subj in zip(recs, y_rec, subj_rec, strict=True):
        for s in window_starts(r.shape[0], window, step):
            xs.append(r[s : s + window].T)
            ys.append(lab)
            gs.append(subj)
    if not xs:
        raise DataError(
            f"window={window} is longer than every recording (shortest "
            f"{min(r.shape[0] for r in recs)} samples); use a smaller window"
        )
    return Dataset(
        name="watch",
        x=torch.from_numpy(np.stack(xs).astype(np.float32)),
        y=torch.tensor(ys, dtype=torch.int64),
        classes=names,
        groups=torch.tensor(gs, dtype=torch.int64),
        source=source,
        meta={
            "kind": "sensor",
            "sample_rate_hz": SAMPLE_RATE_HZ,
            "window": window,
            "step": step,
            "channels": channels,
            "recordings": len(recs),
        },
    )
