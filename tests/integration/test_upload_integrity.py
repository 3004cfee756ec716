"""An upload is immutable once checked, on the real stack (SeaweedFS, Postgres): the presigned PUT takes
only the declared size and sha256 (SeaweedFS checks both signed headers); bytes swapped into quarantine
between the check and the promotion (by an S3 that would not check) are never what gets promoted; the
URL expires soon, and an object it puts back into quarantine after complete is removed by the sweep."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from api_helpers import api_server, new_tenant_client

from adapters.storage import ObjectStorage
from config.settings import Settings
from control.storage_gc import collect_garbage
from control.uploads import Uploads
from reelqueue_client.transfer import complete, send_bytes, start_upload
from schema.db import Database
from schema.uploads import ready_asset

CATALOG = b"product_id,title,description,image_url,price,currency,category\nP-1,Lamp,A lamp,,1.00,USD,Home\n"
SWAPPED = b"product_id,title,description,image_url,price,currency,category\nP-1,Lamp,=HYPERLINK(1),,0,USD,X\n"


@pytest.fixture(scope="module")
def base_url(stack: Settings) -> Iterator[str]:
    with api_server(stack) as url:
        yield url


class _SwapAfterCheck(ObjectStorage):
    """The real storage, with other bytes written to the quarantine key right after the server has
    read it for its checks (the window of the race): through the tenant's still-valid upload URL,
    or, as an S3 that does not check the signed checksum would take them, with the storage's keys."""

    ticket: dict = {}
    swapped, via, answers = b"", "url", []

    def get_to_file(self, key: str, path: Path) -> Path:
        got = super().get_to_file(key, path)
        if "/uploads/quarantine/" in key and not self.answers:
            if self.via == "url":
                sent = httpx.put(self.ticket["upload_url"], content=self.swapped, headers=self.ticket["headers"],
                                 timeout=30)
                self.answers.append(sent.status_code)
            else:
                self.put_bytes(key, self.swapped, "application/octet-stream")
                self.answers.append(200)
        return got


def _clip(tmp_path: Path, colour: str) -> bytes:
    import ffmpeg

    from adapters.media.ffmpeg_tools import run_ffmpeg

    clip = tmp_path / f"{colour}.mp4"
    run_ffmpeg(ffmpeg.input(f"color=c={colour}:s=64x48:r=10:d=1", f="lavfi").output(str(clip), vcodec="libx264"),
               "clip")
    return clip.read_bytes()


@pytest.mark.parametrize("via", ["url", "unchecking-s3"])
@pytest.mark.parametrize("kind", ["catalog", "video"])
def test_bytes_swapped_between_check_and_promotion_are_not_promoted(stack: Settings, base_url: str, kind: str,
                                                                     via: str, tmp_path: Path) -> None:
    checked, swapped, name, content_type = (
        (CATALOG, SWAPPED, "shop.csv", "text/csv") if kind == "catalog"
        else (_clip(tmp_path, "blue"), _clip(tmp_path, "red"), "clip.mp4", "video/mp4"))
    tenant_id, api = new_tenant_client(base_url)
    ticket = start_upload(api, len(checked), hashlib.sha256(checked).hexdigest(), name, content_type)
    send_bytes(ticket, checked)
    storage = _SwapAfterCheck.from_settings(stack)
    storage.ticket, storage.swapped, storage.via, storage.answers = ticket, swapped, via, []
    service = Uploads(Database(stack.database_url), storage, url_ttl=timedelta(minutes=15),
                      complete_ttl=timedelta(hours=1))
    done = service.complete(tenant_id, ticket["id"])
    # through the URL, S3 refuses other bytes (the URL is bound to the declared size and sha256)
    assert storage.answers == ([200] if via != "url" else [400] if len(swapped) == len(checked) else [403])
    assert done.status == "READY" and done.sha256 == hashlib.sha256(checked).hexdigest()
    with Database(stack.database_url).transaction() as session:
        asset = ready_asset(session, tenant_id, ticket["id"], kind=None)
    promoted = ObjectStorage.from_settings(stack).read_bytes(asset.key)
    assert hashlib.sha256(promoted).hexdigest() == asset.sha256 == done.sha256  # what was checked, only
    assert promoted == checked
    everything = [o.key for o in ObjectStorage.from_settings(stack).list_objects(f"tenants/{tenant_id}/")]
    for key in everything:  # the swapped bytes are nowhere under the tenant's keys
        assert ObjectStorage.from_settings(stack).read_bytes(key) != swapped, key


