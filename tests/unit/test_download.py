"""`export --download` file names stay bounded whatever the product id; one video that cannot be copied
does not stop the others."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path

from delivery.download import MAX_STEM, download, file_name
from delivery.export import ExportRow

VIDEO = b"\0\0\0\x18ftypisom" + bytes(range(256)) * 4


def row(product_id: str, task_id: str, key: str = "k/ok.mp4") -> ExportRow:
    return ExportRow(task_id=task_id, product_id=product_id, locale="en-US", aspect_ratio="9:16", variant="a",
                     template_id="tpl", template_version="tpl-v1", object_key=key,
                     sha256=hashlib.sha256(VIDEO).hexdigest(), size_bytes=len(VIDEO), duration_s=2.0, width=8,
                     height=8, urls_expire_at=datetime(2030, 1, 1, tzinfo=UTC))


class Storage:
    """Serves VIDEO under one key; any other key fails like a missing object."""

    def iter_object(self, key: str, offset: int = 0, length: int | None = None):  # noqa: ANN201
        if key != "k/ok.mp4":
            raise FileNotFoundError(f"no object {key}")
        yield VIDEO[offset: offset + (length if length is not None else len(VIDEO))]


def test_long_product_ids_give_bounded_distinct_names() -> None:
    long_a, long_b = "A" * 300 + "-1", "A" * 300 + "-2"
    names = {file_name(row(pid, "0123456789abcdef")) for pid in (long_a, long_b)}
    assert len(names) == 2
    assert all(len(n) <= MAX_STEM + len(".mp4") and n.startswith("AAAA") and n.endswith(".mp4") for n in names)
    short = file_name(row("SKU-1", "0123456789abcdef"))
    assert short == "SKU-1_tpl_en-US_9x16_a_01234567.mp4"  # names that fit keep their form


def test_one_bad_row_does_not_stop_the_run(tmp_path: Path) -> None:
    rows = [row("A" * 300, "1" * 16), row("MISSING", "2" * 16, key="k/gone.mp4"), row("SKU-3", "3" * 16)]
    summary = download(Storage(), "imp_x", rows, tmp_path / "out")
    assert (summary.videos, summary.copied) == (3, 2)
    bad = file_name(rows[1])
    assert summary.failed == [bad] and "no object k/gone.mp4" in summary.errors[bad]
    for entry in json.loads((tmp_path / "out" / "manifest.json").read_text())["videos"]:
        copy = tmp_path / "out" / entry["file"]
        assert copy.exists() == (entry["product_id"] != "MISSING")
        assert not copy.exists() or copy.read_bytes() == VIDEO
