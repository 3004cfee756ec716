"""Delivery on the real stack: the demo import (32 videos) exported, downloaded and played over HLS
through the gateway's signed links; write-once storage and gc; no task submitted without its image.

One finished demo import is shared by the export, download and HLS checks (module fixture).
"""

from __future__ import annotations

import csv
import hashlib
import http.server
import io
import json
import os
import subprocess
import threading
import time
import uuid
from urllib.parse import urljoin

import httpx
import pytest
from cli_helpers import run_cli_async
from sqlalchemy import select
from stack_helpers import EXAMPLES, import_small, make_plan, run_all, serving

from adapters.media.ffmpeg_tools import ffprobe_path
from adapters.storage import ObjectStorage, conflict_key
from catalog.images import normalised_image
from catalog.plan import load_plan
from catalog.service import run_import
from delivery.links import LinkSigner
from schema import queries
from schema.db import Database
from schema.models import Asset, StateEvent, Task

# The module's demo run (up to 600 s) is set up inside whichever of its tests comes first.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
async def demo(stack, client):
    """The demo import (examples/catalog.csv x examples/plan.toml), every task run to its end."""
    summary = run_import(stack, EXAMPLES / "catalog.csv", load_plan(EXAMPLES / "plan.toml"))
    assert summary.tasks == 32
    queue = f"test-{uuid.uuid4().hex[:12]}"
    async with serving(client, stack, queue):
        tasks = await run_all(client, stack, summary.import_id, queue, timeout=600)
    assert [t.status for t in tasks] == ["SUCCEEDED"] * 32
    return summary.import_id


async def test_export_lists_every_video_with_its_checksum(stack, demo, tmp_path):
    out = tmp_path / "videos.csv"
    result = await run_cli_async("export", demo, "--format", "csv", "--out", str(out))
    assert result.code == 0, result.stderr
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 32 and len({r["task_id"] for r in rows}) == 32
    storage = ObjectStorage.from_settings(stack)
    for row in rows:
        data = storage.read_bytes(row["object_key"])
        assert hashlib.sha256(data).hexdigest() == row["sha256"] and len(data) == int(row["size_bytes"])
        assert row["product_id"].startswith("SKU-") and row["template_version"].endswith("-v1")
        assert float(row["duration_s"]) > 1 and row["locale"] in ("en-US", "de-DE")
        for field in ("proxy_url", "hls_url", "thumbnail_url"):
            assert row[field].startswith(f"{stack.media_base_url()}/media/")
    assert len({r["urls_expire_at"] for r in rows}) == 1  # one export, one expiry
    as_json = await run_cli_async("export", demo, "--format", "json")
    assert as_json.code == 0
    videos = json.loads(as_json.stdout)["videos"]
    assert {(v["task_id"], v["sha256"]) for v in videos} == {(r["task_id"], r["sha256"]) for r in rows}
    unknown = await run_cli_async("export", "imp_nope", "--format", "json")
    assert unknown.code == 2 and "imp_nope" in unknown.stderr
    bad_format = await run_cli_async("export", demo, "--format", "xml")
    assert bad_format.code == 2 and "--format" in bad_format.stderr


