"""What /media answers: only the pipeline's own file types, never a page on the gateway's origin."""

from __future__ import annotations

import secrets

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from adapters.storage import StoredObject
from config.settings import Settings
from delivery.links import LinkSigner
from gateway.media import MediaDeps, router
from gateway.problems import install_problem_handlers

FOLDER = "tenants/t/tasks/abc/hls/v1"
HTML = b"<!doctype html><script>fetch('/review')</script>"


class FolderStorage:
    """An object store holding one folder: name -> (bytes, content type it was stored with)."""

    def __init__(self, files: dict[str, tuple[bytes, str | None]]) -> None:
        self.files = {f"{FOLDER}/{name}": value for name, value in files.items()}

    def stat(self, key: str) -> StoredObject | None:
        if key not in self.files:
            return None
        data, content_type = self.files[key]
        return StoredObject(bucket="b", key=key, size=len(data), sha256=None, content_type=content_type)

    def iter_object(self, key, chunk, offset=0, length=None):  # noqa: ANN001, ANN201
        data = self.files[key][0]
        yield data[offset: offset + length]


FILES = {
    "index.m3u8": (b"#EXTM3U\nseg_0000.ts\n", "application/vnd.apple.mpegurl"),
    "seg_0000.ts": (b"\x47" * 188, "video/mp2t"),
    "main.mp4": (b"\0\0\0\x18ftypisom" + b"\0" * 100, "video/mp4"),
    "thumb.jpg": (b"\xff\xd8\xff\xe0" + b"\0" * 20, "image/jpeg"),
    "abc.png": (b"\x89PNG\r\n\x1a\n", "image/png"),
    "raw.mp4": (b"\0\0\0\x18ftyp", "application/octet-stream"),  # a provider output stored as plain bytes
    "page.html": (HTML, "text/html"),
    "evil.png": (HTML, "text/html"),  # an old catalog "image" stored with its upstream type
    "evil.svg": (b"<svg onload='alert(1)'/>", "image/svg+xml"),
    "notes.txt": (b"x", "text/plain"),
}


@pytest.fixture
def client() -> tuple[TestClient, str]:
    settings = Settings(media_link_secret=secrets.token_urlsafe(32), public_url="http://gw.example")
    signer = LinkSigner.from_settings(settings)
    app = FastAPI()
    install_problem_handlers(app)
    app.include_router(router)
    app.state.media = MediaDeps(FolderStorage(FILES), signer)
    token = signer.link(f"{FOLDER}/index.m3u8", 60).url.split("/media/", 1)[1].split("/")[0]
    return TestClient(app), token


@pytest.mark.parametrize(("name", "media_type"), [
    ("index.m3u8", "application/vnd.apple.mpegurl"), ("seg_0000.ts", "video/mp2t"), ("main.mp4", "video/mp4"),
    ("thumb.jpg", "image/jpeg"), ("abc.png", "image/png"), ("raw.mp4", "video/mp4"),
])
def test_media_files_are_served_with_safety_headers(client, name: str, media_type: str) -> None:
    http, token = client
    for method in ("GET", "HEAD"):
        response = http.request(method, f"/media/{token}/{name}")
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith(media_type)
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["content-security-policy"] == "default-src 'none'; sandbox"
        assert response.headers["content-disposition"] == f'inline; filename="{name}"'


@pytest.mark.parametrize("name", ["page.html", "evil.png", "evil.svg", "notes.txt", "missing.mp4"])
def test_anything_else_is_not_found(client, name: str) -> None:
    http, token = client
    response = http.get(f"/media/{token}/{name}")
    assert response.status_code == 404 and b"<script" not in response.content
    assert "text/html" not in response.headers.get("content-type", "")


def test_a_download_is_an_attachment(client) -> None:
    http, token = client
    response = http.get(f"/media/{token}/main.mp4", params={"download": "1"})
    assert response.headers["content-disposition"] == 'attachment; filename="main.mp4"'
    ranged = http.get(f"/media/{token}/main.mp4", headers={"Range": "bytes=0-7"})
    assert ranged.status_code == 206 and ranged.headers["x-content-type-options"] == "nosniff"
