"""MHEALTH (Banos et al. 2014), ``mHealth_subjectN.log`` files.

Layout: one sample per line, 24 tab-separated columns (the data set's README):
1-3 chest acceleration, 4-5 ECG leads 1 and 2, 6-8 left-ankle acceleration, 9-11
left-ankle gyroscope, 12-14 left-ankle magnetometer, 15-17 right-lower-arm
acceleration, 18-20 right-lower-arm gyroscope, 21-23 right-lower-arm
magnetometer, 24 label (0 = null, 1..12 activities). All sensors at 50 Hz; the
default 128-sample window is 2.56 s. The 23 sensor columns become channels.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgetrain.data._io import files_in, read_table
from edgetrain.data.dataset import Dataset
from edgetrain.data.formats._recordings import Recording, subject_from_name, windowed_dataset
from edgetrain.data.windows import window_step
from edgetrain.errors import DataError

SAMPLE_RATE_HZ = 50.0  # MHEALTH README: "sampling rate of 50 Hz"
N_COLS = 24
CHANNELS = (
    ["chest_acc_x", "chest_acc_y", "chest_acc_z", "ecg_1", "ecg_2"]
    + [f"ankle_{s}_{a}" for s in ("acc", "gyro", "mag") for a in "xyz"]
    + [f"arm_{s}_{a}" for s in ("acc", "gyro", "mag") for a in "xyz"]
)
ACTIVITIES = {
    1: "standing still",
    2: "sitting and relaxing",
    3: "lying down",
    4: "walking",
    5: "climbing stairs",
    6: "waist bends forward",
    7: "frontal elevation of arms",
    8: "knees bending",
    9: "cycling",
    10: "jogging",
    11: "running",
    12: "jump front and back",
}
LAYOUT = (
    "MHEALTH 'mHealth_subjectN.log' files: 24 tab-separated columns per line "
    "(23 sensor values, then the label 0..12)"
)


def load_mhealth(
    path_or_dir: str | Path, window: int = 128, overlap: float = 0.5, include_null: bool = False
) -> Dataset:
    """Windows N x 23 x ``window``; groups = subject from the file name; null (0) dropped."""
    window_step(window, overlap)  # reject bad window options before reading files
    recordings = []
    for i, f in enumerate(files_in(path_or_dir, "*.log", LAYOUT)):
        table = read_table(f, N_COLS, LAYOUT)
        raw = table[:, -1]
        if np.isnan(table).any() or (raw != np.round(raw)).any():
            raise DataError(f"{f}: NaN or a non-integer label; expected {LAYOUT}")
        sig = table[:, :-1]
        recordings.append(
            Recording(sig, raw.astype(np.int64), subject_from_name(f, r"subject(\d+)", i + 1), f)
        )
    return windowed_dataset(
        "mhealth",
        recordings,
        {0: "null", **ACTIVITIES},
        window,
        overlap,
        frozenset() if include_null else frozenset({0}),
        {"sample_rate_hz": SAMPLE_RATE_HZ, "channels": list(CHANNELS)},
    )
