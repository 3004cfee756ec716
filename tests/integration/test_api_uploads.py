"""Uploads through presigned URLs on the real stack: bytes go straight to SeaweedFS, complete checks
size and sha256, validation in quarantine makes the asset READY or REJECTED, stale multipart
uploads are aborted, and another tenant's asset answers 404."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from api_helpers import api_server, new_tenant_client

from adapters.storage import ObjectStorage
from config.settings import Settings
from control.uploads import MULTIPART_FROM, Uploads
from reelqueue_client import ApiProblem, ReelqueueClient
from reelqueue_client.transfer import complete, get_asset, send_bytes, start_upload, upload
from schema.db import Database
from schema.uploads import ready_asset

PNG = (Path(__file__).resolve().parents[2] / "examples" / "images" / "aurora-lamp.png").read_bytes()


@pytest.fixture(scope="module")
def base_url(stack: Settings) -> Iterator[str]:
    with api_server(stack) as url:
        yield url


@pytest.fixture(scope="module")
def tenant(base_url: str) -> tuple[str, ReelqueueClient]:
    return new_tenant_client(base_url)


def test_an_image_goes_through_the_presigned_url_and_becomes_ready(stack: Settings, tenant, base_url) -> None:
    tenant_id, api = tenant
    ticket = start_upload(api, len(PNG), hashlib.sha256(PNG).hexdigest(), "lamp.png", "image/png")
    assert ticket["upload_url"].startswith(f"http://{stack.s3_endpoint}/")  # straight to object storage
    assert ticket["object_key"] == f"tenants/{tenant_id}/uploads/quarantine/{ticket['id']}"
    assert get_asset(api, ticket["id"]).status == "PENDING"
    with pytest.raises(ApiProblem) as early:
        complete(api, ticket["id"])
    assert (early.value.status, early.value.slug) == (409, "upload-missing")

    send_bytes(ticket, PNG)
    done = complete(api, ticket["id"])
    assert (done.id, done.status, done.reason) == (ticket["id"], "READY", None)
    again = complete(api, ticket["id"])  # repeatable: the same answer, nothing done twice
    assert again == done
    shown = get_asset(api, ticket["id"])
    assert (shown.status, shown.content_type) == ("READY", "image/png")

    storage = ObjectStorage.from_settings(stack)
    with Database(stack.database_url).transaction() as session:
        asset = ready_asset(session, tenant_id, ticket["id"])
        assert ready_asset(session, "someone-else", ticket["id"]) is None
        assert ready_asset(session, tenant_id, ticket["id"], kind="CATALOG") is None
    assert asset.kind == "INPUT_IMAGE" and asset.sha256 == shown.sha256
    assert storage.stat(asset.key).sha256 == asset.sha256  # re-encoded bytes, out of quarantine
    assert storage.stat(ticket["object_key"]) is None

    other_id, other = new_tenant_client(base_url)
    for call in (lambda: get_asset(other, ticket["id"]), lambda: complete(other, ticket["id"])):
        with pytest.raises(ApiProblem) as hidden:
            call()
        assert hidden.value.status == 404


def test_a_png_bomb_and_an_html_image_are_rejected(tenant, png_bomb) -> None:
    _, api = tenant
    bomb = upload(api, png_bomb(), "bomb.png", "image/png")
    assert bomb.status == "REJECTED" and "too large" in bomb.reason
    page = upload(api, b"<html><script>alert(document.cookie)</script></html>", "page.png", "image/png")
    assert page.status == "REJECTED" and "not an image" in page.reason
    fake_video = upload(api, PNG, "clip.mp4", "video/mp4")  # a declared type is no proof
    assert fake_video.status == "REJECTED" and "not a video" in fake_video.reason
    assert get_asset(api, page.id).status == "REJECTED"


@pytest.mark.parametrize("mismatch", ["size", "checksum"])
def test_size_or_checksum_mismatch_is_refused(stack: Settings, tenant, mismatch: str) -> None:
    _, api = tenant
    declared = PNG + b"x" if mismatch == "size" else PNG
    sha = hashlib.sha256(declared).hexdigest() if mismatch == "size" else "0" * 64
    ticket = start_upload(api, len(declared), sha, "lamp.png", "image/png")
    with pytest.raises(httpx.HTTPStatusError) as put:  # the URL is bound to the declared size and sha256
        send_bytes(ticket, PNG)
    assert put.value.response.status_code in (400, 403)
    assert ObjectStorage.from_settings(stack).stat(ticket["object_key"]) is None
    # as an S3 that checks neither would have taken them: complete checks both again
    ObjectStorage.from_settings(stack).put_bytes(ticket["object_key"], PNG, "image/png")
    with pytest.raises(ApiProblem) as refused:
        complete(api, ticket["id"])
    assert (refused.value.status, refused.value.slug) == (422, f"upload-{mismatch}-mismatch")
    shown = get_asset(api, ticket["id"])
    assert shown.status == "REJECTED" and f"{mismatch} mismatch" in shown.reason
    assert ObjectStorage.from_settings(stack).stat(ticket["object_key"]) is None


@pytest.mark.parametrize(("body", "status", "slug"), [
    ({"filename": "a.exe", "size": 10, "content_type": "application/x-msdownload", "sha256": "a" * 64}, 415,
     "upload-type"),
    ({"filename": "a.png", "size": 26 * 1024 * 1024, "content_type": "image/png", "sha256": "a" * 64}, 413,
     "upload-too-large"),
    ({"filename": "../a.png", "size": 10, "content_type": "image/png", "sha256": "a" * 64}, 400, None),
    ({"filename": "a.png", "size": 10, "content_type": "image/png", "sha256": "nope"}, 400, None),
    ({"filename": "a.png", "size": 0, "content_type": "image/png", "sha256": "a" * 64}, 400, None),
    ({"filename": "a.png", "size": 10, "content_type": "image/png", "sha256": "a" * 64, "bucket": "x"}, 400, None),
])
def test_declarations_out_of_bounds_are_refused(tenant, body: dict, status: int, slug: str | None) -> None:
    _, api = tenant
    with pytest.raises(ApiProblem) as refused:
        api.request("POST", "/v1/uploads", json=body)
    assert refused.value.status == status
    assert slug is None or refused.value.slug == slug


def test_multipart_upload_completes_and_a_stale_one_is_aborted(stack: Settings, tenant) -> None:
    tenant_id, api = tenant
    line = b"P-1,Lamp,A lamp,https://example.com/a.png,19.99,USD,Home\n"
    data = b"product_id,title,description,image_url,price,currency,category\n"
    data += line * (MULTIPART_FROM // len(line) + 2)
    ticket = start_upload(api, len(data), hashlib.sha256(data).hexdigest(), "big.csv", "text/csv")
    assert ticket["upload_url"] is None and len(ticket["parts"]) == 3
    too_long = httpx.put(ticket["parts"][0]["url"], content=data[:ticket["part_size"] + 1], timeout=30)
    assert too_long.status_code == 403  # each part URL takes only its part's size (signed Content-Length)
    parts = send_bytes(ticket, data)
    with pytest.raises(ApiProblem) as wrong:
        complete(api, ticket["id"], [{**parts[0], "etag": "0" * 32}, *parts[1:]])
    assert (wrong.value.status, wrong.value.slug) == (422, "upload-parts-mismatch")
    done = complete(api, ticket["id"], parts)
    assert (done.status, done.kind, done.size) == ("READY", "CATALOG", len(data))

    storage = ObjectStorage.from_settings(stack)
    stale = start_upload(api, len(data), hashlib.sha256(data).hexdigest(), "stale.csv", "text/csv")
    first = stale["parts"][0]
    httpx.put(first["url"], content=data[:first["size"]], timeout=30).raise_for_status()
    assert any(m.upload_id for m in storage.open_multiparts(stale["object_key"]))
    uploads = Uploads(Database(stack.database_url), storage, url_ttl=timedelta(hours=1),
                      complete_ttl=timedelta(hours=24))
    orphan = f"tenants/{tenant_id}/uploads/quarantine/ast_{'0' * 32}"  # a crash before its row was written
    storage.start_multipart(orphan, "text/csv")
    assert uploads.sweep(now=datetime.now(UTC)).expired == 0  # not stale yet: left alone
    assert list(storage.open_multiparts(stale["object_key"])) and list(storage.open_multiparts(orphan))
    later = uploads.sweep(now=datetime.now(UTC) + timedelta(hours=25))
    assert later.expired >= 1 and later.aborted_multiparts >= 1
    assert not list(storage.open_multiparts(stale["object_key"])) and not list(storage.open_multiparts(orphan))
    shown = get_asset(api, stale["id"])
    assert shown.status == "REJECTED" and "expired" in shown.reason
    assert tenant_id in stale["object_key"]


def test_concurrent_completes_all_answer_the_one_outcome(base_url) -> None:
    _, api = new_tenant_client(base_url)
    data = b"product_id,title,description,image_url,price,currency,category\nP-1,Lamp,A lamp,,1.00,USD,Home\n"
    ticket = start_upload(api, len(data), hashlib.sha256(data).hexdigest(), "shop.csv", "text/csv")
    send_bytes(ticket, data)
    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda _: complete(api, ticket["id"]), range(6)))
    # one of them validates; the others answer VALIDATING while it does, or READY once it did
    assert {a.status for a in answers} <= {"VALIDATING", "READY"} and "READY" in {a.status for a in answers}
    assert get_asset(api, ticket["id"]).status == "READY"


def test_uploads_awaiting_completion_are_capped_per_tenant(base_url, monkeypatch) -> None:
    import control.uploads

    monkeypatch.setattr(control.uploads, "MAX_PENDING", 2)
    _, api = new_tenant_client(base_url)
    for _ in range(2):
        start_upload(api, len(PNG), hashlib.sha256(PNG).hexdigest(), "lamp.png", "image/png")
    with pytest.raises(ApiProblem) as refused:
        start_upload(api, len(PNG), hashlib.sha256(PNG).hexdigest(), "lamp.png", "image/png")
    assert (refused.value.status, refused.value.slug) == (429, "upload-quota")
    _, other = new_tenant_client(base_url)  # another tenant's quota is its own
    assert start_upload(other, len(PNG), hashlib.sha256(PNG).hexdigest(), "lamp.png", "image/png")["id"]


def test_a_video_is_probed_and_held_to_the_duration_cap(stack: Settings, tenant, tmp_path) -> None:
    import ffmpeg

    from adapters.media.ffmpeg_tools import run_ffmpeg

    clip = tmp_path / "clip.mp4"
    run_ffmpeg(ffmpeg.input("testsrc2=s=64x48:r=10:d=1", f="lavfi").output(str(clip), vcodec="libx264"), "clip")
    data = clip.read_bytes()
    tenant_id, api = tenant
    ready = upload(api, data, "clip.mp4", "video/mp4")
    assert (ready.status, ready.kind, ready.width, ready.height) == ("READY", "VIDEO", 64, 48), ready.reason
    assert 0.5 < ready.duration_s < 1.5

    capped = Uploads(Database(stack.database_url), ObjectStorage.from_settings(stack), url_ttl=timedelta(hours=1),
                     complete_ttl=timedelta(hours=1), max_duration_s=0.5)
    ticket = start_upload(api, len(data), hashlib.sha256(data).hexdigest(), "clip.mp4", "video/mp4")
    send_bytes(ticket, data)
    rejected = capped.complete(tenant_id, ticket["id"])
    assert rejected.status == "REJECTED" and "limit" in rejected.reason
