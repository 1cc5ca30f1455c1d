"""Real-format loaders on small files written here in each set's exact download layout."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.io
import torch

from edgetrain.data import (
    load_mhealth,
    load_opportunity,
    load_pamap2,
    load_uci_har,
    load_unimib,
    load_wisdm,
)
from edgetrain.data.formats.opportunity import CHANNEL_SETS
from edgetrain.errors import DataError

# ----------------------------------------------------------------------------- UCI HAR

SIGNALS = [f"{k}_{a}" for k in ("body_acc", "body_gyro", "total_acc") for a in "xyz"]


def _write_uci_har(root: Path, split: str, labels: list[int], subjects: list[int]) -> np.ndarray:
    base = root / "UCI HAR Dataset" / split
    (base / "Inertial Signals").mkdir(parents=True)
    rng = np.random.default_rng(len(labels))
    values = rng.normal(size=(len(labels), 9, 128)).astype(np.float32)
    for c, sig in enumerate(SIGNALS):
        lines = ["  " + "  ".join(f"{v:.7e}" for v in row) for row in values[:, c, :]]
        (base / "Inertial Signals" / f"{sig}_{split}.txt").write_text("\n".join(lines) + "\n")
    (base / f"y_{split}.txt").write_text("".join(f"{v}\n" for v in labels))
    (base / f"subject_{split}.txt").write_text("".join(f"{v}\n" for v in subjects))
    (root / "UCI HAR Dataset" / "activity_labels.txt").write_text(
        "1 WALKING\n2 WALKING_UPSTAIRS\n3 WALKING_DOWNSTAIRS\n4 SITTING\n5 STANDING\n6 LAYING\n"
    )
    return values


def test_uci_har_reads_inertial_signals(tmp_path):
    train = _write_uci_har(tmp_path, "train", [1, 2, 3, 4, 5, 6], [1, 1, 3, 3, 5, 5])
    test = _write_uci_har(tmp_path, "test", [6, 5], [2, 4])
    ds = load_uci_har(tmp_path)  # the folder above "UCI HAR Dataset" works too
    assert ds.input_shape == (9, 128) and len(ds) == 6
    assert ds.classes[0] == "WALKING" and ds.y.tolist() == [0, 1, 2, 3, 4, 5]
    assert ds.groups.tolist() == [1, 1, 3, 3, 5, 5]
    assert torch.allclose(ds.x, torch.from_numpy(train), rtol=1e-6)
    both = load_uci_har(tmp_path / "UCI HAR Dataset", split="all")
    assert len(both) == 8 and torch.allclose(both.x[6:], torch.from_numpy(test), rtol=1e-6)
    assert both.groups.tolist()[6:] == [2, 4]
    assert both.meta["channels"] == SIGNALS and both.meta["sample_rate_hz"] == 50.0


def test_uci_har_errors_name_file_and_layout(tmp_path):
    with pytest.raises(DataError, match="does not exist; expected 'UCI HAR Dataset/<split>"):
        load_uci_har(tmp_path / "nowhere")
    _write_uci_har(tmp_path, "train", [1, 2], [1, 1])
    sig = tmp_path / "UCI HAR Dataset" / "train" / "Inertial Signals" / "body_gyro_y_train.txt"
    sig.write_text(sig.read_text().splitlines()[0] + "\n")
    with pytest.raises(DataError, match=r"body_gyro_y_train\.txt: 1 windows but 2 labels"):
        load_uci_har(tmp_path)
    sig.unlink()
    with pytest.raises(DataError, match=r"body_gyro_y_train\.txt does not exist; expected"):
        load_uci_har(tmp_path)
    with pytest.raises(DataError, match="split must be"):
        load_uci_har(tmp_path, split="valid")


# ----------------------------------------------------------------------------- PAMAP2


def _pamap2_table(runs: list[tuple[int, int]], seed: int) -> np.ndarray:
    n = sum(length for _, length in runs)
    rng = np.random.default_rng(seed)
    table = rng.normal(size=(n, 54))
    table[:, 0] = np.arange(n) / 100.0 + 5.64
    table[:, 1] = np.concatenate([np.full(length, a) for a, length in runs])
    table[:, 2] = np.nan
    table[::9, 2] = 100  # heart rate at ~9 Hz
    table[:, 4] = np.arange(n)  # hand acc16 x: a ramp we can find again
    table[10:13, 4:7] = np.nan  # a dropped hand-IMU packet
    return table


def _write_dat(path: Path, table: np.ndarray, sep: str = " ") -> None:
    def fmt(v: float) -> str:
        return "NaN" if np.isnan(v) else f"{v:.6g}"

    path.write_text("\n".join(sep.join(fmt(v) for v in row) for row in table) + "\n")


def test_pamap2_windows_within_activities_and_subjects(tmp_path):
    proto = tmp_path / "PAMAP2_Dataset" / "Protocol"
    proto.mkdir(parents=True)
    t1 = _pamap2_table([(0, 40), (1, 300), (4, 300), (0, 20), (24, 280)], seed=1)
    _write_dat(proto / "subject101.dat", t1)
    _write_dat(proto / "subject102.dat", _pamap2_table([(4, 400)], seed=2))
    ds = load_pamap2(tmp_path)
    assert ds.input_shape == (18, 256) and not torch.isnan(ds.x).any()
    assert ds.classes == ["lying", "walking", "rope jumping"]
    assert ds.meta["label_ids"] == [1, 4, 24]
    # per 300-sample run one window (step 128), 280 -> 1, 400 -> 2
    assert ds.y.tolist() == [0, 1, 2, 1, 1] and ds.groups.tolist() == [101] * 3 + [102] * 2
    assert ds.meta["channels"][0] == "hand_acc_x"
    assert torch.allclose(ds.x[0, 0], torch.arange(40, 296, dtype=torch.float32))
    assert torch.allclose(ds.x[1, 0], torch.arange(340, 596, dtype=torch.float32))
    one = load_pamap2(proto / "subject102.dat", window=100, overlap=0.0, channels="acc_gyro_mag")
    assert one.input_shape == (27, 100) and len(one) == 4 and one.classes == ["walking"]


def test_pamap2_nan_is_interpolated(tmp_path):
    t = _pamap2_table([(1, 300)], seed=3)
    _write_dat(tmp_path / "subject105.dat", t)
    ds = load_pamap2(tmp_path, window=300, channels="acc")
    # columns 5-7 (1-based) are hand acc16 x, y, z; rows 10..12 were NaN
    y_col = t[:, 5]
    expected = np.interp([10, 11, 12], [9, 13], [y_col[9], y_col[13]])
    assert np.allclose(ds.x[0, 1, 10:13].numpy(), expected, atol=1e-5)


def test_pamap2_malformed_rows_and_channel_names(tmp_path):
    bad = tmp_path / "subject109.dat"
    bad.write_text("1.0 1 NaN 3.0\n")
    with pytest.raises(DataError, match=r"subject109\.dat, line 1: 4 columns, expected 54"):
        load_pamap2(bad)
    with pytest.raises(DataError, match="channels must be one of"):
        load_pamap2(bad, channels="everything")
    with pytest.raises(DataError, match=r"sub does not exist; expected PAMAP2"):
        load_pamap2(tmp_path / "sub")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"holds no files matching '\*\.dat'; expected PAMAP2"):
        load_pamap2(tmp_path / "empty")


# ----------------------------------------------------------------------------- WISDM


def _wisdm_records(user: int, activity: str, n: int, t0: int, rng) -> list[str]:
    xyz = rng.normal(size=(n, 3))
    return [
        f"{user},{activity},{t0 + i * 50_000_000},{a:.8g},{b:.8g},{c:.8g};"
        for i, (a, b, c) in enumerate(xyz)
    ]


def test_wisdm_v11_raw_file(tmp_path):
    rng = np.random.default_rng(0)
    recs = (
        _wisdm_records(33, "Jogging", 150, 49105962326000, rng)
        + _wisdm_records(33, "Walking", 140, 49115962326000, rng)
        + _wisdm_records(7, "Jogging", 200, 1000, rng)
    )
    recs.insert(100, "11,Walking,1867172313000,4.4,4.4,;")  # a broken record, as in v1.1
    lines = (
        recs[:10]
        + ["".join(recs[10:12])]
        + [r + "," if i % 7 == 0 else r for i, r in enumerate(recs[12:])]
    )
    path = tmp_path / "WISDM_ar_v1.1_raw.txt"
    path.write_text("\n".join(lines) + "\n")
    (tmp_path / "WISDM_ar_v1.1_raw_about.txt").write_text("about the data\n")
    ds = load_wisdm(tmp_path, window=100, overlap=0.0)
    assert ds.input_shape == (3, 100) and ds.meta["skipped_records"] == 1
    assert ds.classes == ["Walking", "Jogging"]
    assert ds.y.tolist() == [1, 0, 1, 1] and ds.groups.tolist() == [33, 33, 7, 7]
    first = [float(v) for v in recs[0].rstrip(";").split(",")[3:]]
    assert torch.allclose(ds.x[0, :, 0], torch.tensor(first, dtype=torch.float32))
    assert ds.meta["sample_rate_hz"] == 20.0


def test_wisdm_2019_codes_and_malformed(tmp_path):
    rng = np.random.default_rng(1)
    accel = tmp_path / "raw" / "phone" / "accel"
    accel.mkdir(parents=True)
    for user in (1600, 1601):
        recs = _wisdm_records(user, "A", 60, 0, rng) + _wisdm_records(user, "F", 60, 0, rng)
        (accel / f"data_{user}_accel_phone.txt").write_text("\n".join(recs) + "\n")
    (accel / "README.txt").write_text("not records\n")
    ds = load_wisdm(accel, window=40, overlap=0.5)
    assert ds.classes == ["walking", "typing"]
    assert len(ds) == 2 * 2 * 2  # 60-sample runs, step 20: 2 windows each
    assert sorted(ds.groups.unique().tolist()) == [1600, 1601]
    bad = tmp_path / "WISDM_ar_v1.1_raw.txt"
    bad.write_text("33;Jogging;1;2;3\nnot,a,record\n")
    with pytest.raises(
        DataError, match=r"WISDM_ar_v1\.1_raw\.txt: 6 of 6 records are malformed \(first: '33'\)"
    ):
        load_wisdm(bad)
    with pytest.raises(DataError, match="does not exist; expected WISDM raw records"):
        load_wisdm(tmp_path / "missing.txt")


# ----------------------------------------------------------------------------- MHEALTH


def test_mhealth_logs(tmp_path):
    folder = tmp_path / "MHEALTH_Dataset"
    folder.mkdir()
    for subject, runs in ((1, [(0, 50), (1, 200), (11, 130)]), (10, [(4, 256)])):
        n = sum(length for _, length in runs)
        table = np.random.default_rng(subject).normal(size=(n, 24))
        table[:, 0] = np.arange(n)
        table[:, 23] = np.concatenate([np.full(length, a) for a, length in runs])
        _write_dat(folder / f"mHealth_subject{subject}.log", table, sep="\t")
    ds = load_mhealth(folder)
    assert ds.input_shape == (23, 128) and ds.classes == ["standing still", "walking", "running"]
    assert ds.y.tolist() == [0, 0, 2, 1, 1, 1] and ds.groups.tolist() == [1, 1, 1, 10, 10, 10]
    assert torch.allclose(ds.x[0, 0], torch.arange(50, 178, dtype=torch.float32))
    with_null = load_mhealth(
        folder / "mHealth_subject1.log", window=50, overlap=0.0, include_null=True
    )
    assert with_null.classes[0] == "null" and with_null.y.tolist()[0] == 0
    (folder / "mHealth_subject2.log").write_text("1\t2\t3\n")
    with pytest.raises(DataError, match=r"mHealth_subject2\.log, line 1: 3 columns, expected 24"):
        load_mhealth(folder)


# ----------------------------------------------------------------------------- OPPORTUNITY


def _opportunity_table(n: int, loco: list[tuple[int, int]], gestures: list[tuple[int, int]]):
    table = np.tile(np.arange(250, dtype=np.float64) * 1000.0, (n, 1)) + np.arange(n)[:, None]
    table[:, 0] = np.arange(n) * 33
    table[5:8, 1] = np.nan  # a dropped body-worn sensor sample
    table[:, 150] = np.nan  # an ambient sensor that never reported
    table[:, 243] = np.concatenate([np.full(length, a) for a, length in loco])
    table[:, 244] = 101
    table[:, 245:249] = 0
    table[:, 249] = np.concatenate([np.full(length, a) for a, length in gestures])
    return table


def test_opportunity_locomotion_and_gestures(tmp_path):
    folder = tmp_path / "OpportunityUCIDataset" / "dataset"
    folder.mkdir(parents=True)
    t1 = _opportunity_table(96, [(0, 12), (1, 36), (2, 48)], [(0, 40), (406516, 30), (0, 26)])
    _write_dat(folder / "S1-ADL1.dat", t1)
    _write_dat(folder / "S3-Drill.dat", _opportunity_table(24, [(5, 24)], [(0, 24)]))
    (folder / "column_names.txt").write_text("Column: 1 MILLISEC\n")
    ds = load_opportunity(tmp_path)
    assert ds.input_shape == (113, 24) and ds.meta["sample_rate_hz"] == 30.0
    assert ds.classes == ["Stand", "Walk", "Lie"]
    assert ds.y.tolist() == [0, 0, 1, 1, 1, 2] and ds.groups.tolist() == [1] * 5 + [3]
    # channel k is sensor column CHANNEL_SETS['body'][k]; 1-based column 51 is channel 45
    assert CHANNEL_SETS["body"][45] == 50 and len(CHANNEL_SETS["body"]) == 113
    assert ds.x[0, 45, 0].item() == 50_000 + 12
    assert ds.x[0, 0, 0].item() == 1000 + 12
    assert not torch.isnan(ds.x).any()
    assert torch.allclose(ds.x[2, 0, :], 1000 + torch.arange(48, 72, dtype=torch.float32))
    gest = load_opportunity(folder / "S1-ADL1.dat", label="gestures", channels="all", window=24)
    assert gest.classes == ["Open Door 1"] and gest.input_shape == (242, 24) and len(gest) == 1
    assert torch.all(gest.x[:, 149] == 0)  # all-NaN channel becomes 0
    with pytest.raises(DataError, match="label must be one of"):
        load_opportunity(folder, label="objects")
    (folder / "S2-ADL1.dat").write_text("0 1 2\n")
    with pytest.raises(DataError, match=r"S2-ADL1\.dat, line 1: 3 columns, expected 250"):
        load_opportunity(folder)


# ----------------------------------------------------------------------------- UniMiB-SHAR


def _write_unimib(folder: Path, n: int = 12) -> np.ndarray:
    folder.mkdir(parents=True)
    rng = np.random.default_rng(5)
    data = rng.normal(size=(n, 453))
    labels = np.stack([np.arange(n) % 3 + 1, np.arange(n) // 4 + 1, np.ones(n)], axis=1)
    names = np.empty((2, 17), dtype=object)
    names[0, :] = ["StandingUpFS", "StandingUpFL", "Walking"] + [f"A{i}" for i in range(14)]
    names[1, :] = ["adl"] * 17
    scipy.io.savemat(folder / "acc_data.mat", {"acc_data": data})
    scipy.io.savemat(folder / "acc_labels.mat", {"acc_labels": labels})
    scipy.io.savemat(folder / "acc_names.mat", {"acc_names": names})
    return data


def test_unimib_mat_files(tmp_path):
    data = _write_unimib(tmp_path / "UniMiB-SHAR" / "data")
    ds = load_unimib(tmp_path / "UniMiB-SHAR")
    assert ds.input_shape == (3, 151) and len(ds) == 12
    assert ds.classes == ["StandingUpFS", "StandingUpFL", "Walking"]
    assert ds.y.tolist() == [0, 1, 2] * 4 and ds.groups.tolist() == [1] * 4 + [2] * 4 + [3] * 4
    assert np.allclose(ds.x[1, 1].numpy(), data[1, 151:302], atol=1e-6)  # y axis
    assert np.allclose(ds.x[1, 2].numpy(), data[1, 302:], atol=1e-6)
    same = load_unimib(tmp_path / "UniMiB-SHAR" / "data" / "acc_data.mat")
    assert torch.equal(same.x, ds.x)
    names = scipy.io.loadmat(tmp_path / "UniMiB-SHAR" / "data" / "acc_names.mat")["acc_names"]
    scipy.io.savemat(tmp_path / "UniMiB-SHAR" / "data" / "acc_names.mat", {"acc_names": names.T})
    assert load_unimib(tmp_path / "UniMiB-SHAR").classes == ds.classes  # K x 2 layout too


def test_unimib_errors(tmp_path):
    folder = tmp_path / "data"
    _write_unimib(folder)
    with pytest.raises(DataError, match=r"adl_data\.mat does not exist; expected UniMiB-SHAR"):
        load_unimib(folder, task="adl")
    scipy.io.savemat(folder / "acc_labels.mat", {"labels": np.ones((12, 3))})
    with pytest.raises(DataError, match=r"acc_labels\.mat has no variable 'acc_labels'"):
        load_unimib(folder)
    (folder / "acc_data.mat").write_bytes(b"this is not a mat file at all" * 10)
    with pytest.raises(DataError, match=r"acc_data\.mat is not a readable \.mat file"):
        load_unimib(folder)
    header = b"MATLAB 7.3 MAT-file, HDF5 schema 1.00 .".ljust(116) + bytes(8) + b"\x00\x02IM"
    (folder / "acc_data.mat").write_bytes(header + bytes(512))
    with pytest.raises(DataError, match=r"acc_data\.mat is a MATLAB v7\.3 \(HDF5\) file"):
        load_unimib(folder)
    with pytest.raises(DataError, match="task must be one of"):
        load_unimib(folder, task="walk")


def test_window_option_errors(tmp_path):
    with pytest.raises(DataError, match="window must be a positive integer"):
        load_mhealth(tmp_path, window=0)
    for loader in (load_pamap2, load_wisdm, load_opportunity):
        with pytest.raises(DataError, match=r"overlap must be in \[0, 1\)"):
            loader(tmp_path, overlap=-0.1)