async def test_download_copies_once_verifies_and_resumes(stack, demo, tmp_path):
    target = tmp_path / "shop"
    first = await run_cli_async("export", demo, "--download", str(target), "--json")
    assert first.code == 0, first.stderr
    assert (first.json["videos"], first.json["copied"], first.json["present"]) == (32, 32, 0)
    manifest = json.loads((target / "manifest.json").read_text())["videos"]
    assert len(manifest) == 32
    for entry in manifest:
        assert hashlib.sha256((target / entry["file"]).read_bytes()).hexdigest() == entry["sha256"]
    mtimes = {p.name: p.stat().st_mtime_ns for p in target.glob("*.mp4")}

    again = await run_cli_async("export", demo, "--download", str(target), "--json")
    assert (again.json["copied"], again.json["present"], again.json["bytes_copied"]) == (0, 32, 0)
    assert {p.name: p.stat().st_mtime_ns for p in target.glob("*.mp4")} == mtimes

    victim = target / manifest[0]["file"]  # an interrupted copy: half the file in .part, no file
    data = victim.read_bytes()
    victim.unlink()
    victim.with_name(victim.name + ".part").write_bytes(data[: len(data) // 2])
    resumed = await run_cli_async("export", demo, "--download", str(target), "--json")
    assert (resumed.json["copied"], resumed.json["resumed"], resumed.json["present"]) == (1, 1, 31)
    assert resumed.json["bytes_copied"] == len(data) - len(data) // 2
    assert victim.read_bytes() == data and not list(target.glob("*.part"))


async def test_hls_plays_from_the_delivered_link(stack, demo, tmp_path):
    out = tmp_path / "videos.json"
    assert (await run_cli_async("export", demo, "--format", "json", "--out", str(out))).code == 0
    video = json.loads(out.read_text())["videos"][0]
    async with httpx.AsyncClient(timeout=20) as http:
        playlist = await http.get(video["hls_url"])
        assert playlist.status_code == 200 and "mpegurl" in playlist.headers["content-type"]
        segments = [line for line in playlist.text.splitlines() if line and not line.startswith("#")]
        assert segments
        for name in segments:
            seg = await http.get(urljoin(video["hls_url"], name))
            assert seg.status_code == 200 and seg.content[:1] == b"\x47", name  # MPEG-TS sync byte
        proxy = await http.get(video["proxy_url"], headers={"Range": "bytes=0-99"})
        assert proxy.status_code == 206 and len(proxy.content) == 100 and proxy.content[4:8] == b"ftyp"
        thumb = await http.get(video["thumbnail_url"])
        assert thumb.status_code == 200 and thumb.content[:3] == b"\xff\xd8\xff"
        for answer in (playlist, proxy, thumb):  # stored objects never run as a page on our origin
            assert answer.headers["x-content-type-options"] == "nosniff"
            assert answer.headers["content-security-policy"] == "default-src 'none'; sandbox"

        token = video["hls_url"].split("/media/")[1].split("/")[0]
        forged = video["hls_url"].replace(token, token[:-3] + ("AAA" if token[-3:] != "AAA" else "BBB"))
        assert (await http.get(forged)).status_code == 404  # an invalid link tells nothing
        outside = await http.get(urljoin(video["hls_url"], "../../raw/1.mp4"))
        assert outside.status_code == 404
        expired = LinkSigner.from_settings(stack).link("tenants/x/tasks/y/hls/v1/index.m3u8", -1).url
        assert (await http.get(expired)).status_code == 404
    # GCONV_PATH: the static ffprobe crashes loading the host's iconv modules on MPEG-TS service
    # names; adapters/media/ffmpeg_tools.py runs it the same way.
    probe = subprocess.run(
        [ffprobe_path(), "-v", "error", "-print_format", "json", "-show_streams", "-show_format", video["hls_url"]],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "GCONV_PATH": str(tmp_path / "no-gconv-modules")},
    )
    assert probe.returncode == 0, probe.stderr
    info = json.loads(probe.stdout)
    assert info["format"]["format_name"] == "hls"
    assert {s["codec_name"] for s in info["streams"]} >= {"h264", "aac"}
    assert float(info["format"]["duration"]) > 1


async def test_final_keys_are_write_once_and_gc_spares_what_rows_name(stack, client, task_queue, demo, tmp_path):
    """Other bytes already at a task's raw key stay (conflict recorded, new bytes set aside); gc
    removes only old staging objects and reports what no row names."""
    storage = ObjectStorage.from_settings(stack)
    db = Database(stack.database_url)
    with db.transaction() as session:  # a demo video this task's checks accept (same ratio and duration)
        donor, donor_task = session.execute(select(Asset, Task).join(Task, Task.id == Asset.task_id).where(
            Asset.kind == "RAW_OUTPUT", Task.import_id == demo, Task.aspect_ratio == "9:16")).first()
    summary = import_small(stack, tmp_path, [("W-1", "Jar", "A jar")], duration_s=int(donor_task.duration_s))
    with db.transaction() as session:
        (task,) = queries.list_tasks(session, summary.import_id)
    placed = storage.read_bytes(donor.key)  # a valid video, but not this job's
    raw_key = f"tenants/{task.tenant_id}/tasks/{task.id}/raw/1.mp4"
    storage.client.put_object(storage.bucket, raw_key, io.BytesIO(placed), len(placed))  # no sha256 metadata

    (done,) = await run_all(client, stack, summary.import_id, task_queue)
    assert done.status == "SUCCEEDED"
    assert storage.read_bytes(raw_key) == placed
    with db.transaction() as session:
        raw = session.scalars(select(Asset).where(Asset.task_id == task.id, Asset.kind == "RAW_OUTPUT")).one()
        (event,) = session.scalars(select(StateEvent).where(StateEvent.task_id == task.id,
                                                            StateEvent.event == "storage_conflict")).all()
    assert raw.sha256 == hashlib.sha256(placed).hexdigest()
    assert not event.applied and event.payload["key"] == raw_key
    assert event.payload["new_bytes_at"] == conflict_key(raw_key, event.payload["new_sha256"])
    kept = storage.stat(event.payload["new_bytes_at"])
    assert kept is not None and kept.sha256 == event.payload["new_sha256"] != raw.sha256

    prefix = f"tenants/{task.tenant_id}/tasks/{task.id}/"
    storage.put_bytes(prefix + "staging/9-9.mp4", b"old staging")
    time.sleep(2.5)
    storage.put_bytes(prefix + "staging/9-10.mp4", b"young staging")
    storage.put_bytes(prefix + "stray.bin", b"no row")
    named_before = [o.key for o in storage.list_objects(prefix)]
    window = str(2.0 / 3600)
    dry = await run_cli_async("gc", "--prefix", prefix, "--min-age-hours", window, "--dry-run", "--json")
    assert dry.code == 0, dry.stderr
    assert [o["key"] for o in dry.json["removed"]] == [prefix + "staging/9-9.mp4"]
    assert [o.key for o in storage.list_objects(prefix)] == named_before
    real = await run_cli_async("gc", "--prefix", prefix, "--min-age-hours", window, "--json")
    report = real.json
    assert (report["staging_removed"], report["staging_young"]) == (1, 1)
    assert {o["key"] for o in report["unreferenced_objects"]} == {prefix + "stray.bin", event.payload["new_bytes_at"]}
    left = {o.key for o in storage.list_objects(prefix)}
    assert left == set(named_before) - {prefix + "staging/9-9.mp4"}
    with db.transaction() as session:
        detail = queries.task_detail(session, task.id)
    named = {a["key"] for a in detail["assets"]} | {s for a in detail["assets"] for s in (a["meta"] or {}).get(
        "segments", [])}
    assert named <= left and report["referenced"] == len(named)
    demo_task = donor.key.split("/raw/")[0] + "/"  # a finished demo task: every object is named, none removed
    full = await run_cli_async("gc", "--prefix", demo_task, "--min-age-hours", "0", "--json")
    assert (full.json["staging_removed"], full.json["unreferenced"]) == (0, 0)
    assert full.json["referenced"] == full.json["scanned"] > 3


class _ImageServer(http.server.ThreadingHTTPServer):
    """Serves one PNG at /lamp.png and counts the requests; everything else is 404."""

    def __init__(self, png: bytes):
        self.png, self.hits = png, []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                server.hits.append(self.path)
                if self.path != "/lamp.png":
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "image/png")
                self.send_header("Content-Length", str(len(server.png)))
                self.end_headers()
                self.wfile.write(server.png)

            def log_message(self, *args) -> None:  # noqa: ANN002
                pass

        super().__init__(("127.0.0.1", 0), Handler)


