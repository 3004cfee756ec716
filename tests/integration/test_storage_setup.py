"""`reelqueue storage setup`, the compose file's bucket job, against a real SeaweedFS (the embedded
stack's S3 alone): it makes the bucket once, finds it after, and stops at once on refused keys. With
--check, the Kubernetes set-up step, it only looks: no bucket made, a CORS rule set by hand kept."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from config.settings import Settings, get_settings

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def s3_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    import devstack

    home = str(tmp_path_factory.mktemp("storage-home"))
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("REELQUEUE_") or k == "DATABASE_URL"}
    os.environ["REELQUEUE_HOME"] = home
    try:
        devstack.up(Settings(), services=["s3"])
        yield home
    finally:
        devstack.down(Settings())
        os.environ.pop("REELQUEUE_HOME", None)
        os.environ.update(saved)


def _setup(*args: str, **env: str) -> tuple[int, str]:
    from starter import app

    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(app, ["storage", "setup", "--json", *args], env=env)
    finally:
        get_settings.cache_clear()
    return result.exit_code, result.stdout


def test_setup_makes_the_bucket_once_and_then_finds_it(s3_home: str) -> None:
    first = _setup("--wait", "30", REELQUEUE_S3_BUCKET="made-by-setup")
    assert first[0] == 0 and json.loads(first[1])["created"] is True, first
    again = _setup(REELQUEUE_S3_BUCKET="made-by-setup")
    assert again[0] == 0 and json.loads(again[1])["created"] is False, again


def _cors_origins(bucket: str) -> list[str]:
    """The AllowedOrigin values of the bucket's CORS configuration (S3 GetBucketCors)."""
    import re

    from adapters.storage import ObjectStorage

    storage = ObjectStorage.from_settings(Settings().model_copy(update={"s3_bucket": bucket}))
    answer = storage.client._execute("GET", bucket, query_params={"cors": ""})  # noqa: SLF001 - no client call
    return re.findall(r"<AllowedOrigin>([^<]*)</AllowedOrigin>", answer.data.decode())


def test_check_makes_no_bucket_and_leaves_a_cors_rule_set_by_hand(s3_home: str) -> None:
    """Kubernetes runs `storage setup --check` in every pod: the operator made the bucket and its
    rule once, so a pod start must neither replace the rule nor need rights to write it."""
    from adapters.storage import ObjectStorage
    from adapters.storage_cors import allow_browser_uploads

    code, out = _setup("--check", "--wait", "30", REELQUEUE_S3_BUCKET="not-made-by-check")
    assert code == 1 and "not-made-by-check" in json.loads(out)["error"], out
    assert _setup("--check", REELQUEUE_S3_BUCKET="not-made-by-check")[0] == 1, "--check made the bucket"
    assert _setup(REELQUEUE_S3_BUCKET="cors-by-hand")[0] == 0
    by_hand = ObjectStorage.from_settings(Settings().model_copy(update={"s3_bucket": "cors-by-hand"}))
    allow_browser_uploads(by_hand, ["https://studio.example.com"])
    code, out = _setup("--check", REELQUEUE_S3_BUCKET="cors-by-hand", REELQUEUE_PUBLIC_URL="https://other.example")
    assert code == 0 and json.loads(out) | {"endpoint": None} == {
        "endpoint": None, "bucket": "cors-by-hand", "created": False, "cors": "left alone"}, out
    assert _cors_origins("cors-by-hand") == ["https://studio.example.com"]
    # without --check (compose's job) the rule is the one the settings give
    assert _setup(REELQUEUE_S3_BUCKET="cors-by-hand", REELQUEUE_PUBLIC_URL="https://other.example")[0] == 0
    assert _cors_origins("cors-by-hand")[0] == "https://other.example"
    assert "https://studio.example.com" not in _cors_origins("cors-by-hand")


def test_refused_keys_end_the_wait_at_once_naming_the_bucket(s3_home: str) -> None:
    started = time.monotonic()
    code, out = _setup("--wait", "60", REELQUEUE_S3_BUCKET="never-made", REELQUEUE_S3_SECRET_KEY="wrong-secret-key")
    assert code == 1 and "never-made" in json.loads(out)["error"], out
    assert time.monotonic() - started < 30, "refused credentials do not wait out --wait"


def test_no_server_is_an_error_after_the_wait(s3_home: str) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    started = time.monotonic()
    code, out = _setup("--wait", "1", REELQUEUE_S3_ENDPOINT=f"127.0.0.1:{port}")
    assert code == 1 and f"127.0.0.1:{port}" in json.loads(out)["error"], out
    assert time.monotonic() - started >= 1


def test_a_url_signed_for_the_public_endpoint_works_there_and_nowhere_else(s3_home: str) -> None:
    """The signature covers the host: signed for the public name, the URL works when S3 is reached
    by that name (here `localhost` for the stack's 127.0.0.1) and is refused under another."""
    from datetime import timedelta

    import httpx

    from adapters.storage import ObjectStorage

    internal = Settings()
    port = internal.s3_endpoint.rpartition(":")[2]
    public = internal.model_copy(update={"s3_public_endpoint": f"http://localhost:{port}"})
    storage = ObjectStorage.from_settings(public)
    body = b"through the public name"
    url, headers = storage.presigned_put("uploads/public-check.txt", timedelta(minutes=5), size=len(body),
                                         sha256=hashlib.sha256(body).hexdigest())
    assert url.startswith(f"http://localhost:{port}/")
    assert httpx.put(url, content=body, headers=headers).status_code == 200
    assert storage.read_bytes("uploads/public-check.txt") == body
    elsewhere = url.replace(f"localhost:{port}", f"127.0.0.1:{port}")
    assert httpx.put(elsewhere, content=body, headers=headers).status_code == 403
    got = httpx.get(storage.presigned_url("uploads/public-check.txt", timedelta(minutes=5), internal=True))
    assert got.content == b"through the public name"