def test_the_upload_url_expires_soon_and_bytes_it_puts_back_are_swept(stack: Settings, base_url: str) -> None:
    tenant_id, api = new_tenant_client(base_url)
    before = datetime.now(UTC)
    ticket = start_upload(api, len(CATALOG), hashlib.sha256(CATALOG).hexdigest(), "shop.csv", "text/csv")
    assert datetime.fromisoformat(ticket["urls_expire_at"]) <= before + timedelta(minutes=15, seconds=5)
    send_bytes(ticket, CATALOG)
    assert complete(api, ticket["id"]).status == "READY"
    storage = ObjectStorage.from_settings(stack)
    assert storage.stat(ticket["object_key"]) is None

    same_size = CATALOG.replace(b"Lamp", b"Pump")
    for other, headers, status in ((same_size, ticket["headers"], 400),  # other bytes: BadDigest
                                   (same_size, {}, 403),  # the signed checksum header left out
                                   (SWAPPED * 1000, ticket["headers"], 403)):  # another size
        refused = httpx.put(ticket["upload_url"], content=other, headers=headers, timeout=30)
        assert refused.status_code == status, refused.text
    assert storage.stat(ticket["object_key"]) is None
    send_bytes(ticket, CATALOG)  # the URL still works until it expires: the same bytes land in quarantine again
    assert storage.stat(ticket["object_key"]) is not None
    service = Uploads(Database(stack.database_url), storage, url_ttl=timedelta(minutes=15),
                      complete_ttl=timedelta(hours=1))
    report = service.sweep()
    assert report.reappeared >= 1
    assert storage.stat(ticket["object_key"]) is None
    assert complete(api, ticket["id"]).status == "READY"  # the upload itself is as it was

    pending = start_upload(api, len(CATALOG), hashlib.sha256(CATALOG).hexdigest(), "open.csv", "text/csv")
    send_bytes(pending, CATALOG)  # an upload still awaiting its complete keeps its bytes
    service.sweep()
    assert storage.stat(pending["object_key"]) is not None
    assert complete(api, pending["id"]).status == "READY"


def test_gc_removes_old_quarantine_objects_no_open_upload_names(stack: Settings, base_url: str) -> None:
    """What the sweep did not reach (no upload route called for a day): `reelqueue gc` removes it past
    its safety window, and never the bytes of an upload still awaiting its complete."""
    tenant_id, api = new_tenant_client(base_url)
    ended = start_upload(api, len(CATALOG), hashlib.sha256(CATALOG).hexdigest(), "shop.csv", "text/csv")
    send_bytes(ended, CATALOG)
    assert complete(api, ended["id"]).status == "READY"
    send_bytes(ended, CATALOG)  # put back into quarantine after complete
    waiting = start_upload(api, len(CATALOG), hashlib.sha256(CATALOG).hexdigest(), "open.csv", "text/csv")
    send_bytes(waiting, CATALOG)
    storage = ObjectStorage.from_settings(stack)
    prefix = f"tenants/{tenant_id}/uploads/quarantine/"
    young = collect_garbage(Database(stack.database_url), storage, prefix=prefix, min_age=timedelta(hours=24),
                            dry_run=False)
    assert (young.staging_young, young.referenced, young.staging_removed) == (1, 1, 0)
    report = collect_garbage(Database(stack.database_url), storage, prefix=prefix, min_age=timedelta(0),
                             dry_run=False)
    assert [o.key for o in report.removed] == [ended["object_key"]] and report.referenced == 1
    assert storage.stat(ended["object_key"]) is None and storage.stat(waiting["object_key"]) is not None
    assert complete(api, waiting["id"]).status == "READY"
