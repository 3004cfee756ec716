"""Secure by default on a fresh `dev up` (docs/security.md): no media link from public values, the
stack's secrets random and owner-only, services that ask for them, no token in the gateway's log."""

from __future__ import annotations

import hashlib
import hmac
import io
import stat
import uuid
from pathlib import Path

import httpx
import psycopg
import pytest
from minio import Minio
from minio.error import S3Error
from sqlalchemy.engine import make_url
from stack_helpers import gateway_log_after

from adapters.storage import ObjectStorage
from config.secrets import problem
from control import review_tokens
from delivery.links import LinkSigner
from devstack.probes import psycopg_conninfo

pytestmark = pytest.mark.integration

PUBLIC_S3_SECRET = "reelqueue-secret"  # the default main shipped, and docker-compose.yml with it
MP4_HEAD = bytes.fromhex("0000001866747970") + b"mp42" + b"\0" * 4 + b"mp42isom"


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _derived_signer(s3_secret: str, base_url: str) -> LinkSigner:
    """How media links were keyed on main when REELQUEUE_MEDIA_LINK_SECRET was empty."""
    return LinkSigner(hmac.new(s3_secret.encode(), b"reelqueue media links v1", hashlib.sha256).digest(), base_url)


def _stored_video(stack) -> str:
    key = f"tenants/default/tasks/sec-{uuid.uuid4().hex[:12]}/proxy/v1/proxy.mp4"
    ObjectStorage.from_settings(stack).put_bytes(key, MP4_HEAD + bytes(64 * 1024), "video/mp4")
    return key


def test_a_media_link_built_from_public_values_is_refused(stack):
    key = _stored_video(stack)
    for s3_secret in (PUBLIC_S3_SECRET, stack.s3_secret_key):
        forged = _derived_signer(s3_secret, stack.gateway_url).link(key, 3600).url
        assert httpx.get(forged, timeout=10).status_code == 404, s3_secret[:4]  # refused, telling nothing
    genuine = LinkSigner.from_settings(stack).link(key, 3600).url
    assert httpx.get(genuine, timeout=10).status_code == 200


def test_the_stack_secrets_are_random_and_owner_only(stack):
    home = Path(stack.home)
    assert _mode(home / "stack.json") == 0o600
    logs = sorted((home / "logs").glob("*.log"))
    assert {p.stem for p in logs} >= {"postgres", "s3", "temporal", "emulator", "gateway"}
    for log in logs:
        assert _mode(log) == 0o600, log
    for folder in (home, home / "logs", home / "data", home / "pids"):
        assert _mode(folder) & 0o076 == 0, folder  # at most traversable by others, never readable
    password = str(make_url(stack.database_url).password or "")
    for field, value in (("media_link_secret", stack.media_link_secret), ("review_secret", stack.review_secret),
                         ("s3_secret_key", stack.s3_secret_key), ("database_url", password),
                         ("emulator_webhook_secret", stack.emulator_webhook_secret)):
        assert problem(field, value) is None, field
    assert stack.media_link_secret not in (stack.s3_secret_key, stack.review_secret)


def test_postgres_and_s3_refuse_the_public_defaults(stack):
    url = make_url(stack.database_url)
    for password in ({}, {"password": "reelqueue"}):  # none (what main's trust allowed), the old default
        with pytest.raises(psycopg.OperationalError, match="password"):
            psycopg.connect(host=url.host, port=url.port, user=url.username, dbname=url.database, connect_timeout=5,
                            **password).close()
    psycopg.connect(psycopg_conninfo(stack.database_url), connect_timeout=5).close()
    public = Minio(stack.s3_endpoint, access_key="reelqueue", secret_key=PUBLIC_S3_SECRET, secure=False,
                   region=stack.s3_region)
    with pytest.raises(S3Error):
        public.put_object(stack.s3_bucket, "sec/probe.txt", io.BytesIO(b"x"), 1)


def test_no_token_reaches_the_gateway_log(stack):
    """Open the gallery from a reviewer link and play a video from a media link, as a browser does."""
    review_token = review_tokens.issue(stack.review_secret, "imp_security_probe", "rita")
    with httpx.Client(base_url=stack.gateway_url, timeout=10, follow_redirects=True) as browser:
        gallery = browser.get("/review/imp_security_probe", params={"token": review_token, "locale": "de-DE"})
        assert gallery.history[0].status_code == 303  # accepted, moved into the cookie (no such import: 404)
        link = LinkSigner.from_settings(stack).link(_stored_video(stack), 3600).url
        assert browser.head(link).status_code == 200
        assert browser.get(link, headers={"Range": "bytes=0-1023"}).status_code == 206
        assert browser.get(link, headers={"Range": "bytes=1024-"}).status_code == 206
    media_token = link.split("/media/")[1].split("/")[0]
    log = gateway_log_after(stack, "/media/[redacted]/proxy.mp4")
    assert "GET /media/[redacted]/proxy.mp4" in log and "/review/imp_security_probe?[redacted]" in log
    for secret in (review_token, media_token, review_token.split(".")[1], media_token.split(".")[1]):
        assert secret not in log
