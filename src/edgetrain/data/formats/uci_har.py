"""UCI HAR (Anguita et al. 2013): smartphone on the waist, 30 subjects, 6 activities.

Layout (as downloaded)::

    UCI HAR Dataset/
      activity_labels.txt             "1 WALKING" ... "6 LAYING"   (optional here)
      train/Inertial Signals/{body_acc,body_gyro,total_acc}_{x,y,z}_train.txt
      train/y_train.txt               one label 1..6 per window
      train/subject_train.txt         one subject id per window
      test/... (same with _test)

Each signal file holds one pre-cut window per line: 128 samples (2.56 s at 50 Hz,
50 % overlap). The 9 signals become the 9 channels in the order below.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from edgetrain.data._io import read_text
from edgetrain.data._labels import encode_present
from edgetrain.data.dataset import Dataset
from edgetrain.errors import DataError

SAMPLE_RATE_HZ = 50.0  # UCI HAR README: "sampled at a constant rate of 50Hz"
SIGNALS = tuple(
    f"{kind}_{axis}" for kind in ("body_acc", "body_gyro", "total_acc") for axis in "xyz"
)
ACTIVITIES = {
    1: "WALKING",
    2: "WALKING_UPSTAIRS",
    3: "WALKING_DOWNSTAIRS",
    4: "SITTING",
    5: "STANDING",
    6: "LAYING",
}
LAYOUT = (
    "'UCI HAR Dataset/<split>/Inertial Signals/<signal>_<split>.txt' (9 signals "
    f"{', '.join(SIGNALS)}; one 128-sample window per line) with '<split>/y_<split>.txt' "
    "and '<split>/subject_<split>.txt' (one integer per line)"
)


def _ints(path: Path) -> np.ndarray:
    tokens = read_text(path, LAYOUT).split()
    try:
        return np.array([int(float(t)) for t in tokens], dtype=np.int64)
    except ValueError as exc:
        raise DataError(f"{path}: non-integer value ({exc}); expected {LAYOUT}") from exc


def _signal(path: Path, n: int) -> np.ndarray:
    text = read_text(path, LAYOUT)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) != n:
        raise DataError(f"{path}: {len(lines)} windows but {n} labels; expected {LAYOUT}")
    try:
        values = np.array(" ".join(lines).split(), dtype=np.float32)
    except ValueError as exc:
        raise DataError(f"{path}: non-numeric value ({exc}); expected {LAYOUT}") from exc
    if n == 0 or values.size % n:
        raise DataError(f"{path}: rows have unequal lengths; expected {LAYOUT}")
    width = values.size // n
    if any(len(ln.split()) != width for ln in lines):
        raise DataError(f"{path}: rows have unequal lengths; expected {LAYOUT}")
    return values.reshape(n, width)


def _split(root: Path, split: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    base = root / split
    y = _ints(base / f"y_{split}.txt")
    subjects = _ints(base / f"subject_{split}.txt")
    if len(subjects) != len(y):
        raise DataError(
            f"{base}: {len(y)} labels but {len(subjects)} subject ids; expected {LAYOUT}"
        )
    sig = [_signal(base / "Inertial Signals" / f"{s}_{split}.txt", len(y)) for s in SIGNALS]
    if len({s.shape for s in sig}) != 1:
        raise DataError(f"{base}: signal files have different window lengths; expected {LAYOUT}")
    return np.stack(sig, axis=1), y, subjects


def _activity_names(root: Path) -> dict[int, str]:
    path = root / "activity_labels.txt"
    if not path.is_file():
        return dict(ACTIVITIES)
    names = {}
    for lineno, line in enumerate(read_text(path, LAYOUT).splitlines(), start=1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 2 or not parts[0].isdigit():
            raise DataError(f"{path}, line {lineno}: expected '<id> <NAME>', got {line!r}")
        names[int(parts[0])] = parts[1]
    return names


def load_uci_har(root: str | Path, split: str = "train") -> Dataset:
    """N x 9 x 128 windows; ``split`` 'train', 'test' or 'all'; groups = subject (1..30)."""
    if split not in ("train", "test", "all"):
        raise DataError(f"split must be 'train', 'test' or 'all', got {split!r}")
    root = Path(root)
    if (root / "UCI HAR Dataset").is_dir():
        root = root / "UCI HAR Dataset"
    if not root.is_dir():
        raise DataError(f"{root} does not exist; expected {LAYOUT}")
    parts = [_split(root, s) for s in (("train", "test") if split == "all" else (split,))]
    x = np.concatenate([p[0] for p in parts])
    y, classes, ids = encode_present(np.concatenate([p[1] for p in parts]), _activity_names(root))
    return Dataset(
        name="uci_har",
        x=torch.from_numpy(x),
        y=torch.from_numpy(y),
        classes=classes,
        groups=torch.from_numpy(np.concatenate([p[2] for p in parts])),
        source=str(root),
        meta={
            "kind": "sensor",
            "sample_rate_hz": SAMPLE_RATE_HZ,
            "window": int(x.shape[-1]),
            "channels": list(SIGNALS),
            "split": split,
            "label_ids": ids,
        },
    )
