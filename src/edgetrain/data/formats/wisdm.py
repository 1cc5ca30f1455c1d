"""WISDM raw accelerometer streams (Kwapisz et al. 2010; Weiss 2019).

Layout: records ``user,activity,timestamp,x,y,z;`` — in v1.1
(``WISDM_ar_v1.1_raw.txt``) the activity is a name (Walking, Jogging, Upstairs,
Downstairs, Sitting, Standing); in the 2019 smartphone/smartwatch set
(``wisdm-dataset/raw/<device>/<sensor>/data_<id>_<sensor>_<device>.txt``) it is a
letter code A..S. Records end with ';' and may share or split lines. 20 Hz.

The real v1.1 file contains a few broken records (a missing axis, an empty
value); those are skipped and counted in ``meta['skipped_records']``. A file with
no valid record, or with more than 1 % broken ones, is rejected as malformed.
Windows lie within one contiguous (user, activity) run; default 128 samples
(6.4 s at 20 Hz) with 50 % overlap.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from edgetrain.data._io import files_in, read_text
from edgetrain.data.dataset import Dataset
from edgetrain.data.formats._recordings import Recording, windowed_dataset
from edgetrain.data.windows import window_step
from edgetrain.errors import DataError

SAMPLE_RATE_HZ = 20.0  # WISDM v1.1 readme and WISDM 2019 description: 20 Hz
V11_ACTIVITIES = ["Walking", "Jogging", "Upstairs", "Downstairs", "Sitting", "Standing"]
CODES_2019 = {  # wisdm-dataset/activity_key.txt (there is no code N)
    "A": "walking",
    "B": "jogging",
    "C": "stairs",
    "D": "sitting",
    "E": "standing",
    "F": "typing",
    "G": "teeth",
    "H": "soup",
    "I": "chips",
    "J": "pasta",
    "K": "drinking",
    "L": "sandwich",
    "M": "kicking",
    "O": "catch",
    "P": "dribbling",
    "Q": "writing",
    "R": "clapping",
    "S": "folding",
}
# one id space for both variants: v1.1 names 1..6, 2019 codes 101..
ACTIVITY_IDS = {n.lower(): i + 1 for i, n in enumerate(V11_ACTIVITIES)} | {
    c: 101 + i for i, c in enumerate(CODES_2019)
}
ID_NAMES = {i + 1: n for i, n in enumerate(V11_ACTIVITIES)} | {
    101 + i: n for i, n in enumerate(CODES_2019.values())
}
LAYOUT = (
    "WISDM raw records 'user,activity,timestamp,x,y,z;' (activity a v1.1 name "
    f"{V11_ACTIVITIES} or a 2019 code A..S)"
)
MAX_BROKEN_FRACTION = 0.01
_RECORD_FILE = re.compile(r"^(WISDM_ar_v[\d.]+_raw|data_\d+_\w+)\.txt$")


def _parse(path: Path) -> tuple[list[Recording], int]:
    text = read_text(path, LAYOUT)
    users: list[int] = []
    acts: list[int] = []
    xyz: list[tuple[float, float, float]] = []
    broken = 0
    first_bad = ""
    for rec in text.replace("\n", ";").replace("\r", ";").split(";"):
        rec = rec.strip().rstrip(",")
        if not rec:
            continue
        fields = [f.strip() for f in rec.split(",")]
        act = fields[1] if len(fields) > 1 else ""
        key = act if act in CODES_2019 else act.lower()
        try:
            if len(fields) != 6 or key not in ACTIVITY_IDS:
                raise ValueError
            values = (float(fields[3]), float(fields[4]), float(fields[5]))
            user = int(fields[0])
        except ValueError:
            broken += 1
            first_bad = first_bad or rec[:80]
            continue
        users.append(user)
        acts.append(ACTIVITY_IDS[key])
        xyz.append(values)
    total = len(users) + broken
    if not users or broken > MAX_BROKEN_FRACTION * total:
        raise DataError(
            f"{path}: {broken} of {total} records are malformed (first: {first_bad!r}); "
            f"expected {LAYOUT}"
        )
    u = np.asarray(users, dtype=np.int64)
    a = np.asarray(acts, dtype=np.int64)
    sig = np.asarray(xyz, dtype=np.float64)
    # a recording = a contiguous run of one user (activity runs are cut by the windower)
    change = np.flatnonzero(u[1:] != u[:-1]) + 1
    bounds = np.concatenate([[0], change, [len(u)]])
    recs = [
        Recording(sig[s:e], a[s:e], int(u[s]), path)
        for s, e in zip(bounds[:-1], bounds[1:], strict=True)
    ]
    return recs, broken


def load_wisdm(path: str | Path, window: int = 128, overlap: float = 0.5) -> Dataset:
    """Windows N x 3 x ``window`` of (x, y, z) acceleration; groups = user id.

    ``path`` is the raw file, or a folder searched recursively for record files
    (``WISDM_ar_v1.1_raw.txt`` or ``data_<id>_<sensor>_<device>.txt``). Point it at
    one sensor's folder (e.g. ``raw/phone/accel``) so streams are not mixed.
    """
    window_step(window, overlap)  # reject bad window options before reading files
    files = files_in(path, "*.txt", LAYOUT)
    if len(files) > 1 or Path(path).is_dir():
        files = [f for f in files if _RECORD_FILE.match(f.name)]
        if not files:
            raise DataError(
                f"{path} holds no WISDM record files (WISDM_ar_v1.1_raw.txt or "
                f"data_<id>_<sensor>_<device>.txt); expected {LAYOUT}"
            )
    recordings: list[Recording] = []
    skipped = 0
    for f in files:
        recs, broken = _parse(f)
        recordings += recs
        skipped += broken
    return windowed_dataset(
        "wisdm",
        recordings,
        ID_NAMES,
        window,
        overlap,
        frozenset(),
        {"sample_rate_hz": SAMPLE_RATE_HZ, "channels": ["x", "y", "z"], "skipped_records": skipped},
    )
