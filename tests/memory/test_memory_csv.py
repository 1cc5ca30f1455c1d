"""MiniMalloc CSV problems: reading, writing, errors."""

from __future__ import annotations

import pytest

from edgetrain.errors import DataError
from edgetrain.memory import Buffer, allocate, read_minimalloc_csv, write_minimalloc_csv


def test_round_trip_with_offsets(tmp_path) -> None:
    src = tmp_path / "p.csv"
    src.write_text("id,lower,upper,size\nb1,0,3,4\nb2,3,9,4\nb3,0,9,4\nb4,9,21,4\nb5,0,21,4\n")
    bufs = read_minimalloc_csv(src)
    assert bufs[0] == Buffer("b1", 0, 3, 4, "b1")
    res = allocate(bufs)
    out = tmp_path / "o.csv"
    write_minimalloc_csv(out, bufs, res.offsets)
    lines = out.read_text().splitlines()
    assert lines[0] == "id,lower,upper,size,offset"
    assert len(lines) == 6
    again = read_minimalloc_csv(out)  # a solution file reads back as a problem
    assert [(b.id, b.lower, b.upper, b.size) for b in again] == [
        (b.id, b.lower, b.upper, b.size) for b in bufs
    ]
    assert {row.split(",")[0]: int(row.split(",")[4]) for row in lines[1:]} == res.offsets


def test_old_header_end_is_inclusive(tmp_path) -> None:
    src = tmp_path / "old.csv"
    src.write_text("buffer,start,end,size\nb1,0,2,4\n")
    (b,) = read_minimalloc_csv(src)
    assert (b.lower, b.upper) == (0, 3)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (
            "id,lo,upper,size\n",
            r"bad\.csv:1: bad header 'id,lo,upper,size'; expected 'id,lower,upper,size'",
        ),
        ("", r"bad\.csv:1: empty file"),
        ("id,lower,upper,size\na,0,1\n", r"bad\.csv:2: 3 fields, expected 4"),
        (
            "id,lower,upper,size\na,0,1,4\nb,x,1,4\n",
            r"bad\.csv:3: lower, upper and size must be integers",
        ),
        ("id,lower,upper,size\na,3,1,4\n", r"bad\.csv:2: buffer 'a' needs lower < upper"),
        ("id,lower,upper,size\na,0,1,4\na,1,2,4\n", r"bad\.csv:3: duplicate id 'a'"),
    ],
)
def test_malformed_files_name_file_line_and_expectation(tmp_path, text, match) -> None:
    src = tmp_path / "bad.csv"
    src.write_text(text)
    with pytest.raises(DataError, match=match):
        read_minimalloc_csv(src)


def test_missing_file(tmp_path) -> None:
    with pytest.raises(DataError, match="no such file"):
        read_minimalloc_csv(tmp_path / "nope.csv")