async def test_no_task_is_submitted_without_its_image(stack, client, tmp_path, emulator_jobs):
    """--no-check-urls: validation fetches and stores the image (SSRF-safe fetcher) before any
    submit; a task whose image cannot be fetched ends INVALID and never reaches the provider."""
    png = (EXAMPLES / "images" / "aurora-lamp.png").read_bytes()
    server = _ImageServer(png)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host = f"127.0.0.1:{server.server_address[1]}"
    try:
        catalog = tmp_path / "catalog.csv"
        catalog.write_text("product_id,title,description,image_url,price,currency,category\n"
                           f"N-1,Lamp,A lamp,http://{host}/lamp.png,19.99,USD,Home\n"
                           f"N-2,Vase,A vase,http://{host}/gone.png,19.99,USD,Home\n")
        summary = run_import(stack, catalog, load_plan(make_plan(tmp_path)), catalog=f"nourl-{tmp_path.name}",
                             check_urls=False)
        assert summary.tasks == 2 and server.hits == []  # nothing fetched at import
        settings = stack.model_copy(update={"fetch_allowed_hosts": [host]})
        queue = f"test-{uuid.uuid4().hex[:12]}"
        async with serving(client, settings, queue):
            tasks = {t.product_id: t for t in await run_all(client, stack, summary.import_id, queue)}
    finally:
        server.shutdown()
    assert (tasks["N-1"].status, tasks["N-2"].status) == ("SUCCEEDED", "INVALID")
    assert {"/lamp.png", "/gone.png"} <= set(server.hits)
    assert "image" in tasks["N-2"].last_error
    with Database(stack.database_url).transaction() as session:
        image = session.get(Asset, tasks["N-1"].image_asset_id)
        stored, _ = normalised_image(png)  # re-encoded before it is stored
        assert image is not None and image.sha256 == hashlib.sha256(stored).hexdigest()
        assert session.get(Task, tasks["N-2"].id).image_asset_id is None
    assert ObjectStorage.from_settings(stack).read_bytes(image.key) == stored
    keys = [j["request_key"] for j in emulator_jobs()]
    assert sum(k.startswith(tasks["N-1"].id) for k in keys) == 1
    assert not any(k.startswith(tasks["N-2"].id) for k in keys)
