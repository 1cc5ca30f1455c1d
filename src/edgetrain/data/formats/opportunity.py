"""OPPORTUNITY activity recognition (Roggen et al. 2010), ``S<n>-<run>.dat`` files.

Layout (OpportunityUCIDataset/dataset/column_names.txt): one sample per line, 250
space-separated columns, ``NaN`` for missing: 1 time (ms), 2-243 sensors, 244
Locomotion, 245 HL_Activity, 246-249 low-level arm labels, 250 ML_Both_Arms
(gestures). 30 Hz. ``channels='body'`` keeps the 113 body-worn sensor channels of
DeepConvLSTM (Ordonez & Roggen 2016, Sensors 16(1):115): columns 2-46, 51-59,
64-72, 77-85, 90-98, 103-134 (1-based); 'all' keeps the 242 sensor columns. Missing
values are interpolated per channel. Default window 24 samples (0.8 s) with 50 %
overlap, as in DeepConvLSTM. Subject from the file name (S2-ADL1.dat -> 2).
"""

from __future__ import annotations

from pathlib import Path

from edgetrain.data.dataset import Dataset
from edgetrain.data.formats._recordings import dat_recordings, windowed_dataset
from edgetrain.data.windows import window_step
from edgetrain.errors import DataError

SAMPLE_RATE_HZ = 30.0  # OPPORTUNITY README: sensor data resampled to 30 Hz
N_COLS = 250
_BODY_RANGES_1BASED = [(2, 46), (51, 59), (64, 72), (77, 85), (90, 98), (103, 134)]
CHANNEL_SETS = {
    "body": [c - 1 for a, b in _BODY_RANGES_1BASED for c in range(a, b + 1)],
    "all": list(range(1, 243)),
}
LABEL_COLUMNS = {"locomotion": 243, "high_level": 244, "gestures": 249}  # 0-based
LABEL_NAMES = {  # OpportunityUCIDataset/dataset/label_legend.txt
    "locomotion": {1: "Stand", 2: "Walk", 4: "Sit", 5: "Lie"},
    "high_level": {
        101: "Relaxing",
        102: "Coffee time",
        103: "Early morning",
        104: "Cleanup",
        105: "Sandwich time",
    },
    "gestures": {
        406516: "Open Door 1",
        406517: "Open Door 2",
        404516: "Close Door 1",
        404517: "Close Door 2",
        406520: "Open Fridge",
        404520: "Close Fridge",
        406505: "Open Dishwasher",
        404505: "Close Dishwasher",
        406519: "Open Drawer 1",
        404519: "Close Drawer 1",
        406511: "Open Drawer 2",
        404511: "Close Drawer 2",
        406508: "Open Drawer 3",
        404508: "Close Drawer 3",
        408512: "Clean Table",
        407521: "Drink from Cup",
        405506: "Toggle Switch",
    },
}
LAYOUT = (
    "OPPORTUNITY 'S<n>-<run>.dat' files: 250 space-separated columns per line (time, "
    "242 sensors, 7 label tracks; NaN for missing)"
)


def load_opportunity(
    path_or_dir: str | Path,
    label: str = "locomotion",
    channels: str = "body",
    window: int = 24,
    overlap: float = 0.5,
    include_null: bool = False,
) -> Dataset:
    """Windows N x 113 (or 242) x ``window`` labelled by ``label`` track; groups = subject."""
    window_step(window, overlap)  # reject bad window options before reading files
    if label not in LABEL_COLUMNS:
        raise DataError(f"label must be one of {sorted(LABEL_COLUMNS)}, got {label!r}")
    if channels not in CHANNEL_SETS:
        raise DataError(f"channels must be one of {sorted(CHANNEL_SETS)}, got {channels!r}")
    cols = CHANNEL_SETS[channels]
    recordings = dat_recordings(
        path_or_dir,
        n_cols=N_COLS,
        layout=LAYOUT,
        label_column=LABEL_COLUMNS[label],
        label_desc=f"the {label} label column",
        channels=cols,
        subject_pattern=r"S(\d+)",
    )
    return windowed_dataset(
        "opportunity",
        recordings,
        {0: "null", **LABEL_NAMES[label]},
        window,
        overlap,
        frozenset() if include_null else frozenset({0}),
        {"sample_rate_hz": SAMPLE_RATE_HZ, "label_track": label, "channel_columns": cols},
    )
