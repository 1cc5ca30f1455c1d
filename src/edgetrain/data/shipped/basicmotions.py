"""BasicMotions (UEA archive), from the ``.ts`` files sktime installs.

80 cases (40 train + 40 test) of 6 channels x 100 samples: a smartwatch's 3-D
accelerometer and 3-D gyroscope sampled at 10 Hz for 10 s, four activities
(standing, running, walking, badminton). Read with our own ``.ts`` parser; sktime
itself is never imported.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from edgetrain.data._io import package_dir
from edgetrain.data.dataset import Dataset
from edgetrain.data.ts_format import TsData, read_ts
from edgetrain.errors import DataError

SAMPLE_RATE_HZ = 10.0  # BasicMotions_TRAIN.ts header: "sampled once every tenth of a second"
SPLITS = ("all", "train", "test")


@lru_cache(maxsize=2)
def _read(split: str) -> tuple[str, TsData]:
    folder = package_dir("sktime") / "datasets" / "data" / "BasicMotions"
    path = folder / f"BasicMotions_{split.upper()}.ts"
    return str(path), read_ts(path)


def load_basicmotions(split: str = "all") -> Dataset:
    """N x 6 x 100 float32; ``split`` 'all' puts the 40 original train cases first."""
    if split not in SPLITS:
        raise DataError(f"split must be one of {list(SPLITS)}, got {split!r}")
    parts = [_read(s) for s in (("train", "test") if split == "all" else (split,))]
    classes = parts[0][1].class_labels
    for p, ts in parts:
        if ts.class_labels != classes:
            raise DataError(f"{p}: @classLabel {ts.class_labels} differs from {classes}")
    x = np.concatenate([ts.x for _, ts in parts]).astype(np.float32)
    y = [classes.index(lab) for _, ts in parts for lab in ts.labels]
    return Dataset(
        name="basicmotions",
        x=torch.from_numpy(x),
        y=torch.tensor(y, dtype=torch.int64),
        classes=list(classes),
        groups=None,
        source=parts[0][0] if len(parts) == 1 else str(Path(parts[0][0]).parent),
        meta={
            "kind": "sensor",
            "sample_rate_hz": SAMPLE_RATE_HZ,
            "channels": ["acc_x", "acc_y", "acc_z", "gyro_x", "gyro_y", "gyro_z"],
            "split": split,
            "train_count": len(parts[0][1].labels) if split == "all" else None,
        },
    )
