"""PAMAP2 physical activity monitoring (Reiss & Stricker 2012), ``.dat`` files.

Layout: ``PAMAP2_Dataset/Protocol/subject1NN.dat`` (and ``Optional/``), one
sample per line, 54 space-separated columns (readme.pdf of the data set):
1 timestamp (s), 2 activity id (0 = transient, discarded), 3 heart rate (bpm),
then three IMUs (hand 4-20, chest 21-37, ankle 38-54) of 17 columns each:
temperature, acc +-16 g (3), acc +-6 g (3), gyroscope (3), magnetometer (3),
orientation (4, documented as invalid). IMUs sample at 100 Hz; missing samples are
``NaN`` and are interpolated per channel. The default 256-sample window is 2.56 s.
"""

from __future__ import annotations

from pathlib import Path

from edgetrain.data.dataset import Dataset
from edgetrain.data.formats._recordings import dat_recordings, windowed_dataset
from edgetrain.data.windows import window_step
from edgetrain.errors import DataError

SAMPLE_RATE_HZ = 100.0  # PAMAP2 readme: IMU sampling frequency 100 Hz
N_COLS = 54
IMUS = {"hand": 3, "chest": 20, "ankle": 37}  # 0-based first column of each IMU block
# offsets inside an IMU block (0-based): acc16 1-3, gyro 7-9, magnetometer 10-12
SENSOR_OFFSETS = {"acc": (1, 2, 3), "gyro": (7, 8, 9), "mag": (10, 11, 12)}
CHANNEL_SETS = {
    "acc": ("acc",),
    "acc_gyro": ("acc", "gyro"),
    "acc_gyro_mag": ("acc", "gyro", "mag"),
}
ACTIVITIES = {
    1: "lying",
    2: "sitting",
    3: "standing",
    4: "walking",
    5: "running",
    6: "cycling",
    7: "Nordic walking",
    9: "watching TV",
    10: "computer work",
    11: "car driving",
    12: "ascending stairs",
    13: "descending stairs",
    16: "vacuum cleaning",
    17: "ironing",
    18: "folding laundry",
    19: "house cleaning",
    20: "playing soccer",
    24: "rope jumping",
}
LAYOUT = (
    "PAMAP2 'subject1NN.dat' files: 54 space-separated columns per line (timestamp, "
    "activity id, heart rate, 3 IMUs x 17 columns; NaN for missing)"
)


def _columns(channels: str) -> tuple[list[int], list[str]]:
    if channels not in CHANNEL_SETS:
        raise DataError(f"channels must be one of {sorted(CHANNEL_SETS)}, got {channels!r}")
    cols, names = [], []
    for imu, base in IMUS.items():
        for sensor in CHANNEL_SETS[channels]:
            for axis, off in zip("xyz", SENSOR_OFFSETS[sensor], strict=True):
                cols.append(base + off)
                names.append(f"{imu}_{sensor}_{axis}")
    return cols, names


def load_pamap2(
    path_or_dir: str | Path,
    window: int = 256,
    overlap: float = 0.5,
    channels: str = "acc_gyro",
) -> Dataset:
    """Windows N x C x ``window``; ``channels`` 'acc' (9), 'acc_gyro' (18) or 'acc_gyro_mag' (27).

    ``path_or_dir`` is one ``.dat`` file or a folder searched recursively for them;
    groups = subject id from the file name (subject101.dat -> 101).
    """
    cols, names = _columns(channels)
    window_step(window, overlap)  # reject bad window options before reading files
    recordings = dat_recordings(
        path_or_dir,
        n_cols=N_COLS,
        layout=LAYOUT,
        label_column=1,
        label_desc="column 2 (activity id)",
        channels=cols,
        subject_pattern=r"subject(\d+)",
    )
    return windowed_dataset(
        "pamap2",
        recordings,
        ACTIVITIES,
        window,
        overlap,
        frozenset({0}),
        {"sample_rate_hz": SAMPLE_RATE_HZ, "channels": names},
    )
