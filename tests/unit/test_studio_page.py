"""The studio page's files and headers (no services), and the bucket CORS rules it relies on."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from adapters.storage_cors import browser_origins, cors_xml, origin_of
from config.settings import Settings
from gateway.app import create_app
from gateway.deps import GatewayDeps
from gateway.studio import STATIC, policy
from schema.db import Database

NOWHERE_DB = "postgresql+psycopg://nobody@127.0.0.1:1/nothing?connect_timeout=2"
TEST_IDS = ("api-key", "sign-in", "image-file", "prompt", "create", "status", "player", "cancel")


@pytest.fixture(scope="module")
def client() -> TestClient:
    settings = Settings(s3_endpoint="files.example.com:9000", public_url="https://studio.example.com")
    app = create_app(GatewayDeps(db=Database(NOWHERE_DB), providers={}, signaler=None), settings=settings)
    app.state.studio_policy = policy(settings)
    return TestClient(app)


def test_the_page_allows_only_its_own_scripts_the_bucket_and_the_media_origin(client: TestClient) -> None:
    page = client.get("/app")
    assert page.status_code == 200 and page.headers["cache-control"] == "no-store"
    csp = page.headers["content-security-policy"]
    assert "script-src 'self';" in csp and "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
    assert "connect-src 'self' http://files.example.com:9000;" in csp
    assert "media-src 'self' https://studio.example.com blob:;" in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    html = page.text
    for test_id in TEST_IDS:
        assert f'data-testid="{test_id}"' in html, test_id
    # every control has a label; nothing is fetched from another origin
    for control in re.findall(r'<(?:input|select|textarea)[^>]*\bid="([^"]+)"', html):
        assert f'for="{control}"' in html, control
    assert not re.search(r'(?:src|href)="(?:https?:)?//', html)


def test_only_the_page_files_are_served_with_their_types(client: TestClient) -> None:
    script = client.get("/app/static/studio.js")
    assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
    assert script.headers["x-content-type-options"] == "nosniff"
    assert client.get("/app/static/studio.css").headers["content-type"].startswith("text/css")
    for name in ("index.html", "nothing.js", "studio.py"):
        answer = client.get(f"/app/static/{name}")
        assert answer.status_code == 404 and answer.json()["type"] == "urn:reelqueue:problem:not-found", name
    for name in ("..%2Fstudio.py", "%2e%2e%2fstudio.py", "..%2F..%2Fconfig%2Fsettings.py"):
        assert client.get(f"/app/static/{name}").status_code == 404, name
    assert sorted(p.name for p in STATIC.iterdir()) == ["index.html", "studio.css", "studio.js"]


def test_the_script_keeps_the_session_token_not_the_key() -> None:
    script = (STATIC / "studio.js").read_text()
    assert "sessionStorage.setItem(SESSION, JSON.stringify(session))" in script
    assert "localStorage" not in script and "document.cookie" not in script
    assert "import " not in script.split("\n", 5)[-1].split("const $")[0]  # no module imported from anywhere


def test_cors_rules_name_the_gateway_origins_only() -> None:
    assert origin_of("https://Studio.Example.com/app?x=1") == "https://studio.example.com"
    assert origin_of("") is None and origin_of("ftp://x") is None
    assert browser_origins("", "http://127.0.0.1:8000", "https://studio.example.com/") == [
        "http://127.0.0.1:8000", "http://localhost:8000", "https://studio.example.com"]
    xml = cors_xml(["https://a.example", "http://x<y"]).decode()
    assert "<AllowedOrigin>https://a.example</AllowedOrigin>" in xml and "x&lt;y" in xml
    assert re.findall(r"<AllowedMethod>(\w+)</AllowedMethod>", xml) == ["PUT"]
    assert re.findall(r"<AllowedHeader>([\w-]+)</AllowedHeader>", xml) == ["content-type", "x-amz-checksum-sha256"]
    assert "<ExposeHeader>ETag</ExposeHeader>" in xml


def test_the_page_is_packaged() -> None:
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert 'gateway = ["static/studio/*"]' in pyproject
