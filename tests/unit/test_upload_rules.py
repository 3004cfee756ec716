"""The upload declarations and checks that need no stack, and the event stream's cursor format."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from pydantic import ValidationError

from control.uploads import (
    MAX_BYTES,
    MAX_PARTS,
    MIN_PART,
    AssetRejected,
    UploadRefused,
    UploadRequest,
    _check_text,
    kind_of,
    part_size_for,
)
from schema.event_feed import EMPTY, BadCursor, Cursor

SHA = "ab" * 32


@pytest.mark.parametrize("name", ["../x.png", "a/b.png", "a\\b.png", "x\x00.png", "line\nbreak.png", "..", "",
                                  "lone\ud800.png", "x\u202evsc.exe", "a\u2066b.csv", "esc\x1b[2J.png", "c1\x9b.png"])
def test_a_file_name_is_a_plain_name(name: str) -> None:
    with pytest.raises(ValidationError):
        UploadRequest(filename=name, size=10, content_type="image/png", sha256=SHA)


def test_declarations_are_bounded() -> None:
    assert UploadRequest(filename="lamp 1.png", size=10, content_type="image/png", sha256=SHA.upper())
    for bad in ({"size": 0}, {"size": MAX_BYTES["VIDEO"] + 1}, {"sha256": "ab"}, {"bucket": "other"}):
        with pytest.raises(ValidationError):
            UploadRequest(**{"filename": "a.png", "size": 10, "content_type": "image/png", "sha256": SHA, **bad})


def test_the_declared_type_picks_the_checks_and_unknown_types_are_415() -> None:
    assert kind_of("image/PNG") == "IMAGE" and kind_of("video/mp4") == "VIDEO"
    assert kind_of("text/csv; charset=utf-8") == "CATALOG"
    for refused in ("text/html", "application/zip", "image/svg+xml", ""):
        with pytest.raises(UploadRefused) as exc:
            kind_of(refused)
        assert exc.value.status == 415


@pytest.mark.parametrize("size", [MIN_PART + 1, 100 * 1024 * 1024, MAX_BYTES["VIDEO"]])
def test_parts_stay_within_the_s3_bounds(size: int) -> None:
    part = part_size_for(size)
    assert part >= MIN_PART and math.ceil(size / part) <= MAX_PARTS


@pytest.mark.parametrize("head", [b"PK\x03\x04rest", b"\x89PNG\r\n\x1a\nxxxxxxxx", b"id,title\n1,\x00lamp\n",
                                  b"%PDF-1.7"])
def test_a_catalog_must_be_text(tmp_path: Path, head: bytes) -> None:
    path = tmp_path / "c.csv"
    path.write_bytes(head)
    with pytest.raises(AssetRejected):
        _check_text(path)


def test_a_csv_is_text(tmp_path: Path) -> None:
    path = tmp_path / "c.csv"
    path.write_text("product_id,title\nP-1,Lämpchen\n", encoding="utf-8")
    _check_text(path)


def test_cursors_round_trip_and_garbage_is_refused() -> None:
    for cursor in (Cursor(seen=EMPTY), Cursor(seen="100:104:100,102", batch="100:110:", after=4211)):
        assert Cursor.parse(cursor.encode()) == cursor
    for bad in ("", "12", "1:2", "1:2:3/4", "1:2:/1:2:/x", "1:2:' OR 1=1", "1:2:" + ",1" * 5000, "5:3:", "0:0:",
                "99999999999999999999:99999999999999999999:", "1:9:9", "1:9:5,3", "1:9:3,3", "1:2:/1:2:/9" * 3,
                f"1:2:/1:2:/{2**63}"):
        with pytest.raises(BadCursor):
            Cursor.parse(bad)
